"""The end-to-end check: the search's pick against whole-model alternatives (check/verify.py).

The decision wiring is tested with injected timings (no wall clock); one test runs the real
timing and checks only what it records.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import light_model_path
from iree.compiler import ir
from onnx import TensorProto, helper, numpy_helper

import collage_mlir
from collage_mlir.backends.registry import available_backends
from collage_mlir.check import verify
from collage_mlir.check.compare import Timing, whole_model_runner
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects.collage import WEIGHTS
from collage_mlir.tensors import max_abs_diff
from collage_mlir.tensors import model_inputs as random_inputs

GRAPH_BACKENDS = [b for b in ("onnxruntime", "openvino") if b in available_backends()]
needs_two = pytest.mark.skipif(len(GRAPH_BACKENDS) < 2, reason="needs onnxruntime and openvino")


class SplitFavouringEstimator(CostEstimator):
    """Test double: one-op regions cost 1 µs, larger regions 1.2 µs per op, no hand-off
    cost — so the search splits every op into its own region, while the whole model is
    estimated only 20% dearer (inside verify.MARGIN)."""

    def estimate(self, candidates, progress=None):
        return [1e-6 if len(c.sub_graph.nodes) == 1 else 1.2e-6 * len(c.sub_graph.nodes)
                for c in candidates]

    def transition_cost(self, src_backend, dst_backend, nbytes):
        return 0.0


def relu_chain(n: int = 12) -> ir.Module:
    nodes = [helper.make_node("Relu" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"])
             for k in range(n)]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return collage_mlir.import_onnx(model)


def fake_timings(medians: dict[str, float], again: float | None = None, calls: list | None = None,
                 rebuilt: dict[str, float] | None = None):
    """A stand-in for time_side_by_side that reports fixed medians (and runs nothing); the
    pick's second timing gets `again` (default: the pick's median), a contender's second
    build its `rebuilt` entry (default: its median). `calls` collects the contender names
    of each call."""
    table = {**medians, verify.AGAIN: medians[verify.PICK] if again is None else again,
             **{verify.rebuilt(n): (rebuilt or {}).get(n, t) for n, t in medians.items()}}

    def timer(runners, inputs, rounds=20, warmup=3, inner=1, seed=0):
        assert set(runners) <= set(table)
        if calls is not None:
            calls.append(sorted(runners))
        return [Timing(n, table[n], table[n]) for n in runners]
    return timer


def compile_chain(backends, **kwargs):
    """The chain under SplitFavouringEstimator, checked; no refinement (check/refine.py has
    its own tests) unless asked for."""
    kwargs.setdefault("refine_budget_s", 0)
    return collage_mlir.compile(relu_chain(), backends=backends,
                                estimator=SplitFavouringEstimator(), verify=True, **kwargs)


def test_whole_model_kept_when_it_runs_faster(monkeypatch):
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 2e-3, "onnxruntime whole": 1e-3}))
    model = compile_chain(["onnxruntime"])
    assert model.verdict.kept == "onnxruntime whole"
    assert [s.backend for s in model.plan.steps] == ["onnxruntime"]
    assert len(model.report_rows) == 1 and "kept onnxruntime whole" in model.report()
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    assert np.allclose(model.run({"t0": x})[0], _chain_ref(x))


@pytest.mark.skipif("openvino" not in available_backends(), reason="needs openvino")
def test_a_kept_whole_model_with_stored_weights_saves_after_partitioning(monkeypatch, tmp_path):
    """The check's kept model is built from a copy of the model made while its large
    weights were in the partition's scratch store. After `compile` returns, that store is
    gone: the model names no store, and saving it (OpenVINO compiles the region again, its
    probe's blob being gone too) reads the weights from the IR."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32) / 8  # 16 KiB: kept in the store
    nodes = [helper.make_node("MatMul", ["t0", "W"], ["t1"]),
             *(helper.make_node("Relu" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"])
               for k in range(1, 6))]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("t6", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(w, "W")])
    module = collage_mlir.import_onnx(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 2e-3, "openvino whole": 1e-3}))
    model = collage_mlir.compile(module, backends=["openvino"],
                                 estimator=SplitFavouringEstimator(), verify=True,
                                 refine_budget_s=0)
    assert model.verdict.kept == "openvino whole"
    assert WEIGHTS not in model.mlir
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    want = -np.maximum(-np.maximum(-(x @ w), 0), 0)

    again = collage_mlir.load(model.save(tmp_path / "saved"))
    np.testing.assert_allclose(again.run([x])[0], want, rtol=1e-4, atol=1e-5)


