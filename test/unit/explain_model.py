"""Mixed partitions for the report and explain tests: a model over onnxruntime and openvino
under table costs (test/data/mixing_costs.json: Conv, pooling and MatMul cheaper on openvino,
everything else on onnxruntime), nothing measured."""

from __future__ import annotations

import html.parser
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


def mixed_model(out: Path, name: str = "squeezenet") -> tuple[collage_mlir.PartitionedModel, Path]:
    """The mixed partition of `MODELS[name]`, and where it was saved (under `out`)."""
    if len(BACKENDS) < 2:
        pytest.skip("needs onnxruntime and openvino for a mixed partition")
    model = collage_mlir.compile(MODELS[name], backends=BACKENDS, cost=f"table:{COSTS}",
                                 max_depth=2)
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
