"""Import: all light models, clean one-line errors for bad input (API and command line)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest

import collage_mlir
from collage_mlir import CollageError
from collage_mlir.graph import DataflowGraph
from collage_mlir.importer import MIN_OPSET, upgrade_opset


def _relu_model() -> onnx.ModelProto:
    value = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                          [value("x", onnx.TensorProto.FLOAT, [1, 3])],
                          [value("y", onnx.TensorProto.FLOAT, [1, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_light_model_imports(light_model):
    module = collage_mlir.import_onnx(light_model)
    assert module.operation.verify()
    graph = DataflowGraph(module.body.operations[0])
    original = upgrade_opset(onnx.load(light_model), MIN_OPSET)  # what import_onnx reads
    # every ONNX node that depends on a graph input is an op node; the rest (weights made by
    # ConstantOfShape, Unsqueeze of those, and Shape of static values) fold to constants
    const = {i.name for i in original.graph.initializer}
    real = 0
    for n in original.graph.node:
        if n.op_type == "Shape" or all(i in const or not i for i in n.input):
            const.update(n.output)
        else:
            real += 1
    assert graph.op_bits.bit_count() == real


def _bad_op_model() -> onnx.ModelProto:
    node = oh.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [2])],
                          [oh.make_tensor_value_info("y", 1, [2])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_unsupported_op_names_node_and_op():
    with pytest.raises(CollageError, match=r"node 'mystery' has unsupported op 'NoSuchOp'"):
        collage_mlir.import_onnx(_bad_op_model())


def test_control_flow_is_refused_naming_the_node():
    """An If whose branches read the model's input: its subgraphs were dropped on export,
    so every backend failed ("Required attribute 'else_branch' is missing") and the run
    ended "no backend can run If". Now the import says why, naming the node."""
    value = oh.make_tensor_value_info
    then = oh.make_graph([oh.make_node("Relu", ["a"], ["t"])], "then", [],
                         [value("t", onnx.TensorProto.FLOAT, [2])])
    other = oh.make_graph([oh.make_node("Neg", ["a"], ["e"])], "else", [],
                          [value("e", onnx.TensorProto.FLOAT, [2])])
    graph = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)],
        "g", [value("a", onnx.TensorProto.FLOAT, [2]), value("c", onnx.TensorProto.BOOL, [])],
        [value("y", onnx.TensorProto.FLOAT, [2])])
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match=r"node 'branch' \(If\) holds subgraphs \(control "
                                           r"flow\)"):
        collage_mlir.import_onnx(proto)


def test_malformed_model_names_file(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is not a protobuf")
    with pytest.raises(CollageError, match="broken.onnx"):
        collage_mlir.import_onnx(path)


def test_missing_external_data_says_which_file(tmp_path):
    """A model whose weights live in a .onnx.data file left behind: onnx's own reason (the
    missing file) is in the message, not just the exception's type."""
    import shutil
    from pathlib import Path

    src = Path(__file__).parent.parent / "data" / "exported" / "tiny_opt_dynamo.onnx"
    shutil.copy(src, tmp_path / src.name)
    with pytest.raises(CollageError, match=r"tiny_opt_dynamo\.onnx\.data"):
        collage_mlir.import_onnx(tmp_path / src.name)


def test_inputs_forms_name_the_mistake(tmp_path):
    """--inputs: an .npz of any case holds every input; name=FILE takes an .npy, and an
    .npz given there says so instead of looking for a file named 'x=in.npz'."""
    from collage_mlir.tools.args import load_inputs

    with open(tmp_path / "in.NPZ", "wb") as f:  # (np.savez would append ".npz")
        np.savez(f, x=np.ones(2, np.float32))
    assert list(load_inputs([str(tmp_path / "in.NPZ")])) == ["x"]
    with pytest.raises(CollageError, match="holds several arrays"):
        load_inputs([f"x={tmp_path / 'in.NPZ'}"])


