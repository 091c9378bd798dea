"""End-to-end check of the search's pick against the backends running the whole model.

Why: the search adds up kernels measured one at a time in a worker. The sum is a good guide
but not the truth — a large kernel timed on a busy moment, hand-offs that cost more in a
real chain than in the transition experiment, two backends whose whole-model costs differ
by less than the noise. So whenever some backend could run the whole model for an estimate
within MARGIN of the pick (other than the pick itself), both are compiled and timed side by
side, interleaved, in this process, and the faster is kept. That makes "never slower than the
best single backend" a measured fact, not an estimate.
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
"""Whole-model alternatives estimated above MARGIN x the pick's estimate are not tried."""

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


PICK = "pick"
"""Contender name of the search's own pick."""


def whole_alternatives(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                       costs: Sequence[float], pick: Partitioning,
                       transition: Transition | None) -> list[Partitioning]:
    """Single-region partitionings worth timing against `pick`: the cheapest whole-function
    candidate per backend, estimated within MARGIN of the pick, cheapest first, at most
    MAX_ALTERNATIVES. The pick itself is not among them."""
    best: dict[str, tuple[float, CandidatePartition]] = {}
    for cand, cost in zip(candidates, costs, strict=True):
        if cand.inside != graph.op_bits or not math.isfinite(cost):
            continue
        if cand.backend not in best or cost < best[cand.backend][0]:
            best[cand.backend] = (cost, cand)
    if len(pick.choices) == 1:
        best.pop(pick.choices[0].candidate.backend, None)
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
            regions: dict[str, int]) -> Verdict:
    """Time the contenders side by side; the lowest median wins. Ties go to the contender
    with fewer regions (the simpler deployment), then to the search's pick."""
    timings: list[Timing] = time_side_by_side(runners, inputs, rounds=rounds, warmup=2)
    medians = {t.name: t.median_s for t in timings}
    kept = min(medians, key=lambda n: (medians[n], regions[n], n != PICK))
    return Verdict(kept, medians)
