"""How the cache sweep before each timed call (`MeasureSettings.cold_bytes`) moves the
measure table, and what it costs.

Measures a model's single-op candidates on each backend once per sweep size and repeat, on
a fresh cache each time, in a balanced order (A B B A ...) so that the VM's drift hits the
sizes alike. Prints, per size: the measure phase's seconds, and each candidate's median
against the first size's (geomean and quartiles of the ratio); the two repeats of one size
give the noise (their own ratio, the same way).

    python bench/sweep.py MODEL.onnx [--sizes 64,16] [--reps 2] [--backends onnxruntime,openvino]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.dialects.func import public_functions
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.importer import import_onnx

MIB = 1 << 20


def measure(path: str, backends: list[str], cold_bytes: int) -> tuple[float, dict]:
    """Seconds to measure every single-op candidate of `path` on `backends` after sweeps of
    `cold_bytes`, on a fresh cache; and (node, backend) → median seconds."""
    module = import_onnx(path)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    with tempfile.TemporaryDirectory() as tmp:
        est = MeasuringEstimator(backends, cache_path=Path(tmp) / "cache.sqlite",
                                 settings=MeasureSettings(cold_bytes=cold_bytes))
        with est:
            caps = {b: est.capability(graph, b) for b in backends}
            cands = [CandidatePartition(SubGraph(graph, 1 << n.index), b, "single-op")
                     for n in graph.op_nodes() for b in backends if caps[b] >> n.index & 1]
            start = time.perf_counter()
            costs = est.estimate(cands)
            took = time.perf_counter() - start
    return took, {(c.sub_graph.first, c.backend): cost for c, cost in zip(cands, costs, strict=True)
                  if math.isfinite(cost) and cost > 0}


def ratios(a: dict, b: dict) -> list[float]:
    return [b[k] / a[k] for k in a if k in b]


def describe(r: list[float]) -> str:
    if not r:
        return "no common candidates"
    q1, q2, q3 = np.percentile(r, [25, 50, 75])
    geo = math.exp(statistics.fmean(math.log(x) for x in r))
    return f"geomean {geo:.3f}, quartiles {q1:.3f} / {q2:.3f} / {q3:.3f} over {len(r)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--sizes", default="64,16", help="sweep sizes in MiB, the first the base")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--backends", default="onnxruntime,openvino")
    args = p.parse_args()
    sizes = [int(float(s) * MIB) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    order = []
    for rep in range(args.reps):  # A B B A: each size as often early as late
        order += [(s, rep) for s in (sizes if rep % 2 == 0 else sizes[::-1])]
    runs: dict[int, list[tuple[float, dict]]] = {s: [] for s in sizes}
    for size, rep in order:
        took, medians = measure(args.model, backends, size)
        runs[size].append((took, medians))
        print(f"sweep {size // MIB} MiB, repeat {rep + 1}: {took:.1f} s, "
              f"{len(medians)} candidates", flush=True)
    base = runs[sizes[0]]
    for size in sizes:
        took = statistics.fmean(t for t, _ in runs[size])
        line = f"sweep {size // MIB:>3} MiB: measure {took:.1f} s"
        if size != sizes[0]:
            pairs = [ratios(b[1], r[1]) for b, r in zip(base, runs[size], strict=True)]
            line += "; medians / base, repeat by repeat: " + "; ".join(map(describe, pairs))
            line += f"; all repeats (drift cancelled): {describe(sum(pairs, []))}"
        if len(runs[size]) > 1:
            noise = describe(ratios(runs[size][0][1], runs[size][1][1]))
            line += f"; repeat / first (noise): {noise}"
        print(line)


if __name__ == "__main__":
    main()
