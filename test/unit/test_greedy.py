"""Greedy baselines (search/greedy.py) under table costs: what partition_for_X and the
first-claim order cut, what they cost by the search's own cost model, and when a cost is
reused, estimated or unknown. No backends run and nothing is timed."""

from __future__ import annotations

import math

import pytest
from dags import dag_text

from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.table import TableEstimator
from collage_mlir.graph import DataflowGraph, SubGraph, bits_of
from collage_mlir.importer import parse_mlir
from collage_mlir.search import evaluate, search
from collage_mlir.search.greedy import best, claim, greedy_baselines, supported_ops

# Neg(1) -> Add(2) -> Neg(3) -> Add(4) -> Add(5): a chain, nodes 1..5
CHAIN = [[], [0, 0], [1], [2, 2], [3, 3]]

TABLE = TableEstimator.from_dict({
    "per_op": {"ort": {"*": 1.0}, "ov": {"Add": 0.25}, "iree": {"*": 0.75}},
    "per_call": {"ort": 0.1, "ov": 0.1, "iree": 0.1},
    "transition": {"per_call": 0.05, "per_byte": 0.0},
})


@pytest.fixture(scope="module")
def graph() -> DataflowGraph:
    module = parse_mlir(dag_text(CHAIN))
    g = DataflowGraph(module.body.operations[0])
    g.module = module
    assert [n.op_type for n in g.op_nodes()] == ["Neg", "Add", "Neg", "Add", "Add"]
    return g


def cands(graph, backend: str, sets: list[list[int]]) -> list[CandidatePartition]:
    return [CandidatePartition(SubGraph(graph, bits_of(s)), backend, "op") for s in sets]


def singles(graph, backend: str, nodes: list[int]) -> list[CandidatePartition]:
    return cands(graph, backend, [[i] for i in nodes])


def regions(baseline) -> list[tuple[str, list[int]]]:
    return [(c.candidate.backend, c.candidate.sub_graph.nodes)
            for c in baseline.partitioning.choices]


def by_name(baselines):
    return {b.name: b for b in baselines}


def test_partition_for_takes_the_largest_supported_regions_and_the_fallback_the_rest(graph):
    # ov supports the Adds only; ort (the fallback) everything
    candidates = (singles(graph, "ort", [1, 2, 3, 4, 5]) + cands(graph, "ort", [[1, 2, 3, 4, 5]])
                  + singles(graph, "ov", [2, 4, 5]) + cands(graph, "ov", [[4, 5]]))
    costs = TABLE.estimate(candidates)
    out = by_name(greedy_baselines(graph, candidates, costs, TABLE.transition_cost,
                                   ["ov", "ort"], fallback="ort"))
    assert regions(out["partition_for_ov"]) == [("ort", [1]), ("ov", [2]), ("ort", [3]),
                                                ("ov", [4, 5])]
    assert regions(out["partition_for_ort"]) == [("ort", [1, 2, 3, 4, 5])]
    # priced as the search prices any cover: the same evaluate, the run's own costs
    p = out["partition_for_ov"].partitioning
    want, moved = evaluate(graph, p.candidates, [1.1, 0.35, 1.1, 0.1 + 0.25 + 0.25],
                           TABLE.transition_cost)
    assert p.total_cost == pytest.approx(want) and p.transition_cost == pytest.approx(moved)
    assert moved == pytest.approx(3 * 0.05)  # three backend switches along the chain
    assert out["partition_for_ov"].reason == "" and "first_claim(ov>ort)" not in out


def test_the_search_is_never_dearer_than_a_baseline_made_of_candidates(graph):
    candidates = (singles(graph, "ort", [1, 2, 3, 4, 5]) + cands(graph, "ort", [[1, 2, 3, 4, 5]])
                  + singles(graph, "ov", [2, 4, 5]) + cands(graph, "ov", [[4, 5]]))
    costs = TABLE.estimate(candidates)
    pick = search(graph, candidates, costs, TABLE.transition_cost)
    baselines = greedy_baselines(graph, candidates, costs, TABLE.transition_cost, ["ov", "ort"],
                                 fallback="ort")
    assert all(pick.total_cost <= b.cost + 1e-12 for b in baselines)
    assert best(baselines).name == "partition_for_ov"


