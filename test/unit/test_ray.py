"""Measuring on Ray (issue 14): a real local cluster of two simulated nodes, each offering
one unit of the measuring resource, with the numpy test doubles of fault_backend.py and
ray_doubles.py (and onnxruntime where weights must travel).

Ray comes with the `test` extra; a venv without it gets it installed here, and the module
skips with the reason where it cannot be had.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import onnx.numpy_helper
import onnx.parser
import pytest
from ray_doubles import OtherPacedTestBackend, PacedTestBackend
from ray_setup import Cluster, ray
from test_measure import FAST, MODEL, NUMPY

import collage_mlir
from collage_mlir.backends.registry import _extra, register_backend
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.cache import ERROR, OK, MeasurementCache
from collage_mlir.cost.key import host_fingerprint, measurement_key
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.cost.protocol import MeasureSettings, settings_dict
from collage_mlir.cost.ray_executor import BENCH_RESOURCE, RayExecutor
from collage_mlir.cost.remote import (
    BoundBackend,
    Group,
    HostKind,
    Outcome,
    RemoteExecutor,
    RemoteItem,
    store_token,
)
from collage_mlir.driver import entry_graph
from collage_mlir.export.resources import weight_store
from collage_mlir.graph import SubGraph
from collage_mlir.importer import import_onnx

PACED = "ray_doubles:PacedTestBackend"
OTHER = "ray_doubles:OtherPacedTestBackend"
KILLING = "ray_doubles:TaskKillingBackend"
ENV_REPORTING = "ray_doubles:EnvReportingBackend"


@pytest.fixture(scope="module")
def cluster():
    """Two simulated nodes on this machine, one CPU and one measuring slot each."""
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "resources": {BENCH_RESOURCE: 1},
                                "include_dashboard": False})
    c.add_node(num_cpus=1, resources={BENCH_RESOURCE: 1})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def executor(cluster):
    with RayExecutor() as ex:
        yield ex


@pytest.fixture
def paced():
    for cls in (PacedTestBackend, OtherPacedTestBackend):
        register_backend(cls)
    yield
    for cls in (PacedTestBackend, OtherPacedTestBackend):
        _extra.pop(cls.name, None)


def _single_ops(est: MeasuringEstimator, graph, backends):
    return [CandidatePartition(SubGraph(graph, 1 << n.index), b, "single-op")
            for n in graph.op_nodes() for b in backends]


class NoHandOffs(MeasuringEstimator):
    """A measuring estimator whose hand-offs cost nothing (a test double: hand-off
    experiments run in the driver whatever the executor, and take most of a minute here)."""

    def transition_cost(self, src_backend: str, dst_backend: str, nbytes: int) -> float:
        return 0.0


STEADY = MeasureSettings(warmup=1, min_runs=5, max_runs=30, budget_s=0.05, cold_bytes=0)
"""Enough calls that a busy machine's preemptions do not move a paced kernel's median."""


def test_a_partition_measured_on_ray_is_the_local_one(tmp_path, executor, paced):
    """Same tiny model, same doubles (paced so that the best cover is known: the fast
    backend refuses Sigmoid), measured here and on Ray: the same regions on the same
    backends, and the Ray run's rows carry this machine's fingerprint (both simulated nodes
    are this machine) under the keys the local run used (every candidate measured: which
    ones the lower bound leaves out rides on timings)."""
    backends = {PACED: {"per_call_ms": 6.0, "refuse": "Sigmoid"},
                OTHER: {"per_call_ms": 1.0, "per_op_ms": 12.0}}
    picks, keys = [], []
    for where, name in ((None, "local"), (executor, "ray")):
        cache = tmp_path / f"{name}.sqlite"
        with NoHandOffs(backends, cache_path=cache, reference=NUMPY, settings=STEADY,
                        timeout_s=20, executor=where) as est:
            model = collage_mlir.compile(onnx.parser.parse_model(MODEL),
                                         backends=["paced_test", "paced_other"],
                                         estimator=est, max_depth=2, verify=False,
                                         prune=False)
        picks.append([(c.backend, sorted(c.sub_graph.nodes))
                      for c in model.partitioning.candidates])
        with MeasurementCache(cache) as c:
            rows = c.measurements()
        keys.append({m.key for m in rows})
        assert {m.host for m in rows} == {host_fingerprint()}
        assert all(m.status == OK or "refuses Sigmoid" in m.error for m in rows)
    assert picks[0] == picks[1]
    assert [(b, len(nodes)) for b, nodes in picks[1]] == [
        ("paced_test", 2), ("paced_other", 1), ("paced_test", 2)]
    assert keys[0] == keys[1]
    assert {t.backend for t in executor.tasks} == {"paced_test", "paced_other"}


def test_a_killed_ray_worker_costs_a_resend_then_an_error(tmp_path, executor):
    """The backend kills the Ray worker running its task when it compiles the Sigmoid
    region: killed once, the task's unreported regions are sent again and measured; killed
    on every try, they are errors naming the loss, and the rest of the run is measured."""
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = entry_graph(module)
    for times, name in ((1, "once"), (2, "twice")):
        marks = tmp_path / name
        marks.mkdir()
        backends = {NUMPY: {}, KILLING: {"times": times, "marks": str(marks)}}
        with MeasuringEstimator(backends, cache_path=tmp_path / f"{name}.sqlite",
                                reference=None, settings=FAST, timeout_s=20,
                                executor=executor) as est:
            before = executor.requeued
            cands = _single_ops(est, graph, ["numpy_test", "task_killing"])
            costs = dict(zip(((c.backend, c.sub_graph.first) for c in cands),
                             est.estimate(cands), strict=True))
            reasons = {(c.backend, c.sub_graph.first): est.reason(c) for c in cands}
        assert len(list(marks.glob("kill-*"))) == times
        assert executor.requeued > before
        assert all(math.isfinite(v) for (b, _), v in costs.items() if b == "numpy_test")
        killed = {k for k, v in costs.items() if not math.isfinite(v)}
        sigmoid = ("task_killing", next(n.index for n in graph.op_nodes()
                                        if n.op_type == "Sigmoid"))
        if times == 1:
            assert not killed
        else:
            assert sigmoid in killed and all(b == "task_killing" for b, _ in killed)
            assert all(reasons[k].startswith(f"{ERROR}: lost 2 times on Ray") and
                       "WorkerCrashedError" in reasons[k] for k in killed)


@pytest.mark.parametrize("queued", [False, True], ids=["streamed", "queued"])
def test_one_measuring_task_per_node(tmp_path, cluster, queued):
    """Four groups on two nodes of one measuring slot each: both nodes measure, and no two
    tasks overlap on one node (by the node's own clock, start to end). Results come back
    streamed, or through a Ray queue as they do through Ray Client."""
    with RayExecutor(queued=queued) as executor:
        _four_groups_on_two_nodes(tmp_path, executor)


def _four_groups_on_two_nodes(tmp_path, executor) -> None:
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = entry_graph(module)
    with MeasuringEstimator([PACED], cache_path=tmp_path / "c.sqlite", reference=None) as est:
        text = est.region_text(SubGraph(graph, 1 << graph.op_nodes()[0].index))
        config = est._worker_config(est.backends["paced_test"])
    config.backend = {"target": PACED, "options": {"per_call_ms": 5.0}}
    config.settings = settings_dict(FAST)
    executor.bind({"paced_test": config.backend}, config.sys_path)
    groups = [Group("paced_test", config, False,
                    [RemoteItem(f"g{g}i{i}", text, ("MatMul",)) for i in range(2)])
              for g in range(4)]
    seen = []
    start = len(executor.tasks)
    executor.measure(groups, seen.append)
    assert sorted(o.key for o in seen) == sorted(i.key for g in groups for i in g.items)
    assert all(o.result["status"] == "ok" for o in seen)
    tasks = executor.tasks[start:]
    assert len(tasks) == 4 and len({t.node for t in tasks}) == 2
    for node in {t.node for t in tasks}:
        spans = sorted((t.started, t.ended) for t in tasks if t.node == node)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_a_node_that_cannot_read_the_weight_store_is_sent_it(tmp_path, executor, monkeypatch):
    """The region's text names a weight store at a path the nodes cannot read: the node
    asks, the driver sends the store's files once, the node measures from its copy."""
    w = onnx.numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((64, 64), np.float32), "w")
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,64] x) => (float[1,64] y) { y = MatMul(x, w) }""")
    model.graph.initializer.append(w)
    module = import_onnx(model)
    with weight_store(module) as store:
        graph = entry_graph(module)
        with MeasuringEstimator(["onnxruntime"], cache_path=tmp_path / "c.sqlite", reference=None,
                                settings=FAST) as est:
            text = est.region_text(SubGraph(graph, 1 << graph.op_nodes()[0].index))
            info = est.backends["onnxruntime"]
            config = est._worker_config(info)
        elsewhere = str(tmp_path / "not-on-the-nodes")
        assert f'"{store.path}"' in text
        text = text.replace(f'"{store.path}"', f'"{elsewhere}"')
        real = RayExecutor._ship
        monkeypatch.setattr(RayExecutor, "_ship",
                            lambda self, path: real(self, str(store.path)))
        executor.bind({"onnxruntime": info.spec}, ())
        token = store_token(store.path)
        local = f"/tmp/collage-store-{token.replace(':', '-')}"
        shutil.rmtree(local, ignore_errors=True)
        seen = []
        executor.measure([Group("onnxruntime", config, False,
                                [RemoteItem("k", text, ("MatMul",))], {elsewhere: token})],
                         seen.append)
    (outcome,) = seen
    assert outcome.result["status"] == "ok", outcome.result
    assert store_token(local) == token
    shutil.rmtree(local, ignore_errors=True)


def test_measuring_on_ray_with_no_measuring_node_says_how_to_start_one(cluster):
    """Asking for a resource no node offers is a one-line error naming the flag."""
    import collage_mlir.cost.ray_executor as rex

    with RayExecutor() as ex:
        ex.bench_nodes = lambda: []
        with pytest.raises(collage_mlir.CollageError, match=rf"ray start --resources='{{\"{rex.BENCH_RESOURCE}"):
            ex.bind({"numpy_test": {"target": NUMPY, "options": {}}}, ())


class FakeRemoteExecutor(RemoteExecutor):
    """A test double: 'measures' every region at 1 ms on a machine whose fingerprint it
    makes up (`bound` at bind, `measured` in each outcome)."""

    def __init__(self, bound: str, measured: str, hangs_on: str = "") -> None:
        self.bound, self.measured, self.hangs_on = bound, measured, hangs_on
        self.sent: list[str] = []

    def bind(self, specs, sys_path):
        return HostKind(self.bound, {n: BoundBackend(s, "v1", "threads=7")
                                     for n, s in specs.items()})

    def measure(self, groups, on_outcome):
        for g in groups:
            for item in g.items:
                self.sent.append(item.key)
                result = ({"status": "timeout", "error": "timed out after 20 s"}
                          if self.hangs_on in item.op_types else
                          {"status": "ok", "median": 1e-3, "p90": 1e-3, "spread": 0.0,
                           "runs": 5, "error": ""})
                on_outcome(Outcome(g.backend, item.key, result, self.measured, "v1",
                                   "threads=7"))


def test_rows_are_keyed_by_the_machine_that_measured_them(tmp_path):
    """Keys carry the measuring machines' fingerprint and backend build: a local run on
    the same cache does not take their numbers; a result from a machine of another kind
    than the one bound is cached under its own key and is no answer for this run."""
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = entry_graph(module)
    cache = tmp_path / "c.sqlite"
    with MeasuringEstimator([NUMPY], cache_path=cache, reference=None, settings=FAST,
                            executor=FakeRemoteExecutor("kind-a", "kind-a")) as est:
        cands = _single_ops(est, graph, ["numpy_test"])
        assert est.estimate(cands) == [1e-3] * len(cands)
        assert est.key(cands[0]) == measurement_key(
            est.region(cands[0].sub_graph), "numpy_test", "v1", "threads=7", host="kind-a",
            method=FAST.method)
    with MeasurementCache(cache) as c:
        assert {(m.host, m.version, m.options) for m in c.measurements()} == {
            ("kind-a", "v1", "threads=7")}
    with MeasuringEstimator([NUMPY], cache_path=cache, reference=None, settings=FAST) as est:
        est.estimate(cands)
        assert est.stats.hits == 0 and est.stats.measured == est.stats.regions
    with MeasuringEstimator([NUMPY], cache_path=tmp_path / "d.sqlite", reference=None,
                            settings=FAST,
                            executor=FakeRemoteExecutor("kind-a", "kind-b")) as est:
        assert all(math.isinf(c) for c in est.estimate(cands))
        assert "measured on a machine of another kind (kind-b" in est.reason(cands[0])
    with MeasurementCache(tmp_path / "d.sqlite") as c:
        assert {m.host for m in c.measurements()} == {"kind-b"}


def test_backends_on_ray_get_explicit_threads_and_no_omp_limit(tmp_path, executor):
    """Bound on a node, onnxruntime's spec names its thread count (the node's cores); the
    measuring worker a Ray task starts does not inherit Ray's OMP_NUM_THREADS=1."""
    import os

    kind = executor.bind({"onnxruntime": {"target": "onnxruntime", "options": {}}}, ())
    assert kind.backends["onnxruntime"].spec["options"] == {"threads": os.cpu_count()}
    assert kind.backends["onnxruntime"].options.startswith(f"threads={os.cpu_count()},")
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = entry_graph(module)
    with MeasuringEstimator([ENV_REPORTING], cache_path=tmp_path / "c.sqlite",
                            reference=None) as est:
        text = est.region_text(SubGraph(graph, 1 << graph.op_nodes()[0].index))
        config = est._worker_config(est.backends["env_reporting"])
    executor.bind({"env_reporting": config.backend}, config.sys_path)
    seen = []
    executor.measure([Group("env_reporting", config, False,
                            [RemoteItem("k", text, ("MatMul",))])], seen.append)
    assert "OMP_NUM_THREADS=None" in seen[0].result["error"]


