"""collage-mlir measure model.onnx [--backends onnxruntime,openvino,iree] [--cache PATH]

Measures every single-op candidate (one SubGraph per op node, on each backend whose
capability includes it) and prints one row per distinct region: identical ops (same cache
key, like ResNet's repeated blocks) are measured once and shown once with their count.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from collage_mlir.errors import CollageError
from collage_mlir.tools.args import (
    add_backends_argument,
    add_cache_argument,
    add_input_shape_argument,
    add_measure_on_argument,
    add_tolerance_arguments,
    backend_names,
    input_shapes,
    positive_float,
    tolerance_of,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model (.onnx) or ONNX-in-MLIR module (.mlir)")
    add_backends_argument(p, extra=" or module:Class paths")
    add_cache_argument(p)
    add_measure_on_argument(p)
    p.add_argument("--timeout", type=positive_float, default=60.0,
                   help="seconds one region may take to compile, check and time (default 60)")
    p.add_argument("--budget", type=positive_float, default=1.0,
                   help="seconds of timing per kernel at most (default 1)")
    add_tolerance_arguments(p)
    p.add_argument("--reference", default="onnxruntime",
                   help="backend every kernel's numbers are checked against ('none': "
                        "unchecked)")
    p.add_argument("--transitions", action="store_true",
                   help="also measure (or show cached) hand-off costs between the backends")
    p.add_argument("--all", action="store_true", help="one row per op node, not per region")
    add_input_shape_argument(p)


def load_function(path: str, shapes: dict[str, tuple[int, ...]] | None = None):
    """The model's main function, from .onnx (imported) or .mlir (parsed)."""
    from collage_mlir.dialects.func import find_function
    from collage_mlir.importer import import_onnx, parse_mlir

    if Path(path).suffix == ".mlir":
        if not Path(path).is_file():
            raise CollageError(f"{path}: no such file")
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise CollageError(f"{path}: cannot read ({e})") from None
        module = parse_mlir(text, path)
    else:
        module = import_onnx(path, input_shapes=shapes)
    try:
        return module, find_function(module)
    except ValueError:
        raise CollageError(f"{path}: no func.func to measure") from None


def fmt_cost(cost: float | None) -> str:
    if cost is None:
        return "-"
    if math.isinf(cost):
        return "invalid"
    if math.isnan(cost):
        return "?"
    return f"{cost * 1e3:.3f}"


def winner(costs: dict[str, float]) -> str:
    finite = {b: c for b, c in costs.items() if math.isfinite(c)}
    return min(finite, key=finite.get) if finite else "-"


def print_table(rows: list[tuple[str, str, int, dict[str, float]]], backends: Sequence[str],
                out=None) -> None:
    """rows: (first node, signature, count, cost per backend); to `out` (default: stdout as
    it is at call time)."""
    out = out or sys.stdout
    header = ["node", "op (inputs) -> (outputs)", "n", *[f"{b} ms" for b in backends], "winner"]
    cells = [[node, sig, str(n), *[fmt_cost(costs.get(b)) for b in backends], winner(costs)]
             for node, sig, n, costs in rows]
    widths = [max(len(r[k]) for r in [header, *cells]) for k in range(len(header))]
    widths[1] = min(widths[1], 70)
    for r in [header, *cells]:
        sig = r[1] if len(r[1]) <= widths[1] else r[1][:widths[1] - 1] + "…"
        parts = [r[0].rjust(widths[0]), sig.ljust(widths[1]), r[2].rjust(widths[2])]
        parts += [c.rjust(w) for c, w in zip(r[3:-1], widths[3:-1], strict=True)]
        out.write("  ".join([*parts, r[-1]]) + "\n")


def run(args: argparse.Namespace) -> int:
    from collage_mlir.backends.registry import available_backends
    from collage_mlir.candidate import CandidatePartition
    from collage_mlir.cost.measure import MeasuringEstimator
    from collage_mlir.driver import measure_settings, ready_scratch
    from collage_mlir.graph import DataflowGraph, SubGraph
    from collage_mlir.progress import ProgressBar

    targets = backend_names(args) or available_backends()
    if not targets:
        raise CollageError("no backend is installed and usable here")
    ready_scratch()
    reference = None if args.reference.lower() == "none" else args.reference
    started = time.perf_counter()
    est = MeasuringEstimator(targets, cache_path=args.cache, timeout_s=args.timeout,
                             reference=reference, skip_unusable=True,
                             settings=measure_settings(args.budget, tolerance_of(args)),
                             executor=args.measure_on)
    for target, reason in est.skipped.items():
        sys.stderr.write(f"collage-mlir: skipping backend '{target}': {reason}\n")
    if not est.backends:
        raise CollageError("no usable backend among: " + ", ".join(targets))
    backends = list(est.backends)
    with est:
        module, fn = load_function(args.model, input_shapes(args))  # the module must outlive the graph
        graph = DataflowGraph(fn)
        caps = {b: est.capability(graph, b) for b in backends}
        candidates = [CandidatePartition(SubGraph(graph, 1 << n.index), b, "single-op")
                      for n in graph.op_nodes() for b in backends if caps[b] >> n.index & 1]
        bar = ProgressBar("measuring")
        try:
            costs = est.estimate(candidates, progress=bar)
        finally:
            bar.close()
        rows = _rows(est, graph, candidates, costs, per_node=args.all)
        print_table(rows, backends)
        _print_summary(est, graph, candidates, costs, backends, time.perf_counter() - started)
        _print_invalid(est, candidates, costs)
        if args.transitions:
            _print_transitions(est, backends)
    del graph, module
    return 0


