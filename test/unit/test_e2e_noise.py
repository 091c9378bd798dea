"""bench/e2e.py's noise column: how far identical models landed apart in one run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from e2e import run_noise  # noqa: E402


@pytest.mark.parametrize("whole_on, noise", [(None, 0.01), ("openvino", 0.09)])
def test_a_mix_of_one_region_is_a_twin_of_its_backends_whole_model(whole_on, noise):
    """A mix that is OpenVINO's whole model, 9% off OpenVINO's column, is that far from
    its twin: a tie, not a loss; a mix of several regions is no one's twin."""
    row = {"onnxruntime": 150.0, "onnxruntime#2": 150.0, "openvino": 100.0,
           "openvino#2": 101.0, "mix": 109.0}
    if whole_on:
        row["mix_whole_on"] = whole_on
    assert run_noise(row, ["onnxruntime", "openvino"]) == pytest.approx(noise)
