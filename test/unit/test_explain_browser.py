"""The explain page in a real browser: headless Chromium loads the page of a mixed partition
(the bundled alexnet, an exported tiny BERT) and must log nothing to its console, colour
every op with its backend, and show a region's costs (and an op's details) when one is
clicked (`#select=ID` clicks it on load; the DOM is read back with `--dump-dom`).

Chromium comes from Debian (`apt-get install -y chromium`): the session fixture tries the
install once where it can (root, apt-get) and otherwise skips with the reason.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest
from explain_model import COSTS, SvgPage, installed, mixed_model, need_dot

from collage_mlir.runtime.explain import backend_colours, write_explain
from collage_mlir.runtime.report import report_data
from collage_mlir.tools.report_out import hand_off_prices


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser's path, installed once per session where possible."""
    path, why = installed(("chromium", "chromium-browser", "google-chrome"), "chromium")
    if path is None:
        pytest.skip(f"headless Chromium unavailable ({why}); install it with "
                    "`apt-get install -y chromium`")
    return path


def load_page(browser: str, page: Path, fragment: str, profile: Path) -> tuple[str, list[str]]:
    """The DOM of `page#fragment` once its scripts ran, and the console's lines."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", "--dump-dom", f"{page.as_uri()}#{fragment}"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def details(dom: str) -> tuple[str, str]:
    """(the id the details panel shows, its text)."""
    m = re.search(r'<div id="details"([^>]*)>(.*?)</div>', dom, re.S)
    assert m, "no details panel"
    selected = re.search(r'data-selected="([^"]*)"', m.group(1))
    text = html.unescape(re.sub(r"<[^>]+>", " ", m.group(2)))
    return (selected.group(1) if selected else ""), " ".join(text.split())


@pytest.fixture(scope="module", params=["alexnet", "tiny_bert"])
def report(request, tmp_path_factory) -> dict:
    """The report of a mixed partition of the bundled alexnet and of an exported transformer."""
    model, _ = mixed_model(tmp_path_factory.mktemp("browser"), request.param)
    return report_data(model.module, model.record(),
                       transition=hand_off_prices(f"table:{COSTS}", None))


@pytest.mark.parametrize("layout", ["layered", "dot"])
def test_clicking_a_region_shows_its_costs(chromium, report, layout, tmp_path):
    if layout == "dot":
        need_dot()
    page = write_explain(report, tmp_path / "p.html", layout)
    region = next(r for r in report["regions"] if r["runner_up"] and len(r["ops"]) > 1)
    dom, console = load_page(chromium, page, f"select=rg-{region['index']}", tmp_path / "prof")
    assert console == [], "console output:\n" + "\n".join(console)
    root = re.search(r"<html[^>]*>", dom).group(0)  # the page's own error counter is on it
    assert 'data-ready="1"' in root and "data-errors" not in root, root
    parsed = SvgPage()
    parsed.feed(dom)
    colours = {c.lower() for c in backend_colours(report).values()}
    ops = [op for r in report["regions"] for op in r["ops"]]
    assert len(parsed.fills) == len(ops)
    assert {f.lower() for f in parsed.fills.values()} <= colours
    selected, text = details(dom)
    assert selected == f"rg-{region['index']}"
    assert region["name"] in text
    assert f"estimated {region['estimated_s'] * 1e3:.3f} ms" in text
    assert (f"runner-up {region['runner_up']['backend']} "
            f"{region['runner_up']['estimated_s'] * 1e3:.3f} ms") in text
    assert f"bytes, {region['handoffs_in_s'] * 1e3:.3f} ms" in text  # hand-offs in, priced
    assert json.loads(parsed.data)["report"] == report


def test_clicking_an_op_shows_its_type_name_and_shapes(chromium, report, tmp_path):
    page = write_explain(report, tmp_path / "p.html", "layered")
    op = next(op for r in report["regions"] for op in r["ops"]
              if op["name"] and op["outputs"][0]["shape"] and op["outputs"][0]["dtype"] == "f32")
    dom, console = load_page(chromium, page, f"select=op-{op['id']}", tmp_path / "prof")
    assert console == []
    selected, text = details(dom)
    assert selected == f"op-{op['id']}"
    assert f"type {op['type']}" in text
    assert f"ONNX node {op['name']}" in text
    assert "[" + "x".join(map(str, op["outputs"][0]["shape"])) + "] f32" in text
    assert f"region {op['region']}" in text


def test_the_overview_shows_the_end_to_end_check_and_its_noise(chromium, report, tmp_path):
    checked = dict(report, verdict={
        "kept": "pick", "pick_kept": True, "noise": 0.015, "rounds": 15, "lost_pick": None,
        "contenders": [{"name": "pick", "median_s": 0.0101},
                       {"name": "pick (again)", "median_s": 0.01025},
                       {"name": "onnxruntime whole", "median_s": 0.012}]})
    page = write_explain(checked, tmp_path / "p.html", "layered")
    dom, console = load_page(chromium, page, "", tmp_path / "prof")
    assert console == []
    _, text = details(dom)
    assert ("End-to-end check pick 10.100 ms kept pick (again) 10.250 ms onnxruntime whole "
            "12.000 ms noise (the pick timed twice) ±1.5% rounds 15 side by side") in text
