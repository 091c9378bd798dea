"""bench/ceiling.py's bookkeeping: kernels charged to anchors, the oracle, the remainder.

Profiles here are written by hand in each backend's naming (a test double of what their
profilers report); no backend runs."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from collage_mlir.errors import CollageError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from ceiling import (  # noqa: E402
    Attribution,
    Ceiling,
    Kernel,
    batched_shapes,
    ceiling_of,
    crossing_bytes,
    named,
    price_hand_offs,
    scaled_to,
)


@pytest.fixture
def model() -> onnx.ModelProto:
    """conv -> batch norm -> relu -> LRN -> (unnamed) flatten -> gemm -> add -> GRU."""
    def node(op, ins, out, name=""):
        return helper.make_node(op, ins, [out], name=name)

    nodes = [
        node("Conv", ["x", "w"], "c", "conv"),
        node("BatchNormalization", ["c", "s", "b", "m", "v"], "bn", "bn"),
        node("Relu", ["bn"], "r", "relu"),
        node("LRN", ["r"], "l", "lrn"),
        node("Flatten", ["l"], "f"),
        node("Constant", [], "k0", "bias"),
        node("Identity", ["k0"], "k", "bias_copy"),
        node("Gemm", ["f", "g"], "y0", "gemm"),
        node("Add", ["k", "y0"], "y", "add"),
        node("GRU", ["y", "gw", "gr"], "h", "gru"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)])
    return named(helper.make_model(graph))


def test_named_gives_every_node_a_name_and_keeps_the_given_ones(model):
    names = [n.name for n in model.graph.node]
    assert names[:4] == ["conv", "bn", "relu", "lrn"]
    assert names[4] and len(set(names)) == len(names)


def test_backend_decorations_map_back_to_their_nodes(model):
    a = Attribution(model)
    assert a.node_of("fused conv").name == "conv"
    assert a.node_of("r_nchwc").name == "relu"  # onnxruntime's NCHWc output name
    assert a.node_of("conv/WithoutBiases").name == "conv"  # OpenVINO's bias split
    assert a.node_of("gemm/MatMulAddFusion").name == "gemm"
    assert a.node_of("relu/QuickGeluFusion/").name == "relu"
    assert a.node_of("gemm_token_12").name == "gemm"
    assert a.node_of("GRUSequence_4202") is None


def test_tails_are_charged_to_the_compute_node_they_hang_off(model):
    a = Attribution(model)
    by = {n.name: n for n in model.graph.node}
    assert a.anchor(by["relu"]) == "conv"
    assert a.anchor(by["bn"]) == "conv"
    assert a.anchor(by["lrn"]) == "lrn"
    assert a.anchor(by[model.graph.node[4].name]) == "lrn"  # the flatten after it
    assert a.anchor(by["add"]) == "gemm"  # past the weight feeding its first input


def test_charge_keeps_anchors_only_a_data_move_reached_out_of_the_common_set(model):
    per_anchor, lost = Attribution(model).charge([
        Kernel(("r_nchwc",), "Conv", 2.0),
        Kernel(("lrn",), "LRN", 1.0),
        Kernel(("y_reshape", "gru"), "Reshape", 0.5),  # a move named after the GRU
        Kernel(("SkipLayerNormalization_token_3",), "SkipLayerNormalization", 0.25),
    ])
    assert per_anchor == {"conv": 2.0, "lrn": 1.0}
    assert lost == pytest.approx(0.75)


def test_the_oracle_takes_each_common_anchor_from_its_faster_backend(model):
    kernels = {
        "onnxruntime": [Kernel(("r_nchwc",), "Conv", 2.0), Kernel(("lrn",), "LRN", 4.0),
                        Kernel(("fused gemm",), "Gemm", 1.0), Kernel(("gru",), "GRU", 3.0)],
        "openvino": [Kernel(("conv/WithoutBiases", "bn", "relu"), "Convolution", 3.0),
                     Kernel(("lrn",), "LRN", 0.5), Kernel(("gemm",), "FullyConnected", 1.5),
                     Kernel(("GRUSequence_7",), "RNNSeq", 2.0)],
    }
    c = ceiling_of(model, kernels)
    assert c.totals == {"onnxruntime": 10.0, "openvino": 7.0}
    assert c.common() == {"conv", "lrn", "gemm"}
    # the GRU: onnxruntime timed it by name, OpenVINO under a name of its own
    assert c.remainder("onnxruntime") == 3.0
    assert c.remainder("openvino") == 2.0
    assert c.oracle == pytest.approx(2.0 + 0.5 + 1.0 + 2.0)
    assert c.ratio == pytest.approx(7.0 / 5.5)
    # openvino leads; onnxruntime is faster on the conv and the gemm, the conv by more
    assert [a for a, _ in c.differing(5)] == ["conv", "gemm"]
    assert c.differing(1)[0][1] == {"onnxruntime": 2.0, "openvino": 3.0}


def test_one_backend_faster_everywhere_gives_a_ceiling_of_one():
    c = Ceiling(totals={"a": 4.0, "b": 8.0},
                per_anchor={"a": {"x": 1.0, "y": 3.0}, "b": {"x": 2.0, "y": 6.0}},
                unattributed={"a": 0.0, "b": 0.0})
    assert c.ratio == pytest.approx(1.0)
    assert c.differing(3) == []


def test_a_fused_kernel_named_after_its_tail_goes_to_the_compute_node_it_lists(model):
    """OpenVINO names a FullyConnected that absorbed an activation after the activation;
    its fused-layer list still names the Gemm."""
    per_anchor, _ = Attribution(model).charge([Kernel(("relu", "gemm"), "FullyConnected", 2.0)])
    assert per_anchor == {"gemm": 2.0}


def test_compute_nodes_one_backend_fused_are_compared_as_one_group(model):
    """OpenVINO computes the LRN and the Gemm in one kernel (as it does an attention's
    MatMul, Softmax, MatMul): onnxruntime's two kernels for them count against it together,
    not its whole time against onnxruntime's LRN alone."""
    kernels = {
        "onnxruntime": [Kernel(("r_nchwc",), "Conv", 2.0), Kernel(("lrn",), "LRN", 1.0),
                        Kernel(("fused gemm",), "Gemm", 3.0)],
        "openvino": [Kernel(("conv",), "Convolution", 2.0),
                     Kernel(("lrn", "gemm"), "FullyConnected", 3.5),
                     Kernel(("k_reorder", "lrn", "gemm"), "Reorder", 0.5)],  # a move: no group
    }
    c = ceiling_of(model, kernels)
    assert c.groups == {"lrn": ("lrn", "gemm")}
    assert c.per_anchor["onnxruntime"] == {"conv": 2.0, "lrn": 4.0}
    assert c.per_anchor["openvino"] == {"conv": 2.0, "lrn": 4.0}
    assert c.ratio == pytest.approx(1.0)  # with OpenVINO's kernel on the LRN alone: 2.0


