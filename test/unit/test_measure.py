"""MeasuringEstimator: isolation of backend faults, caching, dedup, concurrency, transitions.

Uses the test doubles in fault_backend.py (loaded by `module:Class` path, as a plugin not
installed as an entry point would be); the real backends are not needed.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from collage_mlir import tensors
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.cache import INVALID, OK, TIMEOUT, MeasurementCache
from collage_mlir.cost.key import function_key
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.cost.transition import fit
from collage_mlir.dialects.func import find_function
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.importer import import_onnx
from collage_mlir.tensors import compare, index_bounds, make_inputs, make_inputs_for_specs

HERE = Path(__file__).parent
NUMPY = "fault_backend:NumpyTestBackend"
FAULT = "fault_backend:FaultInjectingBackend"
BATCHING = "fault_backend:BatchingTestBackend"
FAST = MeasureSettings(warmup=1, min_runs=3, max_runs=20, budget_s=0.02, cold_bytes=1 << 20)

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[16,16] x, float[16,16] w) => (float[16,16] y) {
  a = MatMul(x, w)
  b = Relu(a)
  c = Sigmoid(b)
  d = Relu(c)
  y = Add(d, x)
}
"""


@pytest.fixture(scope="module")
def graph():
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = DataflowGraph(find_function(module))
    graph._module = module  # keep the IR alive as long as the graph
    return graph


def single_op(graph, backend: str) -> list[CandidatePartition]:
    return [CandidatePartition(SubGraph(graph, 1 << n.index), backend, "single-op")
            for n in graph.op_nodes()]


def estimator(tmp_path, backends, **kw) -> MeasuringEstimator:
    kw.setdefault("reference", NUMPY)
    kw.setdefault("settings", FAST)
    kw.setdefault("timeout_s", 20)
    return MeasuringEstimator(backends, cache_path=tmp_path / "c.sqlite", **kw)


@pytest.mark.parametrize("mode, reason", [
    ("segfault", "SIGSEGV"),
    ("abort", "SIGABRT"),
    ("hang", "timed out after 3 s"),
    ("wrong", "wrong numbers: max abs err 0.5"),
    ("stale", "(call 2, on other inputs)"),
    ("leak", "memory limit exceeded"),
    ("compile_error", "compile failed: RuntimeError: injected"),
])
def test_fault_costs_one_candidate(tmp_path, graph, mode, reason):
    timeout = 3 if mode == "hang" else 20
    memory = 1 << 30 if mode == "leak" else None
    with estimator(tmp_path, {FAULT: {"mode": mode, "on": "Relu"}}, timeout_s=timeout,
                   worker_memory_bytes=memory) as est:
        cands = single_op(graph, "fault")
        costs = est.estimate(cands)
        types = [graph.nodes[c.sub_graph.first].op_type for c in cands]
        for op_type, cost in zip(types, costs, strict=True):
            assert math.isinf(cost) if op_type == "Relu" else 0 < cost < math.inf, op_type
        rows = est.cache.measurements("fault")
        # two Relu nodes with one shape: one key, one row
        assert len(rows) == len(set(types)) == est.stats.regions
        bad = [r for r in rows if r.status != OK]
        assert len(bad) == 1 and bad[0].status == (TIMEOUT if mode == "hang" else INVALID)
        assert bad[0].signature.startswith("Relu") and reason in bad[0].error
        assert all(r.runs >= FAST.min_runs_on_budget and r.median > 0
                   for r in rows if r.status == OK)


def test_a_run_fault_that_loses_the_device_costs_only_its_own_candidate(tmp_path, graph):
    # after the Sigmoid region's fault every call in that worker would fail: the worker
    # retires and a fresh one measures the rest, so no other region is cached invalid
    with estimator(tmp_path, {FAULT: {"mode": "poison", "on": "Sigmoid"}}) as est:
        cands = single_op(graph, "fault")
        costs = est.estimate(cands)
        types = [graph.nodes[c.sub_graph.first].op_type for c in cands]
        assert [math.isinf(c) for c in costs] == [t == "Sigmoid" for t in types]
        bad = [r for r in est.cache.measurements("fault") if r.status != OK]
        assert len(bad) == 1 and "injected device fault" in bad[0].error
        assert est.stats.restarts >= 1


def test_second_estimate_is_all_cache_hits(tmp_path, graph):
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        first = est.estimate(cands)
        assert est.stats.measured == est.stats.regions == len(set(est.key(c) for c in cands))
    with estimator(tmp_path, [NUMPY]) as est:  # a new process would see the same
        seen = []
        second = est.estimate(cands, progress=lambda d, t: seen.append((d, t)))
        assert est.stats.measured == 0 and est.stats.hits == est.stats.regions
    assert second == first
    assert seen[-1] == (len(cands), len(cands))


def test_a_cost_is_measured_again_when_its_backend_changes_how_kernels_are_called(
        tmp_path, graph):
    """A backend whose kernels are now called another way (OpenVINO: no copy of each output
    per call) raises `call_revision`: costs measured through the old call are not reused."""
    from fault_backend import NumpyTestBackend

    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        est.estimate(cands)
        old = {est.key(c) for c in cands}
    with patch.object(NumpyTestBackend, "call_revision", 1), \
            estimator(tmp_path, [NUMPY]) as est:
        est.estimate(cands)
        assert est.stats.hits == 0 and est.stats.measured == est.stats.regions
        assert not old & {est.key(c) for c in cands}
        assert {r.version for r in est.cache.measurements("numpy_test")} == {
            NumpyTestBackend().version, NumpyTestBackend().version + "+call1"}


def test_inside_a_session_one_worker_per_backend_serves_every_estimate_call(tmp_path, graph):
    # a cold run's measure phase makes a dozen calls: a start costs 0.4-0.6 s each; after
    # the session (and outside one) no idle worker holds its runtimes' memory
    ops = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        with est.session():
            est.estimate(ops[:2])
            worker = est._workers["numpy_test"]
            pid = worker.proc.pid
            est.estimate(ops[2:4])
            assert est.stats.measured > 0 and est.stats.restarts == 0
            assert worker.proc.pid == pid and worker.starts == 1
        assert worker.proc is None and not _alive(pid) and not est._workers
        est.estimate(ops[4:])
        assert est.stats.measured > 0 and not est._workers


def test_the_reference_backend_measures_first_and_the_others_reuse_its_outputs(tmp_path,
                                                                               graph):
    # "fault" (here without a fault: MODEL has no Conv) sorts before "numpy_test": by name
    # alone it would go first and compute the reference's outputs itself
    ops = single_op(graph, "numpy_test") + single_op(graph, "fault")
    backends = {NUMPY: {}, FAULT: {"mode": "compile_error", "on": "Conv"}}
    with estimator(tmp_path, backends, reference=NUMPY) as est:
        costs = est.estimate(ops)
        rows = est.cache.measurements()
    assert all(math.isfinite(c) for c in costs)
    first = max(r.created for r in rows if r.backend == "numpy_test")
    assert all(r.created > first for r in rows if r.backend == "fault")


def test_identical_regions_measured_once(tmp_path, graph):
    relus = [c for c in single_op(graph, "numpy_test")
             if graph.nodes[c.sub_graph.first].op_type == "Relu"]
    assert len(relus) == 2
    with estimator(tmp_path, [NUMPY]) as est:
        costs = est.estimate(relus)
        assert est.stats.measured == 1 and costs[0] == costs[1]


def test_batch_compile_crash_is_retried_one_by_one(tmp_path, graph):
    with estimator(tmp_path, {BATCHING: {"on": "Sigmoid"}}) as est:
        cands = single_op(graph, "batching_test")
        costs = est.estimate(cands)
        types = [graph.nodes[c.sub_graph.first].op_type for c in cands]
        assert [math.isinf(c) for c in costs] == [t == "Sigmoid" for t in types]
        assert est.stats.restarts >= 2  # batch death, then the culprit's own death
        bad = [r for r in est.cache.measurements() if r.status != OK]
        assert len(bad) == 1 and "SIGABRT" in bad[0].error


