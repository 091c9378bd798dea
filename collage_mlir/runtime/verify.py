"""End-to-end check of the search's pick against the backends running the whole model.

Why: the search adds up kernels measured one at a time in a worker. The sum is a good guide
but not the truth — a large kernel timed on a busy moment, hand-offs that cost more in a
real chain than in the transition experiment. So when the search chose a split and some
backend could also run the whole model for a comparable estimated cost, both are compiled and
timed side by side, interleaved, in this process; the split is kept only if it is faster.
That makes "never slower than the best single backend" a measured fact, not an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph
from collage_mlir.runtime.compare import Runner, Timing, time_side_by_side
from collage_mlir.search.partitioning import Choice, Partitioning, Transition, evaluate

MARGIN = 1.5
"""Whole-model alternatives estimated above MARGIN x the split's estimate are not tried."""

MAX_ALTERNATIVES = 2


@dataclass
class Verdict:
    """What the end-to-end check timed (median seconds per contender) and what it kept."""

    kept: str
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        cells = ", ".join(f"{n} {t * 1e3:.3f} ms" for n, t in self.timings.items())
        return f"end-to-end check: {cells}; kept {self.kept}"

    def to_json(self) -> dict:
        return {"kept": self.kept, "timings": self.timings}


SPLIT = "split"
"""Contender name of the search's own pick."""


def whole_alternatives(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                       costs: Sequence[float], pick: Partitioning,
                       transition: Transition | None) -> list[Partitioning]:
    """Single-region partitionings worth timing against `pick`: the cheapest whole-function
    candidate per backend, estimated within MARGIN of the pick, cheapest first. Empty when
    the pick is already one whole-function region (there is nothing to check)."""
    if len(pick.choices) == 1:
        return []
    best: dict[str, tuple[float, CandidatePartition]] = {}
    for cand, cost in zip(candidates, costs, strict=True):
        if cand.inside != graph.op_bits or not math.isfinite(cost):
            continue
        if cand.backend not in best or cost < best[cand.backend][0]:
            best[cand.backend] = (cost, cand)
    out = []
    for cost, cand in sorted(best.values(), key=lambda t: (t[0], t[1].backend)):
        total, moved = evaluate(graph, [cand], [cost], transition)
        if total <= MARGIN * pick.total_cost:
            out.append(Partitioning(graph, (Choice(cand, cost),), total, moved))
    return out[:MAX_ALTERNATIVES]


def rounds_for(estimates: Sequence[float], budget_s: float, lo: int = 5, hi: int = 15) -> int:
    """Timed rounds that fit `budget_s`, given each contender's estimated seconds."""
    per_round = max(sum(e for e in estimates if math.isfinite(e)), 1e-6)
    return max(lo, min(hi, int(budget_s / per_round)))


def fastest(runners: dict[str, Runner], inputs: Sequence[np.ndarray], rounds: int,
            prefer: str) -> Verdict:
    """Time the contenders side by side; the lowest median wins, and any contender other
    than `prefer` (the split) wins ties: a single region is the simpler deployment."""
    timings: list[Timing] = time_side_by_side(runners, inputs, rounds=rounds, warmup=2)
    medians = {t.name: t.median_s for t in timings}
    kept = min(medians, key=lambda n: (medians[n], n == prefer))
    return Verdict(kept, medians)
