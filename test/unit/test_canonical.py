"""Value-keeping rewrites at import (collage_mlir/canonical.py): what is rewritten, what is
not, and that the rewritten model computes what the original did on the real backends."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import collage_mlir
from collage_mlir.canonical import canonicalize, respell
from collage_mlir.check.compare import whole_model_runner
from collage_mlir.static_shapes import make_static


def _model(pool: str, shape: str = "1,8,7,7", opset: int = 17) -> onnx.ModelProto:
    return onnx.parser.parse_model(f'''<ir_version: 8, opset_import: ["" : {opset}]>
    g (float[{shape}] x) => (float[1,8,1,1] y) {{
      r = Relu(x)
      y = AveragePool<{pool}>(r)
    }}''')


WHOLE = "kernel_shape=[16,16], strides=[16,16], ceil_mode=1, count_include_pad=1, pads=[0,0,0,0]"
"""transformers' EfficientNet pooler, scaled down: one window larger than the 7x7 input."""


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


@pytest.mark.parametrize("opset", [17, 18])
def test_a_whole_input_window_becomes_the_mean_with_the_same_values(opset: int) -> None:
    original = _model(WHOLE, opset=opset)
    proto = make_static(_copy(original), "g")
    assert canonicalize(proto) and _ops(proto) == ["Relu", "ReduceMean"]
    x = np.random.default_rng(0).standard_normal((1, 8, 7, 7)).astype(np.float32)
    (want,) = ort.InferenceSession(original.SerializeToString()).run(None, {"x": x})
    (got,) = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, np.maximum(x, 0).mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5)


@pytest.mark.parametrize("pool", [
    "kernel_shape=[16,16], strides=[16,16], ceil_mode=1, pads=[1,1,1,1]",  # padding counts
    "kernel_shape=[4,4], dilations=[2,2], ceil_mode=1",  # a dilated window skips elements
    "kernel_shape=[4,4], strides=[4,4], ceil_mode=1",  # two windows a side
])
def test_other_pools_stay(pool: str) -> None:
    proto = make_static(_copy(_model(pool)), "g")
    assert canonicalize(proto) == [] and _ops(proto) == ["Relu", "AveragePool"]


def test_imported_whole_window_pool_runs_on_openvino() -> None:
    # OpenVINO refuses the pool as exported; after import it compiles and agrees
    module = collage_mlir.import_onnx(_model(WHOLE))
    assert "onnx.AveragePool" not in str(module) and "onnx.ReduceMean" in str(module)
    x = np.random.default_rng(1).standard_normal((1, 8, 7, 7)).astype(np.float32)
    (got,) = whole_model_runner(module, "openvino")([x])
    np.testing.assert_allclose(got, np.maximum(x, 0).mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5)


def _negative_perm() -> onnx.ModelProto:
    """What torch's TorchScript exporter writes for `x.permute(0, -2, -1, 1)` (Mamba2), and the
    same Transpose again inside an If's branch."""
    return onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4,5] x, bool c) => (float[2,4,5,3] y, float[2,4,5,3] z) {
      y = Transpose<perm=[0,-2,-1,1]>(x)
      z = If(c) <then_branch = t () => (float[2,4,5,3] a) { a = Transpose<perm=[0,-2,-1,1]>(x) },
                 else_branch = e () => (float[2,4,5,3] b) { b = Transpose<perm=[0,2,3,1]>(x) }>
    }''')


def test_a_negative_perm_is_counted_from_the_start_and_refused_no_more() -> None:
    proto = _negative_perm()
    with pytest.raises(Exception, match="perm"):  # as exported: refused by onnxruntime
        ort.InferenceSession(proto.SerializeToString())
    assert respell(proto) == ["y", "a"]
    perms = [list(a.ints) for n in [proto.graph.node[0], *proto.graph.node[1].attribute[0].g.node]
             for a in n.attribute if a.name == "perm"]
    assert perms == [[0, 2, 3, 1], [0, 2, 3, 1]]
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    y, z = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x, "c": np.array(True)})
    np.testing.assert_array_equal(y, x.transpose(0, -2, -1, 1))
    np.testing.assert_array_equal(z, y)
    assert respell(proto) == []  # nothing left to fix


def test_a_model_with_a_negative_perm_imports_and_runs() -> None:
    proto = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4,5] x) => (float[2,4,5,3] y) {
      r = Relu(x)
      y = Transpose<perm=[0,-2,-1,1]>(r)
    }''')
    module = collage_mlir.import_onnx(proto)
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (got,) = whole_model_runner(module, "onnxruntime")([x])
    np.testing.assert_array_equal(got, np.maximum(x, 0).transpose(0, 2, 3, 1))


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out