def test_unknown_backend_is_refused_even_when_skipping_unusable(tmp_path, graph):
    """A name no backend is registered under is a typo: an error whatever `skip_unusable`
    says (that only skips known backends that cannot run here)."""
    with pytest.raises(CollageError, match="unknown backend 'nope'"):
        estimator(tmp_path, [NUMPY, "nope"])
    with pytest.raises(CollageError, match="unknown backend 'nope'"):
        estimator(tmp_path, [NUMPY, "nope"], skip_unusable=True)
    with estimator(tmp_path, [NUMPY]) as est:
        costs = est.estimate(single_op(graph, "elsewhere"))  # a backend it does not know
        assert all(math.isnan(c) for c in costs)


CONCURRENT = """
import sys
sys.path.insert(0, {here!r})
from test_measure import MODEL, FAST, NUMPY, single_op
import onnx.parser
from collage_mlir.importer import import_onnx
from collage_mlir.dialects.func import find_function
from collage_mlir.graph import DataflowGraph
from collage_mlir.cost.measure import MeasuringEstimator
module = import_onnx(onnx.parser.parse_model(MODEL.replace("16", sys.argv[2])))
graph = DataflowGraph(find_function(module))
est = MeasuringEstimator([NUMPY], cache_path=sys.argv[1], reference=NUMPY, settings=FAST)
costs = est.estimate(single_op(graph, "numpy_test"))
assert all(0 < c < float("inf") for c in costs), costs
"""


def test_two_measuring_processes_share_one_cache(tmp_path, graph):
    path = str(tmp_path / "shared.sqlite")
    script = CONCURRENT.format(here=str(HERE))
    # Same model in both (every key written twice) and one different model each.
    sizes = ["16", "16", "24", "32"]
    procs = [subprocess.Popen([sys.executable, "-c", script, path, s]) for s in sizes[:2]]
    procs += [subprocess.Popen([sys.executable, "-c", script, path, s]) for s in sizes[2:]]
    assert [p.wait(timeout=180) for p in procs] == [0, 0, 0, 0]
    with MeasurementCache(path) as cache:
        assert cache.integrity_ok()
        rows = cache.measurements()
    # 4 distinct single-op regions (MatMul, Relu, Sigmoid, Add) per distinct size
    assert len(rows) == 4 * len(set(sizes)) == len({r.key for r in rows})
    assert all(r.status == OK and r.median > 0 for r in rows)


def test_transition_cost_measured_once_then_cached(tmp_path):
    backends = [NUMPY, BATCHING]
    with estimator(tmp_path, backends) as est:
        same = est.transition("numpy_test", "numpy_test")  # two kernels of one backend
        assert same.status == OK and same.per_call >= 0 and same.per_byte >= 0
        assert est.transition_cost("numpy_test", "numpy_test", 64) == pytest.approx(
            same.per_call + same.per_byte * 64)
        forward = est.transition("numpy_test", "batching_test")
        backward = est.transition("batching_test", "numpy_test")
        assert forward.status == OK and backward.status == OK
        assert len(forward.points) == 4 and forward.per_call >= 0 and forward.per_byte >= 0
        assert est.transition_cost("numpy_test", "batching_test", 4096) == pytest.approx(
            forward.per_call + forward.per_byte * 4096)
        created = forward.created
        assert est._transition_client.starts == 1  # one worker measured every pair
    with estimator(tmp_path, backends) as est:
        again = est.transition("numpy_test", "batching_test")
        assert again.created == created and again.points == forward.points


def test_a_worker_compiles_each_backends_rings_once_across_pairs(monkeypatch):
    from collage_mlir.cost import transition
    from collage_mlir.cost.worker import Worker

    compiled = []
    real = transition.compile_rings

    def counting(backend, sizes=transition.SIZES):
        compiled.append(backend.name)
        return real(backend, sizes)

    monkeypatch.setattr(transition, "compile_rings", counting)
    worker = Worker(io.StringIO())
    numpy_spec, batching_spec = {"target": NUMPY}, {"target": BATCHING}
    worker.init({"backend": numpy_spec, "settings": {}})
    for src, dst in [(None, numpy_spec), (numpy_spec, batching_spec),
                     (batching_spec, numpy_spec), (batching_spec, batching_spec)]:
        worker.transition({"src": src, "dst": dst})
    assert sorted(compiled) == ["batching_test", "numpy_test"]


# -- pieces ---------------------------------------------------------------------------------


def test_input_rule():
    specs = [((3, 5), np.dtype(np.float32)), ((4,), np.dtype(np.int64)),
             ((2, 2), np.dtype(np.bool_))]
    x, idx, mask = make_inputs_for_specs(specs)
    assert x.dtype == np.float32 and abs(float(x.mean())) < 1.5
    assert idx.dtype == np.int64 and idx.min() >= 0 and idx.max() < 3  # below every dim
    assert mask.dtype == np.bool_
    again = make_inputs_for_specs(specs)
    assert all(np.array_equal(a, b) for a, b in zip([x, idx, mask], again, strict=True))


def test_a_kept_input_set_is_handed_out_as_copies_and_within_its_bytes(monkeypatch):
    """The sets made before are copied to each caller: a kernel that wrote into its inputs
    cannot change the next region's; past MADE_BYTES the least recently used go, and a set
    made again is the same."""
    monkeypatch.setattr(tensors, "_made", type(tensors._made)())
    monkeypatch.setattr(tensors, "MADE_BYTES", 3 * 4096)
    specs = [((1024,), np.dtype(np.float32))]
    first = make_inputs_for_specs(specs)
    first[0][:] = 0
    second = make_inputs_for_specs(specs)
    assert second[0].any() and second[0] is not make_inputs_for_specs(specs)[0]
    for v in range(1, 5):
        make_inputs_for_specs(specs, variant=v)
    assert len(tensors._made) == 3  # 4 KiB each
    assert np.array_equal(make_inputs_for_specs(specs)[0], second[0])


def test_compare_tolerates_reordering_not_errors():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    b = rng.standard_normal((512, 64)).astype(np.float32)
    ref = a @ b
    reordered = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert compare([reordered], [ref], MeasureSettings()) is None
    off = ref.copy()
    off[3, 3] += 0.5
    assert "wrong numbers: max abs err 0.5" in compare([off], [ref], MeasureSettings())
    assert "shape" in compare([ref[:2]], [ref], MeasureSettings())
    assert "outputs" in compare([ref, ref], [ref], MeasureSettings())


def test_compare_is_relative_to_the_outputs_magnitude_and_exact_on_dtype():
    small = np.full((1, 1000), 1e-3, np.float32)
    s = MeasureSettings()
    assert compare([small * (1 + 1e-5)], [small], s) is None
    assert "wrong numbers" in compare([np.zeros_like(small)], [small], s)
    assert "wrong numbers" in compare([small * 2], [small], s)
    assert "wrong numbers" in compare([small * 1.05], [small], s)
    assert "is float64, reference float32" in compare([small.astype(np.float64)], [small], s)
    assert "is int32" in compare([np.ones((2,), np.int32)], [np.ones((2,), np.int64)], s)
    zero = np.zeros((4,), np.float32)
    assert compare([zero + 1e-12], [zero], s) is None


