"""Models as users export them (test/data/exported): they import static, partition across the
real backends from the original file, and compute what torch computed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import collage_mlir
from collage_mlir.check.compare import whole_model_runner
from collage_mlir.dialects.func import public_functions
from collage_mlir.dialects.onnx import attribute_value, attributes
from collage_mlir.driver import annotate, entry_graph
from collage_mlir.errors import CollageError
from collage_mlir.graph import SubGraphConfig
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.combinators import MAX_PER_NODE
from collage_mlir.tensors import (
    argument_specs,
    arrange_inputs,
    index_bounds,
    index_limits,
    model_inputs,
)
from collage_mlir.tools import cli

DATA = Path(__file__).parents[1] / "data" / "exported"
MODELS = ["tiny_bert", "tiny_gpt2", "tiny_mobilenet_v2", "tiny_deepspeech2", "tiny_llama",
          "tiny_bert_token_types", "tiny_opt_dynamo", "tiny_performer"]


def _reference(name: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    saved = np.load(DATA / f"{name}.npz")
    return {k: saved[k] for k in saved.files if k != "expected"}, saved["expected"]


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", MODELS)
def test_exports_import_with_every_value_static(name: str) -> None:
    original = onnx.load(str(DATA / f"{name}.onnx"))
    module = collage_mlir.import_onnx(DATA / f"{name}.onnx")
    body = str(module).split("{-#")[0]
    assert "?" not in body and "onnx.Shape" not in body
    feeds, want = _reference(name)
    (got,) = whole_model_runner(module, "onnxruntime")(list(feeds.values()))
    assert _relative(got, want) < 1e-4
    computed = body.count("torch.operator") - body.count('"onnx.Constant"')  # not weights
    shape_ops = sum(n.op_type == "Shape" for n in original.graph.node)
    assert computed <= len(original.graph.node) - shape_ops  # shape code folded away


@pytest.mark.parametrize("name", ["tiny_bert_dynbatch", "tiny_bert_dynbatch_dynamo"])
def test_dynamic_batch_needs_a_shape_and_takes_one(capsys, name: str) -> None:
    path = DATA / f"{name}.onnx"
    with pytest.raises(CollageError, match=r"inputs 'input_ids' \[batch,16\], 'attention_mask' "
                       r"\[batch,16\] have dynamic shapes; give static ones with --input-shape "
                       r"input_ids=1x16 --input-shape attention_mask=1x16 .*sample inputs"):
        collage_mlir.import_onnx(path)
    assert cli.main(["import", str(path), "-o", "/dev/null"]) == 1
    assert "--input-shape" in capsys.readouterr().err
    shapes = {"input_ids": (2, 16), "attention_mask": (2, 16)}
    module = collage_mlir.import_onnx(path, input_shapes=shapes)
    feeds, want = _reference("tiny_bert")
    batch = [np.concatenate([v, v]) for v in feeds.values()]
    (got,) = whole_model_runner(module, "onnxruntime")(batch)
    assert got.shape == (2, *want.shape[1:])
    assert _relative(got[1:], want) < 1e-4


def test_a_dynamic_model_takes_the_shapes_of_the_inputs_given() -> None:
    """`partition --inputs` on a dynamic model: the samples' shapes stand in for
    --input-shape where none is given (a static input keeps its own, and a sample of
    another shape there is named)."""
    path = DATA / "tiny_bert_dynbatch.onnx"
    feeds, want = _reference("tiny_bert")
    batch = {k: np.concatenate([v, v, v]) for k, v in feeds.items()}
    model = collage_mlir.compile(path, backends=["onnxruntime"], cost="table:" + str(
        Path(__file__).parents[1] / "data" / "mixing_costs.json"), inputs=batch, verify=False)
    assert model.plan.inputs[0].shape == (3, 16)
    (got,) = model.run(batch)
    assert _relative(got[2:], want) < 1e-4
    with pytest.raises(CollageError, match=r"input 'input_ids' is \[batch,16\]; the given "
                                           r"input has shape \[3,15\]"):
        collage_mlir.import_onnx(path, samples=[(3, 15), (3, 15)])
    with pytest.raises(CollageError, match=r"input 'attention_mask' .*--input-shape attention"):
        collage_mlir.import_onnx(path, samples={"input_ids": (3, 16)})


def test_input_shapes_in_python_take_the_command_lines_spelling_or_integers() -> None:
    """`input_shapes={"input_ids": "2x16"}` was read letter by letter ("--input-shape gives
    [2,x,1,6]"); a list of other things is named as what is wrong; a shape past the
    machine's memory (a typo) is refused instead of being killed for memory in shape
    inference."""
    path = DATA / "tiny_bert_dynbatch.onnx"
    module = collage_mlir.import_onnx(path, input_shapes={"input_ids": "2x16",
                                                          "attention_mask": [2, 16]})
    assert [s.shape for s in argument_specs(public_functions(module)[0])] == [(2, 16)] * 2
    with pytest.raises(CollageError, match=r"input shape of 'input_ids': \[2.0, 16\]: "
                                           r"expected integers"):
        collage_mlir.import_onnx(path, input_shapes={"input_ids": [2.0, 16],
                                                     "attention_mask": [2, 16]})
    with pytest.raises(CollageError, match=r"input 'input_ids' of shape \[99999999999,16\] "
                                           r"would take .* GiB, more than this machine's"):
        collage_mlir.import_onnx(path, input_shapes={"input_ids": "99999999999x16",
                                                     "attention_mask": [1, 16]})


@pytest.mark.slow
def test_exported_transformer_partitions_on_three_backends(tmp_path) -> None:
    model = collage_mlir.compile(DATA / "tiny_bert.onnx",
                                 backends=["onnxruntime", "openvino", "iree"],
                                 cache=tmp_path / "c.sqlite", max_depth=2)
    feeds, want = _reference("tiny_bert")
    (got,) = model.run(feeds)
    assert _relative(got, want) < 1e-3
    (ort,) = whole_model_runner(collage_mlir.import_onnx(DATA / "tiny_bert.onnx"),
                                "onnxruntime")(list(feeds.values()))
    assert _relative(got, ort) < 1e-3
    out = model.save(tmp_path / "out")
    loaded = collage_mlir.load(out)
    with pytest.raises(CollageError, match=r"built for \[1,16\]"):
        loaded.run({k: np.concatenate([v, v]) for k, v in feeds.items()})


def test_recurrent_model_split_across_backends_computes_what_torch_did(tmp_path) -> None:
    """DeepSpeech2 with its GRUs on OpenVINO and the rest on onnxruntime (a cost table, a test
    double, says so): the GRU layers' sequences cross backends in both directions, and the
    saved model computes what torch computed."""
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({
        "per_op": {"onnxruntime": {"GRU": 1.0, "*": 1e-4}, "openvino": {"GRU": 1e-3, "*": 1.0}},
        "transition": {"per_call": 1e-5}}))
    model = collage_mlir.compile(DATA / "tiny_deepspeech2.onnx",
                                 backends=["onnxruntime", "openvino"], cost=f"table:{table}",
                                 cache=tmp_path / "c.sqlite", refine_budget_s=0)
    graph = model.partitioning.graph
    placed = {graph.nodes[i].op_type: c.candidate.backend
              for c in model.partitioning.choices for i in c.candidate.sub_graph.nodes}
    assert placed["GRU"] == "openvino" and placed["Conv"] == "onnxruntime"
    order = [s.backend for s in model.plan.steps]
    assert order[0] == order[-1] == "onnxruntime" and "openvino" in order  # both directions
    feeds, want = _reference("tiny_deepspeech2")
    loaded = collage_mlir.load(model.save(tmp_path / "out"))
    for runner in (model, loaded):
        (got,) = runner.run(feeds)
        assert _relative(got, want) < 1e-4


def test_llama_split_across_backends_computes_what_torch_did(tmp_path) -> None:
    """A Llama decoder (rotary positions, RMS norms, grouped key-value heads, a causal mask
    built from the attention mask) with its MatMuls on OpenVINO and the rest on onnxruntime
    (a cost table, a test double, says so), saved and loaded: torch's numbers."""
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({
        "per_op": {"onnxruntime": {"MatMul": 1.0, "*": 1e-4},
                   "openvino": {"MatMul": 1e-3, "*": 1.0}},
        "transition": {"per_call": 1e-5}}))
    model = collage_mlir.compile(DATA / "tiny_llama.onnx", backends=["onnxruntime", "openvino"],
                                 cost=f"table:{table}", cache=tmp_path / "c.sqlite",
                                 refine_budget_s=0)
    assert {s.backend for s in model.plan.steps} == {"onnxruntime", "openvino"}
    feeds, want = _reference("tiny_llama")
    loaded = collage_mlir.load(model.save(tmp_path / "out"))
    for runner in (model, loaded):
        (got,) = runner.run(feeds)
        assert _relative(got, want) < 1e-4