def test_a_batch_sets_every_inputs_first_dimension_and_no_initializers():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])  # an initializer listed too
    graph = helper.make_graph([], "g", [x, ids, w], [],
                              [helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)])
    assert batched_shapes(helper.make_model(graph), 8) == {"x": [8, 3, 8, 8], "ids": [8, 16]}


def test_kernels_are_scaled_to_the_unprofiled_run_in_proportion():
    profiled = [Kernel(("conv",), "Conv", 6.0), Kernel(("gemm",), "Gemm", 3.0),
                Kernel(("reorder",), "Reorder", 1.0)]
    scaled = scaled_to(profiled, 8.0)  # the profiler added 25%
    assert [k.ms for k in scaled] == pytest.approx([4.8, 2.4, 0.8])
    assert [k.names for k in scaled] == [k.names for k in profiled]
    assert scaled_to([], 8.0) == []


def test_a_cut_hands_off_what_enters_and_leaves_its_nodes_once():
    """x[1,4] -> MatMul (weight w) -> y[1,8] -> Softmax -> z[1,8] -> Relu -> out; y also
    returned. Around MatMul+Softmax: x in (16 bytes), y and z out (32 each); the weight is
    not data; around the Relu alone: z in, out out."""
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Softmax", ["y"], ["z"], name="sm"),
             helper.make_node("Relu", ["z"], ["out"], name="relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f32, [1, 4])],
        [helper.make_tensor_value_info("out", f32, [1, 8]),
         helper.make_tensor_value_info("y", f32, [1, 8])],
        [helper.make_tensor("w", f32, [4, 8], [0.0] * 32)],
        value_info=[helper.make_tensor_value_info("z", f32, [1, 8])])
    model = helper.make_model(graph)
    assert crossing_bytes(model, ["mm", "sm"]) == 16 + 32 + 32
    assert crossing_bytes(model, ["relu"]) == 32 + 32


def test_the_priced_ceiling_keeps_only_gains_that_outlive_their_hand_offs():
    """b leads (8 ms whole); a is faster on x by 1 ms and on y by 3 ms. A hand-off of 2 ms
    on each leaves only y's gain: oracle 8 - 1 = 7 against the free bound's 8 - 4 = 4."""
    c = Ceiling(totals={"a": 9.0, "b": 8.0},
                per_anchor={"a": {"x": 1.0, "y": 2.0, "z": 6.0},
                            "b": {"x": 2.0, "y": 5.0, "z": 1.0}},
                unattributed={"a": 0.0, "b": 0.0})
    assert c.leader == "b"
    assert c.ratio == pytest.approx(8.0 / 4.0)
    assert c.priced_ratio == pytest.approx(c.ratio)  # nothing priced yet
    c.hand_off_ms = {"x": 2.0, "y": 2.0}
    assert c.priced_ratio == pytest.approx(8.0 / 7.0)


def test_hand_offs_are_priced_per_crossing_tensor_on_the_measured_line():
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f32, [1, 256])],
                              [helper.make_tensor_value_info("out", f32, [1, 256])],
                              value_info=[helper.make_tensor_value_info("y", f32, [1, 256])])
    model = helper.make_model(graph)
    c = Ceiling(totals={"a": 3.0, "b": 2.0},
                per_anchor={"a": {"sm": 1.0}, "b": {"sm": 2.0}},
                unattributed={"a": 2.0, "b": 0.0})
    price_hand_offs(c, model, (1e-5, 1e-8))  # 10 us a tensor, 10 ns a byte
    assert c.hand_off_ms == {"sm": pytest.approx(2 * (1e-2 + 1e-5 * 1024))}


def test_a_batch_for_a_static_first_dimension_is_refused_saying_so():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    with pytest.raises(CollageError, match=r"--batch 2: input 'x' has a static first "
                                           r"dimension \(1\)"):
        batched_shapes(helper.make_model(graph), 2)
    assert batched_shapes(helper.make_model(graph), 1) == {"x": [1, 16]}