def test_compare_takes_nan_and_inf_where_the_reference_has_them():
    """A region whose made-up inputs give NaN (an RMS norm's mean of squares, drawn
    negative, under a square root) is right where it returns NaN exactly where the
    reference does: compared as equal, such regions were all invalid on every backend but
    the reference."""
    s = MeasureSettings()
    ref = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare([ref.copy()], [ref], s) is None
    assert "NaN" in compare([np.array([1.0, 0.0, np.inf, -np.inf], np.float32)], [ref], s)
    assert "NaN" in compare([np.array([1.0, np.nan, np.nan, -np.inf], np.float32)], [ref], s)
    assert "±Inf where the reference has other values (or back) in 1 elements" in compare(
        [np.array([1.0, np.nan, -np.inf, -np.inf], np.float32)], [ref], s)
    assert "±Inf" in compare([np.array([1.0, np.nan, np.inf, 5.0], np.float32)], [ref], s)
    assert "±Inf" in compare([np.array([np.inf, np.nan, np.inf, -np.inf], np.float32)],
                             [ref], s)
    assert "max abs err 1" in compare([np.array([2.0, np.nan, np.inf, -np.inf], np.float32)],
                                      [ref], s)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantized_values_may_round_one_step_apart_and_no_more(dtype):
    """Two correct int8 kernels round differently where a value sits between two steps;
    a wrong one (a zero point off by a few, a saturated sum) is further off. Only outputs
    a quantizing op makes get the step: 8-bit integer arithmetic must be exact (OpenVINO's
    int8 BitShift gave -1 >> 1 = 0, one step off, rc 0)."""
    s = MeasureSettings()
    ref = np.arange(0, 100, dtype=dtype)
    step = ref.copy()
    step[::7] += 1
    assert compare([step], [ref], s, quantized={0}) is None
    assert "differs in 15 elements" in compare([step], [ref], s)
    off = ref.copy()
    off[5] += 3  # three steps on a small value: beyond 1 step and beyond the relative bound
    assert "wrong numbers: max abs err 3 in output 0" in compare([off], [ref], s, {0})
    assert "wrong numbers" in compare([np.zeros_like(ref)], [ref], s, {0})
    scalar = np.array(7, dtype)  # DynamicQuantizeLinear's zero point, and its scale below
    assert compare([scalar, scalar + 1], [scalar, scalar], s, {1}) is None
    assert "max abs err 2" in compare([scalar + 2], [scalar], s, {0})
    scale = np.array(0.02, np.float32)
    assert compare([scale], [scale], s) is None and "wrong numbers" in compare(
        [scale * 2], [scale], s)
    ids = ref.astype(np.int64)  # other integers are indices and sizes: exact
    assert "differs in 1 elements" in compare([ids + (ids == 5)], [ids], s)


def test_fit_recovers_line_and_clips():
    points = [(n, 5e-6 + 2e-10 * n) for n in (1024, 65536, 1 << 20, 4 << 20)]
    per_call, per_byte = fit(points)
    assert per_call == pytest.approx(5e-6, rel=1e-3)
    assert per_byte == pytest.approx(2e-10, rel=1e-3)
    assert fit([(1024, -1e-6), (4096, -2e-6)]) == (0.0, 0.0)
    spoiled = [*points[:2], (points[2][0], 1e-3), points[3]]  # one noisy point
    per_call, per_byte = fit(spoiled)
    assert per_call < 2e-5 and per_byte == pytest.approx(2e-10, rel=0.5)


def test_cli_measure_then_cache(tmp_path, capsys):
    from collage_mlir.tools.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(MODEL), str(model))
    cache = str(tmp_path / "cli.sqlite")
    argv = ["measure", str(model), "--backends", f"{NUMPY},{FAULT}", "--cache", cache,
            "--reference", NUMPY, "--budget", "0.02"]
    assert main([*argv[:3], f"{NUMPY},{FAULT},nope", *argv[4:]]) == 1  # a typo: no work
    assert "unknown backend 'nope'" in capsys.readouterr().err
    assert main(argv) == 0
    out, err = capsys.readouterr()
    relu_row = next(line for line in out.splitlines() if " Relu " in line)
    assert "invalid" in relu_row and relu_row.rstrip().endswith("numpy_test")
    assert "SIGSEGV" in out and "8 measured" in out
    assert main(argv) == 0
    assert "0 measured" in capsys.readouterr().out
    assert main(["cache", "stats", "--cache", cache]) == 0
    stats = capsys.readouterr().out
    assert "fault: 4 (3 ok, 1 invalid)" in stats and "numpy_test: 4 (4 ok)" in stats
    assert main(["measure", str(model), "--backends", "nope", "--cache", cache]) == 1
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_cold_timing_sweeps_before_every_timed_call(monkeypatch):
    from collage_mlir.cost import timing as worker

    events: list[str] = []

    class Sweep:
        def sum(self):
            events.append("sweep")

    class Kernel:
        def run(self, inputs):
            events.append("run")
            return inputs

    monkeypatch.setattr(worker, "_sweep_buffer", lambda nbytes: Sweep())
    settings = MeasureSettings(warmup=2, min_runs=4, max_runs=4, budget_s=10.0)
    times = worker.time_kernel(Kernel(), [], settings)
    assert len(times) == 4
    assert events == ["run", "run"] + ["sweep", "run"] * 4  # warmups hot, timed calls cold
    events.clear()
    worker.time_kernel(Kernel(), [], MeasureSettings(warmup=1, min_runs=3, max_runs=3,
                                                     cold_bytes=0))
    assert events == ["run"] * 4


