"""Static shapes at import: dynamic inputs specialised by the user, shape computations folded.

Each model is written the way `torch.onnx.export` writes them (shapes computed at run time
from `Shape`), folded, and run in onnxruntime before and after: same numbers, no Shape op left,
every value static in the imported IR.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from collage_mlir.check.compare import whole_model_runner
from collage_mlir.errors import CollageError
from collage_mlir.export import export_function
from collage_mlir.importer import import_onnx
from collage_mlir.static_shapes import make_static, parse_input_shape, parse_shape
from collage_mlir.tools import cli

# x[N,4,6] -> Relu -> Reshape to [N, 24] with N = Shape(x)[0] -> MatMul
RESHAPE_BY_SHAPE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N,4,6] x) => (float[N,5] y) <float[24,5] w = {WEIGHTS}> {
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  b = Gather<axis = 0>(s, i0)
  ax = Constant<value = int64[1] {0}>()
  bu = Unsqueeze(b, ax)
  c24 = Constant<value = int64[1] {24}>()
  target = Concat<axis = 0>(bu, c24)
  r = Relu(x)
  flat = Reshape(r, target)
  y = MatMul(flat, w)
}
"""

# pad H and W of x[1,3,H,W] up to a multiple of 8, computed from Shape(x) as exporters do
DYNAMIC_PAD = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,H,W] x) => (float[1,3,P,Q] y) {
  s = Shape<start = 2>(x)
  eight = Constant<value = int64 {8}>()
  m = Mod(s, eight)
  short = Sub(eight, m)
  pad = Mod(short, eight)
  zeros = Constant<value = int64[6] {0,0,0,0,0,0}>()
  tail = Concat<axis = 0>(zeros, pad)
  pads = Cast<to = 7>(tail)
  y0 = Pad(x, pads)
  y = Sigmoid(y0)
}
"""

# batch and sequence read from the input and rebuilt into a 4-d attention shape
SPLIT_HEADS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[B,S,8] x) => (float[B,2,S,4] y) {
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  i1 = Constant<value = int64 {1}>()
  b = Gather<axis = 0>(s, i0)
  n = Gather<axis = 0>(s, i1)
  ax = Constant<value = int64[1] {0}>()
  bu = Unsqueeze(b, ax)
  nu = Unsqueeze(n, ax)
  heads = Constant<value = int64[2] {2, 4}>()
  target = Concat<axis = 0>(bu, nu, heads)
  r = Reshape(x, target)
  y = Transpose<perm = [0, 2, 1, 3]>(r)
}
"""