def test_collage_opt_refuses_binary_stdin_in_one_line():
    from pathlib import Path

    model = Path(__file__).parent.parent / "data" / "exported" / "tiny_bert.onnx"
    proc = subprocess.run([sys.executable, "-m", "collage_mlir.tools.collage_opt"],
                          input=model.read_bytes(), capture_output=True)
    assert proc.returncode == 1, proc.stderr
    assert b"<stdin>: not UTF-8 text" in proc.stderr and b"Traceback" not in proc.stderr


def test_collage_opt_refuses_input_shapes_for_mlir_input(tmp_path):
    """`--input-shape` on .mlir input was ignored, rc 0."""
    text = str(collage_mlir.import_onnx(_relu_model()))
    (tmp_path / "m.mlir").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "collage_mlir.tools.collage_opt",
                           str(tmp_path / "m.mlir"), "--input-shape", "x=7x7"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--input-shape applies to an .onnx model" in proc.stderr


def _names_of(text: str) -> list[str]:
    from collage_mlir.dialects import onnx as onnx_view

    module = collage_mlir.parse_mlir(text)
    fn = module.body.operations[0]
    return [onnx_view.node_name(op) for op in fn.regions[0].blocks[0].operations
            if onnx_view.op_type(op)]


def test_node_names_survive_printed_mlir_where_asked(tmp_path):
    """Names live in op locations, which MLIR text drops unless asked: `import` keeps them
    (its output is the next step's input), collage-opt with --mlir-print-debuginfo. An
    unnamed node goes by its first output's name."""
    from collage_mlir.tools import cli, collage_opt

    onnx.save(_relu_model(), tmp_path / "m.onnx")
    assert cli.main(["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "i.mlir")]) == 0
    assert _names_of((tmp_path / "i.mlir").read_text()) == ["y"]
    for flags, names in (([], [""]), (["--mlir-print-debuginfo"], ["y"])):
        out = io.StringIO()
        assert collage_opt.main([str(tmp_path / "i.mlir"), *flags], stdout=out) == 0
        assert _names_of(out.getvalue()) == names


def test_made_up_names_neither_collide_nor_break_the_text(tmp_path):
    """An unnamed node whose output is another node's name gets a name of its own (a rule
    by that name caught both); names holding "{-#", "dense_resource<k>" or non-ASCII text
    print and read back (the first looked like the resource section)."""
    from collage_mlir.driver import load
    from collage_mlir.tools import cli

    value = oh.make_tensor_value_info
    nodes = [oh.make_node("Relu", ["x"], ["B"]),
             oh.make_node("Neg", ["B"], ["n"], name="B"),
             oh.make_node("Abs", ["n"], ["y"], name='é {-# dense_resource<k> "q"')]
    graph = oh.make_graph(nodes, "g", [value("x", onnx.TensorProto.FLOAT, [2])],
                          [value("y", onnx.TensorProto.FLOAT, [2])])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), tmp_path / "m.onnx")
    assert cli.main(["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.mlir")]) == 0
    names = _names_of((tmp_path / "m.mlir").read_text())
    assert names == ["B (Relu)", "B", 'é {-# dense_resource<k> "q"']
    load(str(tmp_path / "m.mlir"))  # the blob and section checks read it as it is


def test_a_parse_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f() {\n  %0 = bogus\n}\n")
    from collage_mlir.driver import load

    with pytest.raises(CollageError, match=r"bad.mlir:2:8: custom op 'bogus' is unknown"):
        load(str(path))


def test_inputs_of_disagreeing_types_are_refused_at_import():
    """A .half() export can leave a LayerNormalization with float data and a float16 scale:
    no backend runs it, and the run failed late naming a region's internal node."""
    value = oh.make_tensor_value_info
    scale = oh.make_tensor("scale", onnx.TensorProto.FLOAT16, [4], np.ones(4, np.float16))
    node = oh.make_node("LayerNormalization", ["x", "scale"], ["y"], name="ln", axis=-1)
    graph = oh.make_graph([node], "g", [value("x", onnx.TensorProto.FLOAT, [2, 4])],
                          [value("y", onnx.TensorProto.FLOAT, [2, 4])], initializer=[scale])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match=r"node name: ln\): Scale has inconsistent type"):
        collage_mlir.import_onnx(model)


