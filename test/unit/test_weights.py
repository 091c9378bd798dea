"""Random weights in place of splat ones (collage_mlir/weights.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from collage_mlir.weights import splat_weights, with_random_weights


def splat_model() -> onnx.ModelProto:
    """Conv → Relu → Flatten → Gemm, both weights and the Conv bias ConstantOfShape splats
    (as the light zoo makes them), IR 3: the shape initializers are graph inputs too."""
    def shape(name, dims):
        return numpy_helper.from_array(np.array(dims, np.int64), name)

    def splat(shape_name, out):
        return helper.make_node("ConstantOfShape", [shape_name], [out],
                                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]))

    inits = [shape("w_shape", [16, 3, 3, 3]), shape("b_shape", [16]),
             shape("g_shape", [10, 16 * 8 * 8])]
    nodes = [splat("w_shape", "w"), splat("b_shape", "b"), splat("g_shape", "g"),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "g"], ["y"], transB=1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])] + [
        helper.make_tensor_value_info(i.name, TensorProto.INT64, [len(i.int64_data) or
                                                                  len(numpy_helper.to_array(i))])
        for i in inits]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 3
    return model


def test_splat_weights_become_random_well_scaled_initializers():
    model = splat_model()
    assert splat_weights(model) == ["w", "b", "g"]
    out = with_random_weights(model)
    assert splat_weights(out) == [] and len(splat_weights(model)) == 3  # a copy
    assert not any(n.op_type == "ConstantOfShape" for n in out.graph.node)
    weights = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    assert set(weights) == {"w", "b", "g"}  # the shape recipes are gone
    assert weights["w"].shape == (16, 3, 3, 3) and weights["g"].shape == (10, 1024)
    assert abs(weights["w"].std() - np.sqrt(1 / 27)) < 0.2 * np.sqrt(1 / 27)
    assert abs(weights["g"].std() - np.sqrt(1 / 10)) < 0.2 * np.sqrt(1 / 10)  # min(shape)
    assert weights["b"].std() < 0.1
    assert [i.name for i in out.graph.input] == ["x"] and out.ir_version >= 4
    again = {i.name: numpy_helper.to_array(i) for i in with_random_weights(model).graph.initializer}
    assert all(np.array_equal(again[k], weights[k]) for k in weights)  # seeded


def test_the_randomized_model_runs_and_its_output_depends_on_its_input():
    session = ort.InferenceSession(with_random_weights(splat_model()).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    a, b = (session.run(None, {"x": rng.standard_normal((1, 3, 8, 8), np.float32)})[0]
            for _ in range(2))
    assert np.isfinite(a).all() and 0.05 < np.abs(a).max() < 100
    assert not np.allclose(a, b)