def test_a_replaced_pick_keeps_its_regions_in_the_record(monkeypatch, tmp_path):
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 2e-3, "onnxruntime whole": 1e-3}))
    model = compile_chain(["onnxruntime"])
    lost = model.verdict.lost
    assert [r.ops for r in lost.rows] == [1] * 12 and {r.backend for r in lost.rows} == {
        "onnxruntime"}
    assert lost.estimated_cost == pytest.approx(12e-6)
    assert "the pick's 12 region(s) on onnxruntime, estimated 0.012 ms" in model.report()
    data = json.loads(model.report(format="json"))
    assert len(data["verdict"]["lost_pick"]["regions"]) == 12
    again = collage_mlir.load(model.save(tmp_path / "m"))
    assert json.loads(again.report(format="json"))["verdict"] == data["verdict"]
    # the greedy baseline of the one backend is its whole model, at the search's price
    (baseline,) = data["baselines"]["items"]
    assert baseline["name"] == "partition_for_onnxruntime"
    assert baseline["estimated_s"] == pytest.approx(12 * 1.2e-6)


def _chain_ref(x: np.ndarray, n: int = 12) -> np.ndarray:
    for k in range(n):
        x = np.maximum(x, 0) if k % 2 else -x
    return x


def test_split_kept_when_it_runs_faster(monkeypatch):
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 1e-3, "onnxruntime whole": 2e-3}))
    model = compile_chain(["onnxruntime"])
    assert model.verdict.kept == verify.PICK
    assert len(model.plan.steps) == 12
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    assert np.allclose(model.run([x])[0], _chain_ref(x))


def test_tie_goes_to_the_whole_model(monkeypatch):
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 1e-3, "onnxruntime whole": 1e-3}))
    assert compile_chain(["onnxruntime"]).verdict.kept == "onnxruntime whole"


@needs_two
def test_alternatives_are_cheapest_first_and_within_margin(monkeypatch):
    seen = {}

    def timer(runners, inputs, **kw):
        seen.update(runners)
        return [Timing(n, 1.0 if n in (verify.PICK, verify.AGAIN) else 2.0, 2.0)
                for n in runners]

    monkeypatch.setattr(verify, "time_side_by_side", timer)
    model = compile_chain(GRAPH_BACKENDS)
    wholes = {f"{b} whole" for b in GRAPH_BACKENDS}  # each could be the incumbent: two builds
    assert set(seen) == {verify.PICK, verify.AGAIN} | wholes | {verify.rebuilt(n) for n in wholes}
    assert model.verdict.kept == verify.PICK


def whole_favouring(tmp_path, ov_factor: float = 1.1) -> str:
    """A table where the whole function as one region is cheapest on every backend, and
    onnxruntime's whole model is estimated a little cheaper than openvino's."""
    costs = tmp_path / "whole.json"
    costs.write_text(json.dumps({"per_op": {"onnxruntime": {"*": 1.0},
                                            "openvino": {"*": ov_factor}},
                                 "per_call": {"onnxruntime": 0.5, "openvino": 0.5}}))
    return str(costs)


def test_no_check_with_table_costs_or_without_an_alternative(tmp_path):
    costs = whole_favouring(tmp_path)
    model = collage_mlir.compile(relu_chain(), backends=["onnxruntime"], cost=f"table:{costs}")
    assert model.verdict is None and len(model.plan.steps) == 1
    # table costs replay a decision: no timing, even when they split the model
    model = collage_mlir.compile(relu_chain(), backends=["onnxruntime"],
                                 estimator=SplitFavouringEstimator())
    assert model.verdict is None and len(model.plan.steps) == 12
    # one region, and no other backend to run the whole model: nothing to compare
    from collage_mlir.cost.table import TableEstimator

    model = collage_mlir.compile(relu_chain(), backends=["onnxruntime"], verify=True,
                                 estimator=TableEstimator.from_json(costs))
    assert model.verdict is None


@needs_two
@pytest.mark.parametrize("medians,kept", [((1.0, 2.0), "pick"), ((2.0, 1.0), "openvino whole"),
                                          ((1.0, 1.0), "pick")])