@pytest.mark.parametrize("call_s, warmups", [(0.001, 2), (0.02, 10), (0.05, 4), (0.1, 2)])
def test_a_big_kernel_is_warmed_up_for_longer(monkeypatch, call_s, warmups):
    """Calls of 5 ms or more go on untimed until 0.2 s is spent (10 calls at most); a
    small kernel, or one whose two calls already took that long, gets two. A fake clock
    that only the kernel's calls advance."""
    from types import SimpleNamespace

    from collage_mlir.cost import timing as worker

    now = [0.0]
    calls = []

    class Kernel:
        def run(self, inputs):
            now[0] += call_s
            calls.append(now[0])
            return inputs

    monkeypatch.setattr(worker, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    times = worker.time_kernel(Kernel(), [], MeasureSettings(warmup=2, min_runs=3, max_runs=3,
                                                             cold_bytes=0))
    assert len(times) == 3 and len(calls) == warmups + 3
    calls.clear()
    worker.time_kernel(Kernel(), [], MeasureSettings(warmup=2, big_warmup_s=0, min_runs=3,
                                                     max_runs=3, cold_bytes=0))
    assert len(calls) == 2 + 3  # longer warm-up turned off


UNSETTLED = MeasureSettings(warmup=0, min_runs=20, max_runs=24, budget_s=100.0,
                            min_runs_on_budget=5, settle=-1.0, cold_bytes=0)
"""Never settles, never spends its budget: timed to `max_runs` unless stopped above a bound."""


def test_timing_stops_after_a_few_calls_above_its_bound():
    from collage_mlir.cost.timing import stopped_at_bound, time_kernel

    class Kernel:
        def run(self, inputs):
            return inputs

    for bound, calls in [(0.0, 5), (1e9, 24), (None, 24)]:
        times = time_kernel(Kernel(), [], UNSETTLED, stop_above=bound)
        assert len(times) == calls
        assert stopped_at_bound(times, UNSETTLED, bound) == (calls == 5)


def test_a_candidate_told_where_it_loses_is_timed_on_fewer_calls(tmp_path, graph):
    cands = single_op(graph, "numpy_test")
    relus = [k for k, c in enumerate(cands) if graph.nodes[c.sub_graph.first].op_type == "Relu"]
    bounds = [0.0] * len(cands)
    bounds[relus[0]] = None  # one of the two identical Relus needs precision: both get it
    wrapped = []

    class Wrapping(MeasuringEstimator):
        """A subclass that wraps `estimate` (as users do): the bounds go through it."""

        def estimate(self, candidates, progress=None):
            wrapped.append(len(candidates))
            return super().estimate(candidates, progress)

    with Wrapping([NUMPY], cache_path=tmp_path / "c.sqlite", reference=NUMPY,
                  settings=UNSETTLED, timeout_s=20) as est:
        est.estimate_bounded(cands, bounds)
        runs = {r.signature.split()[0]: r.runs for r in est.cache.measurements()}
    assert runs == {"MatMul": 5, "Sigmoid": 5, "Add": 5, "Relu": 24}
    assert wrapped == [len(cands)]


def test_a_timing_cut_short_is_measured_again_where_precision_is_needed(tmp_path, graph,
                                                                         capsys):
    from collage_mlir.cost.timing import CUT_SHORT
    from collage_mlir.tools.cli import main

    cands = single_op(graph, "numpy_test")
    regions = len({c.sub_graph.graph.nodes[c.sub_graph.first].op_type for c in cands})

    def runs(est) -> list[int]:
        return sorted(r.runs for r in est.cache.measurements())

    with estimator(tmp_path, [NUMPY], settings=UNSETTLED) as est:
        est.estimate_bounded(cands, [0.0] * len(cands))  # every one a clear loser
        assert runs(est) == [5] * regions
        assert all(r.error.endswith(CUT_SHORT) for r in est.cache.measurements())
        assert main(["cache", "list", "--cache", str(tmp_path / "c.sqlite")]) == 0
        listed = [line for line in capsys.readouterr().out.splitlines()
                  if " n=5 " in line and line.endswith(
                      f"(unchecked: this backend is the reference; {CUT_SHORT})")]
        assert len(listed) == regions
        est.estimate_bounded(cands, [0.0] * len(cands))  # still losers: the rows stand
        assert est.stats.measured == 0 and est.stats.hits == regions
        est.estimate_bounded(cands, [1e9] * len(cands))  # within their bounds now
        assert est.stats.measured == regions and runs(est) == [24] * regions
        assert not any(CUT_SHORT in r.error for r in est.cache.measurements())
    with estimator(tmp_path, [NUMPY], settings=UNSETTLED) as est:
        est.estimate_bounded(cands, [1e9] * len(cands))  # precise rows stand for any bound
        est.estimate(cands)
        assert est.stats.measured == 0 and runs(est) == [24] * regions
    (tmp_path / "c.sqlite").unlink()
    with estimator(tmp_path, [NUMPY], settings=UNSETTLED) as est:
        est.estimate_bounded(cands, [0.0] * len(cands))
        est.estimate(cands)  # no bound at all: measured again, to max_runs
        assert est.stats.measured == regions and runs(est) == [24] * regions


def test_failed_candidates_are_out_of_the_search_not_unknown(tmp_path, graph):
    """A backend failing every Relu leaves those nodes to the other backend; with no other
    backend, the error names the op and the backend's reason."""
    from collage_mlir.search.search import search

    backends = {NUMPY: {}, FAULT: {"mode": "compile_error", "on": "Relu"}}
    with estimator(tmp_path, backends) as est:
        cands = single_op(graph, "numpy_test") + single_op(graph, "fault")
        costs = est.estimate(cands)
        assert not any(math.isnan(c) for c in costs)
        out = [c for c, cost in zip(cands, costs, strict=True) if math.isinf(cost)]
        assert {graph.nodes[c.sub_graph.first].op_type for c in out} == {"Relu"}
        assert all("invalid: compile failed" in est.reason(c) for c in out)
        picked = search(graph, cands, costs, reason=est.reason)
        for choice in picked.choices:
            node = graph.nodes[choice.candidate.sub_graph.first]
            assert node.op_type != "Relu" or choice.candidate.backend == "numpy_test"
        only_fault = [k for k, c in enumerate(cands) if c.backend == "fault"]
        with pytest.raises(CollageError) as err:
            search(graph, [cands[k] for k in only_fault], [costs[k] for k in only_fault],
                   reason=est.reason)
        assert "no backend can run Relu node" in str(err.value)
        assert "fault: invalid: compile failed: RuntimeError: injected" in str(err.value)


def test_a_region_that_cannot_be_extracted_costs_inf_with_its_reason(tmp_path, graph,
                                                                      monkeypatch):
    with estimator(tmp_path, [NUMPY]) as est:
        def broken(sub_graph):
            raise ValueError("no way")

        monkeypatch.setattr(est, "region", broken)
        (cand,) = single_op(graph, "numpy_test")[:1]
        assert est.estimate([cand]) == [math.inf]
        assert est.reason(cand) == "cannot extract the region: no way"


def test_error_rows_cost_inf_and_are_measured_again(tmp_path, graph):
    from collage_mlir.cost.cache import ERROR, Measurement

    with estimator(tmp_path, [NUMPY]) as est:
        (cand,) = single_op(graph, "numpy_test")[:1]
        m = Measurement(key=est.key(cand), region="r", backend="numpy_test", version="1",
                        options="", host="h", signature="Relu", status=ERROR, error="no inputs")
        assert m.cost == math.inf
        est.cache.put(m)
        (cost,) = est.estimate([cand])
        assert 0 < cost < math.inf and est.stats.measured == 1
        assert est.cache.get_many([m.key])[m.key].status == OK


OLD_IREE_FAILURE = ("compile failed: RuntimeError: iree-compile failed: regions.mlir:83:11: "
                    "error: One or more operations with large vector sizes (16384 bytes)")


def test_iree_calls_its_compile_failures_from_before_the_retry_outdated():
    from collage_mlir.backends.iree import RETRIED, IreeBackend, IreeCudaBackend

    now = OLD_IREE_FAILURE.replace(
        "iree-compile failed", f"{RETRIED}retried without --iree-opt-data-tiling) iree-compile failed")
    for cls in (IreeBackend, IreeCudaBackend):
        assert cls.outdated_failure(OLD_IREE_FAILURE) and not cls.outdated_failure(now)
        assert not cls.outdated_failure("wrong numbers: max abs err 0.5 in output 0")


@pytest.mark.parametrize("old_reason", ["nan", "backend"])
def test_rows_refused_for_a_reason_an_older_version_gave_are_measured_again(
        tmp_path, graph, monkeypatch, old_reason):
    """Matching NaNs taken as wrong, and failures the row's backend calls outdated
    (`Backend.outdated_failure`, here a test rule): measured again; other reasons, and
    another backend's outdated ones, stand."""
    from fault_backend import NumpyTestBackend

    from collage_mlir.cost.cache import INVALID, Measurement
    from collage_mlir.cost.measure import NAN_TAKEN_FOR_WRONG

    monkeypatch.setattr(NumpyTestBackend, "outdated_failure",
                        classmethod(lambda cls, reason: reason.startswith("before the fix")))
    why_old = {"nan": f"{NAN_TAKEN_FOR_WRONG} in output 0 (max |ref| 1.75, rtol 0.01)",
               "backend": "before the fix: compile failed"}[old_reason]
    with estimator(tmp_path, [NUMPY]) as est:
        cands = single_op(graph, "numpy_test")[:3]
        rows = [Measurement(
            key=est.key(c), region="r", backend="numpy_test", version="1", options="",
            host="h", signature="Relu", status=INVALID, error=why) for c, why in zip(
                cands, [why_old, "wrong numbers: max abs err 0.5 in output 0", OLD_IREE_FAILURE],
                strict=True)]
        for row in rows:
            est.cache.put(row)
        costs = est.estimate(cands)
        assert 0 < costs[0] < math.inf and costs[1] == costs[2] == math.inf
        assert est.stats.measured == 1
        assert est.cache.get_many([rows[0].key])[rows[0].key].status == OK


@pytest.mark.parametrize("median", [-1.0, math.nan, None, math.inf])
def test_an_ok_row_without_a_usable_time_is_measured_again(tmp_path, graph, median):
    """A row edited outside collage (by hand, another tool, an old import) with status ok
    and a median of -1 stopped the search ("negative cost -1.0 for Candidate(...)", naming
    neither cache nor row); a NaN or missing one silently dropped the candidate."""
    from collage_mlir.cost.cache import OK, Measurement

    with estimator(tmp_path, [NUMPY]) as est:
        (cand,) = single_op(graph, "numpy_test")[:1]
        est.cache.put(Measurement(key=est.key(cand), region="r", backend="numpy_test",
                                  version="1", options="", host="h", signature="Relu",
                                  status=OK, median=median, p90=median, runs=5))
        (cost,) = est.estimate([cand])
        assert 0 < cost < math.inf and est.stats.measured == 1


def test_rows_measured_without_a_reference_are_checked_by_a_run_that_has_one(tmp_path, graph):
    """`measure --reference none` leaves rows unchecked, a wrong kernel's too; a later run
    that checks numbers must not take them as checked: it measures them again and catches
    the wrong one. A run without a reference takes them as they are."""
    cands = [c for c in single_op(graph, "fault")
             if graph.nodes[c.sub_graph.first].op_type in ("MatMul", "Relu")]
    backends = {NUMPY: {}, FAULT: {"mode": "wrong", "on": "Relu"}}
    with estimator(tmp_path, backends, reference=None) as est:
        assert all(0 < c < math.inf for c in est.estimate(cands))
        rows = est.cache.get_many([est.key(c) for c in cands]).values()
        assert all("unchecked: no reference backend" in m.error for m in rows)
    with estimator(tmp_path, backends, reference=None) as est:
        est.estimate(cands)
        assert est.stats.hits == 2 and est.stats.measured == 0
    with estimator(tmp_path, backends) as est:
        costs = est.estimate(cands)
        assert est.stats.measured == 2 and sorted(costs)[1] == math.inf
        rows = est.cache.get_many([est.key(c) for c in cands]).values()
        assert not any("unchecked" in m.error for m in rows)


def test_a_backend_failing_every_candidate_leaves_the_model_to_the_others(tmp_path, graph):
    from collage_mlir.search.search import search

    backends = {NUMPY: {}, FAULT: {"mode": "compile_error", "on": "*"}}
    with estimator(tmp_path, backends) as est:
        cands = single_op(graph, "fault") + single_op(graph, "numpy_test")
        costs = est.estimate(cands)
        assert all(math.isinf(c) for c, k in zip(costs, cands, strict=True)
                   if k.backend == "fault")
        picked = search(graph, cands, costs, reason=est.reason)
        assert {c.candidate.backend for c in picked.choices} == {"numpy_test"}


def test_a_hung_worker_dies_with_its_parent(tmp_path):
    """A worker stuck in a kernel must not outlive the run that started it: kill the parent
    (SIGKILL, no clean-up) and the worker ends by itself."""
    import signal
    import time

    parent = tmp_path / "parent.py"
    parent.write_text(f"""
import sys
from collage_mlir.cost.client import Item, WorkerClient, WorkerConfig
from collage_mlir.cost.key import module_text
from collage_mlir.importer import import_onnx
import onnx.parser
from collage_mlir.dialects.func import find_function
from collage_mlir.graph import DataflowGraph, SubGraph
module = import_onnx(onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
g (float[4] x) => (float[4] y) {{ y = Relu(x) }}'''))
graph = DataflowGraph(find_function(module), owner=module)
relu = next(n for n in graph.op_nodes() if n.op_type == "Relu")
region = SubGraph(graph, 1 << relu.index).extract("r")
client = WorkerClient(WorkerConfig(
    backend={{"target": "{FAULT}", "options": {{"mode": "hang", "on": "Relu"}}}},
    sys_path=[{str(HERE)!r}], timeout_s=600))
client.start()
print(client.proc.pid, flush=True)
client.measure([Item("r", module_text(region))], False, lambda i, r: None)
""")
    proc = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, text=True)
    worker = int(proc.stdout.readline())
    time.sleep(2)  # the worker is inside the hanging kernel by now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.1)
    alive = _alive(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- hangs (issue 15 item 5) ----------------------------------------------------------------


def chains(graph, backend: str) -> list[CandidatePartition]:
    """Every two-op chain of MODEL (MatMul→Relu→Sigmoid→Relu→Add) on `backend`."""
    ops = graph.op_nodes()
    return [CandidatePartition(SubGraph(graph, 1 << a.index | 1 << b.index), backend, "chain")
            for a, b in zip(ops, ops[1:], strict=False)]


def test_after_a_hang_on_an_op_type_its_other_regions_are_skipped_in_this_run(tmp_path, graph):
    """One timeout per (backend, op type) per run: every other region holding Relu is out
    with the reason, not measured (and not cached)."""
    with estimator(tmp_path, {FAULT: {"mode": "hang", "on": "Relu"}}, timeout_s=1.5) as est:
        cands = chains(graph, "fault") + single_op(graph, "fault")  # chains listed first
        costs = est.estimate(cands)
        assert est.stats.timeouts == 1 and est.stats.skipped == 4  # every chain holds a Relu
        for c, cost in zip(cands, costs, strict=True):
            types = {graph.nodes[i].op_type for i in c.sub_graph.nodes}
            assert math.isinf(cost) == ("Relu" in types)
            if "Relu" in types and len(types) > 1:
                assert est.reason(c) == "error: skipped: fault hung on Relu earlier in this run"
                assert est.cache.get(est.key(c)) is None
        relu = next(c for c in cands if len(c.sub_graph) == 1 and "Relu" in
                    graph.nodes[c.sub_graph.first].op_type)
        row = est.cache.get(est.key(relu))
        assert (row.status, row.timeout_s, row.attempts) == (TIMEOUT, 1.5, 1)
        assert est.reason(relu).startswith("timeout: timed out after 1.5 s")


def test_a_tiny_timeout_does_not_poison_the_cache(tmp_path, graph):
    """`measure --timeout 0.001`: every region times out, and a plain later run measures
    them all again."""
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY], timeout_s=0.001) as est:
        assert all(math.isinf(c) for c in est.estimate(cands))
        rows = est.cache.measurements()
        assert rows and all(r.status == TIMEOUT and r.timeout_s == 0.001 for r in rows)
    with estimator(tmp_path, [NUMPY]) as est:
        costs = est.estimate(cands)
        assert all(0 < c < math.inf for c in costs)
        assert est.stats.measured == est.stats.regions and est.stats.hits == 0


