"""The final compile probed in a child process (issue 15 item 4) and the fault-injection
audit (issue 15 "Done when"), through the fault-injecting test double
`fault_backend.StagedFaultBackend`.

Each audit cell runs `fault_audit.py` in a child process (a crash must fail the test, not
kill pytest): a tiny model with Relu pinned to the fault backend, the fault striking at
compile or at run, in the measuring workers or only in the final compile. Every cell must
end with correct outputs or a one-line refusal; before the probe, a fault in the final
compile killed the run (exit 139, nothing said) or shipped wrong outputs.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fault_audit import run_cell
from fault_backend import STAGED_COMPILE_MODES, STAGED_RUN_MODES

import collage_mlir
from collage_mlir.backends.onnxruntime import OnnxRuntimeBackend
from collage_mlir.check import isolated

CELLS = [(mode, when, where) for when, modes in (("compile", STAGED_COMPILE_MODES),
                                                 ("run", STAGED_RUN_MODES))
         for mode in modes for where in ("measure", "final")]


@pytest.mark.parametrize(("mode", "when", "where"), CELLS,
                         ids=[f"{m}-at-{w}-in-{p}" for m, w, p in CELLS])
def test_audit_cell_finishes_right_or_refuses_in_one_line(mode, when, where):
    rc, out, err = run_cell(mode, when, where)
    assert rc == 0 and out is not None, f"the run died (status {rc}): {err[-2000:]}"
    assert out["outcome"] in ("ok", "refused"), out
    if out["outcome"] == "refused":
        assert "\n" not in out["error"] and "Traceback" not in err
    if mode == "leak":  # costs memory, computes right: may pass (or time out measuring)
        return
    assert out["outcome"] == "refused", out  # Relu is pinned to a backend that fails on it
    assert out["error"].startswith("no backend can run Relu")
    assert ("final compile: fault region" in out["error"]) == (where == "final")


@pytest.mark.parametrize("mode", ["segfault", "exit", "hang", "wrong", "stale"])
def test_a_fault_in_the_final_compile_costs_its_region_and_the_next_best_pick_ships(mode):
    """Not pinned, the fault backend favoured by the estimator: the pick holds a fault
    region that fails only in the final compile (it holds Relu); the run ends with Relu on
    numpy_test, correct outputs, and the reason in the report's left-out list."""
    rc, out, err = run_cell(mode, "run", "final", pin=False, favour_fault=True)
    assert rc == 0 and out is not None, f"the run died (status {rc}): {err[-2000:]}"
    assert out["outcome"] == "ok", out
    assert any(b == "numpy_test" and "Relu" in types for b, types in out["regions"]), out
    assert not any(b == "fault" and "Relu" in types for b, types in out["regions"]), out
    (line,) = [ln for ln in out["left_out"] if "final compile" in ln]
    assert line.startswith("fault: invalid: final compile: fault region g_fault_")
    said = [ln for ln in err.splitlines() if ln.startswith("collage: final compile:")
            and ln.endswith("searching again")]
    assert len(said) == 1 and "fault region g_fault_" in said[0], err


def test_given_inputs_catch_a_kernel_that_is_right_only_on_made_up_ones():
    """The fault backend's Add regions are wrong only where an input exceeds 8 in
    magnitude: measuring and the probe's made-up inputs (standard normal) cannot see it,
    so on data of another scale (x a hundred times larger) the pick computes wrong
    numbers; given one such input set, the probe blames the region on it and the next-best
    pick computes right."""
    cell = {"pin": False, "favour_fault": True, "scale": 100.0, "on": "Add"}
    rc, out, err = run_cell("large", "run", "both", **cell)
    assert rc == 0 and out is not None, f"the run died (status {rc}): {err[-2000:]}"
    assert out["outcome"] == "wrong" and out["max_err"] > 1.0, out
    assert any(b == "fault" and "Add" in types for b, types in out["regions"]), out

    rc, out, err = run_cell("large", "run", "both", given=True, **cell)
    assert rc == 0 and out is not None, f"the run died (status {rc}): {err[-2000:]}"
    assert out["outcome"] == "ok", out
    assert not any(b == "fault" and "Add" in types for b, types in out["regions"]), out
    blamed = [ln for ln in out["left_out"] if "final compile" in ln]
    assert blamed and all("on call 1 (the given inputs)" in ln for ln in blamed), out


def test_the_parent_loads_the_kernels_the_probe_compiled(tmp_path, monkeypatch):
    """onnxruntime saves its kernels: the parent loads them rather than compiling again
    (here its compile is broken in this process only; the probe runs in its own)."""
    def broken(self, module):
        raise AssertionError("compiled in the parent")

    monkeypatch.setattr(OnnxRuntimeBackend, "compile", broken)
    module = collage_mlir.parse_mlir(ABS_RELU)
    model = collage_mlir.compile(module, backends=["onnxruntime"],
                                 cost=f"table:{_table(tmp_path)}")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(model.run([x])[0], np.abs(np.maximum(x, 0)))
    assert "probe" in model.timings


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "iree"])
def test_a_model_built_on_the_probes_kernels_saves_and_loads_again(tmp_path, backend):
    """The main process loads what the probe saved only from a backend whose loaded kernels
    save and load again (OpenVINO exports an imported model as a blob it cannot import):
    the user saves the model next."""
    from collage_mlir.backends.registry import available_backends

    if backend not in available_backends():
        pytest.skip(f"{backend} not installed")
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"per_op": {backend: {"Relu": 1.0, "Abs": 1.0}}}))
    model = collage_mlir.compile(collage_mlir.parse_mlir(ABS_RELU), backends=[backend],
                                 cost=f"table:{costs}")
    loaded = collage_mlir.load(model.save(tmp_path / "out"))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(loaded.run([x])[0], np.abs(np.maximum(x, 0)))