def test_a_one_region_pick_is_checked_against_other_backends(tmp_path, monkeypatch,
                                                              medians, kept):
    """Two backends' whole models estimated within the noise of each other: the faster
    one end to end is kept; on a tie, the pick."""
    from collage_mlir.cost.table import TableEstimator

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: medians[0], "openvino whole": medians[1]}))
    model = collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                                 refine_budget_s=0,
                                 estimator=TableEstimator.from_json(whole_favouring(tmp_path)))
    assert model.verdict.kept == kept
    want = "onnxruntime" if kept == verify.PICK else "openvino"
    assert [s.backend for s in model.plan.steps] == [want]
    (row,) = model.report_rows
    assert row.runner_up == ("openvino" if want == "onnxruntime" else "onnxruntime")
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    assert np.allclose(model.run([x])[0], _chain_ref(x))


def one_region_pick(tmp_path, monkeypatch, timer):
    """relu_chain's one-region onnxruntime pick checked against openvino whole under `timer`."""
    from collage_mlir.cost.table import TableEstimator

    monkeypatch.setattr(verify, "time_side_by_side", timer)
    return collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                                refine_budget_s=0,
                                estimator=TableEstimator.from_json(whole_favouring(tmp_path)))


@needs_two
def test_a_contender_faster_only_within_the_noise_leaves_the_pick(tmp_path, monkeypatch):
    """The pick's two instances land 10% apart: openvino whole 5% under the pick is noise,
    and timed again alone with the pick it is 8% behind, so the pick stays."""
    calls = []
    among_all = fake_timings({verify.PICK: 1.0, "openvino whole": 0.95}, again=1.1,
                             calls=calls)
    alone = fake_timings({verify.PICK: 1.0, "openvino whole": 1.08}, calls=calls)
    model = one_region_pick(tmp_path, monkeypatch, lambda runners, inputs, **kw: (
        alone if len(runners) == 2 else among_all)(runners, inputs, **kw))
    assert model.verdict.kept == verify.PICK
    assert model.verdict.noise == pytest.approx(0.1)
    assert calls[1] == sorted([verify.PICK, "openvino whole"])  # the two again, alone
    assert "noise ±10.0%" in model.report()
    data = json.loads(model.report(format="json"))
    assert data["verdict"]["noise"] == pytest.approx(0.1)
    again = collage_mlir.load(model.save(tmp_path / "m"))
    assert again.verdict.noise == pytest.approx(0.1)


@needs_two
def test_a_winner_must_win_again_timed_alone_with_the_pick(tmp_path, monkeypatch):
    """openvino whole 20% under the pick among all contenders, but slower when the two are
    timed alone: the pick stays."""
    calls = []
    first = fake_timings({verify.PICK: 1.0, "openvino whole": 0.8})
    second = fake_timings({verify.PICK: 1.0, "openvino whole": 1.05})

    def timer(runners, inputs, **kw):
        calls.append(sorted(runners))
        return (first if len(calls) == 1 else second)(runners, inputs, **kw)

    model = one_region_pick(tmp_path, monkeypatch, timer)
    assert calls[1] == sorted([verify.PICK, "openvino whole"])
    assert model.verdict.kept == verify.PICK


def test_a_split_pick_within_the_noise_of_a_whole_model_gives_way(monkeypatch):
    """Twelve regions 1% faster than one: inside the 2% floor, the simpler model is kept."""
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 0.99e-3, "onnxruntime whole": 1e-3}))
    model = compile_chain(["onnxruntime"])
    assert model.verdict.kept == "onnxruntime whole" and len(model.plan.steps) == 1


def test_a_split_pick_must_beat_the_faster_build_of_the_whole_model(monkeypatch):
    """The split runs 5% under the whole model's first build, but the second build of that
    whole model is faster still: the 6% spread between the builds is noise, the whole model
    stays."""
    calls = []
    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 0.95e-3, "onnxruntime whole": 1e-3}, calls=calls,
        rebuilt={"onnxruntime whole": 0.94e-3}))
    model = compile_chain(["onnxruntime"])
    assert calls[0] == sorted([verify.PICK, verify.AGAIN, "onnxruntime whole",
                               verify.rebuilt("onnxruntime whole")])
    assert model.verdict.kept == "onnxruntime whole" and len(model.plan.steps) == 1
    assert model.verdict.noise == pytest.approx(0.06 / 0.94)
    assert model.verdict.timings == {verify.PICK: 0.95e-3, "onnxruntime whole": 0.94e-3}


