"""Merge after the search (TVM Collage's MaxCoalesce): adjacent chosen regions on one backend
become one region when the merged kernel, measured, is not slower.

The search only knows the candidates the rules produced, and a rule bounds their size
(`max_depth`), so a pick often holds a chain of regions on one backend whose boundaries
cost a kernel switch each. Two regions are *adjacent* when one reads a value the other
produces; their union is tried when it is convex (so the cover stays acyclic). Every round
measures all such unions in one batch (a measuring estimator shares its workers across a
batch), then takes the winners greedily, best gain first, each region merged at most once
per round; merged regions may merge again in the next round. A union is kept only when the
whole cover's estimate (kernels plus hand-offs, `partitioning.evaluate`) does not rise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.search.partitioning import (
    Choice,
    Partitioning,
    TransitionCost,
    adjacent_regions,
    evaluate,
    execution_order,
)

Estimate = Callable[[Sequence[CandidatePartition]], list[float]]
"""estimate(candidates) -> seconds each (+inf invalid, NaN unknown), as `CostEstimator`."""

RULE = "merged"
"""`rule_name` of a region made by merging."""

MAX_ROUNDS = 8
MAX_TRIES = 64
"""Unions measured per run at most: each is a compile and a timing."""


@dataclass(frozen=True)
class Merge:
    """One union tried: its backend, the nodes of its two parts, what the whole cover was
    estimated at before and with it, and whether it was kept."""

    backend: str
    parts: tuple[tuple[int, ...], tuple[int, ...]]
    cost: float
    before_s: float
    after_s: float
    kept: bool


def coalesce(pick: Partitioning, estimate: Estimate, transition: TransitionCost | None,
             max_tries: int = MAX_TRIES) -> tuple[Partitioning, list[Merge]]:
    """`pick` with adjacent same-backend regions merged where that does not raise the
    estimate, and every union tried. `pick` itself is returned when nothing was merged."""
    graph = pick.graph
    choices: list[Choice | None] = list(pick.choices)
    total = pick.total_cost
    tried: set[tuple[str, int]] = set()
    log: list[Merge] = []
    for _ in range(MAX_ROUNDS):
        pairs = [(a, b) for a, b in _adjacent_pairs(graph, choices)
                 if (choices[a].candidate.backend, _union_bits(choices, a, b)) not in tried]
        pairs = pairs[: max(0, max_tries - len(tried))]
        if not pairs:
            break
        unions = [_union(graph, choices, a, b) for a, b in pairs]
        tried.update((u.backend, u.inside) for u in unions)
        costs = estimate(unions)
        ranked = sorted(zip(pairs, unions, costs, strict=True), key=lambda t: _total_with(
            graph, choices, *t[0], t[1], t[2], transition))  # best first
        used: set[int] = set()
        for (a, b), union, cost in ranked:
            if {a, b} & used:
                continue  # one of its parts was merged this round: tried again next round
            after = _total_with(graph, choices, a, b, union, cost, transition)
            keep = after <= total
            log.append(Merge(union.backend, (tuple(choices[a].candidate.sub_graph.nodes),
                                             tuple(choices[b].candidate.sub_graph.nodes)),
                             cost, total, after, keep))
            if keep:
                used |= {a, b}
                choices[a], choices[b] = Choice(union, cost), None
                total = after
        if not used:
            break
        choices = [ch for ch in choices if ch is not None]
    if not any(m.kept for m in log):
        return pick, log
    return _partitioning(graph, choices, transition, pick.states, pick.exact), log


def _adjacent_pairs(graph: DataflowGraph, choices: Sequence[Choice]) -> list[tuple[int, int]]:
    """Adjacent regions on one backend whose union is convex."""
    return [(a, b) for a, b in adjacent_regions(choices)
            if choices[a].candidate.backend == choices[b].candidate.backend
            and SubGraph(graph, _union_bits(choices, a, b)).is_convex]


def _union_bits(choices: Sequence[Choice], a: int, b: int) -> int:
    return choices[a].candidate.inside | choices[b].candidate.inside


def _union(graph: DataflowGraph, choices: Sequence[Choice], a: int, b: int
           ) -> CandidatePartition:
    return CandidatePartition(SubGraph(graph, _union_bits(choices, a, b)),
                              choices[a].candidate.backend, RULE)


def _total_with(graph: DataflowGraph, choices: Sequence[Choice | None], a: int, b: int,
                union: CandidatePartition, cost: float, transition: TransitionCost | None
                ) -> float:
    """The cover's estimate with regions a and b replaced by `union` at `cost` (None
    entries are regions merged away this round)."""
    if not math.isfinite(cost):
        return math.inf
    rest = [ch for k, ch in enumerate(choices) if k not in (a, b) and ch is not None]
    return _evaluate(graph, rest + [Choice(union, cost)], transition)[0]


def _evaluate(graph: DataflowGraph, choices: Sequence[Choice],
              transition: TransitionCost | None) -> tuple[float, float]:
    return evaluate(graph, [ch.candidate for ch in choices], [ch.cost for ch in choices],
                    transition)


def _partitioning(graph: DataflowGraph, choices: Sequence[Choice],
                  transition: TransitionCost | None, states: int, exact: bool) -> Partitioning:
    """The merged cover in execution order, priced as the search prices covers."""
    order = execution_order(graph, [ch.candidate for ch in choices])
    ordered = tuple(choices[k] for k in order)
    total, moved = _evaluate(graph, ordered, transition)
    return Partitioning(graph, ordered, total, moved, states, exact)