def test_probe_limits_its_attempts(tmp_path, monkeypatch):
    """Every probe failing on a new region: MAX_PROBES attempts, then one line."""
    calls = []

    def failing(module, pick, alternatives, reference, specs, scratch, timeout_s, tol,
                inputs=None):
        calls.append(pick)
        return isolated._Outcome(False, model="pick", regions=isolated._region_names(pick),
                                 reason="region r: killed by SIGSEGV while running call 1")

    monkeypatch.setattr(isolated, "_probe", failing)
    monkeypatch.setattr(isolated, "_blame", lambda *a: [0])
    monkeypatch.setattr(isolated, "search", lambda graph, *a: calls[-1])
    module = collage_mlir.parse_mlir(ABS_RELU)
    with pytest.raises(collage_mlir.CollageError, match=r"^final compile failed 4 times; "
                       r"last: region r: killed by SIGSEGV while running call 1; left out "
                       r"in turn: onnxruntime \(Relu\)(; onnxruntime \(Relu\)){3} "
                       r"\(--placement can pin these ops"):
        collage_mlir.compile(module, backends=["onnxruntime"], cost=f"table:{_table(tmp_path)}")
    assert len(calls) == isolated.MAX_PROBES


def test_a_failing_pick_region_takes_out_its_backends_overlapping_candidates_an_alternative_itself():
    from collage_mlir import driver
    from collage_mlir.candidate import CandidatePartition
    from collage_mlir.graph import SubGraph
    from collage_mlir.search.partitioning import Choice, Partitioning

    graph = driver.entry_graph(collage_mlir.parse_mlir(ABS_RELU))
    relu, abs_ = (1 << n.index for n in graph.op_nodes())
    cands = [CandidatePartition(SubGraph(graph, bits), backend) for bits, backend in
             [(relu, "a"), (abs_, "a"), (relu | abs_, "a"), (relu, "b"), (relu | abs_, "b")]]
    pick = Partitioning(graph, (Choice(cands[0], 1.0), Choice(cands[1], 1.0)), 2.0)
    whole_b = Partitioning(graph, (Choice(cands[4], 1.0),), 1.0)
    region = isolated._Outcome(False, model="pick", regions=isolated._region_names(pick)[:1])
    costs = [1.0] * len(cands)
    assert isolated._blame(cands, costs, pick, [whole_b], region) == [0, 2]
    assert costs == [np.inf, 1.0, np.inf, 1.0, 1.0]
    costs = [1.0] * len(cands)
    alternative = isolated._Outcome(False, model="alt:b")
    assert isolated._blame(cands, costs, pick, [whole_b], alternative) == [4]


def _table(tmp_path) -> str:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"per_op": {"onnxruntime": {"Relu": 1.0, "Abs": 1.0}}}))
    return str(path)


T = "!torch.vtensor<[2,4],f32>"
ABS_RELU = f"""
func.func @f(%arg0: {T}) -> {T} attributes {{torch.onnx_meta.opset_version = 17 : si64}} {{
  %a = torch.operator "onnx.Relu"(%arg0) : ({T}) -> {T}
  %b = torch.operator "onnx.Abs"(%a) : ({T}) -> {T}
  return %b : {T}
}}
"""


@pytest.mark.parametrize(("where", "given"), [("final", False), ("measure", False),
                                            ("final", True)])
def test_nan_inputs_are_the_backends_own_and_said_when_the_pick_drops_them(where, given):
    """Chosen semantics (issue 15 item 3): outputs are checked on finite inputs; with NaN
    inputs a partitioned model returns what its backends compute. The probe runs the pick
    once more with a NaN in its inputs and says so when it returns finite values where the
    reference's whole model does not. The test double maps NaN to 0 in its Relu regions
    (as OpenVINO does) only `where` said: in the final model, or only while measuring (the
    final model then propagates NaN, and nothing is said). The NaN goes into the given
    inputs where there are some."""
    rc, out, err = run_cell("finite", "run", where, pin=False, favour_fault=True, given=given)
    assert rc == 0 and out is not None and out["outcome"] == "ok", (out, err[-2000:])
    assert any(b == "fault" and "Relu" in types for b, types in out["regions"]), out
    said = [ln for ln in err.splitlines() if "non-finite inputs" in ln]
    if where == "final":  # y = sigmoid(relu(x @ w)) + x: NaN in x[0, 0] → NaN row 0
        assert out["finite_given_nan"] > 56
        assert len(said) == 1 and re.fullmatch(
            r"collage: final compile: non-finite inputs: given a NaN input the pick returns "
            r"[1-9]\d* finite values where the reference's whole model returns NaN or Inf "
            r"\(outputs are checked on finite inputs only\)", said[0]), said
    else:
        assert out["finite_given_nan"] == 56 and said == []