def test_a_split_pick_faster_than_both_builds_is_kept(monkeypatch):
    """Beating the faster build by more than the builds' spread: the split stays."""
    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 0.9e-3, "onnxruntime whole": 1e-3},
        rebuilt={"onnxruntime whole": 0.97e-3}))
    model = compile_chain(["onnxruntime"])
    assert model.verdict.kept == verify.PICK and len(model.plan.steps) == 12


@needs_two
def test_a_one_region_pick_is_timed_as_two_builds(tmp_path, monkeypatch):
    """openvino whole 5% under the pick's first build, 1% over its second: the pick stays,
    and the confirmation would have timed the faster build."""
    calls = []
    model = one_region_pick(tmp_path, monkeypatch, fake_timings(
        {verify.PICK: 1.0, "openvino whole": 0.95}, calls=calls,
        rebuilt={verify.PICK: 0.94}))
    assert calls[0] == sorted([verify.PICK, verify.AGAIN, verify.rebuilt(verify.PICK),
                               "openvino whole"])
    assert model.verdict.kept == verify.PICK and len(calls) == 1


@needs_two
def test_a_far_dearer_whole_model_is_timed_all_the_same(tmp_path, monkeypatch):
    """Estimated 2x the pick, the other backend's whole model is still timed: estimates
    taken on a busy machine can be off by that much."""
    from collage_mlir.cost.table import TableEstimator

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 2.0, "openvino whole": 1.0}))
    model = collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                                 refine_budget_s=0,
                                 estimator=TableEstimator.from_json(
                                     whole_favouring(tmp_path, ov_factor=2.0)))
    assert model.verdict.kept == "openvino whole"
    assert [s.backend for s in model.plan.steps] == ["openvino"]


def test_real_check_times_every_contender_and_saves_the_verdict(tmp_path):
    model = compile_chain(["onnxruntime"], verify_budget_s=0.2)
    assert set(model.verdict.timings) == {verify.PICK, "onnxruntime whole"}
    assert all(t > 0 for t in model.verdict.timings.values())
    assert "verify" in model.timings and "measure" in model.timings
    assert model.verdict.rounds == verify.rounds_for([0.0], 0.2) == 15  # µs kernels
    assert "15 rounds" in model.verdict.summary()
    loaded = collage_mlir.load(model.save(tmp_path / "out"))
    assert loaded.verdict.kept == model.verdict.kept
    assert loaded.verdict.timings == pytest.approx(model.verdict.timings)
    assert loaded.verdict.rounds == 15


def test_rounds_fit_the_budget():
    assert verify.rounds_for([0.1, 0.1], budget_s=3.0) == 15
    assert verify.rounds_for([0.5, 0.5], budget_s=3.0) == 5
    assert verify.rounds_for([0.1, 0.2], budget_s=2.5) == 8
    assert verify.rounds_for([float("nan"), 1e-4], budget_s=1.0) == 15


def test_with_no_budget_given_a_slow_models_check_gets_its_full_rounds():
    """A 250 ms model against one whole model (four contenders a round: the pick twice, its
    rival, a second build): a fixed 3 s leaves the minimum of rounds, the default budget
    scales with one run of the pick up to the maximum; a fast model keeps the floor."""
    contenders = [0.25] * 4
    assert verify.rounds_for(contenders, budget_s=3.0) == 5
    assert verify.rounds_for(contenders, budget_s=verify.default_budget(0.25)) == 15
    assert verify.default_budget(1e-3) == verify.DEFAULT_BUDGET_S


@pytest.mark.parametrize("given, expected", [(None, 60 * 0.25), (3.0, 3.0)])
def test_the_check_times_within_the_given_budget_or_one_scaled_to_the_pick(
        monkeypatch, given, expected):
    budgets = []
    monkeypatch.setattr(verify, "_one_run_s", lambda run, inputs: 0.25)
    monkeypatch.setattr(verify, "rounds_for", lambda estimates, budget_s: budgets.append(
        budget_s) or 5)
    monkeypatch.setattr(verify, "time_side_by_side",
                        fake_timings({verify.PICK: 2e-3, "onnxruntime whole": 1e-3}))
    model = compile_chain(["onnxruntime"], verify_budget_s=given)
    assert budgets == [pytest.approx(expected)]
    assert model.verdict.rounds == 5