def test_the_demo_model_splits_its_scans_from_the_rest_and_computes_the_same(tmp_path) -> None:
    """The bundled demo model (examples/bamba_tiny.onnx, Mamba2 layers and attention) with
    its CumSums dear on OpenVINO and every other op dear on onnxruntime (a cost table, a test
    double, says so, as OpenVINO's slow scans do on a CPU): the nine scans run on
    onnxruntime between OpenVINO's regions, and the split model computes what onnxruntime
    computes on the file."""
    import onnxruntime as ort

    example = Path(__file__).parents[2] / "examples" / "bamba_tiny.onnx"
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({
        "per_op": {"onnxruntime": {"CumSum": 1e-4, "*": 1.0},
                   "openvino": {"CumSum": 1.0, "*": 1e-4}},
        "transition": {"per_call": 1e-5}}))
    model = collage_mlir.compile(example, backends=["onnxruntime", "openvino"],
                                 cost=f"table:{table}", cache=tmp_path / "c.sqlite",
                                 refine_budget_s=0)
    graph = model.partitioning.graph
    scans = Counter(c.candidate.backend for c in model.partitioning.choices
                    for i in c.candidate.sub_graph.nodes if graph.nodes[i].op_type == "CumSum")
    assert scans == {"onnxruntime": 9}
    assert Counter(s.backend for s in model.plan.steps)["openvino"] >= 4  # between the scans
    ids = np.random.default_rng(0).integers(0, 1000, (1, 128))
    (want,) = ort.InferenceSession(str(example)).run(None, {"input_ids": ids})
    (got,) = model.run({"input_ids": ids})
    assert _relative(got, want) < 1e-4


