"""The JSON report (`report(format="json")`, `--json`) against its schema and the partition it
describes, its survival through save, and the explain page drawn from it."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest
from explain_model import BACKENDS, COSTS, MODELS, ROOT, SvgPage, mixed_model, need_dot

import collage_mlir
from collage_mlir.errors import CollageError
from collage_mlir.runtime.explain import backend_colours, explain_html
from collage_mlir.runtime.model import MANIFEST_DIGEST, _manifest_digest, describe
from collage_mlir.runtime.report import (
    SCHEMA_PATH,
    SCHEMA_VERSION,
    BaselineRow,
    LostPick,
    Record,
    Rejection,
    ReportRow,
    Trial,
    Verdict,
    _why,
    report_data,
)

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (test extra) not installed")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return mixed_model(tmp_path_factory.mktemp("explain"))


@pytest.fixture(scope="module")
def schema() -> dict:
    s = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(s)
    return s


def test_report_matches_schema_and_partition(mixed, schema):
    model, _ = mixed
    data = json.loads(model.report(format="json"))
    jsonschema.validate(data, schema)
    assert data["schema_version"] == SCHEMA_VERSION
    assert [r["name"] for r in data["regions"]] == [s.callee for s in model.plan.steps]
    assert [r["backend"] for r in data["regions"]] == [s.backend for s in model.plan.steps]
    assert data["backends"]["used"] == sorted(BACKENDS)
    assert data["backends"]["considered"] == BACKENDS
    assert set(data["phases_s"]) >= {"import", "annotate", "hand-offs", "measure", "search",
                                     "compile"}
    ops = [op for r in data["regions"] for op in r["ops"]]
    assert [op["id"] for op in ops] == list(range(len(ops))) == list(range(data["totals"]["ops"]))
    for op in ops:  # every op reads earlier ops only: ids follow execution order
        for t in op["inputs"]:
            if t["source"].startswith("op:"):
                assert int(t["source"][3:]) < op["id"]
    rows = {r.region: r for r in model.report_rows}
    for region in data["regions"]:
        assert region["estimated_s"] == rows[region["name"]].estimated_cost
        assert (region["runner_up"] or {}).get("backend", "") == rows[region["name"]].runner_up
        assert {op["region"] for op in region["ops"]} == {region["name"]}
        assert len(region["ops"]) == rows[region["name"]].ops


def test_handoffs_follow_the_transition_model(mixed):
    model, _ = mixed
    data = report_data(model.module, model.record())
    expected = sum(len(set(s.args)) for s in model.plan.steps) + len(set(model.plan.outputs))
    assert len(data["handoffs"]) == expected
    into = [h for h in data["handoffs"] if h["to"] == data["regions"][1]["name"]]
    assert into and into[0]["from"] == data["regions"][0]["name"]
    assert into[0]["bytes"] == 4 * math.prod(into[0]["shape"])
    totals = data["totals"]
    assert totals["handoffs_s"] == pytest.approx(model.partitioning.transition_cost)
    assert totals["kernels_s"] + totals["handoffs_s"] == pytest.approx(totals["estimated_s"])
    # the table prices 0.05 s per hand-off between two backends, none with the host
    crossings = [h for h in data["handoffs"] if "host" not in (h["from"], h["to"])
                 and h["from_backend"] != h["to_backend"]]
    assert totals["handoffs_s"] == pytest.approx(0.05 * len(crossings))


def test_an_input_named_across_lines_matches_the_schema(mixed, schema):
    """An input whose name holds a newline made a report that failed its own schema."""
    model, _ = mixed
    data = json.loads(model.report(format="json"))
    text = json.dumps(data)
    assert '"input:' in text
    jsonschema.validate(json.loads(text.replace('"input:', '"input:line\\nbreak ')), schema)


def test_hand_offs_priced_as_the_search_priced_them(mixed, schema):
    from collage_mlir.tools.report_out import hand_off_prices

    model, _ = mixed
    data = report_data(model.module, model.record(),
                       transition=hand_off_prices(f"table:{COSTS}", None))
    jsonschema.validate(data, schema)
    costs = [h["cost_s"] for h in data["handoffs"]]
    assert None not in costs
    assert math.fsum(costs) == pytest.approx(data["totals"]["handoffs_s"])
    for region in data["regions"]:
        assert region["handoffs_in_s"] == pytest.approx(math.fsum(
            h["cost_s"] for h in data["handoffs"] if h["to"] == region["name"]))
    assert report_data(model.module, model.record())["regions"][1]["handoffs_in_s"] is None


def test_hand_offs_priced_from_the_measuring_cache(mixed, tmp_path):
    from collage_mlir.backends.registry import get_backend
    from collage_mlir.cost.cache import OK, MeasurementCache, Transition
    from collage_mlir.cost.transition import transition_key
    from collage_mlir.tools.report_out import hand_off_prices

    model, _ = mixed
    ort, ov = (get_backend(b).version for b in ("onnxruntime", "openvino"))
    cache = MeasurementCache(tmp_path / "c.sqlite")
    cache.put_transition(Transition(transition_key("onnxruntime", ort, "openvino", ov),
                                    "onnxruntime", "openvino", "h", OK, 1e-4, 1e-9))
    cache.close()
    price = hand_off_prices("measure", str(tmp_path / "c.sqlite"))
    assert price("onnxruntime", "openvino", 1000) == pytest.approx(1e-4 + 1e-6)
    assert math.isnan(price("openvino", "onnxruntime", 1000))  # not in the cache: unknown
    assert price("host", "openvino", 1000) == 0.0
    data = report_data(model.module, model.record(), transition=price)
    crossing = [h for h in data["handoffs"]
                if (h["from_backend"], h["to_backend"]) == ("onnxruntime", "openvino")]
    assert crossing and all(h["cost_s"] == pytest.approx(1e-4 + 1e-9 * h["bytes"])
                            for h in crossing)
    assert any(h["cost_s"] is None for h in data["handoffs"])


def test_profile_adds_measured_times_and_errors(mixed, schema):
    model, _ = mixed
    measured = {s.callee: 0.5 for s in model.plan.steps}
    data = json.loads(model.report(measured, format="json", rounds=3))
    jsonschema.validate(data, schema)
    profile = data["profile"]
    assert profile["rounds"] == 3
    assert profile["measured_total_s"] == pytest.approx(0.5 * len(measured))
    assert profile["error_s"] == pytest.approx(model.estimated_cost - 0.5 * len(measured))
    first = data["regions"][0]
    assert first["measured_s"] == 0.5
    assert first["error_s"] == pytest.approx(first["estimated_s"] - 0.5)
    assert first["error_rel"] == pytest.approx((first["estimated_s"] - 0.5) / 0.5)
    assert profile["region_error_median_abs_rel"] == pytest.approx(
        statistics.median(abs(r["error_rel"]) for r in data["regions"]))
    assert json.loads(model.report(format="json"))["profile"] is None
    text = model.report(measured)
    assert "additive error: regions median |err|" in text
    assert f"over {len(measured)}; total" in text


def test_the_run_records_its_greedy_baselines(mixed, schema):
    model, saved = mixed
    data = json.loads(model.report(format="json"))
    items = {b["name"]: b for b in data["baselines"]["items"]}
    assert set(items) == {f"partition_for_{b}" for b in BACKENDS}
    for b in BACKENDS:  # each backend here runs every op: its baseline is its whole model
        assert items[f"partition_for_{b}"]["ops"] == {b: data["totals"]["ops"]}
        assert items[f"partition_for_{b}"]["estimated_s"] >= model.estimated_cost
    assert data["baselines"]["apparent_loss_estimated_s"] <= 0
    assert "greedy baselines (estimated" in model.report()
    assert json.loads(json.dumps(report_data(*describe(saved))["baselines"])) == \
        data["baselines"]


def test_saved_model_keeps_what_the_report_needs(mixed):
    model, saved = mixed
    module, record = describe(saved)
    assert report_data(module, record) == report_data(model.module, model.record())
    names = [op["name"] for r in report_data(module, record)["regions"] for op in r["ops"]]
    assert sum(map(bool, names)) > len(names) // 2, "ONNX node names lost in the saved model"
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["backends_considered"] == BACKENDS
    assert manifest["transition_cost"] == pytest.approx(model.partitioning.transition_cost)


def test_verdict_and_left_out_survive_the_manifest(mixed, schema):
    model, _ = mixed
    record = model.record()
    lost = [ReportRow("f_onnxruntime_0", "onnxruntime", 3, "Conv, Relu x2", 1e-3, spread=0.125),
            ReportRow("f_openvino_1", "openvino", 2, "LRN x2", 0.5e-3)]
    record.verdict = Verdict("openvino whole", {"pick": 2e-3, "openvino whole": 1.5e-3,
                                                "iree whole": 6e-3},
                             LostPick(lost, 1.75e-3), noise=0.03125, rounds=12,
                             out_of_race=["iree whole"])
    record.rejected = [Rejection("openvino", "compile error: LRN", 3, ["LRN", "Relu"])]
    record.timings = {"measure": 1.25}
    record.skipped = {"iree": "iree.runtime is not installed"}
    record.baselines = [BaselineRow("partition_for_openvino", ["openvino", "onnxruntime"], 2e-3,
                                    1e-4, 2, {"openvino": 20, "onnxruntime": 4}),
                        BaselineRow("partition_for_iree", ["iree", "onnxruntime"], None, None,
                                    0, {}, "no backend of iree supports LRN node 3")]
    again = Record.from_manifest(json.loads(json.dumps(record.to_manifest())))
    assert again == record
    data = report_data(model.module, again)
    jsonschema.validate(data, schema)
    assert data["verdict"] == {"kept": "openvino whole", "pick_kept": False, "contenders": [
        {"name": "pick", "median_s": 2e-3, "out_of_race": False},
        {"name": "openvino whole", "median_s": 1.5e-3, "out_of_race": False},
        {"name": "iree whole", "median_s": 6e-3, "out_of_race": True}],
        "noise": 0.03125, "rounds": 12, "lost_pick": {"estimated_s": 1.75e-3, "regions": [
            {"name": "f_onnxruntime_0", "backend": "onnxruntime", "ops": 3,
             "op_types": "Conv, Relu x2", "estimated_s": 1e-3, "spread": 0.125},
            {"name": "f_openvino_1", "backend": "openvino", "ops": 2, "op_types": "LRN x2",
             "estimated_s": 0.5e-3, "spread": None}]}}
    assert data["backends"]["skipped"] == [{"backend": "iree",
                                            "reason": "iree.runtime is not installed"}]
    baselines = data["baselines"]
    assert [b["name"] for b in baselines["items"]] == ["partition_for_openvino",
                                                       "partition_for_iree"]
    assert baselines["best"] == "partition_for_openvino"
    # the search's pick (1.75 ms, lost to openvino whole) against the best baseline, 2 ms:
    # the kept model's estimate does not stand in for what the search picked
    assert baselines["apparent_loss_estimated_s"] == pytest.approx(1.75e-3 - 2e-3)
    assert baselines["items"][1]["estimated_s"] is None
    text = describe_text(model, again)
    assert "the pick's 2 region(s) on onnxruntime, openvino, estimated 1.750 ms" in text
    assert "partition_for_iree: no estimate, 0 region(s) ()" in text
    assert "backends skipped: iree: iree.runtime is not installed" in text
    assert data["left_out"] == [{"backend": "openvino", "reason": "compile error: LRN",
                                 "count": 3, "op_types": ["LRN", "Relu"]}]
    assert data["phases_s"] == {"measure": 1.25}
    assert {r["won_by"] for r in data["regions"]} == {"check"}
    assert "pick 2.000 ms" in data["regions"][0]["why"]
    # refinement then kept a neighbour: its regions were all said to be the check's
    # whole-model region
    again.trials = [Trial("refine", "incumbent", 1.5e-3, 1.5e-3, False),
                    Trial("refine", "flip region 0 to onnxruntime", 1.4e-3, 1.2e-3, True)]
    data = report_data(model.module, again)
    jsonschema.validate(data, schema)
    assert {r["won_by"] for r in data["regions"]} == {"refine"}
    again.trials.append(Trial("refine", "islands x", math.inf, math.nan, False, "cannot run"))
    text = json.dumps(report_data(model.module, again), allow_nan=False)  # no Infinity
    assert json.loads(text)["trials"][-1]["estimate_s"] is None
    manifest = json.dumps(again.to_manifest(), allow_nan=False)
    assert Record.from_manifest(json.loads(manifest)).trials[-1].measured_s is None
    assert "flip region 0 to onnxruntime ran faster" in data["regions"][0]["why"]


def describe_text(model, record: Record) -> str:
    """The text report of `model` with `record` in place of its own."""
    shown = model.with_record(verdict=record.verdict, candidates=[],
                              backends_considered=record.backends_considered,
                              timings=record.timings, rejected=record.rejected)
    shown.baseline_rows, shown.skipped = record.baselines, record.skipped
    return shown.report()


@pytest.mark.parametrize("key, value", [("transition_cost", "x"), ("timings", {"a": "b"}),
                                        ("op_names", "x"), ("rejected", [1]),
                                        ("report", [{"region": 1}]),
                                        ("baselines", [{"name": "x"}]),
                                        ("baselines", [{"name": "x", "order": [],
                                                        "estimated_cost": "1", "regions": 0,
                                                        "transition_cost": None}]),
                                        ("verdict", {"kept": "pick", "lost": {"rows": 1}})])
def test_a_malformed_record_is_one_line(mixed, tmp_path, key, value):
    _, saved = mixed
    damaged = tmp_path / "m"
    shutil.copytree(saved, damaged)
    manifest = dict(json.loads((damaged / "manifest.json").read_text()), **{key: value})
    manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)  # signed: the record is checked
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CollageError, match=r"manifest.json: malformed"):
        describe(damaged)


def test_text_report_is_the_default_and_unknown_formats_fail(mixed):
    model, _ = mixed
    text = model.report()
    assert text == model.report(format="text")
    assert text.splitlines()[0].split()[:3] == ["region", "backend", "ops"]
    with pytest.raises(CollageError, match="report format 'xml'"):
        model.report(format="xml")


def test_why_names_hand_offs_when_the_runner_up_kernel_was_cheaper():
    assert _why("openvino", 2e-3, {"backend": "onnxruntime", "estimated_s": 1e-3})[0] == "hand-offs"
    assert _why("openvino", 1e-3, {"backend": "onnxruntime", "estimated_s": 2e-3})[0] == "kernel"
    assert _why("openvino", 1e-3, None)[0] is None


@pytest.mark.parametrize("layout", ["layered", "dot"])
def test_explain_page_colours_every_op_and_embeds_the_report(mixed, layout):
    if layout == "dot":
        need_dot()
    model, _ = mixed
    data = report_data(model.module, model.record())
    page = explain_html(data, layout)
    parser = SvgPage()
    parser.feed(page)
    colours = backend_colours(data)
    backend = {op["id"]: r["backend"] for r in data["regions"] for op in r["ops"]}
    assert {f"op-{k}" for k in backend} == set(parser.fills)
    for k, b in backend.items():
        assert parser.fills[f"op-{k}"].lower() == colours[b].lower()
    assert json.loads(parser.data)["report"] == data
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "page loads from the network"
    assert parser.clusters == [f"rg-{r['index']}" for r in data["regions"]]


def test_names_holding_placeholders_or_script_openers_leave_the_page_whole(mixed):
    """A model named "x%SCRIPT%" got the page's script pasted into its data, and a node
    named "a<!--<script>" made the data block swallow the script: both pages showed
    nothing."""
    model, _ = mixed
    data = report_data(model.module, model.record())
    data["model"]["entry"] = "x%SCRIPT% %DATA% %SVG%"
    data["regions"][0]["ops"][0]["name"] = "a<!--<script></script>"
    page = explain_html(data, "layered")
    parser = SvgPage()
    parser.feed(page)
    assert json.loads(parser.data)["report"] == data
    assert page.count("<script") == 3 and "<!--" not in page  # the error hook, data, script
    assert "<title>collage_mlir partition: x%SCRIPT% %DATA% %SVG%</title>" in page


def test_model_explain_writes_the_page_of_its_report(mixed, tmp_path):
    model, _ = mixed
    measured = {s.callee: 1e-3 for s in model.plan.steps}
    page = model.explain(tmp_path / "sub" / "p.html", measured, rounds=4)
    parser = SvgPage()
    parser.feed(page.read_text())
    assert json.loads(parser.data)["report"] == report_data(model.module, model.record(),
                                                             measured, 4)
    saved = model.save(tmp_path / "saved")  # the command line refuses a page in there
    with pytest.raises(CollageError, match="inside the saved model"):
        model.explain(saved / "p.html")
    assert not (saved / "p.html").exists()


def test_two_thousand_ops_open_on_the_region_view():
    n = 2000
    regions = [{"name": f"main_b{k % 2}_{k}", "index": k, "backend": f"b{k % 2}",
                "op_types": "Add", "estimated_s": 1e-3, "runner_up": None, "won_by": None,
                "why": "", "measured_s": None, "error_s": None, "error_rel": None,
                "ops": [{"id": i, "type": "Add", "name": f"n{i}", "region": f"main_b{k % 2}_{k}",
                         "inputs": [{"source": f"op:{i - 1}" if i else "input:x", "shape": [1],
                                     "dtype": "f32"}] + ([{"source": f"op:{i - 7}",
                                                           "shape": [1], "dtype": "f32"}]
                                                         if i >= 7 else []),
                         "outputs": [{"shape": [1], "dtype": "f32"}]}
                        for i in range(k * 20, k * 20 + 20)]}
               for k in range(n // 20)]
    data = {"model": {"entry": "main", "inputs": [{"name": "x", "shape": [1], "dtype": "f32"}],
                      "outputs": [{"name": "y", "source": f"op:{n - 1}", "shape": [1],
                                   "dtype": "f32"}]},
            "backends": {"considered": ["b0", "b1"], "used": ["b0", "b1"]},
            "totals": {"regions": n // 20, "ops": n, "estimated_s": 0.1, "kernels_s": 0.1,
                       "handoffs_s": 0.0, "by_backend": {}},
            "regions": regions, "handoffs": [], "verdict": None, "phases_s": {},
            "left_out": [], "profile": None}
    page = explain_html(data)  # over DOT_MAX_OPS: the built-in layout, and a region view
    parser = SvgPage()
    parser.feed(page)
    assert len(parser.fills) == n
    assert parser.region_nodes == [f"rn-{k}" for k in range(n // 20)]
    assert parser.clusters == [f"rg-{k}" for k in range(n // 20)]
    assert '"views":["regions","ops"]' in page and "layered (ops)" in page


def test_cli_partition_json_then_explain(tmp_path, schema, capsys):
    from collage_mlir.tools.cli import main

    if len(BACKENDS) < 2:
        pytest.skip("needs onnxruntime and openvino")
    from conftest import light_model_path

    out, report = tmp_path / "out", tmp_path / "r.json"
    assert main(["partition", light_model_path("squeezenet"), "--backends", ",".join(BACKENDS),
                 "--cost", f"table:{COSTS}", "--max-depth", "2", "-o", str(out),
                 "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    jsonschema.validate(data, schema)
    assert data["totals"]["regions"] > 1
    page, again = tmp_path / "p.html", tmp_path / "again.json"
    assert main(["explain", str(out), "-o", str(page), "--json", str(again),
                 "--cost", f"table:{COSTS}"]) == 0
    assert json.loads(again.read_text()) == data
    assert None not in [h["cost_s"] for h in data["handoffs"]]
    assert "report-data" in page.read_text()
    assert main(["explain", str(tmp_path / "missing"), "-o", str(page)]) == 1
    assert "missing: not found" in capsys.readouterr().err
    # prices of another cost than the model's search do not add up: shown without them
    assert main(["explain", str(out), "-o", str(page), "--json", str(again),
                 "--cost", f"table:{COSTS.with_name('explain_costs.json')}"]) == 0
    assert "do not add up" in capsys.readouterr().out
    assert {h["cost_s"] for h in json.loads(again.read_text())["handoffs"]} == {None}
    # one file for both: the JSON overwrote the page, rc 0; '-o -' wrote a file named '-'
    capsys.readouterr()
    assert main(["explain", str(out), "-o", str(page), "--json", str(page)]) == 1
    assert "the page and the report need two files" in capsys.readouterr().err
    assert main(["explain", str(out), "-o", str(page), "--max-depth", "1",
                 "--input-shape", "x=1x2"]) == 1  # silently ignored
    assert ("a saved model is drawn as it was partitioned; --input-shape, --max-depth only "
            "applies to a model file") in capsys.readouterr().err
    assert main(["explain", str(out), "-o", "-", "--cost", f"table:{COSTS}"]) == 0
    shown = capsys.readouterr()
    assert shown.out.startswith("<!DOCTYPE html>") and "report-data" in shown.out
    assert not (Path.cwd() / "-").exists()


def test_cli_explain_partitions_a_model_file_first(tmp_path, schema):
    from conftest import light_model_path

    from collage_mlir.tools.cli import main

    if len(BACKENDS) < 2:
        pytest.skip("needs onnxruntime and openvino")
    page, report = tmp_path / "p.html", tmp_path / "r.json"
    assert main(["explain", light_model_path("squeezenet"), "--backends", ",".join(BACKENDS),
                 "--cost", f"table:{COSTS}", "--max-depth", "2", "-o", str(page),
                 "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    jsonschema.validate(data, schema)
    assert data["backends"]["used"] == sorted(BACKENDS)
    assert math.fsum(h["cost_s"] for h in data["handoffs"]) == pytest.approx(
        data["totals"]["handoffs_s"])
    assert not list(tmp_path.glob("*/manifest.json")), "explain saved the model"


def test_cli_run_json_has_the_profile(tmp_path, schema, capsys):
    from conftest import light_model_path

    from collage_mlir.tools.cli import main

    model = collage_mlir.compile(light_model_path("squeezenet"), backends=["onnxruntime"],
                                 cost=f"table:{COSTS}", max_depth=2)
    model.save(tmp_path / "m")
    report = tmp_path / "r.json"
    assert main(["run", str(tmp_path / "m"), "--profile", "2", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    jsonschema.validate(data, schema)
    assert data["profile"]["rounds"] == 2
    assert all(r["measured_s"] > 0 for r in data["regions"])
    chain = data["profile"]["chain_s"]
    assert chain > 0 and data["profile"]["chain_error_rel"] == pytest.approx(
        (data["profile"]["estimated_total_s"] - chain) / chain)
    printed = capsys.readouterr().out
    assert "additive error: regions median |err|" in printed and "ms whole chain (" in printed
    page, explained = tmp_path / "p.html", tmp_path / "e.json"
    assert main(["explain", str(tmp_path / "m"), "-o", str(page), "--profile", "1",
                 "--json", str(explained)]) == 0
    assert json.loads(explained.read_text())["profile"]["rounds"] == 1
    shown = SvgPage()
    shown.feed(page.read_text())
    assert json.loads(shown.data)["report"]["profile"]["rounds"] == 1


def test_hand_off_prices_must_add_up_to_the_search_total():
    from collage_mlir.tools.report_out import consistent

    def report(costs, total):
        return {"handoffs": [{"cost_s": c} for c in costs], "totals": {"handoffs_s": total}}

    assert consistent(report([0.1, 0.2], 0.3))
    assert consistent(report([0.1, None], 0.1))  # unknown: charged 0 by the search
    assert not consistent(report([0.1, 0.2], 0.5))
    assert not consistent(report([0.1, None], 0.3))
    assert consistent(report([None, None], 0.3))  # nothing priced: nothing to contradict


def test_backends_skipped_as_unusable_are_in_the_report(monkeypatch, tmp_path, schema):
    from collage_mlir import driver
    from collage_mlir.backends import registry

    class Ghost:
        """Test double: a registered backend that cannot run here."""

        @classmethod
        def unavailable_reason(cls) -> str:
            return "ghost-runtime is not installed"

    known = dict(registry.registered_backends(), ghost=Ghost)
    monkeypatch.setattr(registry, "registered_backends", lambda: known)
    monkeypatch.setattr(driver, "registered_backends", lambda: known)
    model = collage_mlir.compile(MODELS["alexnet"], backends=[*BACKENDS, "ghost"],
                                 cost=f"table:{COSTS}", max_depth=1)
    data = json.loads(model.report(format="json"))
    jsonschema.validate(data, schema)
    assert data["backends"]["skipped"] == [{"backend": "ghost",
                                            "reason": "ghost-runtime is not installed"}]
    assert data["backends"]["considered"] == BACKENDS
    assert "backends skipped: ghost: ghost-runtime is not installed" in model.report()
    assert describe(model.save(tmp_path / "m"))[1].skipped == {
        "ghost": "ghost-runtime is not installed"}

ADDITIVE_MODELS = ["light:squeezenet", "light:shufflenet", "alexnet"]
"""Models of the bench zoo that measure in about a minute each on 2 busy cores: two light
model-zoo CNNs with random weights (bench/light.py) and the bundled alexnet."""
ADDITIVE_BOUND = 1.0
"""Largest median |estimate - measured whole run| / measured run over ADDITIVE_MODELS. Set
from measurements taken while other work kept the load average at 6-7 on 2 cores
(onnxruntime + openvino, depth 1): the light zoo with random weights had a median of 30%
(alexnet -51%, squeezenet -24%, shufflenet -33%, inception_v1 +35%, resnet50 -30%, zfnet512
+4%, densenet121 -30%), these three models 24% to 33% with one +116% (alexnet). Below a few
ms a chain is mostly fixed call costs and each kernel is timed after a cache sweep, so
sub-millisecond exported transformers read +190% to +650%: they are not in this set."""


def additive_model(name: str):
    """An ONNX path or model for a name of ADDITIVE_MODELS."""
    if name.startswith("light:"):
        import sys

        sys.path.insert(0, str(ROOT / "bench"))
        import light

        return light.randomized(light.path_of(name[len("light:"):]))
    return MODELS[name]


@pytest.mark.slow
@pytest.mark.backends
def test_median_additive_error_stays_within_its_bound(tmp_path, schema):
    """The additive cost model (kernels measured alone plus measured hand-offs) against the
    search's pick run whole, as `run --profile` reports it: an accuracy bound, not a timing
    assertion. Measures with real backends into a fresh cache (minutes on 2 busy cores:
    deselect with -m 'not slow')."""
    from collage_mlir.check.compare import time_side_by_side
    from collage_mlir.tensors import model_inputs

    if len(BACKENDS) < 2:
        pytest.skip("needs onnxruntime and openvino")
    errors = {}
    for name in ADDITIVE_MODELS:
        model = collage_mlir.compile(additive_model(name), backends=BACKENDS, max_depth=1,
                                     verify=False, cache=tmp_path / "cache.sqlite",
                                     measure_budget_s=0.3)
        inputs = model_inputs(model.module)
        (chain,) = time_side_by_side({"model": lambda a, m=model: m.run(a)},
                                     model.arrange(inputs), rounds=15)
        measured = model.profile(inputs, rounds=5)
        data = json.loads(model.report(measured, format="json", rounds=5,
                                       chain_s=chain.median_s))
        jsonschema.validate(data, schema)
        errors[name] = data["profile"]["chain_error_rel"]
    assert statistics.median(abs(e) for e in errors.values()) < ADDITIVE_BOUND, errors