@needs_two
def test_verified_mix_on_alexnet_matches_onnxruntime(monkeypatch, tmp_path):
    """A table that mixes backends on alexnet, with the whole-model answer winning the
    check: the rebuilt model is one region and still computes the model."""
    table = {"per_op": {"onnxruntime": {"Conv": 3.0, "*": 1.0},
                        "openvino": {"Conv": 1.0, "*": 2.0}}}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(table))
    from collage_mlir.cost.table import TableEstimator

    path = light_model_path("bvlc_alexnet")
    monkeypatch.setattr(verify, "MARGIN", 100.0)
    monkeypatch.setattr(verify, "time_side_by_side", lambda runners, inputs, **kw: [
        Timing(n, 1.0 if n == "openvino whole" else 2.0, 2.0) for n in runners])
    model = collage_mlir.compile(path, backends=GRAPH_BACKENDS, max_depth=1, verify=True,
                                 refine_budget_s=0,  # the check's verdict is under test
                                 estimator=TableEstimator.from_json(str(costs)))
    assert model.verdict.kept == "openvino whole"
    assert [s.backend for s in model.plan.steps] == ["openvino"]
    original = collage_mlir.import_onnx(path)
    inputs = random_inputs(original, seed=2)
    assert max_abs_diff(model.run(inputs), whole_model_runner(original, "onnxruntime")(inputs)) \
        < 1e-4


def test_hand_offs_are_costed_before_the_search(monkeypatch):
    """Every backend pair's transition is asked for in the measure phase, so a measuring
    estimator's transition experiment is not billed to the search."""
    import importlib

    search_mod = importlib.import_module("collage_mlir.driver")

    asked: list[tuple[str, str]] = []
    seen_at_search: list[set] = []

    class Recording(SplitFavouringEstimator):
        def transition_cost(self, src_backend, dst_backend, nbytes):
            asked.append((src_backend, dst_backend))
            return 0.0

    real_search = search_mod.search

    def spy(*args, **kwargs):
        seen_at_search.append(set(asked))
        return real_search(*args, **kwargs)

    monkeypatch.setattr(search_mod, "search", spy)
    names = ["onnxruntime", *GRAPH_BACKENDS[1:]]
    collage_mlir.compile(relu_chain(), backends=names, estimator=Recording(), verify=False)
    assert seen_at_search and seen_at_search[0] >= {(a, b) for a in names for b in names}


@needs_two
def test_an_alternative_that_fails_here_is_not_a_contender(tmp_path, monkeypatch):
    """A whole model that cannot run in this process drops out of the check; the pick stays."""
    from collage_mlir.cost.table import TableEstimator

    def broken(module, backend):
        def run(arrays):
            raise RuntimeError(f"{backend} broke")
        return run

    monkeypatch.setattr(verify, "whole_model_runner", broken)
    model = collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                                 refine_budget_s=0,
                                 estimator=TableEstimator.from_json(whole_favouring(tmp_path)))
    assert model.verdict is None  # nothing left to compare with
    assert [s.backend for s in model.plan.steps] == ["onnxruntime"]


def test_picks_are_timed_against_the_cheapest_whole_models_however_dear():
    from collage_mlir.candidate import CandidatePartition
    from collage_mlir.driver import entry_graph
    from collage_mlir.graph import SubGraph
    from collage_mlir.search.partitioning import Choice, Partitioning

    graph = entry_graph(relu_chain(2))
    first, second = (n.index for n in graph.op_nodes())
    whole = [CandidatePartition(SubGraph(graph, graph.op_bits), b, "whole")
             for b in ("onnxruntime", "openvino")]
    ops = [CandidatePartition(SubGraph(graph, 1 << i), "openvino", "op") for i in (first, second)]
    candidates, costs = whole + ops, [30.0, 40.0, 1.0, 1.0]  # whole models 15-20x the pick
    split = Partitioning(graph, tuple(Choice(c, 1.0) for c in ops), 2.0)
    alternatives = verify.whole_alternatives(graph, candidates, costs, split, None)
    assert [a.choices[0].candidate.backend for a in alternatives] == ["onnxruntime", "openvino"]
    one = Partitioning(graph, (Choice(whole[0], 1.0),), 1.0)  # one region: the cheapest other
    alternatives = verify.whole_alternatives(graph, candidates, [1.0, 40.0, 1.0, 1.0], one, None)
    assert [a.choices[0].candidate.backend for a in alternatives] == ["openvino"]


