"""Placement files: first match wins, pins and exclusions filter candidates, clear errors."""

from __future__ import annotations

import json

import pytest

import collage_mlir
from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, SubGraph, bits_of
from collage_mlir.placement import Placement

T = "!torch.vtensor<[4],f32>"
TEXT = f"""
func.func @f(%arg0: {T}) -> {T} {{
  %a = torch.operator "onnx.Relu"(%arg0) : ({T}) -> {T} loc("first_relu")
  %b = torch.operator "onnx.Abs"(%a) : ({T}) -> {T} loc("abs")
  %c = torch.operator "onnx.Relu"(%b) : ({T}) -> {T} loc("second_relu")
  return %c : {T}
}}
"""


@pytest.fixture
def graph():
    module = collage_mlir.parse_mlir(TEXT)
    graph = DataflowGraph(module.body.operations[0])
    graph._module = module  # keep the IR alive with the graph
    return graph


def write(tmp_path, entries) -> str:
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"placement": entries}))
    return str(path)


def cands(graph, nodes, backends=("onnxruntime", "iree")):
    return [CandidatePartition(SubGraph(graph, bits_of(ns)), b) for ns in nodes for b in backends]


def test_pin_by_name_first_match_wins(graph, tmp_path):
    placement = Placement.from_json(write(tmp_path, [
        {"pattern": {"match": {"onnx_node_name": "second_.*"}, "rewrite": {"backend": "iree"}}},
        {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": "onnxruntime"}}},
    ]))
    kept = placement.filter(graph, cands(graph, [[1], [2], [3], [2, 3]]))
    got = sorted((tuple(c.sub_graph.nodes), c.backend) for c in kept)
    # node 1 (first_relu) pinned to onnxruntime by rule 2; node 3 pinned to iree by rule 1
    assert got == [((1,), "onnxruntime"), ((2,), "iree"), ((2,), "onnxruntime"),
                   ((2, 3), "iree"), ((3,), "iree")]


def test_a_pin_to_a_backend_offering_nothing_says_so(graph, tmp_path):
    """OpenVINO installed but taking none of the model's ops (its int64 ops now refused)
    was reported as "not among the backends in use"."""
    placement = Placement.from_json(write(tmp_path, [
        {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": "openvino"}}}]))
    with pytest.raises(collage_mlir.CollageError, match=r"pins Relu node .* to 'openvino', "
                       r"which offers no candidate here .*backends offering some: "
                       r"iree, onnxruntime\)"):
        placement.filter(graph, cands(graph, [[1], [2], [3]]))


def test_exclude(graph, tmp_path):
    placement = Placement.from_json(write(tmp_path, [
        {"pattern": {"match": {"node_type": "Abs"}, "rewrite": {"exclude": ["iree"]}}}]))
    kept = placement.filter(graph, cands(graph, [[1, 2], [2]]))
    assert {c.backend for c in kept if 2 in c.sub_graph.nodes} == {"onnxruntime"}


def test_an_excluded_name_no_backend_has_is_an_error_not_a_silent_no_op(graph, tmp_path):
    placement = Placement.from_json(write(tmp_path, [
        {"pattern": {"match": {"node_type": "Abs"}, "rewrite": {"exclude": ["onnxruntme"]}}}]))
    with pytest.raises(collage_mlir.CollageError, match="excludes 'onnxruntme', which names "
                                                        "no backend"):
        placement.filter(graph, cands(graph, [[2]]))
    known_unused = Placement.from_json(write(tmp_path, [
        {"pattern": {"match": {"node_type": "Abs"}, "rewrite": {"exclude": ["openvino"]}}}]))
    assert len(known_unused.filter(graph, cands(graph, [[2]]))) == 2


@pytest.mark.parametrize("entries, message", [
    ([{"pattern": {"match": {"node_type": "("}, "rewrite": {"backend": "x"}}}], "bad regex"),
    ([{"pattern": {"match": {"op": "Relu"}, "rewrite": {"backend": "x"}}}], "unknown keys"),
    ([{"pattern": {"match": {"node_type": "Relu"}, "rewrite": {}}}], "needs 'backend'"),
    ([{"nope": 1}], "placement\\[0\\]"),
])
def test_errors_name_file_and_entry(tmp_path, entries, message):
    with pytest.raises(collage_mlir.CollageError, match=message):
        Placement.from_json(write(tmp_path, entries))