def _model(text: str) -> onnx.ModelProto:
    weights = ", ".join(f"{v:.3f}" for v in np.linspace(-1, 1, 24 * 5))
    return onnx.parser.parse_model(text.replace("{WEIGHTS}", "{" + weights + "}"))


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _folded(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return make_static(copy, "test", shapes)


@pytest.mark.parametrize("text, shapes", [
    (RESHAPE_BY_SHAPE, {"x": [3, 4, 6]}),
    (DYNAMIC_PAD, {"x": [1, 3, 13, 16]}),
    (SPLIT_HEADS, {"x": [2, 5, 8]}),
])
def test_shape_computations_fold_and_compute_the_same(text, shapes) -> None:
    model = _model(text)
    folded = _folded(model, shapes)
    types = [n.op_type for n in folded.graph.node]
    assert set(types) <= {"Constant", "Relu", "Reshape", "MatMul", "Pad", "Sigmoid",
                          "Transpose"}, types
    x = np.random.default_rng(0).standard_normal(shapes["x"]).astype(np.float32)
    (want,), (got,) = _run(model, {"x": x}), _run(folded, {"x": x})
    np.testing.assert_array_equal(got, want)
    # through the importer and back (what graph-kind backends receive)
    module = import_onnx(model, input_shapes=shapes)
    assert "?" not in str(module).split("{-#")[0]
    (round_trip,) = _run(export_function(module), {"x": x})
    np.testing.assert_allclose(round_trip, want, rtol=1e-6)


# torch.chunk / torch.split over a dynamic axis: a sequence, read at constant indices (one
# part twice, one from the end); the sizes a scalar, or a list computed from the shape
CHUNKS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[B,S,4] x) => (float[B,T,4] y) {
  SPLIT
  seq = SplitToSequence<axis = 1>(x, split)
  i0 = Constant<value = int64 {0}>()
  last = Constant<value = int64 {-1}>()
  a = SequenceAt(seq, i0)
  b = SequenceAt(seq, last)
  c = SequenceAt(seq, i0)
  r = Relu(b)
  y = Concat<axis = 1>(a, r, c)
}
"""
BY_TWO = "split = Constant<value = int64 {2}>()"
FIRST_AND_REST = """s = Shape(x)
  i1 = Constant<value = int64[1] {1}>()
  n = Gather<axis = 0>(s, i1)
  rest = Sub(n, i1)
  split = Concat<axis = 0>(i1, rest)"""


@pytest.mark.parametrize("split", [BY_TWO, FIRST_AND_REST])
def test_a_sequence_read_at_constant_indices_becomes_one_split(split) -> None:
    model = _model(CHUNKS.replace("SPLIT", split))
    folded = _folded(model, {"x": [2, 6, 4]})
    types = [n.op_type for n in folded.graph.node]
    assert types.count("Split") == 1 and not any("Sequence" in t for t in types), types
    x = np.random.default_rng(0).standard_normal([2, 6, 4]).astype(np.float32)
    (want,), (got,) = _run(model, {"x": x}), _run(folded, {"x": x})
    np.testing.assert_array_equal(got, want)
    module = import_onnx(model, input_shapes={"x": [2, 6, 4]})
    assert "?" not in str(module).split("{-#")[0]


@pytest.mark.parametrize("split, last, shape", [
    ("split = Constant<value = int64[2] {7, -1}>()", -1, [2, 6, 4]),  # sizes off the axis
    (BY_TWO, 1, [2, 2, 4]),  # one part, read at index 1
], ids=["sizes", "index"])
def test_a_sequence_not_read_as_its_parts_stays_and_is_named(split, last, shape) -> None:
    """torch writes 128 chunks of a 64-long axis as 127 ones and -63, which no backend runs;
    an index past the parts fails at run time. Neither is rewritten."""
    text = CHUNKS.replace("SPLIT", split).replace("int64 {-1}", f"int64 {{{last}}}")
    with pytest.raises(CollageError, match=r"node 'seq' \(SplitToSequence\).*no static shape"):
        _folded(_model(text), {"x": shape})


def test_padding_amount_comes_from_the_given_shape() -> None:
    folded = _folded(_model(DYNAMIC_PAD), {"x": [1, 3, 13, 16]})
    (out,) = folded.graph.output
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 3, 16, 16]


def test_large_constant_of_shape_weights_stay_ops() -> None:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,256] x) => (float[1,256] y) {
          shape = Constant<value = int64[2] {256, 256}>()
          w = ConstantOfShape<value = float[1] {0.5}>(shape)
          y = MatMul(x, w)
        }""")
    folded = _folded(model, {})
    assert [n.op_type for n in folded.graph.node] == ["Constant", "ConstantOfShape", "MatMul"]


