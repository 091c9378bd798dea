"""bench/carve.py's cover: a whole model on one backend with named islands carved out.

Backends are only names here: the covers are checked, nothing is compiled or timed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import collage_mlir
from collage_mlir.driver import entry_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from carve import carved, groups_of, islands_of  # noqa: E402


@pytest.fixture
def graph():
    """a: Neg -> b: Relu -> c: Neg -> d: Relu, each node named."""
    names = ["a", "b", "c", "d"]
    nodes = [helper.make_node("Relu" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"], name=n)
             for k, n in enumerate(names)]
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("t4", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return entry_graph(collage_mlir.import_onnx(model))


def test_an_island_splits_its_region_upstream_and_downstream(graph):
    cover = carved(graph, "outer", "inner", islands_of(graph, [["b"]]))
    assert [(ch.candidate.backend, ch.candidate.inside.bit_count()) for ch in cover.choices] \
        == [("outer", 1), ("inner", 1), ("outer", 2)]
    island = cover.choices[1].candidate.sub_graph
    assert [graph.nodes[i].op_type for i in island.nodes] == ["Relu"]


def test_islands_in_one_group_go_together_and_groups_apart(graph):
    together = carved(graph, "outer", "inner", islands_of(graph, [["b", "c"]]))
    assert [(ch.candidate.backend, ch.candidate.inside.bit_count())
            for ch in together.choices] == [("outer", 1), ("inner", 2), ("outer", 1)]
    apart = carved(graph, "outer", "inner", islands_of(graph, [["b"], ["d"]]))
    assert [ch.candidate.backend for ch in apart.choices] == ["outer", "inner", "outer", "inner"]
    assert sum(ch.candidate.inside for ch in apart.choices) == graph.op_bits


def test_a_name_no_op_carries_is_refused_by_name(graph):
    with pytest.raises(SystemExit, match="no op named nope"):
        islands_of(graph, [["b"], ["nope"]])


def test_an_island_a_path_leaves_and_reenters_is_refused(graph):
    with pytest.raises(SystemExit, match="the island a, c is not convex"):
        carved(graph, "outer", "inner", islands_of(graph, [["a", "c"]]))


def test_islands_are_read_from_the_option_and_an_empty_name_is_refused():
    assert groups_of("a,b;c") == [["a", "b"], ["c"]]
    for text in ("", "a;;b", "a,"):
        with pytest.raises(SystemExit, match="an empty node name"):
            groups_of(text)
