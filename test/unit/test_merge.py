"""Merge after the search (search/merge.py) under table costs: what is merged, what is not."""

from __future__ import annotations

import math

from test_search import cand, graph_of

from collage_mlir.candidate import CandidatePartition
from collage_mlir.search import check_cover, evaluate
from collage_mlir.search.merge import coalesce
from collage_mlir.search.partitioning import Choice, Partitioning


def switch_everywhere(src: str, dst: str, nbytes: int) -> float:
    """A boundary costs 0.5 s whatever the backends (two kernels of one backend as well)."""
    return 0.0 if "host" in (src, dst) else 0.5


def pick_of(graph, regions: list[tuple[list[int], str, float]], transition) -> Partitioning:
    cands = [cand(graph, nodes, backend) for nodes, backend, _ in regions]
    costs = [c for *_, c in regions]
    total, moved = evaluate(graph, cands, costs, transition)
    return Partitioning(graph, tuple(Choice(c, k) for c, k in zip(cands, costs, strict=True)),
                        total, moved)


class SumOfParts:
    """Test double: a merged region costs what its ops cost alone (`per_node` each) times
    `factor`; records every batch it is asked for."""

    def __init__(self, per_node: float, factor: float = 1.0) -> None:
        self.per_node, self.factor, self.batches = per_node, factor, []

    def __call__(self, cands: list[CandidatePartition]) -> list[float]:
        self.batches.append([(c.backend, tuple(c.sub_graph.nodes)) for c in cands])
        return [self.per_node * len(c.sub_graph.nodes) * self.factor for c in cands]


def test_a_chain_on_one_backend_becomes_one_region_when_it_is_not_slower():
    graph, n = graph_of([[], [0], [1], [2]])
    pick = pick_of(graph, [([n[k]], "a", 1.0) for k in range(4)], switch_everywhere)
    assert pick.total_cost == 4 + 3 * 0.5
    merged, log = coalesce(pick, SumOfParts(1.0), switch_everywhere)
    assert [sorted(c.candidate.sub_graph.nodes) for c in merged.choices] == [sorted(n)]
    assert merged.total_cost == 4.0
    check_cover(graph, merged.candidates)
    assert all(m.after_s <= m.before_s for m in log if m.kept)


def test_a_merge_that_measures_slower_is_not_kept():
    graph, n = graph_of([[], [0]])
    pick = pick_of(graph, [([n[0]], "a", 1.0), ([n[1]], "a", 1.0)], switch_everywhere)
    merged, log = coalesce(pick, SumOfParts(1.0, factor=1.5), switch_everywhere)
    assert merged is pick
    assert [(m.kept, m.after_s) for m in log] == [(False, 3.0)]


def test_a_failed_merge_is_not_kept():
    graph, n = graph_of([[], [0]])
    pick = pick_of(graph, [([n[0]], "a", 1.0), ([n[1]], "a", 1.0)], switch_everywhere)
    merged, log = coalesce(pick, lambda cs: [math.inf] * len(cs), switch_everywhere)
    assert merged is pick and not log[0].kept


def test_regions_on_different_backends_are_not_merged():
    graph, n = graph_of([[], [0], [1]])
    pick = pick_of(graph, [([n[0]], "a", 1.0), ([n[1]], "b", 1.0), ([n[2]], "a", 1.0)],
                   switch_everywhere)
    estimate = SumOfParts(1.0)
    merged, log = coalesce(pick, estimate, switch_everywhere)
    assert merged is pick and log == [] and estimate.batches == []


def test_a_union_that_would_close_a_cycle_is_not_tried():
    # n0 -> n1 -> n2 and n0 -> n2: {n0, n2} on "a" around n1 on "b" is not convex
    graph, n = graph_of([[], [0], [0, 1]])
    pick = pick_of(graph, [([n[0]], "a", 1.0), ([n[1]], "b", 1.0), ([n[2]], "a", 1.0)],
                   switch_everywhere)
    estimate = SumOfParts(1.0)
    merged, _ = coalesce(pick, estimate, switch_everywhere)
    assert merged is pick and estimate.batches == []