def test_a_cached_timeout_is_due_again_by_its_retry_policy(tmp_path, graph):
    from collage_mlir.cost.cache import TIMEOUT_RETRY, Measurement

    (cand,) = single_op(graph, "numpy_test")[:1]
    with estimator(tmp_path, [NUMPY], timeout_s=20) as est:
        def put(attempts: int, timeout_s: float, age_s: float = 0.0) -> None:
            import time
            est.cache.put(Measurement(
                key=est.key(cand), region="r", backend="numpy_test", version="1", options="",
                host="h", signature="MatMul", status=TIMEOUT, error="timed out after 20 s",
                timeout_s=timeout_s, attempts=attempts, created=time.time() - age_s))

        put(TIMEOUT_RETRY.attempts, 20)  # timed out three times in a row at this timeout
        assert est.estimate([cand]) == [math.inf] and est.stats.measured == 0
        assert est.reason(cand).startswith("timeout: ")
        put(TIMEOUT_RETRY.attempts - 1, 20)  # not yet three times: measured again
        assert 0 < est.estimate([cand])[0] < math.inf and est.stats.measured == 1
        put(TIMEOUT_RETRY.attempts, 10)  # timed out under a shorter timeout than today's
        assert 0 < est.estimate([cand])[0] < math.inf and est.stats.measured == 1
        put(TIMEOUT_RETRY.attempts, 20, age_s=TIMEOUT_RETRY.after_s + 1)  # long ago
        assert 0 < est.estimate([cand])[0] < math.inf and est.stats.measured == 1
    assert TIMEOUT_RETRY.next_attempts(20, 2, 20) == 3
    assert TIMEOUT_RETRY.next_attempts(20, 2, 30) == 1  # a longer timeout starts again


def test_a_hanging_transition_experiment_is_not_paid_again_on_every_run(tmp_path):
    hang = {FAULT: {"mode": "hang", "on": "Relu"}}
    with estimator(tmp_path, hang, transition_timeout_s=1.5) as est:
        failed = est.transition("fault", "fault")
        assert failed.status == TIMEOUT and failed.timeout_s == 1.5 and failed.attempts == 1
        assert "timed out after 1.5 s" in failed.error
        assert est.transition_cost("fault", "fault", 1024) == 0.0
    with estimator(tmp_path, hang, transition_timeout_s=1.5) as est:  # a plain later run
        assert est.transition("fault", "fault").created == failed.created  # not tried again
    with estimator(tmp_path, hang, transition_timeout_s=2.0) as est:  # a longer timeout
        again = est.transition("fault", "fault")
        assert again.created > failed.created and again.timeout_s == 2.0
        assert again.attempts == 1



