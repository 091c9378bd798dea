"""How far the measure table moves between runs, in the product's measuring order (the
backends taking turns, `search.prune.interleave`) against each backend in a phase of its
own (the order before stop 56).

Measures a model's single-op candidates on two backends through `driver.measure`, on a
fresh cache each time, the two orders alternating (P T T P ...). Per run: the seconds, and
the best backend op by op against the sum of per-op minima (`bench/e2e.py`'s "per-op
winners"). Per pair of runs in one order: how far the second backend's per-op cost
relative to the first's moved (geomean and quartiles), how many per-op winners flipped,
and each backend's level (geomean of its medians, second run / first). On a drifting VM
the phases move the two backends' levels apart; the turns keep them together.

    python bench/drift.py MODEL.onnx [--runs 4] [--backends onnxruntime,openvino]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from sweep import describe, ratios

from collage_mlir import driver
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.dialects.func import public_functions
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.importer import import_onnx

Table = dict[tuple[int, str], float]
"""(node, backend) → median seconds."""


class Phased(MeasuringEstimator):
    """The measuring estimator with every backend in a phase of its own (no turns)."""

    def alternates(self, backend: str) -> bool:
        return False


def measure(path: str, backends: list[str], turns: bool) -> tuple[float, Table]:
    """Seconds to measure every single-op candidate of `path` on `backends` through
    `driver.measure`, in turns or in phases, on a fresh cache; and the table."""
    module = import_onnx(path)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    kind = MeasuringEstimator if turns else Phased
    with tempfile.TemporaryDirectory() as tmp:
        with kind(backends, cache_path=Path(tmp) / "cache.sqlite") as est:
            caps = {b: est.capability(graph, b) for b in backends}
            cands = [CandidatePartition(SubGraph(graph, 1 << n.index), b, "single-op")
                     for b in backends for n in graph.op_nodes() if caps[b] >> n.index & 1]
            start = time.perf_counter()
            costs, _ = driver.measure(est, cands, graph=graph)
            took = time.perf_counter() - start
    return took, {(c.sub_graph.first, c.backend): cost for c, cost in zip(cands, costs, strict=True)
                  if math.isfinite(cost) and cost > 0}


def gap(table: Table, backends: list[str]) -> float:
    """The best backend op by op over the sum of per-op minima, on the nodes all have."""
    nodes = {n for n, _ in table if all((n, b) in table for b in backends)}
    minima = math.fsum(min(table[(n, b)] for b in backends) for n in nodes)
    return min(math.fsum(table[(n, b)] for n in nodes) for b in backends) / minima


def compare(a: Table, b: Table, backends: list[str]) -> str:
    """How the second backend's cost relative to the first's moved from run `a` to `b`,
    the per-op winners that flipped, and each backend's level."""
    first, second = backends[:2]
    rel = [{n: t[(n, second)] / t[(n, first)] for n, be in t if be == first and (n, second) in t}
           for t in (a, b)]
    common = [n for n in rel[0] if n in rel[1]]
    flips = sum((rel[0][n] < 1) != (rel[1][n] < 1) for n in common)
    levels = []
    for be in backends:
        r = ratios({k: v for k, v in a.items() if k[1] == be}, b)
        levels.append(f"{be} {math.exp(statistics.fmean(math.log(x) for x in r)):.3f}")
    return (f"{second}/{first} moved {describe(ratios(rel[0], rel[1]))}; winners flipped "
            f"{flips}/{len(common)}; levels {', '.join(levels)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--runs", type=int, default=4, help="runs in all, half in each order")
    p.add_argument("--backends", default="onnxruntime,openvino")
    args = p.parse_args()
    backends = args.backends.split(",")
    if len(backends) < 2:
        raise SystemExit("--backends: name at least two")
    order = [("phases", "turns", "turns", "phases")[k % 4] for k in range(args.runs)]
    runs: dict[str, list[Table]] = {"phases": [], "turns": []}
    for k, label in enumerate(order):
        took, table = measure(args.model, backends, label == "turns")
        runs[label].append(table)
        print(f"run {k + 1} ({label}): {took:.1f} s, {len(table)} candidates, best backend "
              f"op by op {gap(table, backends):.3f}x the per-op minima", flush=True)
    for label, tables in runs.items():
        for i in range(len(tables)):
            for j in range(i + 1, len(tables)):
                print(f"{label}, {i + 1} → {j + 1}: {compare(tables[i], tables[j], backends)}")


if __name__ == "__main__":
    main()