class AtMost(SumOfParts):
    """Test double: as SumOfParts, but a region of more than `most` ops cannot run."""

    def __init__(self, per_node: float, most: int) -> None:
        super().__init__(per_node)
        self.most = most

    def __call__(self, cands: list[CandidatePartition]) -> list[float]:
        costs = super().__call__(cands)
        return [math.inf if len(c.sub_graph.nodes) > self.most else k
                for c, k in zip(cands, costs, strict=True)]


def test_a_long_chain_is_merged_whole_in_one_measurement():
    """A chain of 40 one-op regions: pairs measured 64 unions and merged 34 of them, then
    the budget was spent (190 regions left of 224 in a hunt); the maximal group is one
    union, measured once."""
    graph, n = graph_of([[]] + [[k] for k in range(39)])
    pick = pick_of(graph, [([n[k]], "a", 1.0) for k in range(40)], switch_everywhere)
    estimate = SumOfParts(1.0)
    merged, log = coalesce(pick, estimate, switch_everywhere, max_tries=4)
    assert len(merged.choices) == 1 and merged.total_cost == 40.0
    assert [len(b) for b in estimate.batches] == [1] and len(log[0].parts) == 40


def test_a_union_that_would_close_a_cycle_through_another_region_is_not_kept():
    """A feeds R and B reads R: {A, B} is convex, yet with R between them the regions form
    a cycle, and the run ended in an internal error ("regions form a cycle")."""
    # n0 (A) -> n2 (R) -> n3 (R); n1 (R) -> n3 and n1 -> n4 (B); n0 -> n4; n4 -> n5 (C)
    graph, n = graph_of([[], [], [0], [2, 1], [1, 0], [4]])
    pick = pick_of(graph, [([n[0]], "a", 1.0), ([n[1], n[2], n[3]], "b", 1.0),
                           ([n[4]], "a", 1.0), ([n[5]], "a", 1.0)], switch_everywhere)
    merged, log = coalesce(pick, SumOfParts(1.0), switch_everywhere)
    check_cover(graph, merged.candidates)
    assert sorted(sorted(c.candidate.sub_graph.nodes) for c in merged.choices) == sorted(
        [[n[0]], sorted([n[1], n[2], n[3]]), sorted([n[4], n[5]])])
    assert not log[0].kept and math.isinf(log[0].after_s)  # the group of A, B and C


def test_merges_are_measured_in_batches_and_chain_over_rounds():
    """Where the whole group cannot run, pairs are measured a round at a time."""
    graph, n = graph_of([[], [0], [1], [2], [3], [4]])
    pick = pick_of(graph, [([n[k]], "a", 1.0) for k in range(6)], switch_everywhere)
    estimate = AtMost(1.0, most=4)
    merged, log = coalesce(pick, estimate, switch_everywhere)
    assert [len(c.candidate.sub_graph.nodes) for c in merged.choices] == [4, 2]
    assert len(estimate.batches[0]) == 1 and not log[0].kept  # the group of six
    assert len(estimate.batches[1]) == 5  # every adjacent pair of the first round, at once
    assert len(estimate.batches) < 6  # rounds, not one union at a time
    assert merged.total_cost == 6.0 + 0.5


def test_the_number_of_unions_measured_is_bounded():
    graph, n = graph_of([[], [0], [1], [2], [3], [4]])
    pick = pick_of(graph, [([n[k]], "a", 1.0) for k in range(6)], switch_everywhere)
    estimate = AtMost(1.0, most=2)  # the group of six fails: pairs are tried
    coalesce(pick, estimate, switch_everywhere, max_tries=3)
    assert sum(len(b) for b in estimate.batches) == 3


def test_merges_are_reported_as_trials():
    from collage_mlir.driver import merge_trial
    from collage_mlir.runtime.report import format_trials

    graph, n = graph_of([[], [0], [1]])
    pick = pick_of(graph, [([n[k]], "a", 1.0) for k in range(3)], switch_everywhere)
    _, log = coalesce(pick, AtMost(1.0, most=2), switch_everywhere)
    trials = [merge_trial(m) for m in log]
    assert trials[0].what == "join 3 adjacent (3 ops) regions on a" and not trials[0].kept
    assert all(t.phase == "merge" and t.what == "join 1-op and 1-op regions on a"
               for t in trials[1:2])
    assert [t.kept for t in trials] == [m.kept for m in log]
    assert "union(s) of adjacent regions kept" in format_trials(trials)
