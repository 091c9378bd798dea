"""The archipelago offered to the search (`search/islands.py`, `driver.carve_islands`): the
bundled demo model (Mamba2 layers and attention) under a cost table, a test double that
prices its nine CumSums dear on OpenVINO and everything else dear on onnxruntime, with a
fixed cost per call, as a CPU's slow scans and per-call overheads do."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import collage_mlir
from collage_mlir.cost.table import TableEstimator
from collage_mlir.driver import ISLANDS
from collage_mlir.search.islands import ISLAND_RULE

CARVED = "carved 9 x CumSum on onnxruntime"
"""The check's name for the carved cover of the demo's scans."""

EXAMPLE = Path(__file__).parents[2] / "examples" / "bamba_tiny.onnx"
BACKENDS = ["onnxruntime", "openvino"]


def table(tmp_path: Path, regions: list | None = None) -> str:
    """`cost=` for the scans' table: every region pays 5 ms a call, so covering the
    nodes around the scans with rule-sized regions costs far more than a few large parts."""
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({
        "regions": regions or [],
        "per_op": {"onnxruntime": {"CumSum": 1e-4, "*": 1.0},
                   "openvino": {"CumSum": 1.0, "*": 1e-4}},
        "per_call": {"onnxruntime": 5e-3, "openvino": 5e-3},
        "transition": {"per_call": 1e-5}}))
    return f"table:{path}"


def parts(model) -> list:
    return [ch for ch in model.partitioning.choices if ch.candidate.rule_name == ISLAND_RULE]


def test_the_search_takes_the_whole_models_archipelago_that_small_regions_cannot_match(
        tmp_path) -> None:
    """Carved out of OpenVINO's whole model, the nine scans leave seven parts around them.
    Measured and offered to the search, they are its pick: the scans on onnxruntime, the
    rest in those seven parts; the report says so. Without them the search covers the
    same nodes with rule-sized regions, at a dearer estimate."""
    carved = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path))
    graph = carved.partitioning.graph
    scans = Counter(ch.candidate.backend for ch in carved.partitioning.choices
                    for i in ch.candidate.sub_graph.nodes if graph.nodes[i].op_type == "CumSum")
    assert scans == {"onnxruntime": 9}
    assert len(parts(carved)) == 7 and {ch.candidate.backend for ch in parts(carved)} == {
        "openvino"}
    (trial,) = [t for t in carved.trials if t.phase == ISLANDS]
    assert trial.kept and trial.what == ("islands onnxruntime: 9 x CumSum out of openvino's "
                                         "whole model")
    assert trial.why.endswith("the search took 7 of the parts")
    plain = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path), islands=False)
    assert not parts(plain) and not [t for t in plain.trials if t.phase == ISLANDS]
    assert plain.estimated_cost > carved.estimated_cost * 1.5


def test_an_archipelago_past_the_slack_after_its_largest_part_is_not_measured_further(
        tmp_path, monkeypatch) -> None:
    """Parts around islands priced at 10 s each (the whole model: ~9 s): the largest share,
    measured alone, puts the carved cover far above the whole model, so the other six are
    never asked for, nothing is added, and the report says why."""
    asked: list = []
    estimate = TableEstimator.estimate

    def counting(self, candidates, progress=None):
        asked.extend(c for c in candidates if c.rule_name == ISLAND_RULE)
        return estimate(self, candidates, progress)

    monkeypatch.setattr(TableEstimator, "estimate", counting)
    model = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path, [
        {"rule": ISLAND_RULE, "cost": 10.0}]))
    assert len(asked) == 1 and asked[0].inside.bit_count() > 90  # the largest share first
    assert not parts(model)
    (trial,) = [t for t in model.trials if t.phase == ISLANDS]
    assert not trial.kept and trial.estimate_s is None
    assert trial.why.startswith("dropped: estimated ") and "with 1 of its 7 parts measured" \
        in trial.why


def test_an_archipelago_whose_small_parts_come_out_dear_is_dropped_before_the_last(
        tmp_path, monkeypatch) -> None:
    """The largest parts measured nearly free, the smaller ones at 20 s each (small parts pay
    a call each): the first batch keeps the cover within the slack, the second (two parts)
    puts it past it, and the last four are never asked for."""
    asked: list = []
    estimate = TableEstimator.estimate

    def dear_small_parts(self, candidates, progress=None):
        got = estimate(self, candidates, progress)
        for k, c in enumerate(candidates):
            if c.rule_name == ISLAND_RULE:
                asked.append(c)
                got[k] = 1e-3 if c.inside.bit_count() > 90 else 20.0
        return got

    monkeypatch.setattr(TableEstimator, "estimate", dear_small_parts)
    model = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path))
    assert len(asked) == 3 and asked[0].inside.bit_count() > 90
    assert not parts(model)
    (trial,) = [t for t in model.trials if t.phase == ISLANDS]
    assert not trial.kept and "with 3 of its 7 parts measured" in trial.why


def test_no_archipelago_is_measured_once_the_measure_budget_is_spent(tmp_path) -> None:
    """A measure budget already spent by the other candidates leaves the parts unmeasured,
    and the report says so."""
    model = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path),
                                 measure_budget_s=1e-9)
    assert not parts(model)
    (trial,) = [t for t in model.trials if t.phase == ISLANDS]
    assert trial.why == "not measured: the measure budget was spent"


def checked(tmp_path, monkeypatch, medians: dict[str, float]):
    """The demo model with its parts priced so that the carved cover lies between the
    search's slack and the check's above the whole model (the search takes a split of
    small regions instead), checked end to end under fixed `medians` (nothing timed)."""
    from test_verify import fake_timings

    from collage_mlir.check import verify

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(medians))
    return collage_mlir.compile(EXAMPLE, BACKENDS, verify=True, refine_budget_s=0, cost=table(
        tmp_path, [{"rule": ISLAND_RULE, "cost": 1.5}]))


def test_a_carved_cover_the_search_did_not_take_is_timed_by_the_check(tmp_path,
                                                                      monkeypatch) -> None:
    """Estimated ~17% above OpenVINO's whole model, the carved cover is not the search's
    pick; the check builds it and times it beside the pick and the whole models, and keeps
    it when it runs fastest: the model runs the scans on onnxruntime, the rest in its seven
    parts, and the report says what the check timed."""
    model = checked(tmp_path, monkeypatch, {"pick": 1.0, "openvino whole": 1.2,
                                            "onnxruntime whole": 2.0, CARVED: 0.5})
    assert model.verdict.kept == CARVED
    assert len(parts(model)) == 7 and len(model.plan.steps) == 16
    (trial,) = [t for t in model.trials if t.phase == ISLANDS]
    assert trial.kept and trial.measured_s == 0.5
    assert "the search took 0 of the parts" in trial.why
    assert trial.why.endswith("the end-to-end check timed it at 500 ms and kept it")


def test_a_carved_cover_slower_end_to_end_leaves_the_pick(tmp_path, monkeypatch) -> None:
    """The same carved cover timed slower than the pick: the pick stays, and the islands
    trial says what the check timed and kept."""
    model = checked(tmp_path, monkeypatch, {"pick": 1.0, "openvino whole": 1.2,
                                            "onnxruntime whole": 2.0, CARVED: 1.1})
    assert model.verdict.kept == "pick" and not parts(model)
    (trial,) = [t for t in model.trials if t.phase == ISLANDS]
    assert not trial.kept and trial.why.endswith("timed it at 1100 ms and kept pick")


EXPANDS = "carved 14 x Expand on onnxruntime"


def two_archipelagos(tmp_path, monkeypatch, medians: dict[str, float]):
    """Scans and Expands both far cheaper on onnxruntime, and a dear call on OpenVINO, so
    that each archipelago lies 19-25% above OpenVINO's whole model, the search's pick, the
    scans' estimate 4.8% below the Expands' (both past ESTIMATE_SLACK, so the two are not
    carved at once); checked end to end under fixed `medians`. The two islands trials,
    scans first."""
    from test_verify import fake_timings

    from collage_mlir.check import verify

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(medians))
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({
        "per_op": {"onnxruntime": {"CumSum": 1e-4, "Expand": 1e-4, "*": 1.0},
                   "openvino": {"CumSum": 1.0, "Expand": 1.3, "*": 1e-4}},
        "per_call": {"onnxruntime": 5e-3, "openvino": 1.0},
        "transition": {"per_call": 0.4}}))
    model = collage_mlir.compile(EXAMPLE, BACKENDS, verify=True, refine_budget_s=0,
                                 cost=f"table:{path}")
    scans, expands = sorted((t for t in model.trials if t.phase == ISLANDS),
                            key=lambda t: "Expand" in t.what)
    assert "9 x CumSum" in scans.what and "14 x Expand" in expands.what
    assert 0.94 < scans.estimate_s / expands.estimate_s < 0.96
    return model, scans, expands


def moved(model) -> Counter:
    graph = model.partitioning.graph
    return Counter(graph.nodes[i].op_type for ch in model.partitioning.choices
                   if ch.candidate.backend == "onnxruntime" for i in ch.candidate.sub_graph.nodes)


def test_of_two_archipelagos_apart_by_estimate_the_cheaper_is_timed(tmp_path,
                                                                    monkeypatch) -> None:
    """Estimates further apart than CARVED_TIE: the check builds and times the cheaper (the
    scans) under its own name and keeps it, faster; the other is left to refinement, and
    says so."""
    from collage_mlir import driver

    monkeypatch.setattr(driver, "CARVED_TIE", 0.02)
    model, scans, expands = two_archipelagos(tmp_path, monkeypatch, {
        "pick": 1.0, "onnxruntime whole": 2.0, CARVED: 0.9})
    assert model.verdict.kept == CARVED and scans.kept and scans.measured_s == 0.9
    assert not expands.kept and expands.measured_s is None
    assert expands.why.endswith("not timed by the end-to-end check: a cheaper carved cover "
                                "was timed")
    assert moved(model) == {"CumSum": 9}


def test_two_archipelagos_tied_by_estimate_are_both_timed(tmp_path, monkeypatch) -> None:
    """Estimates within CARVED_TIE (4.8% apart): the check times both, and keeps the
    dearer by estimate when it runs faster; each trial says what it was timed at."""
    model, scans, expands = two_archipelagos(tmp_path, monkeypatch, {
        "pick": 1.0, "onnxruntime whole": 2.0, CARVED: 0.9, EXPANDS: 0.8})
    assert model.verdict.kept == EXPANDS and expands.kept and expands.measured_s == 0.8
    assert not scans.kept and scans.measured_s == 0.9
    assert scans.why.endswith(f"timed it at 900 ms and kept {EXPANDS}")
    assert moved(model) == {"Expand": 14}


def test_refinement_does_not_build_again_a_carved_cover_the_check_timed_slower(
        tmp_path, monkeypatch) -> None:
    """The check keeps OpenVINO's whole model over the pick and times the carved cover
    slower than it. The archipelago refinement proposes of that whole model is the same
    cover: it is reported with what the check found, and not built again; a cover the check
    timed faster, short of the noise, would be (a second timing is how it lands)."""
    from test_verify import fake_timings

    from collage_mlir.check import refine, verify
    from collage_mlir.check.compare import Timing

    monkeypatch.setattr(verify, "time_side_by_side", fake_timings(
        {"pick": 1.0, "openvino whole": 0.8, "onnxruntime whole": 2.0, CARVED: 0.9}))
    built: list = []
    build = refine.build_neighbour

    def recording(pristine, nb, *args, **kwargs):
        built.append(refine._regions(nb))
        return build(pristine, nb, *args, **kwargs)
    monkeypatch.setattr(refine, "build_neighbour", recording)
    monkeypatch.setattr(refine, "time_side_by_side", lambda runners, inputs, **kw: [
        Timing(n, 1.0, 1.0) for n in runners])
    model = collage_mlir.compile(EXAMPLE, BACKENDS, verify=True, refine_budget_s=1e6,
                                 cost=table(tmp_path, [{"rule": ISLAND_RULE, "cost": 1.5}]))
    assert model.verdict.kept == "openvino whole"
    (settled,) = [t for t in model.trials if t.phase == refine.PHASE
                  and "9 x CumSum" in t.what]
    assert settled.measured_s is None and not settled.kept
    assert settled.why == ("not tried: the end-to-end check timed it at 900 ms, openvino "
                           "whole at 800 ms")
    (carved,) = [t for t in model.trials if t.phase == ISLANDS and "CumSum" in t.what]
    assert carved.measured_s == 0.9
    assert not any(sum(1 for b, _ in regions if b == "onnxruntime") == 9 for regions in built)


def test_only_a_carved_cover_timed_no_faster_than_what_the_check_kept_is_settled() -> None:
    """Timed slower than the kept contender: settled, with both times. Timed faster but not
    kept (within the noise, or not confirmed), untimed, or kept: left to refinement."""
    from types import SimpleNamespace

    from collage_mlir.driver import settled_covers
    from collage_mlir.runtime.report import Verdict

    slower, faster, untimed, kept = (SimpleNamespace(contender=n, cover=n)
                                     for n in ("slower", "faster", "untimed", "kept"))
    verdict = Verdict("pick", {"pick": 1.0, "slower": 1.25, "faster": 0.97})
    assert settled_covers([(c, None) for c in (slower, faster, untimed)], verdict) == [
        ("slower", "the end-to-end check timed it at 1250 ms, pick at 1000 ms")]
    assert settled_covers([(kept, None)], Verdict("kept", {"pick": 1.0, "kept": 0.5})) == []


def test_a_carved_cover_timed_faster_than_what_the_check_kept_goes_to_refinement_first(
        ) -> None:
    """Timed faster than the kept contender without being kept: handed to refinement by
    the check's name for it. Timed slower, untimed, or kept: not."""
    from types import SimpleNamespace

    from collage_mlir.driver import faster_covers
    from collage_mlir.runtime.report import Verdict

    slower, faster, untimed, kept = (SimpleNamespace(contender=n, cover=n.upper())
                                     for n in ("slower", "faster", "untimed", "kept"))
    verdict = Verdict("pick", {"pick": 1.0, "slower": 1.25, "faster": 0.97})
    assert faster_covers([(c, None) for c in (slower, faster, untimed)], verdict) == [
        ("faster", "FASTER")]
    assert faster_covers([(kept, None)], Verdict("kept", {"pick": 1.0, "kept": 0.5})) == []


