"""The layering of ARCHITECTURE.md, enforced: imports go down the layers, never up or around.

Every import in the package counts: module level, inside functions and under
`TYPE_CHECKING` alike. Units in one layer are independent of each other; a unit may import
itself freely, but no module may sit on an import cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"collage_mlir": "collage_mlir", "passes": "collage_mlir.passes",
           "dialects": "collage_mlir.dialects", "tools": "collage_mlir.tools"}
"""Source folder → the package it installs as (pyproject's package-dir)."""

LAYERS: list[set[str]] = [
    {"errors", "paths", "progress", "context", "scratch", "sigstack"},
    {"dialects"},
    {"graph"},
    {"candidate", "tensors", "static_shapes", "canonical", "legacy", "export", "weights"},
    {"importer"},
    {"rules"},
    {"backends"},
    {"annotate", "placement", "cost", "search"},
    {"runtime"},
    {"check"},
    {"driver"},
    {"api", "passes"},
    {""},
    {"tools"},
]
"""Bottom first. A unit is a subpackage or a module directly under `collage_mlir`; "" is the
package itself (`collage_mlir/__init__.py`, the public facade)."""

LAYER_OF = {unit: k for k, layer in enumerate(LAYERS) for unit in layer}


def module_files() -> dict[str, Path]:
    out = {}
    for folder, package in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = [package, *rel]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports (a `from m import x` counts as `m.x` when that is
    a module, else as `m`)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that goes up a layer, or across to another unit of its layer."""
    out = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            a, b = unit_of(src), unit_of(dst)
            if a == b:
                continue
            if LAYER_OF[b] >= LAYER_OF[a]:
                how = "across its layer to" if LAYER_OF[b] == LAYER_OF[a] else "up to"
                out.append(f"{src} ({a or 'collage_mlir'}) imports {how} {dst} ({b})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_unit_has_a_layer(graph):
    assert {unit_of(m) for m in graph} <= set(LAYER_OF)


def test_imports_only_go_down(graph):
    assert layer_violations(graph) == []


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_a_planted_upward_import_or_cycle_is_caught(graph):
    """The checks above can fail: graph importing the driver is both up a layer and (since
    the driver imports graph) a cycle."""
    planted = {k: set(v) for k, v in graph.items()}
    planted["collage_mlir.graph.dataflow"].add("collage_mlir.driver")
    assert layer_violations(planted) == [
        "collage_mlir.graph.dataflow (graph) imports up to collage_mlir.driver (driver)"]
    assert any("collage_mlir.driver" in c and "collage_mlir.graph.dataflow" in c
               for c in cycles(planted))
    sideways = {k: set(v) for k, v in graph.items()}
    sideways["collage_mlir.cost.table"].add("collage_mlir.search.partitioning")
    assert layer_violations(sideways) == ["collage_mlir.cost.table (cost) imports across its "
                                          "layer to collage_mlir.search.partitioning (search)"]
