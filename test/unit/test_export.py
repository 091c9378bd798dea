"""MLIR → ONNX export: whole light models round-trip through onnxruntime; regions export."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from conftest import light_model_path

from collage_mlir.export import ExportError, export_function, export_graph, node_name
from collage_mlir.export.resources import parse_resources, resource_array
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.importer import import_onnx, parse_mlir

ort = pytest.importorskip("onnxruntime")


def _session(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    s = _session(model)
    return s.run(None, {i.name: x for i, x in zip(s.get_inputs(), inputs, strict=True)})


def _parse(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


@pytest.mark.parametrize("name", ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                                  "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512"])
def test_light_model_round_trip(name: str) -> None:
    path = light_model_path(name)
    original = onnx.load(path)
    exported = export_function(import_onnx(path, min_opset=None))  # the model as written
    onnx.checker.check_model(exported)
    assert exported.opset_import[0].version == original.opset_import[0].version
    assert exported.producer_name == original.producer_name
    assert [o.name for o in exported.graph.output] == [o.name for o in original.graph.output]
    inits = {i.name for i in original.graph.initializer}
    shape = [d.dim_value for d in next(i for i in original.graph.input if i.name not in inits)
             .type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want, got = _run(original, [x]), _run(exported, [x])
    upgraded = _run(export_function(import_onnx(path)), [x])  # opset 17, as the pipeline uses
    assert len(want) == len(got) == len(upgraded)
    for w, g, u in zip(want, got, upgraded, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(u, w, rtol=1e-4, atol=1e-6)


def test_region_with_two_outputs_and_constant() -> None:
    module = import_onnx(_parse('''<ir_version: 8, opset_import: ["" : 13]>
        g (float[2,8] x) => (float[2,8] y) {
          a = Relu(x)
          k = Constant<value = float[8] {1,2,3,4,5,6,7,8}>()
          b = Mul(a, k)
          c = Sigmoid(a)
          y = Add(b, c)
        }'''))
    graph = DataflowGraph(module.body.operations[0])
    inside = sum(1 << n.index for n in graph.op_nodes() if n.op_type in ("Relu", "Mul"))
    region = SubGraph(graph, inside).extract("region")
    model = export_function(region)
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["input_0"]
    assert [o.name for o in model.graph.output] == ["output_0", "output_1"]
    assert len(model.graph.initializer) == 1
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    relu, mul = _run(model, [x])
    k = np.arange(1, 9, dtype=np.float32)
    np.testing.assert_allclose(relu, np.maximum(x, 0))
    np.testing.assert_allclose(mul, np.maximum(x, 0) * k, rtol=1e-6)


def test_omitted_optional_input_becomes_empty_name() -> None:
    module = import_onnx(_parse('''<ir_version: 8, opset_import: ["" : 13]>
        g (float[2,8] x) => (float[2,8] y, float[2,8] z) {
          hi = Constant<value = float {0.5}>()
          y = Clip(x, , hi)
          z = Clip(x)
        }'''))
    model = export_function(module)
    onnx.checker.check_model(model)
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert list(clips[0].input)[1] == "" and len(clips[0].input) == 3
    assert list(clips[1].input) == ["x"]  # trailing omitted inputs are dropped
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)
    y, z = _run(model, [x])
    np.testing.assert_allclose(y, np.minimum(x, 0.5))
    np.testing.assert_allclose(z, x)


def test_attributes_typed_from_schema() -> None:
    module = import_onnx(_parse('''<ir_version: 8, opset_import: ["" : 13]>
        g (float[1,3,8,8] x) => (float[1,3,4,4] y) {
          p = AveragePool<kernel_shape=[2,2], strides=[2,2], auto_pad="VALID">(x)
          y = LeakyRelu<alpha=0.25>(p)
        }'''))
    model = export_function(module)
    attrs = {a.name: a for n in model.graph.node for a in n.attribute}
    assert attrs["kernel_shape"].type == onnx.AttributeProto.INTS
    assert attrs["auto_pad"].type == onnx.AttributeProto.STRING
    assert attrs["alpha"].type == onnx.AttributeProto.FLOAT
    assert attrs["alpha"].f == pytest.approx(0.25)


def test_returned_input_and_duplicate_output_get_identity() -> None:
    module = import_onnx(_parse('''<ir_version: 8, opset_import: ["" : 13]>
        g (float[4] x) => (float[4] y, float[4] x2) {
          y = Relu(x)
          x2 = Identity(x)
        }'''))
    model = export_function(module)
    onnx.checker.check_model(model)
    names = [n.name for n in model.graph.node]
    assert len(set(names)) == len(names)
    x = np.array([-1, 2, -3, 4], np.float32)
    y, x2 = _run(model, [x])
    np.testing.assert_allclose(y, np.maximum(x, 0))
    np.testing.assert_allclose(x2, x)


def test_export_graph_names_nodes_by_post_dfs_index() -> None:
    module = import_onnx(light_model_path("squeezenet"))
    graph = DataflowGraph(module.body.operations[0])
    model = export_graph(graph)
    exported = {n.name for n in model.graph.node}
    assert {node_name(n.index) for n in graph.op_nodes()} <= exported


def test_dense_resource_from_text_honours_alignment_prefix() -> None:
    values = np.array([1.5, -2.0, 3.25], np.float32)
    blob = "0x04000000" + values.tobytes().hex().upper()
    text = f'''module {{
  func.func @f() -> !torch.vtensor<[3],f32> attributes {{torch.onnx_meta.opset_version = 13 : si64}} {{
    %0 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense_resource<w> : tensor<3xf32>}} : () -> !torch.vtensor<[3],f32>
    return %0 : !torch.vtensor<[3],f32>
  }}
}}
{{-#
  dialect_resources: {{
    builtin: {{
      w: "{blob}"
    }}
  }}
#-}}
'''  # noqa: E501
    table = parse_resources(text)
    assert table["w"] == values.tobytes()
    module = parse_mlir(text)
    model = export_function(module)
    (got,) = _run(model, [])
    np.testing.assert_array_equal(got, values)
    op = module.body.operations[0].regions[0].blocks[0].operations[0]
    np.testing.assert_array_equal(resource_array(op.attributes["torch.onnx.value"], table), values)


def test_non_onnx_op_is_an_export_error() -> None:
    module = parse_mlir('''func.func @f(%a: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
      %0 = "test.foo"(%a) : (!torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32>
      return %0 : !torch.vtensor<[2],f32>
    }''')
    with pytest.raises(ExportError, match="test.foo"):
        export_function(module)


def test_extracted_region_with_omitted_optional_input() -> None:
    module = import_onnx(_parse('''<ir_version: 8, opset_import: ["" : 13]>
        g (float[2,8] x) => (float[2,8] y) {
          a = Relu(x)
          hi = Constant<value = float {0.5}>()
          b = Clip(a, , hi)
          c = Sigmoid(a)
          y = Add(b, c)
        }'''))
    graph = DataflowGraph(module.body.operations[0])
    inside = sum(1 << n.index for n in graph.op_nodes() if n.op_type in ("Relu", "Clip", "Sigmoid"))
    region = SubGraph(graph, inside).extract("region")
    model = export_function(region)
    onnx.checker.check_model(model)
    assert len(model.graph.output) == 2
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)
    clip, sig = _run(model, [x])
    np.testing.assert_allclose(clip, np.minimum(np.maximum(x, 0), 0.5))
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


def test_a_model_listing_one_output_twice_exports_both():
    """ONNX output names are unique, so the second of two outputs named `y` had none of
    its own: onnxruntime's whole model returned one array for two (`collage-mlir demo`
    ended in an internal error). The second gets a fresh name through an Identity."""
    from collage_mlir.check.compare import whole_model_runner
    from collage_mlir.errors import CollageError
    from collage_mlir.tensors import argument_specs, arrange_inputs

    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [value("x", onnx.TensorProto.FLOAT, [3])],
        [value("y", onnx.TensorProto.FLOAT, [3]), value("y", onnx.TensorProto.FLOAT, [3])])
    module = import_onnx(onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    proto = export_function(module)
    assert len({o.name for o in proto.graph.output}) == 2
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    outs = whole_model_runner(module, "onnxruntime")([x])
    assert len(outs) == 2 and all(np.array_equal(o, np.maximum(x, 0)) for o in outs)
    fn = module.body.operations[0]
    with pytest.raises(CollageError, match=r"got ndarray \(one array: pass \[x\]\)"):
        arrange_inputs(["x"], argument_specs(fn), x)


@pytest.mark.parametrize("given, takes, ok", [
    (np.array([1, 2, 3], np.uint32), np.int32, True),
    (np.array([1, 4294967289], np.uint32), np.int32, False),  # wraps to -7 and back
    (np.array([-1, 2], np.int64), np.uint64, False),
    (np.array([2**31], np.int64), np.int32, False),
    (np.array([True, False]), np.int64, True),
    (np.array([0.5], np.float64), np.int64, False),
    (np.array([2**24 + 1], np.int64), np.float32, False),
    (np.array(["a", "b"]), np.float32, False),
    (np.array([1, 2], dtype=object), np.int32, True),  # Python numbers, as numpy reads them
    (np.array([2**70, 1], dtype=object), np.int64, False),
])
def test_inputs_are_cast_only_where_no_value_changes(given, takes, ok):
    from collage_mlir.errors import CollageError
    from collage_mlir.tensors import TensorSpec, arrange_inputs

    spec = TensorSpec(given.shape, np.dtype(takes))
    if ok:
        [got] = arrange_inputs(["x"], [spec], [given])
        assert got.dtype == takes and np.array_equal(got, given)
    else:
        with pytest.raises(CollageError, match=r"input 'x' (is|holds) "):
            arrange_inputs(["x"], [spec], [given])


def test_backend_messages_get_the_onnx_names_of_exported_nodes():
    """A region is exported with nodes named n0, n1, ...; a backend's message quoting them
    is shown with the ONNX node names the user can find."""
    from collage_mlir.driver import entry_graph
    from collage_mlir.export import with_onnx_names
    from collage_mlir.graph import SubGraph

    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["a"], name="/enc/Relu"),
         onnx.helper.make_node("Abs", ["a"], ["y"], name="/enc/Abs")], "g",
        [value("x", onnx.TensorProto.FLOAT, [2, 3])], [value("y", onnx.TensorProto.FLOAT, [2, 3])])
    module = import_onnx(onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    g = entry_graph(module)
    abs_only = SubGraph(g, 1 << next(n.index for n in g.op_nodes() if n.op_type == "Abs"))
    assert with_onnx_names("bad type in node (n0); n12, /x/n0 stay", abs_only) == \
        "bad type in node (n0 '/enc/Abs'); n12, /x/n0 stay"
    whole = SubGraph(g, g.op_bits)
    assert with_onnx_names("n0 then n1", whole) == "n0 '/enc/Relu' then n1 '/enc/Abs'"
    # a region function of an outlined model is exported on its own (the final compile, the
    # probe): its k-th op is node n<k>
    from collage_mlir.dialects.func import find_function
    from collage_mlir.export import with_onnx_names_of

    region = abs_only.extract()
    fn = find_function(region)
    assert with_onnx_names_of("Abs in node n0 (n1 is no op)", fn) == \
        "Abs in node n0 '/enc/Abs' (n1 is no op)"


def test_constant_values_read_from_every_numeric_spelling() -> None:
    # what OpenVINO's int32 check and IREE's Resize rewrite read: `value` (inline and as a
    # blob, read only when asked for), value_int(s), value_float(s); a string has none
    from collage_mlir.dialects import onnx as onnx_view
    from collage_mlir.dialects.func import public_functions
    from collage_mlir.export.onnx_export import constant_reader, constant_value
    from collage_mlir.export.resources import module_resources

    h, T = onnx.helper, onnx.TensorProto
    big = np.arange(5000, dtype=np.float32)  # imported as a blob
    nodes = [h.make_node("Constant", [], ["a"], value_int=3_000_000_000),
             h.make_node("Constant", [], ["b"], value_ints=[-1, 0, 3_000_000_000]),
             h.make_node("Constant", [], ["c"], value_float=0.5),
             h.make_node("Constant", [], ["d"], value_floats=[1.5, -2.0]),
             h.make_node("Constant", [], ["e"], value=onnx.numpy_helper.from_array(big)),
             h.make_node("Identity", ["x"], ["y"])]
    outs = [("y", T.FLOAT, [2]), ("a", T.INT64, []), ("b", T.INT64, [3]), ("c", T.FLOAT, []),
            ("d", T.FLOAT, [2]), ("e", T.FLOAT, [5000])]
    module = import_onnx(h.make_model(h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info(*o) for o in outs]), opset_imports=[h.make_opsetid("", 17)]))
    fn = public_functions(module)[0]
    constants = onnx_view.ops_of(fn, "Constant")
    asked = []
    values = [constant_value(op, lambda: asked.append(1) or module_resources(module))
              for op in constants]
    by_shape = {v.shape: v for v in values}
    assert by_shape[()].dtype in (np.int64, np.float32) and len(values) == 5
    ints = [v for v in values if v.dtype == np.int64]
    floats = [v for v in values if v.dtype == np.float32]
    assert sorted(v.tolist() if v.ndim else [v.item()] for v in ints) == \
        [[-1, 0, 3_000_000_000], [3_000_000_000]]
    assert [v.tolist() for v in floats if v.size < 3] == [0.5, [1.5, -2.0]]
    np.testing.assert_array_equal([v for v in floats if v.size == 5000][0], big)
    assert 1 <= len(asked) == sum(str(onnx_view.attributes(op).get("value", "")).startswith(
        "dense_resource") for op in constants)
    read = constant_reader(lambda: module_resources(module))
    assert read(fn.regions[0].blocks[0].arguments[0]) is None  # an input: no value
    assert [read(op.results[0]) is not None for op in constants] == [True] * 5
    missing = constant_reader(lambda: {})  # a blob not at hand: unknown, not an error
    assert sum(missing(op.results[0]) is None for op in constants) == len(asked)
