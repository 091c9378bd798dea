"""bench/drift.py's bookkeeping on tables written by hand (no backend runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from drift import compare, gap  # noqa: E402

B = ["ort", "ov"]


def table(ort: list[float], ov: list[float]) -> dict[tuple[int, str], float]:
    return {**{(n, "ort"): t for n, t in enumerate(ort)},
            **{(n, "ov"): t for n, t in enumerate(ov)}}


def test_gap_is_the_best_backend_op_by_op_over_the_per_op_minima():
    # minima 1 + 1 + 2 = 4; ort sums 5, ov 6
    assert gap(table([1, 2, 2], [3, 1, 2]), B) == pytest.approx(5 / 4)
    assert gap(table([1, 1], [2, 2]), B) == pytest.approx(1.0)  # one backend wins every op


def test_compare_counts_flipped_winners_and_each_backends_level():
    a = table([1, 1, 1, 1], [0.5, 2, 2, 2])
    b = table([1.1, 1.1, 1.1, 1.1], [0.5, 0.8, 2, 2])  # ort 10% slower; node 1 flips to ov
    line = compare(a, b, B)
    assert "winners flipped 1/4" in line
    assert "levels ort 1.100" in line
    assert "ov " in line and "ov 1.000" not in line
