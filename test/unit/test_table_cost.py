"""TableEstimator: the cost rules of the JSON format, and errors that name file and key."""

from __future__ import annotations

import json
import math

import pytest
from dags import dag_text

from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.table import TableEstimator
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraph, bits_of
from collage_mlir.importer import parse_mlir


@pytest.fixture(scope="module")
def graph() -> DataflowGraph:
    """Neg (1) -> Add (2) -> Add (3): a three-op chain, nodes 1..3."""
    module = parse_mlir(dag_text([[], [0, 0], [1, 1]]))
    g = DataflowGraph(module.body.operations[0])
    g.module = module
    assert [n.op_type for n in g.op_nodes()] == ["Neg", "Add", "Add"]
    return g


def cand(graph, nodes, backend="iree", rule="op") -> CandidatePartition:
    return CandidatePartition(SubGraph(graph, bits_of(nodes)), backend, rule)


def test_per_op_sum_with_call_overhead_and_fusion_discount(graph):
    t = TableEstimator.from_dict({
        "per_op": {"iree": {"Neg": 1.0, "*": 2.0}},
        "per_call": {"iree": 0.5},
        "fusion_discount": {"iree": 0.5},
    })
    # The dearest op at full price, the others at half theirs.
    assert t.estimate([cand(graph, [1]), cand(graph, [2]), cand(graph, [1, 2]),
                       cand(graph, [1, 2, 3])]) == [1.5, 2.5, 0.5 + 2.0 + 0.5 * 1.0,
                                                    0.5 + 2.0 + 0.5 * 3.0]


def test_op_without_entry_is_invalid_and_unknown_backend_gets_default(graph):
    t = TableEstimator.from_dict({"per_op": {"iree": {"Neg": 1.0}}})
    costs = t.estimate([cand(graph, [1, 2]), cand(graph, [1], "ort")])
    assert costs[0] == math.inf and math.isnan(costs[1])
    t = TableEstimator.from_dict({"per_op": {"iree": {"Neg": 1.0}}, "default": 7})
    assert t.estimate([cand(graph, [1], "ort")]) == [7.0]


def test_an_op_priced_inf_makes_every_region_holding_it_invalid_not_unknown(graph):
    """ "inf" (the format's "cannot run") on one op: the regions with it cost +inf, in the
    search's terms invalid, never NaN (unknown, which stops the search)."""
    t = TableEstimator.from_dict({"per_op": {"iree": {"Neg": "inf", "*": 1.0}},
                                  "fusion_discount": {"iree": 0.5}})
    assert t.estimate([cand(graph, [1]), cand(graph, [1, 2]), cand(graph, [1, 2, 3]),
                       cand(graph, [2, 3])]) == [math.inf, math.inf, math.inf, 1.5]


def test_region_rows_match_every_given_key_and_first_match_wins(graph):
    t = TableEstimator.from_dict({
        "regions": [
            {"backend": "iree", "nodes": [2, 1], "rule": "fuse", "cost": 0.25},
            {"ops": ["Neg", "Add"], "cost": 0.5},
            {"backend": "ort", "cost": "inf"},
            {"nodes": [1, 2], "cost": 9.0},
        ],
        "per_op": {"iree": {"*": 1.0}},
    })
    costs = t.estimate([cand(graph, [1, 2], "iree", "fuse"), cand(graph, [1, 2], "iree"),
                        cand(graph, [1, 2], "ort"), cand(graph, [2, 3], "ort"),
                        cand(graph, [2, 3], "iree")])
    assert costs == [0.25, 0.5, 0.5, math.inf, 2.0]


def test_progress_is_reported_per_candidate(graph):
    seen = []
    TableEstimator.from_dict({}).estimate([cand(graph, [1]), cand(graph, [2])],
                                          lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]


def test_transitions_same_backend_host_and_pairs():
    t = TableEstimator.from_dict({"transition": {
        "per_call": 1.0, "per_byte": 0.5, "pairs": {"a -> b": {"per_call": 3.0}}}})
    assert t.transition_cost("a", "a", 10) == 0.0
    assert t.transition_cost("a", "b", 10) == 3.0
    assert t.transition_cost("b", "a", 10) == 6.0
    assert t.transition_cost("host", "a", 10) == 0.0
    hosted = TableEstimator.from_dict({"transition": {"per_call": 1.0, "host": True}})
    assert hosted.transition_cost("host", "a", 10) == 1.0
    assert TableEstimator.from_dict({}).transition_cost("a", "b", 1 << 20) == 0.0


@pytest.mark.parametrize(("data", "message"), [
    ([], "top level: expected an object"),
    ({"per_ops": {}}, "per_ops: unknown key"),
    ({"per_op": {"iree": {"Relu": -1}}}, "per_op.iree.Relu: expected a cost"),
    ({"per_op": {"iree": {"Relu": "fast"}}}, "per_op.iree.Relu: expected a cost"),
    ({"per_op": {"iree": [1]}}, "per_op.iree: expected an object"),
    ({"fusion_discount": {"iree": True}}, "fusion_discount.iree: expected a number"),
    ({"regions": {}}, "regions: expected a list"),
    ({"regions": [{"nodes": [1]}]}, r"regions\[0\].cost: missing"),
    ({"regions": [{"cost": 1, "nodes": [1, -2]}]}, r"regions\[0\].nodes: expected a node"),
    ({"regions": [{"cost": 1, "ops": [""]}]}, r"regions\[0\].ops: expected a non-empty"),
    ({"transition": {"per_call": "1"}}, "transition.per_call: expected a number"),
    ({"transition": {"host": 1}}, "transition.host: expected true or false"),
    ({"transition": {"pairs": {"ab": {}}}}, 'transition.pairs.ab: expected "src->dst"'),
    ({"transition": {"pairs": {"a->b": {"host": True}}}}, "transition.pairs.a->b.host: unknown"),
])
def test_bad_tables_name_the_file_and_the_key(tmp_path, data, message):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CollageError, match=f"^{path}: {message}"):
        TableEstimator.from_json(path)


def test_unreadable_or_malformed_file(tmp_path):
    with pytest.raises(CollageError, match="cannot read cost table"):
        TableEstimator.from_json(tmp_path / "absent.json")
    path = tmp_path / "broken.json"
    path.write_text('{"per_op": ')
    with pytest.raises(CollageError, match=f"^{path}: not JSON: .* at line 1"):
        TableEstimator.from_json(path)
