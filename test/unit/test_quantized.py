"""Quantized (QDQ) models: int8 weights stay int8 through the import, regions keep the
DequantizeLinear → Conv → QuantizeLinear pattern by which backends pick integer kernels,
and quantized tensors are compared in steps of their scale."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import collage_mlir
from collage_mlir.backends.registry import available_backends, get_backend
from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.quantized import float_twin, quantization_error
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects.func import public_functions
from collage_mlir.driver import entry_graph, refused_for_numbers, tolerance_hint
from collage_mlir.errors import CollageError
from collage_mlir.graph import SubGraph
from collage_mlir.runtime.model import region_module
from collage_mlir.static_shapes import make_static
from collage_mlir.tensors import model_inputs


def qdq_conv_model(seed: int = 0) -> onnx.ModelProto:
    """x → Q → DQ → Conv(DQ(int8 weights, per channel), bias) → Relu → Q → DQ → y, as
    onnxruntime's static quantizer writes it."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("x_scale", np.array(0.02, np.float32)), ("x_zp", np.array(128, np.uint8)),
        ("w", w), ("w_scale", rng.uniform(0.001, 0.002, 8).astype(np.float32)),
        ("w_zp", np.zeros(8, np.int8)), ("b", rng.standard_normal(8).astype(np.float32)),
        ("y_scale", np.array(0.05, np.float32)), ("y_zp", np.array(0, np.uint8))]]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "y_scale", "y_zp"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "y_scale", "y_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_weight_dequantization_is_not_folded():
    model = make_static(qdq_conv_model(), "qdq")
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DequantizeLinear") == 3 and ops.count("QuantizeLinear") == 2
    weights = {i.name: i.data_type for i in model.graph.initializer}
    assert weights["w"] == TensorProto.INT8
    ir = str(collage_mlir.import_onnx(qdq_conv_model()))
    assert "onnx.DequantizeLinear" in ir and "vtensor<[8,3,3,3],si8>" in ir


def test_a_partitioned_qdq_model_computes_what_onnxruntime_does_on_it(tmp_path):
    """The region onnxruntime receives still has its integer weights and pattern: its
    outputs equal onnxruntime's on the original file, bit for bit (folded to float weights,
    the convolution ran in float and differed)."""
    path = tmp_path / "qdq.onnx"
    onnx.save(qdq_conv_model(), path)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    table = tmp_path / "costs.json"
    table.write_text('{"per_op": {"onnxruntime": {"*": 1.0}}}')
    model = collage_mlir.compile(str(path), backends=["onnxruntime"], cost=f"table:{table}")
    assert [s.backend for s in model.plan.steps] == ["onnxruntime"]
    np.testing.assert_array_equal(model.run([x])[0], want)


class WrongNumbers(CostEstimator):
    """Test double: every candidate refused with the same wrong-numbers reason."""

    def estimate(self, candidates, progress=None):
        return [math.inf] * len(candidates)

    def reason(self, candidate):
        return "invalid: wrong numbers: max abs err 0.3 in output 0 (max |ref| 2, rtol 0.01)"

    def transition_cost(self, src_backend, dst_backend, nbytes):
        return 0.0


def test_a_quantized_model_refused_whole_for_its_numbers_says_what_would_accept_it():
    def whole(model):
        graph = entry_graph(collage_mlir.import_onnx(model))
        return graph, [CandidatePartition(SubGraph(graph, graph.op_bits), "openvino", "whole")]

    graph, candidates = whole(qdq_conv_model())
    refused = refused_for_numbers(graph, candidates, [math.inf], WrongNumbers())
    assert refused == {"openvino": 0.15}
    hint = tolerance_hint(refused)
    assert "openvino's 15.0% of the output's magnitude" in hint
    assert "--atol-scale 0.19" in hint  # 1.25 x 0.15: other inputs may differ a little more
    assert "within the model's own quantization error" in tolerance_hint(refused, 0.2)
    assert "beyond the model's own quantization error" in tolerance_hint(refused, 0.1)
    assert refused_for_numbers(graph, candidates, [1e-3], WrongNumbers()) == {}  # it ran
    assert tolerance_hint({}) is None
    graph, candidates = whole(plain_relu())  # a float model's error is an error
    assert refused_for_numbers(graph, candidates, [math.inf], WrongNumbers()) == {}