# -- cached costs the check finds far off are measured again ---------------------------------


def test_a_whole_model_timed_far_from_its_cached_cost_has_drifted():
    """Drift is a whole model whose timed / cached ratio stands apart from the others'; all
    of them off alike is the method (cold rows, a warmer chain), which measuring again
    cannot change. Alone, a whole model's own ratio decides."""
    from types import SimpleNamespace

    from collage_mlir.runtime.report import Verdict

    def choice(backend, cost, inside=0b111):
        return SimpleNamespace(candidate=SimpleNamespace(backend=backend, inside=inside),
                               cost=cost)

    def whole(backend, cost):
        return SimpleNamespace(choices=[choice(backend, cost)])

    graph = SimpleNamespace(op_bits=0b111)
    split = SimpleNamespace(graph=graph, choices=[choice("ort", 0.1, 0b1),
                                                  choice("ov", 0.1, 0b110)])
    alts = [whole("openvino", 0.010), whole("iree", 0.020), whole("tvm", float("inf"))]
    verdict = Verdict("pick", {verify.PICK: 0.5, "openvino whole": 0.0066,
                               "iree whole": 0.0130, "tvm whole": 0.5})
    assert verify.drifted(verdict, split, alts) == []  # both 0.65x: the method; inf: no cost
    verdict.timings["iree whole"] = 0.0090  # 0.45x against openvino's 0.66x: apart
    assert [(c.backend, cached, timed) for c, cached, timed
            in verify.drifted(verdict, split, alts)] == [("openvino", 0.010, 0.0066),
                                                          ("iree", 0.020, 0.0090)]
    three = [*alts[:2], whole("ort", 0.030)]
    verdict.timings.update({"iree whole": 0.0130, "ort whole": 0.030})  # 0.66, 0.65, 1.0
    assert [c.backend for c, *_ in verify.drifted(verdict, split, three)] == ["ort"]
    one = SimpleNamespace(graph=graph, choices=[choice("ort", 0.2)])  # the pick, whole
    assert [c.backend for c, *_ in verify.drifted(verdict, one, alts[2:])] == ["ort"]
    verdict.timings[verify.PICK] = 0.21
    assert verify.drifted(verdict, one, alts[2:]) == []


class RemeasureRecorder(CostEstimator):
    """Test double: the table's costs; records what it is asked to measure again."""

    def __init__(self, table) -> None:
        from collage_mlir.cost.table import TableEstimator

        self.table = TableEstimator.from_json(table)
        self.asked: list[list] = []

    def estimate(self, candidates, progress=None):
        return self.table.estimate(candidates, progress)

    def transition_cost(self, src_backend, dst_backend, nbytes):
        return self.table.transition_cost(src_backend, dst_backend, nbytes)

    def remeasure(self, candidates):
        self.asked.append(list(candidates))
        return len(candidates)


@needs_two
def test_the_check_has_a_drifted_whole_model_measured_again(tmp_path, monkeypatch, capsys):
    est = RemeasureRecorder(whole_favouring(tmp_path))
    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 1.0, "openvino whole": 1e-3}, again=1.0))
    collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                         refine_budget_s=0, estimator=est)
    asked = [c.backend for cands in est.asked for c in cands]
    assert "openvino" in asked and len(asked) == len(set(asked))  # (the pick's too: far off)
    assert "collage: openvino's whole model ran 1.000 ms end to end, its cached cost says" \
        in capsys.readouterr().err


@needs_two
def test_a_cache_that_cannot_mark_leaves_the_run_standing(tmp_path, monkeypatch, capsys):
    from collage_mlir.errors import CollageError

    class Unmarkable(RemeasureRecorder):
        def remeasure(self, candidates):
            raise CollageError("c.sqlite: the cache is read-only")

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 1.0, "openvino whole": 1e-3}, again=1.0))
    model = collage_mlir.compile(relu_chain(), backends=GRAPH_BACKENDS, verify=True,
                                 refine_budget_s=0,
                                 estimator=Unmarkable(whole_favouring(tmp_path)))
    assert model.verdict is not None
    assert "not marked to be measured again: c.sqlite: the cache is read-only" \
        in capsys.readouterr().err