def test_an_archipelago_leaves_out_the_islands_that_gain_little(tmp_path,
                                                               monkeypatch) -> None:
    """Six of the nine scans priced on OpenVINO just above onnxruntime's price (each gains
    a hundred-thousandth of what the other three gain, less than MIN_SHARE of the best): the
    archipelago carves the three that gain much, as Mamba2's four large scans carved alone
    run faster where all twelve did not. With no share required, all nine are carved."""
    from collage_mlir.dialects.func import public_functions
    from collage_mlir.graph import DataflowGraph
    from collage_mlir.search import islands

    module = collage_mlir.import_onnx(EXAMPLE)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    scans = [n.index for n in graph.op_nodes() if n.op_type == "CumSum"]
    assert len(scans) == 9
    small = [{"backend": "openvino", "nodes": [i], "cost": 5.2e-3} for i in scans[:6]]

    def archipelago() -> str:
        model = collage_mlir.compile(EXAMPLE, BACKENDS, cost=table(tmp_path, small))
        (trial,) = [t for t in model.trials if t.phase == ISLANDS]
        return trial.what
    assert archipelago() == "islands onnxruntime: 3 x CumSum out of openvino's whole model"
    monkeypatch.setattr(islands, "MIN_SHARE", 0.0)
    assert archipelago() == "islands onnxruntime: 9 x CumSum out of openvino's whole model"


