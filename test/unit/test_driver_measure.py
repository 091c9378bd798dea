"""The driver's measuring options and the report of the candidates it left out (issue 15
items 5 and 7), with the test doubles of fault_backend.py registered in process."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx.parser
import pytest
from fault_backend import FaultInjectingBackend, NumpyTestBackend
from test_measure import FAST, FAULT, MODEL, NUMPY  # one tiny model and setting for both

import collage_mlir
from collage_mlir import driver
from collage_mlir.backends.registry import _extra, register_backend
from collage_mlir.cost.llc import sweep_bytes
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.errors import CollageError


@pytest.fixture
def doubles():
    """numpy_test and fault registered by name (annotation and the final compile run in
    this process; measuring workers load them by path)."""
    for cls in (NumpyTestBackend, FaultInjectingBackend):
        register_backend(cls)
    yield
    for cls in (NumpyTestBackend, FaultInjectingBackend):
        _extra.pop(cls.name, None)


def test_the_report_says_why_candidates_were_left_out(tmp_path, doubles):
    backends = {NUMPY: {}, FAULT: {"mode": "compile_error", "on": "Relu"}}
    with MeasuringEstimator(backends, cache_path=tmp_path / "c.sqlite", reference=NUMPY,
                            settings=FAST, timeout_s=20, transition_timeout_s=20) as est:
        model = collage_mlir.compile(onnx.parser.parse_model(MODEL),
                                     backends=["numpy_test", "fault"], estimator=est,
                                     max_depth=2, prune=False)  # no timing-dependent prunes
    (group,) = [g for g in model.rejected if g.backend == "fault"]
    relu_candidates = [c for c in model.candidates if c.backend == "fault" and any(
        c.sub_graph.graph.nodes[i].op_type == "Relu" for i in c.sub_graph.nodes)]
    assert group.count == len(relu_candidates) > 1
    assert group.reason == "invalid: compile failed: RuntimeError: injected compile error on Relu"
    assert group.op_types[0] in ("Relu", "MatMul") and "Relu" in group.op_types
    report = model.report()
    assert "candidates left out" in report
    line = next(ln for ln in report.splitlines() if ln.startswith("  fault: "))
    assert line.startswith(f"  fault: {group.count} x invalid: compile failed: RuntimeError")
    assert "Relu" in line.split("[", 1)[1]
    x = [np.ones((16, 16), np.float32), np.eye(16, dtype=np.float32)]
    assert np.isfinite(model.run(x)[0]).all()


def test_reasons_differing_in_numbers_are_one_group():
    from collage_mlir.cost.table import TableEstimator

    class Reasons(TableEstimator):
        def reason(self, candidate):
            return f"invalid: wrong numbers: max abs err 0.{candidate.sub_graph.first + 1}"

    module = collage_mlir.import_onnx(onnx.parser.parse_model(MODEL))
    graph = driver.entry_graph(module)
    cands = driver.annotate(graph, ["onnxruntime"], driver.SubGraphConfig(max_depth=1))
    groups = driver.rejections(graph, cands, [math.inf] * len(cands), Reasons({}))
    assert [(g.backend, g.count) for g in groups] == [("onnxruntime", len(cands))]
    assert groups[0].op_types == ["MatMul", "Relu", "Sigmoid", "Add"]


def _session_noting_estimator():
    """Table costs (1 ms a node) that note whether each `estimate` call ran inside a
    session (nested ones counted), and how many sessions were opened."""
    from contextlib import contextmanager

    from collage_mlir.cost.table import TableEstimator

    class Sessions(TableEstimator):
        opened, depth = 0, 0

        def __init__(self) -> None:
            super().__init__({})
            self.calls: list[bool] = []

        @contextmanager
        def session(self):
            self.opened += 1
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1

        def estimate(self, candidates, progress=None):
            self.calls.append(self.depth > 0)
            return [1e-3 * len(c.sub_graph.nodes) for c in candidates]

    return Sessions()


def test_the_measure_phase_costs_every_stage_inside_one_estimator_session():
    module = collage_mlir.import_onnx(onnx.parser.parse_model(MODEL))
    graph = driver.entry_graph(module)
    cands = driver.annotate(graph, ["onnxruntime", "openvino"],
                            driver.SubGraphConfig(max_depth=2))
    est = _session_noting_estimator()
    costs, _ = driver.measure(est, cands, graph=graph)
    assert est.opened == 1 and len(est.calls) > 3 and all(est.calls)
    assert not est.depth and all(math.isfinite(c) for c in costs)


def test_the_islands_parts_are_measured_in_the_measure_phases_session(monkeypatch):
    """Carving islands measures parts right after the measure phase: the same session, so
    the same workers, not a fresh start per call."""
    seen = []

    def carve(graph, candidates, costs, estimator, progress=False, left_s=math.inf):
        seen.append(estimator.depth)
        estimator.estimate(candidates[:1])
        return []

    monkeypatch.setattr(driver, "carve_islands", carve)
    est = _session_noting_estimator()
    collage_mlir.compile(onnx.parser.parse_model(MODEL), backends=["onnxruntime", "openvino"],
                         estimator=est, max_depth=2, verify=False)
    assert seen and seen[0] > 0 and all(est.calls)
    assert not est.depth


def test_partition_and_compile_take_the_measuring_timeout_and_budget(tmp_path, monkeypatch):
    est = driver.make_estimator("measure", [NUMPY], tmp_path / "c.sqlite", timeout_s=2.5,
                                kernel_budget_s=0.05)
    with est:
        assert est.timeout_s == 2.5 and est.settings.budget_s == 0.05
        assert est.tolerance.rtol == 0.01 and est.settings.method == f"cold{sweep_bytes()}-b"
    with pytest.raises(CollageError, match="timeout 0"):
        driver.make_estimator("measure", [NUMPY], tmp_path / "c.sqlite", timeout_s=0)
    with pytest.raises(CollageError, match="tolerance"):
        driver.make_estimator("measure", [NUMPY], tmp_path / "c.sqlite", tolerance=(-1, 0))
    # rows checked to another tolerance are other rows
    with driver.make_estimator("measure", [NUMPY], tmp_path / "c.sqlite",
                               tolerance=(0.1, 0.2)) as loose:
        assert (loose.tolerance.rtol, loose.tolerance.atol_scale) == (0.1, 0.2)
        assert loose.settings.method == f"cold{sweep_bytes()}-b-tol0.1/0.2"
    seen = {}

    def spy(cost, backends, cache, timeout_s, kernel_budget_s, executor=None, tolerance=None):
        seen.update(timeout_s=timeout_s, budget=kernel_budget_s, tolerance=tolerance)
        raise CollageError("stop here")

    monkeypatch.setattr(driver, "make_estimator", spy)
    with pytest.raises(CollageError, match="stop here"):
        collage_mlir.compile(onnx.parser.parse_model(MODEL), backends=["onnxruntime"],
                             timeout_s=7.0, kernel_budget_s=0.3, tolerance=(0.05, 0.1))
    assert seen == {"timeout_s": 7.0, "budget": 0.3, "tolerance": (0.05, 0.1)}


def test_cli_partition_passes_timeout_and_budget(tmp_path, monkeypatch):
    from collage_mlir.tools.cli import main

    seen = {}

    def fake_compile(model, **kw):
        seen.update(kw)
        raise CollageError("stop here")

    monkeypatch.setattr(collage_mlir, "compile", fake_compile)
    model = Path(tmp_path / "m.onnx")
    onnx.save(onnx.parser.parse_model(MODEL), str(model))
    argv = ["partition", str(model), "--backends", "onnxruntime", "-o", str(tmp_path / "o")]
    assert main([*argv, "--timeout", "5", "--budget", "0.25", "--measure-budget", "90",
                 "--refine-budget", "0", "--no-merge", "--no-prune"]) == 1
    assert (seen["timeout_s"], seen["kernel_budget_s"], seen["measure_budget_s"]) == \
        (5.0, 0.25, 90.0)
    assert (seen["refine_budget_s"], seen["merge"], seen["prune"]) == (0.0, False, False)
    assert main([*argv, "--atol-scale", "0.2"]) == 1 and seen["tolerance"] == (0.01, 0.2)
    assert main(argv) == 1
    assert (seen["timeout_s"], seen["kernel_budget_s"], seen["measure_budget_s"]) == \
        (60.0, None, None)
    assert seen["tolerance"] is None
    assert (seen["merge"], seen["prune"]) == (True, True)
    assert seen["refine_budget_s"] is None  # refine.default_budget: scaled to the pick


def test_cli_measure_checks_to_the_tolerance_given(tmp_path, monkeypatch):
    import collage_mlir.cost.measure as measure_mod
    from collage_mlir.tools.cli import main

    seen = []

    def spy(*args, settings=None, **kw):
        seen.append(settings)
        raise CollageError("stop here")

    monkeypatch.setattr(measure_mod, "MeasuringEstimator", spy)
    model = Path(tmp_path / "m.onnx")
    onnx.save(onnx.parser.parse_model(MODEL), str(model))
    argv = ["measure", str(model), "--backends", "onnxruntime", "--budget", "0.5"]
    assert main([*argv, "--rtol", "0.02", "--atol-scale", "0.25"]) == 1
    assert (seen[-1].rtol, seen[-1].atol_scale, seen[-1].budget_s) == (0.02, 0.25, 0.5)
    assert main(argv) == 1
    assert (seen[-1].rtol, seen[-1].atol_scale) == (0.01, 0.003)


def test_compile_measures_with_its_timeout_and_a_hang_costs_one_timeout(tmp_path, doubles,
                                                                        monkeypatch):
    """End to end through `compile(timeout_s=...)`: backends registered in this process are
    measured by name (workers load them by module path), the hanging backend's first
    Sigmoid region times out after 1.5 s, its other Sigmoid regions are skipped, and the
    report says so."""
    monkeypatch.setenv("COLLAGE_FAULT_MODE", "hang")
    monkeypatch.setenv("COLLAGE_FAULT_ON", "Sigmoid")
    model = collage_mlir.compile(onnx.parser.parse_model(MODEL), backends=["numpy_test", "fault"],
                                 cache=tmp_path / "c.sqlite", timeout_s=1.5,
                                 kernel_budget_s=0.02, verify=False, max_depth=2,
                                 prune=False)  # pruning rides on timings: it could take one
    groups = {g.reason: g for g in model.rejected if g.backend == "fault"}
    assert groups["timeout: timed out after 1.5 s while measuring"].count == 1
    skipped = groups["error: skipped: fault hung on Sigmoid earlier in this run"]
    holding = [c for c in model.candidates if c.backend == "fault" and "Sigmoid" in
               {c.sub_graph.graph.nodes[i].op_type for i in c.sub_graph.nodes}]
    assert skipped.count == len(holding) - 1 >= 2  # all but the one that hung
    assert "skipped: fault hung on Sigmoid earlier in this run" in model.report()
    assert all(r.backend != "fault" or "Sigmoid" not in r.op_types for r in model.report_rows)


def test_cache_remeasure_noisy_with_a_model_measures_them_now(tmp_path, doubles, capsys):
    import dataclasses

    from collage_mlir.tools.cli import main

    path = tmp_path / "c.sqlite"
    module = collage_mlir.import_onnx(onnx.parser.parse_model(MODEL))
    graph = driver.entry_graph(module)
    singles = [c for c in driver.annotate(graph, ["numpy_test"],
                                          driver.SubGraphConfig(max_depth=1))]
    settings = MeasureSettings(warmup=1, min_runs=3, max_runs=20, budget_s=0.02)  # keyed as
    with MeasuringEstimator([NUMPY], cache_path=path, settings=settings,  # the CLI's
                            load_probe=lambda: 0.0) as est:
        est.estimate(singles)
        rows = [dataclasses.replace(r, spread=0.1) for r in est.cache.measurements()]
        noisy = dataclasses.replace(rows[0], spread=0.9)
        est.cache.put_many([noisy, *rows[1:]])
    onnx.save(onnx.parser.parse_model(MODEL), str(tmp_path / "m.onnx"))
    assert main(["cache", "remeasure", "--noisy", "--cache", str(path), "--model",
                 str(tmp_path / "m.onnx"), "--backends", "numpy_test"]) == 0
    out = capsys.readouterr().out
    assert "marked 1 noisy measurements" in out
    assert "measured 1 marked entries of" in out and "0 stay marked" in out
    with MeasuringEstimator([NUMPY], cache_path=path) as est:
        again = est.cache.get(noisy.key)
        assert not again.stale and again.created > noisy.created
        assert len(est.cache.measurements()) == len(rows)  # nothing else measured


def test_the_left_out_summary_keeps_to_a_few_lines_per_backend():
    from collage_mlir.runtime.report import Rejection, format_rejections

    groups = [Rejection("iree", f"invalid: compile failed: error {k}", 10 - k, ["Conv"])
              for k in range(9)] + [Rejection("openvino", "invalid: x", 1, ["LRN"])]
    lines = format_rejections(groups, per_backend=3).splitlines()
    assert lines[0].startswith("candidates left out (55;")
    assert lines[1:] == ["  iree: 10 x invalid: compile failed: error 0 [Conv]",
                         "  iree: 9 x invalid: compile failed: error 1 [Conv]",
                         "  iree: 8 x invalid: compile failed: error 2 [Conv]",
                         "  iree: 27 x 6 other reasons",
                         "  openvino: 1 x invalid: x [LRN]"]
    assert format_rejections([]) == ""