def test_a_quantized_model_no_backend_runs_right_says_what_would_accept_it():
    """With every backend's candidates refused for their numbers (OpenVINO pinned on a QDQ
    model), the search's error names the node and, as a run that succeeds says it, the
    tolerance that would accept the whole model."""
    from collage_mlir.driver import choose

    graph = entry_graph(collage_mlir.import_onnx(qdq_conv_model()))
    candidates = [CandidatePartition(SubGraph(graph, graph.op_bits), "openvino", "whole")]
    candidates += [CandidatePartition(SubGraph(graph, 1 << n.index), "openvino", "op")
                   for n in graph.op_nodes()]
    with pytest.raises(CollageError, match=r"^no backend can run .* node .*: openvino: "
                       r"invalid: wrong numbers.*; quantized model: .*--atol-scale 0.19"):
        choose(graph, candidates, [math.inf] * len(candidates), WrongNumbers())


def test_the_float_twin_drops_activation_rounding_and_keeps_int8_weights():
    """The twin computes the model's convolution on its float input and its dequantized
    int8 weights, without the input's and output's rounding but clipped to the ranges their
    quantization represents (a quantizer drops a Relu6 whose clipping the range already
    does: without the clip the twin of an int8 MobileNetV2 returned 3.4e6 where the model
    returned 2.0); the model's own error is
    onnxruntime's int8 run against it (on a CPU without VNNI, int8 kernels saturate
    u8 x s8 pair sums, so that is more than the rounding alone)."""
    module = collage_mlir.import_onnx(qdq_conv_model())
    twin = float_twin(module)
    text = str(twin).split("{-#")[0]
    assert "onnx.QuantizeLinear" not in text and text.count("onnx.DequantizeLinear") == 1
    assert text.count("onnx.Clip") == 2
    assert "vtensor<[8,3,3,3],si8>" in text  # the weights are the model's own
    (x,) = model_inputs(module)
    model = qdq_conv_model()
    w, scales = (numpy_helper.to_array(model.graph.initializer[k]) for k in (2, 3))
    ranges = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in [
        ("x_lo", -128 * 0.02), ("x_hi", 127 * 0.02), ("y_lo", 0.0), ("y_hi", 255 * 0.05)]]
    plain = helper.make_graph(
        [helper.make_node("Clip", ["x", "x_lo", "x_hi"], ["xc"]),
         helper.make_node("Conv", ["xc", "wf", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Clip", ["r", "y_lo", "y_hi"], ["y"])], "plain",
        list(model.graph.input), list(model.graph.output),
        [numpy_helper.from_array(w.astype(np.float32) * scales[:, None, None, None], "wf"),
         model.graph.initializer[5], *ranges])
    want = _ort(helper.make_model(plain, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), x)
    got = get_backend("onnxruntime").compile(region_module(public_functions(twin)[0])).run(
        [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    int8 = _ort(model, x)
    assert quantization_error(module) == pytest.approx(
        float(np.abs(int8 - want).max() / np.abs(want).max()), rel=1e-4)
    assert float_twin(collage_mlir.import_onnx(plain_relu())) is None


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def plain_relu() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "float",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op,hinted", [("QLinearAdd", True), ("FusedMatMul", False)])
def test_an_op_from_onnxruntimes_own_domain_is_refused_by_name(op, hinted):
    """QOperator quantization writes com.microsoft ops no other backend reads; the error
    names the node and, for those, the format that every backend reads."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node(op, ["x", "x"], ["y"], name="odd",
                                                domain="com.microsoft")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(CollageError, match="node 'odd' op 'com.microsoft.") as e:
        collage_mlir.import_onnx(model)
    assert ("quant_format=QuantFormat.QDQ" in str(e.value)) == hinted


@pytest.mark.skipif("iree" not in available_backends(), reason="iree unavailable")
def test_iree_returns_quantized_values_as_the_type_the_region_declares():
    """IREE's integers are signless: a QuantizeLinear to uint8 came back int8 (the same
    bits), and the check refused every such region for its dtype."""
    graph = entry_graph(collage_mlir.import_onnx(qdq_conv_model()))
    (q, *_) = [n for n in graph.op_nodes() if n.op_type == "QuantizeLinear"]
    region = SubGraph(graph, 1 << q.index).extract("q")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32) * 3
    got = get_backend("iree").compile(region).run([x])[0]
    want = get_backend("onnxruntime").compile(region).run([x])[0]
    assert got.dtype == want.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1 and got.max() > 127