def _rows(est, graph, candidates, costs, per_node: bool):
    """Group candidates by region (or node): (first node, signature, count, costs)."""
    groups: dict[str, dict] = {}
    for c, cost in zip(candidates, costs, strict=True):
        rk = est.region(c.sub_graph)
        gid = str(c.sub_graph.first) if per_node else rk.digest
        g = groups.setdefault(gid, {"first": c.sub_graph.first, "sig": rk.signature,
                                    "nodes": set(), "costs": {}})
        g["nodes"].add(c.sub_graph.first)
        g["costs"][c.backend] = cost
    return [(f"%{g['first']}", g["sig"], len(g["nodes"]), g["costs"])
            for g in sorted(groups.values(), key=lambda g: g["first"])]


def _print_summary(est, graph, candidates, costs, backends, elapsed: float) -> None:
    s = est.stats
    out = sys.stdout
    skipped = f", {s.skipped} skipped after a hang" if s.skipped else ""
    skipped += f", {s.shared} measured by a concurrent run" if s.shared else ""
    out.write(f"\n{len(graph.op_nodes())} ops, {s.candidates} candidates, {s.regions} distinct "
              f"(region, backend) keys: {s.hits} cached, {s.measured} measured "
              f"({s.invalid} invalid, {s.errors} errors, {s.timeouts} timeouts, "
              f"{s.restarts} worker restarts{skipped}) in {elapsed:.1f} s\n")
    if s.busy:
        out.write(f"  machine busy: {s.busy} of {s.measured} measured while other work ran "
                  f"(load up to {s.max_load:.2f} other runnable tasks per core); "
                  "`collage-mlir cache remeasure --noisy` has them measured again\n")
    per_node: dict[int, dict[str, float]] = {}
    for c, cost in zip(candidates, costs, strict=True):
        per_node.setdefault(c.sub_graph.first, {})[c.backend] = cost
    for b in backends:
        missing = sum(b not in per_node[n] for n in per_node)
        total = sum(per_node[n].get(b, 0.0) for n in per_node)
        note = f" ({missing} ops it cannot take)" if missing else ""
        out.write(f"  every op on {b}: {_ms(total) if not missing else '-'}{note}\n")
    best = sum(min((c for c in v.values() if math.isfinite(c)), default=math.inf)
               for v in per_node.values())
    out.write(f"  best backend per op (no hand-off cost): {_ms(best)}\n")


def _ms(cost: float) -> str:
    text = fmt_cost(cost)
    return text if text in ("invalid", "?", "-") else f"{text} ms"


def _print_invalid(est, candidates, costs) -> None:
    """One line per distinct (region, backend) out of the search, with its reason."""
    seen: set[str] = set()
    lines = []
    for c, cost in zip(candidates, costs, strict=True):
        key = est.key(c)
        if math.isinf(cost) and key not in seen:
            seen.add(key)
            sig = est.region(c.sub_graph).signature
            lines.append(f"  {c.backend}: {sig}: {est.reason(c) or '?'}")
    if lines:
        sys.stdout.write("left out:\n" + "\n".join(lines) + "\n")


def _print_transitions(est, backends: Sequence[str]) -> None:
    sys.stdout.write("\nhand-off cost, extra over the two calls alone (per call + per MB):\n")
    for src in backends:
        for dst in backends:
            if src == dst:
                continue
            t = est.transition(src, dst)
            if t is None or t.per_call is None:
                why = t.error if t is not None else "not measured"
                sys.stdout.write(f"  {src} -> {dst}: unknown ({why})\n")
                continue
            points = ", ".join(f"{n // 1024} KiB: {sec * 1e6:.1f}" for n, sec in t.points)
            sys.stdout.write(f"  {src} -> {dst}: {t.per_call * 1e6:.1f} us + "
                             f"{t.per_byte * 1e12:.1f} us/MB  (measured us: {points})\n")
