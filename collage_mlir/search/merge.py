"""Merge after the search (TVM Collage's MaxCoalesce): adjacent chosen regions on one backend
become one region when the merged kernel, measured, is not slower.

The search only knows the candidates the rules produced, and a rule bounds their size
(`max_depth`), so a pick often holds a chain of regions on one backend whose boundaries
cost a kernel switch each. Two regions are *adjacent* when one reads a value the other
produces; their union is tried when it is convex, and kept only while the regions stay
acyclic (a convex union can still close a cycle through a third region). First each
maximal group of three or more regions on one backend, connected by adjacency, is tried as
one union (a long chain of small regions becomes one region for one measurement, where
pairs would spend the budget of measured unions long before the chain is whole). Then every
round measures all adjacent pairs in one batch (a measuring estimator shares its workers
across a batch) and takes the winners greedily, best gain first, each region merged at most
once per round; merged regions may merge again in the next round. A union is kept only when
the whole cover's estimate (kernels plus hand-offs, `partitioning.evaluate`) does not rise.
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
    """One union tried: its backend, the nodes of its parts (two, or a maximal group), what
    the whole cover was estimated at before and with it, and whether it was kept."""

    backend: str
    parts: tuple[tuple[int, ...], ...]
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
    choices, total = _merge_groups(graph, choices, total, estimate, transition, max_tries,
                                   tried, log)
    for _ in range(MAX_ROUNDS):
        pairs = [(a, b) for a, b in _adjacent_pairs(graph, choices)
                 if (choices[a].candidate.backend, _bits(choices, (a, b))) not in tried]
        pairs = pairs[: max(0, max_tries - len(tried))]
        if not pairs:
            break
        unions = [_union(graph, choices, pair) for pair in pairs]
        tried.update((u.backend, u.inside) for u in unions)
        costs = estimate(unions)
        ranked = sorted(zip(pairs, unions, costs, strict=True), key=lambda t: _total_with(
            graph, choices, t[0], t[1], t[2], transition))  # best first
        used: set[int] = set()
        for (a, b), union, cost in ranked:
            if {a, b} & used:
                continue  # one of its parts was merged this round: tried again next round
            after = _total_with(graph, choices, (a, b), union, cost, transition)
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


def _merge_groups(graph: DataflowGraph, choices: list[Choice | None], total: float,
                  estimate: Estimate, transition: TransitionCost | None, max_tries: int,
                  tried: set[tuple[str, int]], log: list[Merge]
                  ) -> tuple[list[Choice | None], float]:
    """Each maximal group (`_groups`) tried as one union, best gain first, kept when the
    cover's estimate does not rise; (the choices after, merged ones left out; the total)."""
    groups = _groups(graph, choices)[:max_tries]
    if not groups:
        return choices, total
    unions = [_union(graph, choices, g) for g in groups]
    tried.update((u.backend, u.inside) for u in unions)
    costs = estimate(unions)
    ranked = sorted(zip(groups, unions, costs, strict=True), key=lambda t: _total_with(
        graph, choices, *t, transition))
    for group, union, cost in ranked:
        after = _total_with(graph, choices, group, union, cost, transition)
        keep = after <= total
        log.append(Merge(union.backend, tuple(tuple(choices[k].candidate.sub_graph.nodes)
                                              for k in group), cost, total, after, keep))
        if keep:
            choices[group[0]] = Choice(union, cost)
            for k in group[1:]:
                choices[k] = None
            total = after
    return [ch for ch in choices if ch is not None], total


def _groups(graph: DataflowGraph, choices: Sequence[Choice]) -> list[list[int]]:
    """Maximal sets of three or more regions on one backend connected by adjacency whose
    union is convex, largest first."""
    root = list(range(len(choices)))

    def find(k: int) -> int:
        while root[k] != k:
            root[k] = root[root[k]]
            k = root[k]
        return k

    for a, b in adjacent_regions(choices):
        if choices[a].candidate.backend == choices[b].candidate.backend:
            root[find(a)] = find(b)
    members: dict[int, list[int]] = {}
    for k in range(len(choices)):
        members.setdefault(find(k), []).append(k)
    groups = [g for g in members.values()
              if len(g) > 2 and SubGraph(graph, _bits(choices, g)).is_convex]
    return sorted(groups, key=len, reverse=True)


def _bits(choices: Sequence[Choice | None], group: Sequence[int]) -> int:
    out = 0
    for k in group:
        out |= choices[k].candidate.inside
    return out


def _adjacent_pairs(graph: DataflowGraph, choices: Sequence[Choice]) -> list[tuple[int, int]]:
    """Adjacent regions on one backend whose union is convex."""
    return [(a, b) for a, b in adjacent_regions(choices)
            if choices[a].candidate.backend == choices[b].candidate.backend
            and SubGraph(graph, _bits(choices, (a, b))).is_convex]


def _union(graph: DataflowGraph, choices: Sequence[Choice | None], parts: Sequence[int]
           ) -> CandidatePartition:
    """The regions `parts` (on one backend) as one candidate."""
    return CandidatePartition(SubGraph(graph, _bits(choices, parts)),
                              choices[parts[0]].candidate.backend, RULE)


def _total_with(graph: DataflowGraph, choices: Sequence[Choice | None], parts: Sequence[int],
                union: CandidatePartition, cost: float, transition: TransitionCost | None
                ) -> float:
    """The cover's estimate with regions `parts` replaced by `union` at `cost` (None
    entries are regions merged away this round); inf when the union cannot run or would
    close a cycle between regions (a convex union can still feed, through a third region,
    a region that feeds it)."""
    if not math.isfinite(cost):
        return math.inf
    rest = [ch for k, ch in enumerate(choices) if k not in parts and ch is not None]
    after = rest + [Choice(union, cost)]
    try:
        execution_order(graph, [ch.candidate for ch in after])
    except ValueError:
        return math.inf
    return _evaluate(graph, after, transition)[0]


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
