"""Old ops upgraded on import compute what they computed: onnxruntime on the original model
against onnxruntime on the upgraded one (onnx's converter alone changed these answers)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import collage_mlir
from collage_mlir import CollageError
from collage_mlir.importer import MIN_OPSET, upgrade_opset


def _model(node: onnx.NodeProto, opset: int, shape: list[int], out: list[int],
           scales: list[float] | None = None) -> onnx.ModelProto:
    value = oh.make_tensor_value_info
    init = [] if scales is None else [numpy_helper.from_array(np.array(scales, np.float32),
                                                              "scales")]
    graph = oh.make_graph([node], "g", [value("x", TensorProto.FLOAT, shape)],
                          [value("y", TensorProto.FLOAT, out)], initializer=init)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _hardmax(opset: int, **attrs) -> onnx.ModelProto:
    return _model(oh.make_node("Hardmax", ["x"], ["y"], name="h", **attrs), opset,
                  [2, 3, 4], [2, 3, 4])


def _resize(op: str, opset: int, mode: str, scales: list[float]) -> onnx.ModelProto:
    shape = [1, 2, 5, 7]
    out = [int(np.floor(d * s)) for d, s in zip(shape, scales, strict=True)]
    if opset < 9:  # Upsample-7: scales as an attribute
        node = oh.make_node(op, ["x"], ["y"], name="r", mode=mode, scales=scales)
        return _model(node, opset, shape, out)
    return _model(oh.make_node(op, ["x", "scales"], ["y"], name="r", mode=mode), opset,
                  shape, out, scales)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


CASES = {
    "hardmax-11 axis 1": _hardmax(11, axis=1),
    "hardmax-12 default axis": _hardmax(12),
    "hardmax-7 axis 0": _hardmax(7, axis=0),
    "hardmax-11 axis -2": _hardmax(11, axis=-2),
    "resize-10 linear up": _resize("Resize", 10, "linear", [1, 1, 2, 2]),
    "resize-10 linear down": _resize("Resize", 10, "linear", [1, 1, 0.75, 0.7]),
    "resize-10 nearest down": _resize("Resize", 10, "nearest", [1, 1, 0.75, 0.6]),
    "resize-10 nearest up": _resize("Resize", 10, "nearest", [1, 1, 1.5, 2.5]),
    "upsample-9 linear": _resize("Upsample", 9, "linear", [1, 1, 3, 1.7]),
    "upsample-9 nearest": _resize("Upsample", 9, "nearest", [1, 1, 3, 1.7]),
    "upsample-7 nearest": _resize("Upsample", 7, "nearest", [1.0, 1.0, 1.5, 2.5]),
}


@pytest.mark.parametrize("name", CASES)
def test_an_upgraded_old_op_computes_what_it_did(name):
    model = CASES[name]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    original = _run(model, x)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    upgraded = upgrade_opset(copy, MIN_OPSET)
    assert max(o.version for o in upgraded.opset_import if o.domain == "") == MIN_OPSET
    np.testing.assert_array_equal(_run(upgraded, x), original)


def test_an_upgraded_resize_keeps_its_name():
    """The converter drops an Upsample's name; errors and placement rules go by it."""
    upgraded = upgrade_opset(_resize("Upsample", 9, "nearest", [1, 1, 2, 2]), MIN_OPSET)
    assert [n.name for n in upgraded.graph.node if n.op_type == "Resize"] == ["r"]


def test_an_old_nearest_resize_scaling_both_ways_is_refused_by_name():
    model = _resize("Resize", 10, "nearest", [1, 1, 1.5, 0.6])
    with pytest.raises(CollageError, match=r"node 'r' \(opset-10 nearest Resize or Upsample\) "
                                           r"scales one axis up and another down"):
        collage_mlir.import_onnx(model)


def test_the_hardmax_rewrite_names_no_node_twice_and_refuses_opset_4_by_name():
    def model(opset: int) -> onnx.ModelProto:
        value = oh.make_tensor_value_info
        nodes = [oh.make_node("Relu", ["x"], ["r"], name="y"),
                 oh.make_node("Hardmax", ["r"], ["y"]),  # unnamed: named by its output
                 oh.make_node("Neg", ["y"], ["z"], name="y/flatten")]
        graph = oh.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [2, 3, 4])],
                              [value("z", TensorProto.FLOAT, [2, 3, 4])])
        made = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
        made.ir_version = 7
        return made

    names = [n.name for n in upgrade_opset(model(12), MIN_OPSET).graph.node]
    assert len(names) == len(set(names)) == 6
    with pytest.raises(CollageError, match=r"node 'y_' \(Hardmax, opset 4\) would change"):
        collage_mlir.import_onnx(model(4))