def test_first_claim_follows_the_priority_order_with_the_fallback_last(graph):
    candidates = (cands(graph, "ort", [[1, 2, 3, 4, 5]]) + cands(graph, "iree", [[1, 2]])
                  + cands(graph, "ov", [[2, 3, 4, 5]]))
    supported = supported_ops(candidates)
    assert claim(graph, supported, ["iree", "ov", "ort"]) == [("iree", bits_of([1, 2])),
                                                              ("ov", bits_of([3, 4, 5]))]
    assert claim(graph, supported, ["ov", "iree", "ort"]) == [("ov", bits_of([2, 3, 4, 5])),
                                                              ("iree", bits_of([1]))]
    # the user's order, the fallback moved last; a claim no candidate covers is unknown
    out = by_name(greedy_baselines(graph, candidates, TABLE.estimate(candidates),
                                   TABLE.transition_cost, ["ort", "iree", "ov"],
                                   fallback="ort"))
    assert set(out) == {"partition_for_ort", "partition_for_iree", "partition_for_ov",
                        "first_claim(iree>ov>ort)"}
    fc = out["first_claim(iree>ov>ort)"]
    assert fc.order == ("iree", "ov", "ort")
    assert regions(fc) == [("iree", [1, 2]), ("ov", [3, 4, 5])]
    assert math.isnan(fc.cost) and fc.reason == "no cost known for 1 region(s) (not measured, or not in the table)"


def test_regions_no_candidate_covers_are_estimated_in_one_batch(graph):
    candidates = (cands(graph, "ort", [[1, 2, 3, 4, 5]]) + cands(graph, "ov", [[4, 5]]))
    asked: list[list[list[int]]] = []

    def estimate(cs):
        asked.append([c.sub_graph.nodes for c in cs])
        return TABLE.estimate(cs)

    out = by_name(greedy_baselines(graph, candidates, TABLE.estimate(candidates),
                                   TABLE.transition_cost, ["ov", "ort"], fallback="ort",
                                   estimate=estimate))
    assert asked == [[[1, 2, 3]]]  # the fallback's share; ov's region was measured already
    b = out["partition_for_ov"]
    assert regions(b) == [("ort", [1, 2, 3]), ("ov", [4, 5])]
    assert b.cost == pytest.approx((0.1 + 3 * 1.0) + (0.1 + 2 * 0.25) + 0.05)


def test_a_region_that_cannot_run_makes_the_baseline_fail_with_the_reason(graph):
    candidates = cands(graph, "ort", [[1, 2, 3, 4, 5]]) + cands(graph, "ov", [[1, 2, 3, 4, 5]])
    costs = [1.0, math.inf]
    out = by_name(greedy_baselines(graph, candidates, costs, None, ["ov", "ort"],
                                   fallback="ort", reason=lambda c: "invalid: compile error\nx"))
    assert out["partition_for_ov"].cost == math.inf
    assert out["partition_for_ov"].reason == "region 0 (ov, 5 ops): invalid: compile error"
    assert best(out.values()).name == "partition_for_ort"


def test_an_op_no_backend_supports_is_named(graph):
    candidates = cands(graph, "ov", [[2]]) + cands(graph, "iree", [[1, 2, 3]])
    out = by_name(greedy_baselines(graph, candidates, [0.1, 0.2], None, ["ov", "iree"]))
    assert out["partition_for_ov"].partitioning is None
    assert out["partition_for_ov"].reason == "no backend of ov>iree supports Add node 4"
    assert best(out.values()) is None


def test_a_first_claim_the_run_did_not_measure_is_not_measured_here(graph):
    # ov supports {4, 5} but its largest region is no candidate (pruned, say): it stays
    # unknown, while the fallback's share is estimated
    candidates = cands(graph, "ort", [[1, 2, 3, 4, 5]]) + singles(graph, "ov", [4, 5])
    asked: list[list[tuple[str, list[int]]]] = []

    def estimate(cs):
        asked.append([(c.backend, c.sub_graph.nodes) for c in cs])
        return TABLE.estimate(cs)

    out = by_name(greedy_baselines(graph, candidates, TABLE.estimate(candidates),
                                   TABLE.transition_cost, ["ov", "ort"], fallback="ort",
                                   estimate=estimate))
    b = out["partition_for_ov"]
    assert regions(b) == [("ort", [1, 2, 3]), ("ov", [4, 5])]
    assert asked == [[("ort", [1, 2, 3])]]
    assert math.isnan(b.cost) and b.reason == "no cost known for 1 region(s) (not measured, or not in the table)"


def test_a_fallback_region_the_run_left_unmeasured_is_estimated(graph):
    candidates = (cands(graph, "ort", [[1, 2, 3, 4, 5], [1, 2, 3]])
                  + cands(graph, "ov", [[4, 5]]))
    costs = [1.0, math.nan, 0.5]  # the search pruned ort's {1, 2, 3}: not measured
    out = by_name(greedy_baselines(graph, candidates, costs, None, ["ov", "ort"],
                                   fallback="ort", estimate=lambda cs: [0.25] * len(cs)))
    assert out["partition_for_ov"].cost == pytest.approx(0.25 + 0.5)