def test_dangling_input_is_reported(tmp_path):
    node = oh.make_node("Relu", ["nowhere"], ["y"], name="r")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [2])],
                          [oh.make_tensor_value_info("y", 1, [2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match="malformed model"):
        collage_mlir.import_onnx(model)


def test_folding_prints_no_numpy_warnings():
    """Folding T5's position buckets takes log(0) and casts -inf to int64 (a Where drops
    them): numpy's RuntimeWarnings from onnx's reference evaluator reached the terminal."""
    model = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3] x) => (float[2,3] y) {
      s = Shape(x)
      f = Cast<to = 1>(s)
      z = Sub(f, f)
      l = Log(z)
      c = Cast<to = 7>(l)
      neg = Less(l, z)
      k = Where(neg, s, c)
      kf = Cast<to = 1>(k)
      r = ReduceSum<keepdims = 0>(kf)
      y = Add(x, r)
    }''')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = collage_mlir.import_onnx(model)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert "onnx.Log" not in str(module)  # folded


def test_malformed_node_is_named():
    """torch's dynamo exporter at opset 17 wrote GPT-NeoX's Split with num_outputs, an
    opset-18 attribute; among many Splits, the message must say which."""
    node = oh.make_node("Split", ["x"], ["a", "b"], name="my_split", axis=1, num_outputs=2)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [1, 4])],
                          [oh.make_tensor_value_info(n, 1, [1, 2]) for n in "ab"])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match=r"malformed model: node 'my_split' \(Split\): "
                                           r"Unrecognized attribute: num_outputs"):
        collage_mlir.import_onnx(model)
    for name, said in (("my split", "node 'my split' (Split)"), ("", "an unnamed Split node")):
        model.graph.node[0].name = name
        with pytest.raises(CollageError, match=f"malformed model: {re.escape(said)}: "):
            collage_mlir.import_onnx(model)


@pytest.mark.parametrize("content", [b"garbage", None])
def test_cli_error_is_one_line_exit_1(tmp_path, content):
    path = tmp_path / "m.onnx"
    if content is None:
        onnx.save(_bad_op_model(), path)
    else:
        path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "collage_mlir.tools.cli", "import", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "m.onnx" in lines[0] and "Traceback" not in proc.stderr


def test_cli_import_writes_mlir(tmp_path):
    from conftest import light_model_path

    out = tmp_path / "squeezenet.mlir"
    proc = subprocess.run([sys.executable, "-m", "collage_mlir.tools.cli", "import",
                           light_model_path("squeezenet"), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert 'torch.operator "onnx.Conv"' in text and "dialect_resources" in text
    reparsed = collage_mlir.parse_mlir(text)
    assert reparsed.operation.verify()


def test_old_opset_is_upgraded_and_can_be_kept(light_model):
    upgraded = collage_mlir.import_onnx(light_model)
    kept = collage_mlir.import_onnx(light_model, min_opset=None)
    opset = "torch.onnx_meta.opset_version"
    assert upgraded.body.operations[0].attributes[opset].value == MIN_OPSET
    assert kept.body.operations[0].attributes[opset].value == 9


def test_paths_expand_home_and_variables(tmp_path, monkeypatch):
    from collage_mlir.cost.cache import MeasurementCache

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODELS", str(tmp_path / "models"))
    (tmp_path / "models").mkdir()
    onnx.save(_bad_op_model(), tmp_path / "models" / "m.onnx")
    with pytest.raises(CollageError, match="unsupported op"):  # found, read, then refused
        collage_mlir.import_onnx("$MODELS/m.onnx")
    cache = MeasurementCache("~/sub/c.sqlite")
    cache.close()
    assert (tmp_path / "sub" / "c.sqlite").is_file()


def _sparse_model() -> onnx.ModelProto:
    """x + a sparse Constant (coordinates per value) + a sparse initializer (flat indices)."""
    from onnx import numpy_helper
    def sparse(name, values, indices, dims):
        return oh.make_sparse_tensor(numpy_helper.from_array(np.array(values, np.float32), name),
                                     numpy_helper.from_array(np.array(indices, np.int64)), dims)
    nodes = [oh.make_node("Constant", [], ["c"], name="k",
                          sparse_value=sparse("cv", [5, -2], [[0, 1], [1, 2]], [2, 3])),
             oh.make_node("Add", ["x", "c"], ["s"]), oh.make_node("Add", ["s", "w"], ["y"])]
    value = oh.make_tensor_value_info
    graph = oh.make_graph(nodes, "g", [value("x", onnx.TensorProto.FLOAT, [2, 3])],
                          [value("y", onnx.TensorProto.FLOAT, [2, 3])])
    graph.sparse_initializer.append(sparse("w", [7, 9], [0, 5], [2, 3]))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_sparse_tensors_import_as_their_dense_values():
    """A Constant's sparse_value ended in an internal error (folding could not evaluate it),
    a sparse initializer in "no static shape after folding"."""
    import onnxruntime as ort

    from collage_mlir.canonical import respell
    model = _sparse_model()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert respell(model) == ["w", "k"] and not model.graph.sparse_initializer
    got = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert got.tolist() == [[7, 6, 2], [3, 4, 12]]
    assert collage_mlir.import_onnx(_sparse_model()).operation.verify()


LOCAL_FUNCTIONS = """<ir_version: 9, opset_import: ["" : 17, "local" : 1]>
g (float[2,3] x) => (float[2,3] z) {
   y = local.LR (x)
   z = local.Twice <beta: float = 0.1> (y)
}
<domain: "local", opset_import: ["" : 17, "local" : 1]>
LR <beta: float = 0.7> (x) => (o) {
   o = LeakyRelu <alpha: float = @beta> (x)
}
<domain: "local", opset_import: ["" : 17, "local" : 1]>
Twice <beta> (x) => (o) {
   h = local.LR <beta = @beta> (x)
   o = Add (h, h)
}"""


def _same_on_onnxruntime(model: onnx.ModelProto, respelled: onnx.ModelProto,
                         x: np.ndarray) -> None:
    import onnxruntime as ort

    def run(m):
        return ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})
    for a, b in zip(run(model), run(respelled), strict=True):
        np.testing.assert_array_equal(a, b)


def test_local_functions_are_inlined_with_their_default_attributes():
    """torch's dynamo exporter writes model-local functions: they were refused as ops "from
    a custom domain". onnx's inliner drops a default (`beta = 0.7` here): alpha 0.01."""
    from collage_mlir.canonical import respell
    model = onnx.parser.parse_model(LOCAL_FUNCTIONS)
    respelled = onnx.ModelProto()
    respelled.CopyFrom(model)
    assert respell(respelled) == ["y", "z"] and not respelled.functions
    assert {n.op_type for n in respelled.graph.node} == {"LeakyRelu", "Add"}
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    _same_on_onnxruntime(model, respelled, x)
    assert collage_mlir.import_onnx(model).operation.verify()


def test_unsorted_nodes_and_the_long_default_domain_are_respelled():
    """onnxruntime runs both; the checker refused the order (its message cut off, no node
    named) and the schema lookup the domain "ai.onnx" ("unsupported op 'Relu'")."""
    from collage_mlir.canonical import respell
    value = oh.make_tensor_value_info
    nodes = [oh.make_node("Add", ["r", "x"], ["y"], name="add"),
             oh.make_node("Relu", ["n"], ["r"], name="relu", domain="ai.onnx"),
             oh.make_node("Neg", ["x"], ["n"], name="neg")]
    graph = oh.make_graph(nodes, "g", [value("x", onnx.TensorProto.FLOAT, [2, 3])],
                          [value("y", onnx.TensorProto.FLOAT, [2, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    respelled = onnx.ModelProto()
    respelled.CopyFrom(model)
    assert respell(respelled) == ["relu", "neg", "add"]  # respelled, then moved
    assert [n.name for n in respelled.graph.node] == ["neg", "relu", "add"]
    _same_on_onnxruntime(model, respelled, np.arange(-3, 3, dtype=np.float32).reshape(2, 3))
    assert collage_mlir.import_onnx(model).operation.verify()


def test_a_minus_one_dim_is_dynamic_and_string_inputs_are_refused():
    value = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Relu", ["a"], ["b"])], "g",
                          [value("a", onnx.TensorProto.FLOAT, [-1, 3])],
                          [value("b", onnx.TensorProto.FLOAT, [-1, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match=r"input 'a' \[\?,3\] has a dynamic shape"):
        collage_mlir.import_onnx(model)
    module = collage_mlir.import_onnx(model, input_shapes={"a": (2, 3)})
    assert "!torch.vtensor<[2,3],f32>" in str(module)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.STRING
    with pytest.raises(CollageError, match=r"input 'a' holds strings, which no backend"):
        collage_mlir.import_onnx(model)


def test_an_output_declared_without_a_shape_takes_the_inferred_one():
    """onnxruntime runs such a model; the checker's message ("Field 'shape' of 'type' is
    required but missing") named no value. An input without one is refused by name."""
    value = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Add", ["x", "b"], ["y"])], "g",
                          [value("x", onnx.TensorProto.FLOAT, [2, 3]),
                           value("b", onnx.TensorProto.FLOAT, [4, 1, 3])],
                          [value("y", onnx.TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    fn = collage_mlir.import_onnx(model).body.operations[0]
    assert "!torch.vtensor<[4,2,3],f32>" in str(fn.type)
    model.graph.input[1].type.tensor_type.ClearField("shape")
    with pytest.raises(CollageError, match=r"input 'b' declares no shape, not even a rank"):
        collage_mlir.import_onnx(model)


def test_a_declared_type_inference_contradicts_is_named_in_words():
    value = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Exp", ["x"], ["y"])], "g",
                          [value("x", onnx.TensorProto.FLOAT, [2])],
                          [value("y", onnx.TensorProto.DOUBLE, [2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(CollageError, match=r"shape inference failed: .*Exp.* \(float\) vs "
                                           r"\(double\)$"):
        collage_mlir.import_onnx(model)


def test_malformed_respellings_are_left_for_the_checker_to_name():
    """Densifying a sparse tensor whose indices fall outside it, and sorting an unnamed
    node with no output, ended in internal errors once they ran before the checker."""
    from onnx import numpy_helper
    model = _sparse_model()
    model.graph.sparse_initializer[0].indices.CopyFrom(
        numpy_helper.from_array(np.array([0, 9], np.int64), "w_idx"))
    with pytest.raises(CollageError, match=r"malformed model: Sparse tensor .* out of range"):
        collage_mlir.import_onnx(model)
    value = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Relu", ["y"], []), oh.make_node("Neg", ["x"], ["y"])],
                          "g", [value("x", onnx.TensorProto.FLOAT, [2])],
                          [value("y", onnx.TensorProto.FLOAT, [2])])
    with pytest.raises(CollageError, match=r"malformed model: .*output size 0"):
        collage_mlir.import_onnx(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))


def test_a_dims_clash_keeps_its_numbers():
    """Only element types are named: "(3) vs (4)" in a dims clash had become type names."""
    from collage_mlir.static_shapes import _type_names
    dims = "differ in dimension 0: (3) vs (4)"
    assert _type_names(dims) == dims
    assert _type_names("elem type differs: (1) vs (11)").endswith("(float) vs (double)")


def test_a_local_function_written_at_another_opset_is_inlined():
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 12, "C" : 1]>
g (float[2,3] x) => (float[2,3] y) {
   y = C.sm (x)
}
<domain: "C", opset_import: ["" : 13]>
sm (x) => (o) {
   o = Softmax <axis: int = 1> (x)
}""")
    from collage_mlir.canonical import respell
    respell(model)
    assert [n.op_type for n in model.graph.node] == ["Softmax"] and not model.functions