def test_two_archipelagos_each_kept_are_carved_together_too(tmp_path) -> None:
    """Scans and Expands both dear on OpenVINO, calls cheap everywhere: each archipelago
    alone comes out below the whole model, so the two carved at once are measured as well
    (the parts between a scan and an Expand are neither's), reported with both op types,
    and the search's pick moves every scan and every Expand to onnxruntime. With the
    Expands carved alone past the slack, nothing is carved together. With calls and
    hand-offs dear enough that each lies 4-5% above the whole model, short of
    ESTIMATE_SLACK, the two are still carved together and measured (a cover of many parts
    measured one by one adds up pessimistic), and, dearer still, not taken."""
    def compiled(expand_on_openvino: float, openvino_call: float, handoff: float = 1e-5):
        path = tmp_path / "costs.json"
        path.write_text(json.dumps({
            "per_op": {"onnxruntime": {"CumSum": 1e-4, "Expand": 1e-4, "*": 1.0},
                       "openvino": {"CumSum": 1.0, "Expand": expand_on_openvino, "*": 1e-4}},
            "per_call": {"onnxruntime": 5e-3, "openvino": openvino_call},
            "transition": {"per_call": handoff}}))
        return collage_mlir.compile(EXAMPLE, BACKENDS, cost=f"table:{path}")

    model = compiled(1.0, 5e-3)
    trials = [t for t in model.trials if t.phase == ISLANDS]
    assert len(trials) == 3
    both = next(t for t in trials if "CumSum" in t.what and "Expand" in t.what)
    assert both.what == ("islands onnxruntime: 14 x Expand, 9 x CumSum out of openvino's "
                         "whole model") and both.kept
    assert both.estimate_s < min(t.estimate_s for t in trials if t is not both)
    graph = model.partitioning.graph
    moved = Counter(graph.nodes[i].op_type for ch in model.partitioning.choices
                    if ch.candidate.backend == "onnxruntime" for i in ch.candidate.sub_graph.nodes)
    assert moved == {"CumSum": 9, "Expand": 14}

    dropped = compiled(0.02, 0.5)  # the Expands gain little, each part costs a dear call
    trials = [t for t in dropped.trials if t.phase == ISLANDS]
    assert len(trials) == 2 and any(t.estimate_s is None for t in trials)

    close = compiled(1.3, 1.0, handoff=0.2)
    trials = [t for t in close.trials if t.phase == ISLANDS]
    whole = close.estimated_cost
    assert len(trials) == 3 and not any(t.kept for t in trials)
    assert all(whole < t.estimate_s < whole * 1.15 for t in trials[:2])
    assert "CumSum" in trials[2].what and "Expand" in trials[2].what
    assert trials[2].estimate_s > max(t.estimate_s for t in trials[:2])
    assert not parts(close)