def test_a_causal_performer_annotates_in_bounds_without_what_openvino_cannot_compile() -> None:
    """performer-pytorch's CPU path: 128 chunks, each an outer product whose Einsum OpenVINO's
    decomposition throws on (its whole-model query too), joined by one Concat of 128."""
    module = collage_mlir.import_onnx(DATA / "tiny_performer.onnx")
    feeds, want = _reference("tiny_performer")
    (got,) = whole_model_runner(module, "onnxruntime")(list(feeds.values()))
    assert _relative(got, want) < 1e-4
    graph = entry_graph(module)
    outer = sum(1 << n.index for n in graph.op_nodes() if n.op_type == "Einsum" and
                attribute_value(attributes(n.op)["equation"]) == "...nd,...ne->...nde")
    assert outer.bit_count() == 128
    candidates = annotate(graph, ["onnxruntime", "openvino"], SubGraphConfig(max_depth=3))
    on = {b: [c.inside for c in candidates if c.backend == b] for b in ("onnxruntime", "openvino")}
    assert on["openvino"] and not any(bits & outer for bits in on["openvino"])
    assert any(bits & outer for bits in on["onnxruntime"])
    for sets in on.values():  # the Concat of 128 would otherwise join 2^128 sets
        per_node = Counter(i for bits in sets for i in iter_bits(bits))
        assert max(per_node.values()) <= MAX_PER_NODE + 1  # and its maximal region
        assert len(sets) < 4 * graph.op_bits.bit_count()