def test_measure_on_names_local_or_ray_and_nothing_else(capsys):
    """--measure-on takes local, ray, ray://HOST:PORT or ray:HOST:PORT; anything else is a
    usage error naming the value, before anything starts."""
    from collage_mlir.cost.executor import check_executor, make_executor
    from collage_mlir.tools.cli import main

    for good in ("local", "ray", "ray://head:10001", "ray:head:6379", None):
        check_executor(good)
    assert make_executor("local") is None and make_executor(None) is None
    with pytest.raises(collage_mlir.CollageError, match="measure on 'rai'"):
        check_executor("rai")
    with pytest.raises(SystemExit):
        main(["measure", "m.onnx", "--measure-on", "spark://x"])
    assert "measure on 'spark://x': expected 'local', 'ray'" in capsys.readouterr().err


def test_a_hang_measured_remotely_skips_its_op_type_for_the_rest_of_the_run(tmp_path):
    """A remote timeout on Sigmoid: the estimator's later calls do not send regions holding
    Sigmoid to the executor; they are errors saying why."""
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = entry_graph(module)
    fake = FakeRemoteExecutor("kind-a", "kind-a", hangs_on="Sigmoid")
    with MeasuringEstimator([NUMPY], cache_path=tmp_path / "c.sqlite", reference=None,
                            settings=FAST, executor=fake) as est:
        singles = _single_ops(est, graph, ["numpy_test"])
        assert sum(math.isinf(c) for c in est.estimate(singles)) == 1
        ops = graph.op_nodes()  # a chain: each op feeds the next
        pair = [CandidatePartition(SubGraph(graph, (1 << a.index) | (1 << b.index)),
                                   "numpy_test", "pair")
                for a, b in zip(ops, ops[1:], strict=False)]
        sent = len(fake.sent)
        costs = est.estimate(pair)
        holding = [c for c in pair if "Sigmoid" in
                   {graph.nodes[i].op_type for i in c.sub_graph.nodes}]
        assert holding and len(fake.sent) - sent == len(pair) - len(holding)
        assert all(math.isinf(costs[pair.index(c)]) for c in holding)
        assert est.reason(holding[0]) == (
            "error: skipped: numpy_test hung on Sigmoid earlier in this run")


def test_an_address_where_nothing_answers_is_refused_at_once():
    """`ray.init` retried such an address for about 14 minutes, printing Ray's warnings."""
    import socket

    import collage_mlir.cost.ray_executor as rex

    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(collage_mlir.CollageError, match=rf"at {address}: nothing answers "
                                                             r"there \(Connection refused\)"):
            rex._require_answer(address)
    with socket.socket() as s:  # something listening: left to ray.init
        s.bind(("127.0.0.1", 0))
        s.listen()
        rex._require_answer(f"127.0.0.1:{s.getsockname()[1]}")