def test_the_union_takes_the_two_archipelagos_measured_cheapest(tmp_path) -> None:
    """Transposes a little cheaper on onnxruntime, scans and Expands far cheaper, a call
    dear on both: by single ops the 26 Transposes gain most, yet carved out they pay more
    in calls than they save and come out above OpenVINO's whole model. All three are
    measured, and the two measured cheapest, the Expands and the scans, are carved
    together: the search's pick, where a ranking by single ops would have paired the
    Transposes with the Expands."""
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({
        "per_op": {"onnxruntime": {"CumSum": 1e-4, "Expand": 1e-4, "Transpose": 1e-4, "*": 1.0},
                   "openvino": {"CumSum": 1.0, "Expand": 0.9, "Transpose": 0.55, "*": 1e-4}},
        "per_call": {"onnxruntime": 0.3, "openvino": 0.3},
        "transition": {"per_call": 1e-5}}))
    model = collage_mlir.compile(EXAMPLE, BACKENDS, cost=f"table:{path}")
    trials = [t for t in model.trials if t.phase == ISLANDS]
    assert [t.what.split(" out of")[0] for t in trials] == [
        "islands onnxruntime: 26 x Transpose", "islands onnxruntime: 14 x Expand",
        "islands onnxruntime: 9 x CumSum", "islands onnxruntime: 14 x Expand, 9 x CumSum"]
    transposes, *_, both = trials
    whole_ms = float(re.search(r"the whole model ([\d.e+]+);", transposes.why).group(1))
    assert transposes.estimate_s * 1e3 > whole_ms
    assert both.kept and both.estimate_s < min(t.estimate_s for t in trials[:3])
    graph = model.partitioning.graph
    moved = Counter(graph.nodes[i].op_type for ch in model.partitioning.choices
                    if ch.candidate.backend == "onnxruntime" for i in ch.candidate.sub_graph.nodes)
    assert moved == {"CumSum": 9, "Expand": 14}