@pytest.mark.parametrize("name, narrowed", [("tiny_bert_token_types", {"token_type_ids": 2}),
                                            ("tiny_opt_dynamo", {"attention_mask": 2})])
def test_synthesized_inputs_stay_inside_the_tables_the_model_indexes(tmp_path, name: str,
                                                                      narrowed) -> None:
    """A BERT's token types index a table of 2 rows; OPT's positions are the running sum of
    its attention mask (torch's dynamo exporter). Under the general rule (integers up to 15)
    onnxruntime, the reference, failed on both whole models, so neither could be checked
    end to end; measured for real, onnxruntime's whole model is now a valid candidate."""
    module = collage_mlir.import_onnx(DATA / f"{name}.onnx")
    fn = public_functions(module)[0]
    names = list(_reference(name)[0])  # the inputs, in order
    assert {names[k]: b for k, b in index_bounds(fn).items()} == narrowed
    inputs = model_inputs(module)
    for k, bound in index_bounds(fn).items():
        assert 0 <= inputs[k].min() and inputs[k].max() < bound
    (got,) = whole_model_runner(module, "onnxruntime")(inputs)
    assert np.isfinite(got).all()
    model = collage_mlir.compile(DATA / f"{name}.onnx", backends=["onnxruntime"],
                                 cache=tmp_path / "c.sqlite", max_depth=1, verify=False,
                                 refine_budget_s=0)
    assert not [r for r in model.rejected if "invalid" in r.reason]  # whole model checked


@pytest.mark.parametrize("name, limited", [
    ("tiny_bert_token_types", {"input_ids": 1000, "token_type_ids": 2}),
    ("tiny_opt_dynamo", {"input_ids": 1000})])  # its mask reaches indices through a sum
def test_inputs_that_index_a_table_are_checked_against_it(name: str, limited) -> None:
    """Token ids past the vocabulary are refused before anything runs, naming the input,
    where, and the table: onnxruntime would fail, OpenVINO reads past its table. Negative
    ids count from the end, as ONNX says."""
    module = collage_mlir.import_onnx(DATA / f"{name}.onnx")
    fn = public_functions(module)[0]
    feeds, _ = _reference(name)
    names = list(feeds)
    limits = index_limits(fn)
    assert {names[k]: lim.rows for k, lim in limits.items()} == limited
    specs = argument_specs(fn)
    arrange_inputs(names, specs, feeds, limits=limits)  # the exporter's own inputs pass
    ids = feeds["input_ids"].copy()
    ids[0, 3] = -1000
    arrange_inputs(names, specs, {**feeds, "input_ids": ids}, limits=limits)
    for bad in (1000, -1001):
        ids[0, 3] = bad
        with pytest.raises(CollageError, match=rf"input 'input_ids' holds {bad} at \[0,3\], "
                                               r"but it indexes a table of 1000 rows \(Gather "
                                               r"'.*'\): its values must lie in -1000..999"):
            arrange_inputs(names, specs, {**feeds, "input_ids": ids}, limits=limits)


def test_an_index_only_partly_used_narrows_made_up_inputs_but_is_not_a_limit() -> None:
    """ids[:, :2] index a table of 10 rows; ids[:, 2:] are never used as indices, so a user
    may put anything there. Made-up ids stay below 10 all the same."""
    nodes = [onnx.helper.make_node("Slice", ["ids", "starts", "ends", "axes"], ["head"]),
             onnx.helper.make_node("Gather", ["table", "head"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("starts", [0]), ("ends", [2]), ("axes", [1]))]
    inits.append(onnx.numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4),
                                              "table"))
    graph = onnx.helper.make_graph(
        nodes, "partial", [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64,
                                                              [1, 6])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 4])], inits)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    module = collage_mlir.import_onnx(proto)
    fn = public_functions(module)[0]
    assert index_bounds(fn) == {0: 10} and index_limits(fn) == {}