def test_a_carved_challenger_is_never_the_incumbent(monkeypatch):
    """A split pick, the whole model and a carved cover of three regions: the incumbent is
    the whole model, so a carved cover 1% slower than the pick cannot stay by default, and
    one faster than both beyond the noise is kept."""
    runners = {verify.PICK: None, "onnxruntime whole": None, "carved": None}
    regions = {verify.PICK: 12, "onnxruntime whole": 1, "carved": 3}
    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 1.0, "onnxruntime whole": 1.5, "carved": 1.01}))
    assert verify.fastest(runners, [], 5, regions).kept == verify.PICK
    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {verify.PICK: 1.0, "onnxruntime whole": 1.5, "carved": 0.5}))
    assert verify.fastest(runners, [], 5, regions).kept == "carved"


def main_and_alone(main: dict[str, float], alone: dict[str, float], calls: list,
                   again: float = 1.0):
    """A stand-in for time_side_by_side reporting `alone` when exactly its contenders are
    timed, else `main` (read at each call), the pick's second timing `again` times its
    first and second builds as their first; `calls` collects (names, rounds) per call."""
    def timer(runners, inputs, rounds=20, warmup=3, inner=1, seed=0):
        calls.append((sorted(runners), rounds))
        table = alone if set(runners) == set(alone) else {
            **main, verify.AGAIN: main[verify.PICK] * again,
            **{verify.rebuilt(n): t for n, t in main.items()}}
        return [Timing(n, table[n], table[n]) for n in runners]
    return timer


def test_two_whole_models_within_the_noise_are_timed_again_alone(monkeypatch):
    """A split pick and two whole models, onnxruntime's 0.5% ahead of OpenVINO's among all
    contenders (within the noise floor): the two are timed again alone, OpenVINO's wins
    there and is the incumbent, and the pick, within the noise of both, does not replace
    it. The two timings are weighed together. Two whole models far apart are not timed
    again."""
    main = {verify.PICK: 0.995, "onnxruntime whole": 1.0, "openvino whole": 1.005}
    alone = {"onnxruntime whole": 1.04, "openvino whole": 1.0}
    calls: list = []
    monkeypatch.setattr(verify, "time_side_by_side", main_and_alone(main, alone, calls))
    runners = dict.fromkeys(main)
    regions = {verify.PICK: 4, "onnxruntime whole": 1, "openvino whole": 1}
    assert verify.fastest(runners, [], 5, regions).kept == "openvino whole"
    assert calls[-1] == (sorted(alone), verify.CONFIRM_ROUNDS)
    # both timings count: 1.5% behind among all, 0.5% ahead alone is still behind
    main["openvino whole"], alone["onnxruntime whole"] = 1.015, 1.005
    assert verify.fastest(runners, [], 5, regions).kept == "onnxruntime whole"
    main["openvino whole"] = 1.2
    calls.clear()
    assert verify.fastest(runners, [], 5, regions).kept == "onnxruntime whole"
    assert len(calls) == 1


def test_a_whole_model_faster_than_a_one_region_pick_within_the_noise_is_timed_again(
        monkeypatch):
    """A one-region pick and onnxruntime's whole model 3% faster, within the noise of a
    run whose pick builds differ by 5%: the two are timed again alone, and the faster over
    both timings is kept (onnxruntime's, ahead again; the pick, when it is 5% ahead
    alone). A whole model slower than the pick is not timed again."""
    main = {verify.PICK: 1.0, "onnxruntime whole": 0.97}
    alone = {verify.PICK: 1.0, "onnxruntime whole": 0.98}
    calls: list = []
    monkeypatch.setattr(verify, "time_side_by_side",
                        main_and_alone(main, alone, calls, again=1.05))
    runners = dict.fromkeys(main)
    regions = {verify.PICK: 1, "onnxruntime whole": 1}
    verdict = verify.fastest(runners, [], 5, regions)
    assert verdict.noise > 0.03 and verdict.kept == "onnxruntime whole"
    assert calls[-1] == (sorted(alone), verify.CONFIRM_ROUNDS)
    alone["onnxruntime whole"] = 1.05
    assert verify.fastest(runners, [], 5, regions).kept == verify.PICK
    main["onnxruntime whole"] = 1.01
    calls.clear()
    assert verify.fastest(runners, [], 5, regions).kept == verify.PICK
    assert len(calls) == 1


