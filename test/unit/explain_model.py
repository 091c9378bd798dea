"""Mixed partitions for the report and explain tests: a model over onnxruntime and openvino
under table costs (test/data/mixing_costs.json: Conv, pooling and MatMul cheaper on openvino,
everything else on onnxruntime), nothing measured."""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import light_model_path

import collage_mlir
from collage_mlir.backends.registry import available_backends

ROOT = Path(__file__).resolve().parents[2]
COSTS = ROOT / "test" / "data" / "mixing_costs.json"
MODELS = {"squeezenet": light_model_path("squeezenet"),
          "alexnet": str(ROOT / "examples" / "alexnet.onnx"),
          "tiny_bert": str(ROOT / "test" / "data" / "exported" / "tiny_bert.onnx")}
"""A light model-zoo CNN, the bundled example and an exported transformer."""
BACKENDS = [b for b in ("onnxruntime", "openvino") if b in available_backends()]


_INSTALLED: dict[str, str] = {}
"""Debian package → why its install failed ("" when it worked), tried once per session."""


def installed(binaries: tuple[str, ...], package: str) -> tuple[str | None, str]:
    """The path of the first of `binaries` found, installing Debian's `package` (apt-get,
    as root; the package lists updated once if a plain install fails) the first time none
    is; else None and why."""
    def which() -> str | None:
        return next((p for p in map(shutil.which, binaries) if p), None)

    if which() is None and package not in _INSTALLED:
        _INSTALLED[package] = _apt_install(package)
    path = which()
    return path, "" if path else (_INSTALLED.get(package) or "not found after install")


def need_dot() -> None:
    """Skip, saying why, unless Graphviz `dot` is (or could be) installed."""
    path, why = installed(("dot",), "graphviz")
    if path is None:
        pytest.skip(f"Graphviz dot unavailable ({why}); install it with "
                    "`apt-get install -y graphviz`")


def _apt_install(package: str) -> str:
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "not root or no apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    done = None
    for commands in ([["apt-get", "install", "-y", "-q", package]],
                     [["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", package]]):
        try:
            done = [subprocess.run(c, capture_output=True, text=True, timeout=300, env=env)
                    for c in commands]
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        if done[-1].returncode == 0:
            return ""
    return (done[-1].stderr.strip().splitlines() or ["apt-get failed"])[-1]


def mixed_model(out: Path, name: str = "squeezenet") -> tuple[collage_mlir.PartitionedModel, Path]:
    """The mixed partition of `MODELS[name]`, and where it was saved (under `out`): the
    search's own rule-sized regions (not merged after it, no archipelago's parts), so each
    can show its runner-up."""
    if len(BACKENDS) < 2:
        pytest.skip("needs onnxruntime and openvino for a mixed partition")
    model = collage_mlir.compile(MODELS[name], backends=BACKENDS, cost=f"table:{COSTS}",
                                 max_depth=2, merge=False, islands=False)
    assert {s.backend for s in model.plan.steps} == set(BACKENDS), "expected a mix"
    return model, model.save(out / name)


class SvgPage(html.parser.HTMLParser):
    """An explain page (or the DOM a browser made of it): op node id → the fill of its
    first shape, the region clusters' ids in order, the region view's node ids, the
    embedded report's text."""

    def __init__(self) -> None:
        super().__init__()
        self.fills: dict[str, str] = {}
        self.clusters: list[str] = []
        self.region_nodes: list[str] = []
        self.open: str | None = None
        self.in_data = False
        self.data = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g" and (a.get("id") or "").startswith("op-"):
            self.open = a["id"]
        elif tag == "g" and (a.get("id") or "").startswith("rn-"):
            self.region_nodes.append(a["id"])
        elif tag == "g" and "cluster" in (a.get("class") or "").split():
            self.clusters.append(a.get("id", ""))
        elif tag in ("rect", "polygon", "path") and self.open and self.open not in self.fills:
            self.fills[self.open] = a.get("fill", "")
        self.in_data = tag == "script" and a.get("id") == "report-data"

    def handle_data(self, data):
        if self.in_data:
            self.data += data