def test_a_hung_pair_costs_its_worker_not_the_next_pairs(tmp_path):
    """One worker prices every pair; a pair that hangs ends it, and the next pair gets a
    fresh one."""
    backends = {FAULT: {"mode": "hang", "on": "Relu"}, NUMPY: {}}
    with estimator(tmp_path, backends, transition_timeout_s=1.5) as est:
        assert est.transition("fault", "numpy_test").status == TIMEOUT
        est._transition_timeout_s = 60.0  # time enough for a real experiment
        after = est.transition("numpy_test", "numpy_test")
        assert after.status == OK and len(after.points) == 4

# -- load (issue 10 item 14) ----------------------------------------------------------------


def test_each_measurement_records_the_machine_load(tmp_path, graph):
    loads = iter([0.1, 2.0, 0.2, 0.3, 0.1, 0.1, 0.1, 0.1])
    with estimator(tmp_path, [NUMPY], load_probe=lambda: next(loads)) as est:
        cands = single_op(graph, "numpy_test")
        est.estimate(cands)
        rows = sorted(est.cache.measurements(), key=lambda r: r.created)
        # each row: the larger of the load before (the previous result) and after it
        assert [r.load for r in rows] == [2.0, 2.0, 0.3, 0.3]
        assert est.stats.busy == 2 and est.stats.max_load == 2.0
        assert rows[0].noisy and rows[1].noisy  # busy, whatever their spread


def test_cli_measure_says_when_the_machine_was_busy(tmp_path, capsys, monkeypatch):
    from collage_mlir.cost import measure as measure_mod
    from collage_mlir.tools.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(MODEL), str(model))
    argv = ["measure", str(model), "--backends", NUMPY, "--cache", str(tmp_path / "c.sqlite"),
            "--reference", NUMPY, "--budget", "0.02"]
    monkeypatch.setattr(measure_mod, "machine_load", lambda: 0.0)
    assert main(argv) == 0
    assert "machine busy" not in capsys.readouterr().out
    (tmp_path / "c.sqlite").unlink()
    monkeypatch.setattr(measure_mod, "machine_load", lambda: 1.25)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "machine busy: 4 of 4 measured while other work ran (load up to 1.25" in out
    assert "cache remeasure --noisy" in out


def test_cache_remeasure_noisy_has_the_next_run_measure_them_again(tmp_path, graph, capsys):
    import dataclasses

    from collage_mlir.tools.cli import main

    path = tmp_path / "c.sqlite"
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY], load_probe=lambda: 0.0) as est:
        est.estimate(cands)
        rows = [dataclasses.replace(r, spread=0.1) for r in est.cache.measurements()]
        assert len(rows) == 4  # timed noise must not decide which rows are noisy
        wide, busy = dataclasses.replace(rows[0], spread=0.9), dataclasses.replace(rows[1],
                                                                                  load=1.0)
        est.cache.put_many([wide, busy, *rows[2:]])
    assert main(["cache", "remeasure", "--cache", str(path)]) == 1
    assert "--noisy" in capsys.readouterr().err
    assert main(["cache", "remeasure", "--noisy", "--cache", str(path)]) == 0
    assert "marked 2 noisy measurements" in capsys.readouterr().out
    assert main(["cache", "list", "--cache", str(path)]) == 0
    assert capsys.readouterr().out.count("(stale: measured again by the next run)") == 2
    with estimator(tmp_path, [NUMPY], load_probe=lambda: 0.0) as est:
        costs = est.estimate(cands)
        assert all(0 < c < math.inf for c in costs)
        assert est.stats.measured == 2 and est.stats.hits == len(rows) - 2
        again = {r.key: r for r in est.cache.measurements()}
        assert not again[wide.key].stale and again[busy.key].load == 0.0
        assert again[wide.key].created > wide.created


# -- concurrent runs share the work (issue 15 item 9) ---------------------------------------


SHARING = """
import json, os, sys, time
sys.path.insert(0, {here!r})
from test_measure import MODEL, FAST, NUMPY, single_op
import onnx.parser
from collage_mlir.importer import import_onnx
from collage_mlir.dialects.func import find_function
from collage_mlir.graph import DataflowGraph
from collage_mlir.cost.measure import MeasuringEstimator
module = import_onnx(onnx.parser.parse_model(MODEL))
graph = DataflowGraph(find_function(module))
est = MeasuringEstimator([NUMPY], cache_path=sys.argv[1], reference=NUMPY, settings=FAST)
cands = single_op(graph, "numpy_test")
open(sys.argv[2] + ".ready", "w").close()
while not os.path.exists(sys.argv[2] + ".go"):  # start together
    time.sleep(0.01)
costs = est.estimate(cands)
assert all(0 < c < float("inf") for c in costs), costs
json.dump({{"measured": est.stats.measured, "shared": est.stats.shared}}, open(sys.argv[2], "w"))
"""


def test_two_runs_started_together_measure_each_region_once(tmp_path):
    """Each key is measured by one run; the other waits for its row (without claims both
    measured everything: 4 concurrent runs did 4x the work)."""
    import json
    import time

    path = str(tmp_path / "shared.sqlite")
    MeasurementCache(path).close()
    script = SHARING.format(here=str(HERE))
    outs = [tmp_path / f"run{k}.json" for k in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", script, path, str(o)]) for o in outs]
    while not all(Path(f"{o}.ready").exists() for o in outs):
        assert all(p.poll() is None for p in procs)
        time.sleep(0.05)
    for o in outs:
        Path(f"{o}.go").touch()
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    stats = [json.loads(o.read_text()) for o in outs]
    with MeasurementCache(path) as cache:
        rows = cache.measurements()
        assert cache.claims() == []  # every claim ended with its row
    assert len(rows) == 4 and all(r.status == OK for r in rows)
    assert sum(s["measured"] for s in stats) == 4  # each region once
    assert sum(s["shared"] for s in stats) == 4  # the other run took its rows


def test_a_run_waits_for_regions_another_live_run_claimed(tmp_path, graph, caplog):
    """Keys claimed by another live claimant are not measured: the run waits, says so (a
    run that died on another host holds its claims for an hour at the default timeout),
    and takes the rows that run writes."""
    import dataclasses

    from collage_mlir.cost.cache import Claimant

    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:  # what the other run will have measured
        est.estimate(cands)
        theirs = est.cache.measurements()
        est.cache.clear()
    here = Claimant.here()
    other = Claimant("other-run", os.getpid(), here.host, here.boot)  # alive: this process
    with estimator(tmp_path, [NUMPY]) as est:
        keys = [r.key for r in theirs]
        assert est.cache.claim(keys[:2], other, 600, 0.0) == keys[:2]
        naps = []

        def nap(seconds):  # the other run finishes its rows while this one waits
            naps.append(seconds)
            est.cache.put_many(dataclasses.replace(r, created=r.created + 1e6)
                               for r in theirs[:2])

        est._sleep = nap
        costs = est.estimate(cands)
        assert all(0 < c < math.inf for c in costs)
        assert len(naps) == 1 and est.stats.shared == 2 and est.stats.measured == 2
        assert est.cache.claims() == []
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "collage: waiting for 2 region(s) another run is measuring")


def test_claims_of_a_dead_run_expire(tmp_path, graph):
    from collage_mlir.cost.cache import Claimant

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        keys = [est.key(c) for c in cands]
        here = Claimant.here()
        gone = Claimant("dead-run", dead.pid, here.host, here.boot)
        assert est.cache.claim(keys, gone, 600, 0.0) == list(dict.fromkeys(keys))
        # from another host a pid says nothing: there a claim stands till its heartbeat ages
        remote = Claimant("remote-run", dead.pid, "elsewhere", "")
        assert est.cache.claim(keys, remote, 600, 0.0) == []
        assert len(est.cache.claim(keys, remote, -1.0, 0.0)) == 4  # aged: taken over
        est.cache.release(keys, remote)
        est.cache.claim(keys, gone, 600, 0.0)  # the dead run's claims again
        assert {c[1] for c in est.cache.claims()} == {"dead-run"}
        est._sleep = lambda s: pytest.fail("waited for a dead run")
        costs = est.estimate(cands)
        assert all(0 < c < math.inf for c in costs) and est.stats.measured == 4
        assert est.cache.claims() == []