def spread_timings(medians: dict[str, float], calls: list):
    """A stand-in for time_side_by_side whose every call of a contender took its fixed
    time (its median, fastest and slowest call alike; second instances as their first);
    `calls` collects (contender names, rounds) per call."""
    def timer(runners, inputs, rounds=20, warmup=3, inner=1, seed=0):
        calls.append((sorted(runners), rounds))
        return [Timing(n, t, t, t, t) for n in runners
                for t in [medians[verify._base(n)]]]
    return timer


SLOW_RACE = {verify.PICK: 0.1, "openvino whole": 0.11, "onnxruntime whole": 0.3,
             "carved": 0.1}
"""A split pick, two whole models, a carved cover: onnxruntime's whole model 3x the pick."""
RACE_REGIONS = {verify.PICK: 9, "openvino whole": 1, "onnxruntime whole": 1, "carved": 5}


def test_a_contender_far_slower_than_the_fastest_is_timed_no_further(monkeypatch):
    """The budget buys 5 rounds for all seven timings a round; screened, onnxruntime's
    whole model (3x the pick) and its second build are out of the race, and the other five
    get the rounds the budget buys them (0.52 s a round: 9 in 5 s)."""
    calls = []
    monkeypatch.setattr(verify, "time_side_by_side", spread_timings(SLOW_RACE, calls))
    runners = dict.fromkeys(SLOW_RACE)
    twins = {"openvino whole": None, "onnxruntime whole": None}
    verdict = verify.fastest(runners, [], 5, RACE_REGIONS, twins, budget_s=5.0)
    ort = ["onnxruntime whole", verify.rebuilt("onnxruntime whole")]
    assert calls[0] == (sorted([*SLOW_RACE, verify.AGAIN, *map(verify.rebuilt, twins)]),
                        verify.SCREEN_ROUNDS)
    assert calls[1] == (sorted(set(calls[0][0]) - set(ort)), 9) and verdict.rounds == 9
    assert verdict.out_of_race == ["onnxruntime whole"]
    assert verdict.timings["onnxruntime whole"] == 0.3  # its screening median, reported
    assert "onnxruntime whole 300.000 ms (out of the race)" in verdict.summary()
    assert verdict.kept in (verify.PICK, "carved")


def test_the_fastest_whole_model_stays_in_the_race(monkeypatch):
    """Both whole models are far slower than the split pick, but the faster of them is the
    incumbent the pick must beat: it is timed to the end, the other is out."""
    calls = []
    medians = {verify.PICK: 0.1, "openvino whole": 0.2, "onnxruntime whole": 0.3}
    monkeypatch.setattr(verify, "time_side_by_side", spread_timings(medians, calls))
    verdict = verify.fastest(dict.fromkeys(medians), [], 5, RACE_REGIONS, budget_s=5.0)
    assert "openvino whole" in calls[1][0] and verdict.out_of_race == ["onnxruntime whole"]
    assert verdict.kept == verify.PICK  # 0.1 against the incumbent's 0.2, confirmed


def test_contenders_within_the_race_or_with_the_rounds_they_need_are_not_screened(
        monkeypatch):
    """No contender past OUT_OF_RACE: all timed again, in the rounds their screening times
    buy. Rounds at the most already (a fast model): no screening at all."""
    calls = []
    medians = {**SLOW_RACE, "onnxruntime whole": 0.14}
    monkeypatch.setattr(verify, "time_side_by_side", spread_timings(medians, calls))
    verdict = verify.fastest(dict.fromkeys(medians), [], 5, RACE_REGIONS, budget_s=5.0)
    assert calls[1][0] == sorted([*medians, verify.AGAIN]) and not verdict.out_of_race
    calls.clear()
    verify.fastest(dict.fromkeys(SLOW_RACE), [], verify.MAX_ROUNDS, RACE_REGIONS,
                   budget_s=5.0)
    assert [rounds for _, rounds in calls[:1]] == [verify.MAX_ROUNDS]