def test_values_returned_as_they_are_keep_their_types_and_constant_outputs_fold() -> None:
    # an input and an initializer returned as they are, and a returned ConstantOfShape
    # above the folding bound (the model returns its data either way)
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N,4] x) => (float[N,4] y, float[N,4] x, float[2,3] c, float[256,256] w)
          <float[2,3] c = {1, 2, 3, 4, 5, 6}> {
          y = Relu(x)
          shape = Constant<value = int64[2] {256, 256}>()
          w = ConstantOfShape<value = float[1] {0.5}>(shape)
        }""")
    folded = _folded(model, {"x": [2, 4]})
    dims = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim]
            for o in folded.graph.output}
    assert dims == {"y": [2, 4], "x": [2, 4], "c": [2, 3], "w": [256, 256]}
    assert [n.op_type for n in folded.graph.node] == ["Relu"]
    assert "w" in {i.name for i in folded.graph.initializer}


def test_quantized_shape_arithmetic_folds_and_weights_stay_behind_their_dequantize() -> None:
    # onnxruntime's static quantizer quantizes float shape arithmetic (MobileViT's
    # ceil(H / patch) * patch): that DequantizeLinear folds; an int8 weight's does not,
    # nor a fake-quantized float weight's (QuantizeLinear folds it to int8)
    weights = ", ".join(str(v) for v in np.linspace(-1, 1, 256))
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N,4,8,8] x) => (float[N,32,8] y)
          <int8[8] w = {1, 2, 3, 4, 5, 6, 7, 8}, float ws = {0.5}, int8 wz = {0},
           float[32,8] f = {WEIGHTS}, float fs = {0.01}, int8 fz = {0}> {
          s = Shape(x)
          i2 = Constant<value = int64[1] {2}>()
          h = Gather<axis = 0>(s, i2)
          hf = Cast<to = 1>(h)
          sc = Constant<value = float {0.125}>()
          zp = Constant<value = uint8 {0}>()
          q = QuantizeLinear(hf, sc, zp)
          dq = DequantizeLinear(q, sc, zp)
          four = Constant<value = float[1] {4.0}>()
          h4 = Mul(dq, four)
          hi = Cast<to = 7>(h4)
          lead = Constant<value = int64[1] {-1}>()
          eight = Constant<value = int64[1] {8}>()
          target = Concat<axis = 0>(lead, hi, eight)
          r = Reshape(x, target)
          wf = DequantizeLinear(w, ws, wz)
          fq = QuantizeLinear(f, fs, fz)
          ff = DequantizeLinear(fq, fs, fz)
          r2 = Add(r, ff)
          y = Add(r2, wf)
        }""".replace("{WEIGHTS}", "{" + weights + "}"))
    folded = _folded(model, {"x": [2, 4, 8, 8]})
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" not in ops and "QuantizeLinear" not in ops
    assert ops.count("DequantizeLinear") == 2  # the weights', their inputs int8
    ints = {i.name for i in folded.graph.initializer if i.data_type == onnx.TensorProto.INT8}
    assert {n.input[0] for n in folded.graph.node if n.op_type == "DequantizeLinear"} <= ints
    x = np.random.default_rng(5).standard_normal((2, 4, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(model, {"x": x})[0])


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_group_normalization_21_imports_and_runs(backend) -> None:
    # ONNX infers nothing for GroupNormalization-21 (torch's dynamo exporter at opset 21+
    # writes nn.GroupNorm so): the values after it were untyped and the import failed
    model = onnx.parser.parse_model("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[N,4,8,8] x) => (float[N,4,8,8] y)
          <float[4] s = {1, 2, 3, 4}, float[4] b = {0, 1, 0, 1}> {
          n = GroupNormalization<num_groups = 2, epsilon = 0.00001>(x, s, b)
          y = Relu(n)
        }""")
    module = import_onnx(model, input_shapes={"x": [2, 4, 8, 8]})
    x = np.random.default_rng(4).standard_normal((2, 4, 8, 8)).astype(np.float32)
    (got,) = whole_model_runner(module, backend)([x])
    groups = x.reshape(2, 2, -1)
    norm = ((groups - groups.mean(-1, keepdims=True))
            / np.sqrt(groups.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    want = np.maximum(norm * np.array([1, 2, 3, 4], np.float32).reshape(1, 4, 1, 1)
                      + np.array([0, 1, 0, 1], np.float32).reshape(1, 4, 1, 1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_model_with_a_dynamic_input_fails_at_once_naming_input_shape_and_flag() -> None:
    with pytest.raises(CollageError) as err:
        import_onnx(_model(RESHAPE_BY_SHAPE))
    msg = str(err.value)
    assert "input 'x'" in msg and "[N,4,6]" in msg and "--input-shape x=1x4x6" in msg


@pytest.mark.parametrize("shapes, fragment", [
    ({"x": [3, 4]}, "input 'x' is [N,4,6]; --input-shape gives [3,4]"),
    ({"x": [3, 5, 6]}, "--input-shape gives [3,5,6]"),
    ({"nope": [1]}, "names no input 'nope' (inputs: x)"),
])
def test_input_shapes_must_agree_with_the_model(shapes, fragment) -> None:
    with pytest.raises(CollageError, match=r".*") as err:
        import_onnx(_model(RESHAPE_BY_SHAPE), input_shapes=shapes)
    assert fragment in str(err.value)


SHARED_DIMS = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[B,S] a, float[B,S] b) => (float[B,S] y) {
      y = Add(a, b)
    }"""


@pytest.mark.parametrize("shapes, samples, fragment", [
    (None, {"a": (1, 7), "b": (1, 9)}, "'a' and 'b' share dimension 'S' (axis 1 of 'a', "
     "axis 1 of 'b'), but the shapes given for them put 7 and 9 there"),
    ({"a": (2, 7)}, [(3, 7), (1, 7)], "share dimension 'B'"),
])
def test_inputs_sharing_a_named_dim_must_be_given_one_value_for_it(shapes, samples,
                                                                    fragment) -> None:
    """Two sample inputs disagreeing on a shared dim ended in shape inference's
    "Incompatible dimensions", naming neither input."""
    model = onnx.parser.parse_model(SHARED_DIMS)
    with pytest.raises(CollageError) as err:
        import_onnx(model, input_shapes=shapes, samples=samples)
    assert fragment in str(err.value)
    module = import_onnx(model, samples={"a": (2, 5), "b": (2, 5)})
    assert "!torch.vtensor<[2,5],f32>" in str(module)
    with pytest.raises(CollageError, match=r"--input-shape b=2x7 "):  # the hint said 1x1
        import_onnx(model, input_shapes={"a": (2, 7)})
    square = onnx.parser.parse_model(SHARED_DIMS.replace("float[B,S] a", "float[S,S] a"))
    with pytest.raises(CollageError, match=r"input 'a' names dimension 'S' at axes 0 and 1, "
                                           r"but the shape given for it puts 2 and 3 there"):
        import_onnx(square, input_shapes={"a": (2, 3)})


def test_a_data_dependent_shape_is_named() -> None:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (int64[1,N] y) {
          y = NonZero(x)
        }""")
    with pytest.raises(CollageError, match="NonZero.*no static shape"):
        import_onnx(model)


def test_parse_shapes() -> None:
    assert parse_shape("1x3x224x224") == (1, 3, 224, 224)
    assert parse_shape("scalar") == ()
    assert parse_input_shape("input_ids=1x128") == ("input_ids", (1, 128))
    assert parse_input_shape("a=b=2x2") == ("a=b", (2, 2))
    for bad in ("x", "=1x2", "x=1xq", "x=-1"):
        with pytest.raises(CollageError):
            parse_input_shape(bad)


def test_cli_import_takes_input_shape_and_names_a_missing_one(tmp_path, capsys) -> None:
    path = tmp_path / "dyn.onnx"
    onnx.save(_model(RESHAPE_BY_SHAPE), path)
    assert cli.main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-shape x=" in err and "Traceback" not in err
    out = tmp_path / "m.mlir"
    assert cli.main(["import", str(path), "--input-shape", "x=2x4x6", "-o", str(out)]) == 0
    assert "!torch.vtensor<[2,24],f32>" in out.read_text()


def test_external_data_models_load(tmp_path) -> None:
    model = _model(RESHAPE_BY_SHAPE)
    (w,) = model.graph.initializer
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w), w.name))  # raw bytes
    x = np.ones((1, 4, 6), np.float32)
    (want,) = _run(model, {"x": x})
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    assert (tmp_path / "ext.weights").is_file()
    module = import_onnx(path, input_shapes={"x": [1, 4, 6]})
    (got,) = _run(export_function(module), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6)
