"""How a timing setting (`MeasureSettings`: the cache sweep before each timed call by
default, or any other field) moves the measure table, and what it costs.

Measures a model's single-op candidates on each backend once per setting and repeat, on
a fresh cache each time, in a balanced order (A B B A ...) so that the VM's drift hits the
settings alike. Prints, per setting: the measure phase's seconds, and each candidate's
median against the first setting's (geomean and quartiles of the ratio); the two repeats
of one setting give the noise (their own ratio, the same way).

    python bench/sweep.py MODEL.onnx [--sizes 64,16] [--reps 2] [--backends onnxruntime,openvino]
    python bench/sweep.py MODEL.onnx --vary settle=0.02,0.03
"""

from __future__ import annotations

import argparse
import dataclasses
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


def measure(path: str, backends: list[str], settings: MeasureSettings) -> tuple[float, dict]:
    """Seconds to measure every single-op candidate of `path` on `backends` with
    `settings`, on a fresh cache; and (node, backend) → median seconds."""
    module = import_onnx(path)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    with tempfile.TemporaryDirectory() as tmp:
        est = MeasuringEstimator(backends, cache_path=Path(tmp) / "cache.sqlite",
                                 settings=settings)
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


def variants(sizes: str, vary: str | None) -> dict[str, MeasureSettings]:
    """Label → settings: `vary` ("FIELD=V1,V2,...", a `MeasureSettings` field) if given,
    else the sweep `sizes` in MiB."""
    if vary is None:
        return {f"sweep {s} MiB": MeasureSettings(cold_bytes=int(float(s) * MIB))
                for s in sizes.split(",")}
    field, _, values = vary.partition("=")
    kind = {f.name: type(getattr(MeasureSettings(), f.name))
            for f in dataclasses.fields(MeasureSettings)}.get(field)
    if kind is None or not values:
        raise SystemExit(f"--vary {vary}: expected FIELD=V1,V2 with FIELD one of "
                         f"{', '.join(f.name for f in dataclasses.fields(MeasureSettings))}")
    return {f"{field}={v}": MeasureSettings(**{field: kind(float(v))})
            for v in values.split(",")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--sizes", default="64,16", help="sweep sizes in MiB, the first the base")
    p.add_argument("--vary", metavar="FIELD=V1,V2",
                   help="another MeasureSettings field to vary instead, the first the base")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--backends", default="onnxruntime,openvino")
    args = p.parse_args()
    settings = variants(args.sizes, args.vary)
    labels = list(settings)
    backends = args.backends.split(",")
    order = []
    for rep in range(args.reps):  # A B B A: each setting as often early as late
        order += [(s, rep) for s in (labels if rep % 2 == 0 else labels[::-1])]
    runs: dict[str, list[tuple[float, dict]]] = {s: [] for s in labels}
    for label, rep in order:
        took, medians = measure(args.model, backends, settings[label])
        runs[label].append((took, medians))
        print(f"{label}, repeat {rep + 1}: {took:.1f} s, {len(medians)} candidates",
              flush=True)
    base = runs[labels[0]]
    for label in labels:
        took = statistics.fmean(t for t, _ in runs[label])
        line = f"{label}: measure {took:.1f} s"
        if label != labels[0]:
            pairs = [ratios(b[1], r[1]) for b, r in zip(base, runs[label], strict=True)]
            line += "; medians / base, repeat by repeat: " + "; ".join(map(describe, pairs))
            line += f"; all repeats (drift cancelled): {describe(sum(pairs, []))}"
        if len(runs[label]) > 1:
            noise = describe(ratios(runs[label][0][1], runs[label][1][1]))
            line += f"; repeat / first (noise): {noise}"
        print(line)


if __name__ == "__main__":
    main()