def test_the_worker_parses_each_region_after_its_start(monkeypatch, graph):
    """One at a time, a region's parse counts against its own timeout: before, every
    region of the command was parsed before the first `start`, and a tight timeout blamed
    the first region (and, after a timeout, skipped its op types) for the others' parses."""
    import json

    from collage_mlir import importer
    from collage_mlir.cost.key import module_text
    from collage_mlir.cost.protocol import settings_dict
    from collage_mlir.cost.worker import Worker

    events: list[str] = []
    parse = importer.parse_mlir

    def spy(text, label):
        events.append(f"parse {label.split()[-1]}")
        return parse(text, label)

    class Channel:
        def write(self, line: str) -> None:
            msg = json.loads(line)
            if msg["event"] in ("start", "result"):
                events.append(f"{msg['event']} {msg['id']}")

        def flush(self) -> None:
            pass

    monkeypatch.setattr(importer, "parse_mlir", spy)
    worker = Worker(Channel())
    worker.init({"backend": {"target": NUMPY}, "settings": settings_dict(FAST)})
    texts = [module_text(c.sub_graph.extract("r")) for c in single_op(graph, "numpy_test")[:2]]
    worker.measure({"items": [{"id": str(k), "text": t} for k, t in enumerate(texts)]})
    assert events == ["start 0", "parse 0", "result 0", "start 1", "parse 1", "result 1"]


def test_a_stale_row_that_times_out_when_measured_again_keeps_its_cost(tmp_path, graph):
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        first = est.estimate(cands)
        assert est.cache.mark_stale(r.key for r in est.cache.measurements()) == 4
    with estimator(tmp_path, [NUMPY], timeout_s=0.001) as est:  # every region times out
        assert est.estimate(cands) == first
        assert est.stats.timeouts == 4
        assert all(r.status == OK and r.stale for r in est.cache.measurements())


def test_a_standing_cached_timeout_skips_its_op_type_without_a_new_hang(tmp_path, graph):
    """A timeout the retry policy keeps (three in a row at this timeout) stands for its op
    type too: the backend's unmeasured regions holding it are skipped, not hung on again."""
    import time

    from collage_mlir.cost.cache import TIMEOUT_RETRY, Measurement

    with estimator(tmp_path, {FAULT: {"mode": "hang", "on": "Relu"}}, timeout_s=1.5) as est:
        singles = single_op(graph, "fault")
        relu = next(c for c in singles if graph.nodes[c.sub_graph.first].op_type == "Relu")
        est.cache.put(Measurement(
            key=est.key(relu), region="r", backend="fault", version="1", options="", host="h",
            signature="Relu", status=TIMEOUT, error="timed out after 1.5 s while measuring",
            timeout_s=1.5, attempts=TIMEOUT_RETRY.attempts, created=time.time()))
        cands = chains(graph, "fault") + singles
        costs = est.estimate(cands)
        assert est.stats.timeouts == 0 and est.stats.skipped == 4 and est.stats.hits == 1
        for c, cost in zip(cands, costs, strict=True):
            has_relu = any(graph.nodes[i].op_type == "Relu" for i in c.sub_graph.nodes)
            assert math.isinf(cost) == has_relu
            if has_relu and len(c.sub_graph) > 1:
                assert est.reason(c) == ("error: skipped: fault hung on Relu in earlier runs "
                                         "(cached timeout)")


# -- reference outputs shared between workers ------------------------------------------


class _Events:
    """A worker's channel that keeps its results by id."""

    def __init__(self) -> None:
        self.results: dict[str, dict] = {}

    def write(self, line: str) -> None:
        import json

        msg = json.loads(line)
        if msg["event"] == "result":
            self.results[msg["id"]] = msg

    def flush(self) -> None:
        pass


def _worker(backend: dict, reference_dir) -> tuple:
    from collage_mlir.cost.protocol import settings_dict
    from collage_mlir.cost.worker import Worker

    channel = _Events()
    worker = Worker(channel)
    worker.init({"backend": backend, "reference": {"target": NUMPY},
                 "settings": settings_dict(FAST), "reference_dir": str(reference_dir)})
    return worker, channel


def _compiles(worker) -> list:
    """Counts the reference backend's compiles in `worker`."""
    calls: list = []
    compile_ = worker.reference.compile
    worker.reference.compile = lambda module: calls.append(1) or compile_(module)
    return calls


def test_workers_share_the_reference_outputs_and_still_catch_a_wrong_kernel(tmp_path, graph):
    from collage_mlir.cost.key import module_text

    texts = [module_text(c.sub_graph.extract("r")) for c in single_op(graph, "numpy_test")]
    items = lambda: [{"id": str(k), "text": t} for k, t in enumerate(texts)]  # noqa: E731
    types = [graph.nodes[c.sub_graph.first].op_type for c in single_op(graph, "numpy_test")]
    wrong = {"target": FAULT, "options": {"mode": "wrong", "on": "Relu"}}

    alone, channel = _worker(wrong, tmp_path / "none")  # no such directory: no sharing
    computed = _compiles(alone)
    alone.measure({"items": items()})
    assert len(computed) == len(texts)
    assert not (tmp_path / "none").exists()
    verdicts = [channel.results[str(k)]["status"] for k in range(len(texts))]

    shared = tmp_path / "refs"
    shared.mkdir()
    reference, _ = _worker({"target": NUMPY}, shared)  # the reference's own worker
    assert reference.is_reference
    reference.measure({"items": items()})
    assert len(list(shared.glob("*.npz"))) == len(set(texts))

    other, channel = _worker(wrong, shared)
    compiled = _compiles(other)
    other.measure({"items": items()})
    assert compiled == []  # every reference output came from the shared directory
    got = [channel.results[str(k)]["status"] for k in range(len(texts))]
    assert got == verdicts == [INVALID if t == "Relu" else OK for t in types]
    assert all("wrong numbers" in channel.results[str(k)]["error"]
               for k, t in enumerate(types) if t == "Relu")


def test_a_worker_that_computes_the_reference_leaves_it_for_the_others(tmp_path, graph):
    from collage_mlir.cost.key import module_text

    text = module_text(single_op(graph, "numpy_test")[0].sub_graph.extract("r"))
    first, _ = _worker({"target": FAULT, "options": {"mode": "none"}}, tmp_path)
    assert not first.is_reference
    first.measure({"items": [{"id": "0", "text": text}]})
    second, channel = _worker({"target": FAULT, "options": {"mode": "none"}}, tmp_path)
    compiled = _compiles(second)
    second.measure({"items": [{"id": "0", "text": text}]})
    assert compiled == [] and channel.results["0"]["status"] == OK


def test_reference_outputs_round_trip_and_refuse_what_they_cannot_hold(tmp_path, monkeypatch):
    from collage_mlir.cost import references
    from collage_mlir.cost.references import ReferenceOutputs, text_digest

    store = ReferenceOutputs(tmp_path)
    outs = [[np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])],
            [np.ones((2, 3), np.float32), np.array([False, False])]]
    key = text_digest("region a")
    assert store.get(key, 2) is None
    store.put(key, outs)
    got = store.get(key, 2)
    assert [[a.tolist() for a in call] for call in got] == [[a.tolist() for a in call]
                                                           for call in outs]
    assert got[0][1].dtype == np.bool_
    assert store.get(key, 3) is None  # another number of checked calls
    assert store.get(text_digest("region b"), 2) is None
    (tmp_path / f"{text_digest('torn')}.npz").write_bytes(b"not a zip")
    assert store.get(text_digest("torn"), 2) is None  # unreadable: computed again
    big = np.zeros(references.MAX_BYTES // 4 + 1, np.float32)
    store.put(text_digest("big"), [[big]])
    store.put(text_digest("objects"), [[np.array(["a", None], dtype=object)]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{text_digest(n)}.npz" for n in ("region a", "torn"))
    monkeypatch.setattr(references, "TOTAL_BYTES", (tmp_path / f"{key}.npz").stat().st_size)
    store.put(text_digest("region c"), outs)  # the directory is full
    assert store.get(text_digest("region c"), 2) is None
    ReferenceOutputs(None).put(key, outs)  # sharing off: nothing happens
    assert ReferenceOutputs(None).get(key, 2) is None


@pytest.mark.parametrize("mode, calls", [("wrong", 1), ("stale", 2)])
def test_a_wrong_kernel_runs_only_until_its_first_wrong_call(tmp_path, graph, mode, calls):
    from collage_mlir.cost.key import module_text

    relu = next(c for c in single_op(graph, "numpy_test")
                if graph.nodes[c.sub_graph.first].op_type == "Relu")
    worker, channel = _worker({"target": FAULT, "options": {"mode": mode, "on": "Relu"}},
                              tmp_path / "none")
    runs: list = []
    compile_ = worker.backend.compile

    def counting(module):
        kernel = compile_(module)
        run = kernel.run
        kernel.run = lambda inputs: runs.append(1) or run(inputs)
        return kernel

    worker.backend.compile = counting
    worker.measure({"items": [{"id": "0", "text": module_text(relu.sub_graph.extract("r"))}]})
    assert channel.results["0"]["status"] == INVALID
    assert len(runs) == calls  # wrong on its first call: the second input set is not run


def test_remeasure_marks_the_candidates_rows_for_the_next_run(tmp_path, graph):
    cands = single_op(graph, "numpy_test")
    with estimator(tmp_path, [NUMPY]) as est:
        first = est.estimate(cands)
        assert est.remeasure([cands[0]]) == 1
        stale = {r.key for r in est.cache.measurements() if r.stale}
        assert stale == {est.key(cands[0])}
        again = est.estimate(cands)
        assert est.stats.measured == 1 and est.stats.hits == 3
        assert math.isfinite(again[0]) and again[1:] == first[1:]
        assert not any(r.stale for r in est.cache.measurements())



def _indexing_model() -> onnx.ModelProto:
    """Ids index 1000 rows; token types, reshaped, 2 rows; positions (the running sum of a
    mask, times the mask, plus one) 18 rows; a float input of width 4 beside them."""
    h, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(0)
    table = {n: onnx.numpy_helper.from_array(rng.standard_normal((r, 4)).astype(np.float32), n)
             for n, r in (("words", 1000), ("segments", 2), ("places", 18))}
    consts = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("one", 1), ("axis", 1), ("shape", [1, 16]))]
    nodes = [h.make_node("Gather", ["words", "ids"], ["w"]),
             h.make_node("Reshape", ["types", "shape"], ["flat"]),
             h.make_node("Gather", ["segments", "flat"], ["s"]),
             h.make_node("CumSum", ["mask", "axis"], ["c"]),
             h.make_node("Mul", ["c", "mask"], ["m"]),
             h.make_node("Add", ["m", "one"], ["q"]),
             h.make_node("Gather", ["places", "q"], ["e"]),
             h.make_node("Sum", ["w", "s", "e", "x"], ["y"])]
    ints = [h.make_tensor_value_info(n, tp.INT64, [1, 16]) for n in ("ids", "types", "mask")]
    graph = h.make_graph(nodes, "g", [*ints, h.make_tensor_value_info("x", tp.FLOAT,
                                                                       [4, 16, 4])],
                         [h.make_tensor_value_info("y", tp.FLOAT, [4, 16, 4])],
                         [*table.values(), *consts])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_integer_inputs_stay_inside_the_tables_they_index():
    """Token types stay below 2; the mask is 0 or 1 (up to 15, its running sum would index
    row 241 of 18); ids follow the general rule (below every float dim: 4). onnxruntime, the
    reference, runs on them. The narrowing is part of the region's cache key."""
    module = import_onnx(_indexing_model())
    fn = find_function(module)
    assert index_bounds(fn) == {1: 2, 2: 2}
    ids, types, mask, x = make_inputs(fn)
    assert 2 <= ids.max() < 4 and types.max() < 2 and mask.max() < 2
    session = ort.InferenceSession(_indexing_model().SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    session.run(None, {"ids": ids, "types": types, "mask": mask, "x": x})
    with_bounds = function_key(fn).digest
    with patch("collage_mlir.cost.key.index_bounds", lambda fn: {}):
        assert function_key(fn).digest != with_bounds


def test_a_capability_is_asked_again_when_its_backend_revises_it(tmp_path, graph):
    """A backend whose `capability` changes its answer for the same runtime version raises
    `capability_revision`; an answer remembered under the old revision is not reused (an
    old cache kept float64 ops on OpenVINO)."""
    from fault_backend import NumpyTestBackend

    with MeasuringEstimator([NUMPY], cache_path=tmp_path / "c.sqlite", settings=FAST) as est:
        fresh = est.capability(graph, "numpy_test")
        [(key, *_)] = est.cache.capabilities()
        est.cache.put_capability(key, "numpy_test", 0)  # as if an old answer took none
        assert est.capability(graph, "numpy_test") == 0
    with patch.object(NumpyTestBackend, "capability_revision", 1), \
            MeasuringEstimator([NUMPY], cache_path=tmp_path / "c.sqlite", settings=FAST) as est:
        assert est.capability(graph, "numpy_test") == fresh != 0


QUANTIZED_OUTPUTS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,4] x, int8[2,4] a) => (int8[8] q, int8[2,4] s, int8[2,4] p, uint8[2,4] d) {
  sc = Constant<value = float {0.1}>()
  zp = Constant<value = int8 {0}>()
  xq = QuantizeLinear(x, sc, zp)
  sh = Constant<value = int64[1] {8}>()
  q = Reshape(xq, sh)
  s = Add(a, a)
  p = Identity(a)
  d, dsc, dzp = DynamicQuantizeLinear(x)
}
"""


def test_quantized_results_are_those_a_quantizing_op_makes(tmp_path):
    """Through ops that keep values, and through the calls of an outlined model; not
    integer arithmetic, not a given input passed on."""
    import json

    import collage_mlir

    model = onnx.parser.parse_model(QUANTIZED_OUTPUTS)
    module = import_onnx(model)
    assert tensors.quantized_results(find_function(module)) == {0, 3}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"per_op": {"onnxruntime": {"*": 1.0}}}))
    outlined = collage_mlir.compile(model, backends=["onnxruntime"], cost=f"table:{costs}",
                                    verify=False)
    entry = find_function(outlined.module, outlined.plan.entry)
    assert "func.call" in [op.name for op in entry.regions[0].blocks[0].operations]
    assert tensors.quantized_results(entry) == {0, 3}


RECURRENT_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[5,2,4] x, float[1,12,4] w, float[1,12,3] r, int32[2] n, float[2,5,4] t,
   int32[2] m) => (float[1,2,3] y, float[1,2,3] z) {
  y1, y = LSTM<hidden_size = 3>(x, w, r, "", n)
  z1, z = GRU<hidden_size = 3, layout = 1>(t, w, r, "", m)
}
"""


def test_sequence_lengths_are_made_full_not_empty():
    """Drawn as small indices, an RNN's sequence_lens were 0 (below the batch of 2): every
    sequence empty, every backend's outputs zeros, nothing checked (OpenVINO dropping
    LSTM peepholes passed so). They are the sequences' full length, by `layout`, and the
    region's key says so."""
    module = import_onnx(onnx.parser.parse_model(RECURRENT_MODEL))
    fn = find_function(module)
    assert tensors.sequence_lengths(fn) == {3: 5, 5: 5}
    x, _, _, n, _, m = make_inputs(fn)
    assert n.tolist() == [5, 5] and m.tolist() == [5, 5] and n.dtype == np.int32
    with_lengths = function_key(fn).digest
    with patch("collage_mlir.cost.key.sequence_lengths", lambda fn: {}):
        assert function_key(fn).digest != with_lengths
