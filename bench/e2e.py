"""End-to-end benchmark: Collage's mix against each backend alone.

Models are named three ways: a model of the exported zoo (`bench/models.py`: transformers
exports with random, well-scaled weights, exported on first use), a light model-zoo
architecture (`bench/light.py`: its splat weights replaced by random ones unless `--splat`),
or any `.onnx` path. For each model: partition with all backends (measured costs, cached), then time side by side
in one interleaved run: the mix, each backend running the whole model, and each backend's
single-backend partition (`--backends X`, which should match X alone within a few percent).
Every contender is built after partitioning, twice (`--controls`: X and X#2), and its column
is the fastest of its builds: the mix as a user deploys it (saved, then loaded; the
instance `compile` returned is timed beside it, on a line of its own), each backend's whole
model (its single-backend partition, when that is one region, is a third build of it).
"noise" is how far a contender's fastest build may be off: the gap to its next fastest
build, the widest over the contenders, and when the mix is one region on X, the gap between
the mix and X (the same model: a tie). A mix/best ratio inside it is a tie. A build more
than ODD_BUILD slower than its contender's fastest ran slow throughout (a stalled instance,
not a spread of builds): it is named and left out of the noise.
Also prints the estimated cost against the measured latency (est. err = (est - mix) / mix),
the additive error per region (region err: median over the mix's regions of
|estimate - median call inside whole runs| / that call; `--per-region` lists them), what the
end-to-end check kept (and, on a line of its own, what it timed: two whole models within a
few percent of each other can trade places between the check and the columns, minutes
apart), and the measure / search / verify seconds of the mix.

Greedy baselines (`search/greedy.py`: partition_for_X and the first-claim order) are timed
beside the mix: one that is a whole model is the whole-model column of its backend; the
others within `--greedy-margin` of the best baseline's estimate (at most `--greedy` of them)
are built and timed too. "apparent loss" = mix - the fastest greedy baseline, measured in
the same run (negative: Collage wins), as the RFC's success metric.

"per-op winners" reads the measure table: each backend's share of the sum of per-op minima
over the model's single-op candidates, and how far the best backend's op-by-op sum lies
above that sum — where the winners differ, op by op alone. `--ceiling` asks the same inside
the whole models (`bench/ceiling.py`): the most any onnxruntime / OpenVINO split could gain,
beside the bound noise alone gives. "refinement kept" names a neighbour the end-to-end
refinement kept (`check/refine.py`).

    python bench/e2e.py [--models bert_base,mobilenet_v2,light:resnet50,m.onnx] [--rounds 20]
                        [--cache PATH] [--input-shape NAME=DIMS ...] [--greedy N]
                        [--per-region] [--single onnxruntime,openvino | --no-single]
                        [--whole onnxruntime,openvino] [--ceiling]

"max err" is the largest |mix - onnxruntime whole| over the outputs, relative to the largest
|onnxruntime whole| of that output.

The run ends with a summary (`summary`): the geomean of mix/best over the models, the models
where per-op winners differ (the best backend op by op at least `--differ` x the per-op
minima) with the geomean there, with `--ceiling` those whose priced ceiling clears its
noise ceiling (where a split could pay inside the whole models), and each model's verdict
against its noise: faster, a tie or slower.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import onnx

import collage_mlir
from collage_mlir.backends.registry import available_backends
from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.compare import time_side_by_side, whole_model_runner
from collage_mlir.driver import (
    annotate,
    build,
    entry_graph,
    make_estimator,
    tolerance,
    usable_backends,
)
from collage_mlir.export.resources import weight_store
from collage_mlir.graph import SubGraph, SubGraphConfig
from collage_mlir.search.greedy import Baseline
from collage_mlir.search.partitioning import Choice, Partitioning, check_cover
from collage_mlir.static_shapes import parse_input_shape
from collage_mlir.tensors import model_inputs
from collage_mlir.tools.args import positive_int
from collage_mlir.tools.guard import guarded

sys.path.insert(0, os.path.dirname(__file__))
import ceiling  # noqa: E402
from naming import help_text, known_model, resolve  # noqa: E402

ZOO = ["bert_base", "gpt2", "vit_base", "swin_tiny", "convnext_tiny", "mobilenet_v2",
       "efficientnet_b0", "resnet50"]


TWIN = "#2"
"""The suffix of a contender's second build."""

ODD_BUILD = 0.25
"""A build this much slower than its contender's fastest stalled throughout (an OpenVINO
mamba2_4l ran 585.94 ms against its twin's 251.51): it says nothing about the spread of
builds."""

AS_COMPILED = "mix as compiled"
"""The runner of the instance `collage_mlir.compile` returned, timed beside the loaded mix."""

DIFFER = 1.05
"""Per-op winners differ on a model when its best backend op by op lies this far above the
sum of per-op minima (`op_winners`)."""


@dataclass
class Outcome:
    """One model's row, as the summary reads it."""
    model: str
    ratio: float  # mix / the best single backend
    noise: float  # `run_noise`
    headroom: float  # the best backend op by op over the per-op minima (`op_winners`)
    ceiling: tuple[float, float, float] | None = None  # `ceiling_cell`, with --ceiling

    @property
    def clears(self) -> bool:
        """Whether a split could pay inside the whole models: the priced ceiling (hand-offs
        charged) clears what noise alone makes of the bound."""
        return self.ceiling is not None and self.ceiling[2] > self.ceiling[1]

    @property
    def verdict(self) -> str:
        """Against the best single backend, beyond the run's noise or within it."""
        if self.ratio < 1 - self.noise:
            return "faster"
        return "slower" if self.ratio > 1 + self.noise else "tie"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summary(outcomes: list[Outcome], differ: float = DIFFER) -> list[str]:
    """The run's verdict: geomean mix/best over all models and where per-op winners differ,
    and which models were faster, tied or slower than the best single backend."""
    if not outcomes:
        return []
    ratios = [o.ratio for o in outcomes]
    lines = [f"geomean mix/best over {len(outcomes)} models: {geomean(ratios):.3f} "
             f"({min(ratios):.2f}-{max(ratios):.2f})"]
    differing = [o for o in outcomes if o.headroom >= differ]
    if differing:
        faster = [o.model for o in differing if o.verdict == "faster"]
        lines.append(
            f"per-op winners differ (best backend op by op >= {differ:.2f}x the minima) on "
            f"{len(differing)}: " + ", ".join(f"{o.model} {o.headroom:.2f}x" for o in differing)
            + f"; geomean mix/best there {geomean([o.ratio for o in differing]):.3f}; "
            f"faster beyond the noise on {len(faster)} of {len(differing)}"
            + (f" ({', '.join(faster)})" if faster else ""))
    else:
        lines.append(f"per-op winners differ (>= {differ:.2f}x) on none")
    bounded = [o for o in outcomes if o.ceiling is not None]
    if bounded:
        clear = [o for o in bounded if o.clears]
        faster = [o.model for o in clear if o.verdict == "faster"]
        lines.append(
            f"the priced ceiling clears its noise ceiling on {len(clear)} of {len(bounded)}"
            + (": " + ", ".join(f"{o.model} {o.ceiling[2]:.2f} (noise {o.ceiling[1]:.2f})"
                                for o in clear)
               + f"; faster beyond the noise on {len(faster)} of {len(clear)}"
               + (f" ({', '.join(faster)})" if faster else "") if clear else ""))
    for verdict in ("faster", "tie", "slower"):
        named = [f"{o.model} {o.ratio:.2f} (±{o.noise:.0%})" for o in outcomes
                 if o.verdict == verdict]
        lines.append(f"{verdict}: " + (", ".join(named) if named else "none"))
    return lines


def relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """max |got - want| / max |want|, the worst over outputs."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        w64, g64 = np.asarray(w, np.float64), np.asarray(g, np.float64)
        scale = float(np.max(np.abs(w64))) or 1.0
        worst = max(worst, float(np.max(np.abs(g64 - w64))) / scale)
    return worst


def greedy_to_time(baselines: list[Baseline], n_ops: int, margin: float, most: int
                   ) -> tuple[dict[str, str], list[Baseline]]:
    """Which baselines to time: {name: backend} for those that are one backend's whole
    model (timed as that backend's column), and up to `most` others (each distinct cover
    once) whose estimate is unknown or within `margin` x the best baseline's, best first."""
    runnable = [b for b in baselines if b.partitioning is not None and not math.isinf(b.cost)]
    finite = [b.cost for b in runnable if math.isfinite(b.cost)]
    bound = margin * min(finite) if finite else math.inf
    whole, built, seen = {}, [], set()
    for b in sorted(runnable, key=lambda b: (math.isnan(b.cost), b.cost)):
        cover = b.regions()
        if cover in seen:
            continue
        seen.add(cover)
        if len(cover) == 1 and cover[0][1].bit_count() == n_ops:
            whole[b.name] = cover[0][0]
        elif (math.isnan(b.cost) or b.cost <= bound) and len(built) < most:
            built.append(b)
    return whole, built


def build_baseline(path, shapes, baseline: Baseline):
    """The baseline's cover compiled over a fresh import of the model (the same model
    imports to the same post-dfs node numbers; `check_cover` refuses a cover that does not
    fit), as a PartitionedModel."""
    module = collage_mlir.import_onnx(path, input_shapes=shapes)
    with weight_store(module):
        graph = entry_graph(module)
        old = baseline.partitioning
        choices = tuple(Choice(CandidatePartition(SubGraph(graph, c.candidate.inside),
                                                  c.candidate.backend, c.candidate.rule_name),
                               c.cost) for c in old.choices)
        check_cover(graph, [c.candidate for c in choices])
        return build(module, Partitioning(graph, choices, old.total_cost, old.transition_cost))


def op_winners(path, shapes, backends: list[str], cache, tol=None
               ) -> tuple[dict[str, float], float]:
    """From the measure table (single-op candidates, read back from the cache): each
    backend's share of the sum of per-op minima (the time of the ops it is fastest on), and
    the headroom: the best backend's op-by-op sum over that sum (only backends that run every
    op). Single ops timed alone carry each backend's per-call overhead and no fusion, so this
    says where per-op winners differ, not what a mix can gain."""
    module = collage_mlir.import_onnx(path, input_shapes=shapes)
    with weight_store(module):
        graph = entry_graph(module)
        singles = [c for c in annotate(graph, backends, SubGraphConfig(max_depth=1))
                   if c.inside.bit_count() == 1]
        with make_estimator("measure", backends, cache, tolerance=tol) as estimator:
            costs = estimator.estimate(singles)
    per_op: dict[int, dict[str, float]] = {}
    for c, cost in zip(singles, costs, strict=True):
        if math.isfinite(cost):
            per_op.setdefault(c.inside, {})[c.backend] = cost
    minima = {op: min(d.values()) for op, d in per_op.items()}
    total = sum(minima.values()) or 1.0
    shares = {b: sum(m for op, m in minima.items() if per_op[op].get(b) == m) / total
              for b in backends}
    full = [sum(d[b] for d in per_op.values()) for b in backends
            if all(b in d for d in per_op.values())]
    return shares, (min(full) / total if full else math.nan)


def region_errors(model) -> dict[str, tuple[float, float]]:
    """Region → (estimate, median call inside whole runs), both in seconds."""
    measured = model.profile(model_inputs(model.module), rounds=10)
    return {r.region: (r.estimated_cost, measured[r.region]) for r in model.report_rows
            if r.region in measured and r.estimated_cost is not None}


def bench_model(name: str, backends: list[str], args) -> dict:
    """Partition `name`, build every contender and time them side by side: the row."""
    with tempfile.TemporaryDirectory(prefix="collage-e2e-") as keep:  # the saved mix
        return _bench_model(name, backends, args, keep)


def _bench_model(name: str, backends: list[str], args, keep: str) -> dict:
    label, path = resolve(name, args.splat)
    shapes = dict(parse_input_shape(s) for s in args.input_shape) or None
    row: dict = {"model": label}
    t0 = time.perf_counter()
    mixed = collage_mlir.compile(path, backends=backends, cache=args.cache,
                                 max_depth=args.max_depth, input_shapes=shapes,
                                 refine_budget_s=args.refine_budget,
                                 tolerance=tolerance(args.rtol, args.atol_scale))
    row["partition_s"] = time.perf_counter() - t0
    row["regions"] = len(mixed.partitioning.choices)
    row["estimated_ms"] = mixed.estimated_cost * 1e3
    row["phases"] = mixed.timings
    row["kept"] = mixed.verdict.kept if mixed.verdict else "-"
    row["check"] = mixed.verdict.summary() if mixed.verdict else None
    if len(mixed.plan.steps) == 1:  # one backend's whole model: a twin of that column
        row["mix_whole_on"] = mixed.plan.steps[0].backend
    saved = mixed.save(os.path.join(keep, "mix"))
    deployed = collage_mlir.load(saved)
    runners = {"mix": deployed.run, AS_COMPILED: mixed.run}
    if args.without_islands:  # the same run without the archipelago, timed beside it
        plain = collage_mlir.compile(path, backends=backends, cache=args.cache,
                                     max_depth=args.max_depth, input_shapes=shapes,
                                     refine_budget_s=args.refine_budget, islands=False,
                                     tolerance=tolerance(args.rtol, args.atol_scale))
        runners[PLAIN] = plain.run
        row["plain_regions"] = len(plain.partitioning.choices)
        row["plain_kept"] = plain.verdict.kept if plain.verdict else "-"
    original = collage_mlir.import_onnx(path, input_shapes=shapes)
    for b in backends:
        try:
            if b in args.whole:
                runners[f"{b}"] = whole_model_runner(original, b)
        except Exception as e:
            row[f"{b}_error"] = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        if b in args.single:
            try:
                single = collage_mlir.compile(path, backends=[b], cache=args.cache,
                                              max_depth=args.max_depth, input_shapes=shapes,
                                              tolerance=tolerance(args.rtol, args.atol_scale))
                runners[f"{b}/collage"] = single.run
                row[f"{b}/collage_regions"] = len(single.plan.steps)
            except Exception as e:
                row[f"{b}/collage_error"] = str(e).splitlines()[0][:80]
    for b in args.controls.split(","):
        if b in runners:  # a second, independent build of X: the noise floor
            runners[b + TWIN] = (collage_mlir.load(saved).run if b == "mix"
                                 else whole_model_runner(original, b))
    row["greedy"] = greedy_runners(mixed, path, shapes, runners, row, args)
    inputs = model_inputs(original)
    if "onnxruntime" in runners:
        row["max_err"] = relative_error(deployed.run(inputs), runners["onnxruntime"](inputs))
    for t in time_side_by_side(runners, inputs, rounds=args.rounds):
        row[t.name] = t.median_s * 1e3
    row["region_errors"] = region_errors(mixed)  # the report rows are compile's
    row["op_winners"] = op_winners(path, shapes, backends, args.cache, tolerance(args.rtol, args.atol_scale))
    if args.ceiling:
        row["ceiling"] = ceiling_cell(path)
    row["refinement"] = mixed.refinement
    row["islands"] = [f"{t.what}: {t.why}" for t in mixed.trials if t.phase == "islands"]
    return row


PLAIN = "mix without islands"
"""The runner of `--without-islands`: the model partitioned with `islands=False`."""


def ceiling_cell(source: str | onnx.ModelProto) -> tuple[float, float, float] | str:
    """What any onnxruntime/OpenVINO split could gain, from both whole models' profilers
    (`bench/ceiling.py`): (ceiling, what noise alone makes of that bound, what is left of it
    with hand-offs priced); or why not."""
    try:
        pair, noise, _, _ = ceiling.measure(source, rounds=10)
    except Exception as e:  # a backend that cannot run the model whole
        return f"not measured: {str(e).strip().splitlines()[-1][:100]}"
    return pair.ratio, noise, pair.priced_ratio


def builds(row: dict, name: str) -> list[str]:
    """The timed builds of contender `name`: its second build, and for a backend its
    single-backend partition when that is one region (its whole model built again)."""
    same = [name, name + TWIN]
    if row.get(f"{name}/collage_regions") == 1:
        same.append(f"{name}/collage")
    return [n for n in same if n in row]


def contender_ms(row: dict, name: str) -> float:
    """A contender's time in the run: the fastest of its builds."""
    return min(row[n] for n in builds(row, name))


def run_noise(row: dict, backends: list[str]) -> float:
    """How far the fastest build of a contender may be off: the gap from each contender's
    fastest build to its next fastest, leaving out odd builds (more than ODD_BUILD slower
    than the fastest: stalled throughout); and when the mix is one backend's whole model,
    the gap between its fastest build and that backend's (the same model: a tie)."""
    return max((gap for gap, _ in _gaps(row, backends)), default=0.0)


def noise_cell(row: dict, backends: list[str]) -> str:
    """Which two timings set the run's noise, and theirs, and the odd builds left out."""
    gaps = _gaps(row, backends)
    odd = [f"{n} {row[n]:.2f} ms against {fast} {row[fast]:.2f}"
           for n, fast in odd_builds(row, backends)]
    slower, faster = max(gaps)[1] if gaps else (None, None)
    said = (f"{slower} {row[slower]:.2f} ms against {faster} {row[faster]:.2f}" if gaps
            else "no second build timed")
    return said + (f"; odd builds, left out: {', '.join(odd)}" if odd else "")


def _ranked(row: dict, name: str) -> list[str]:
    """The builds of contender `name`, fastest first (none when it was not timed)."""
    return sorted(builds(row, name), key=lambda n: row[n]) if name in row else []


def odd_builds(row: dict, backends: list[str]) -> list[tuple[str, str]]:
    """(build, the fastest of its contender) for each build more than ODD_BUILD slower."""
    return [(n, ranked[0]) for ranked in (_ranked(row, c) for c in ["mix", *backends])
            for n in ranked[1:] if row[n] > row[ranked[0]] * (1 + ODD_BUILD)]


def _gaps(row: dict, backends: list[str]) -> list[tuple[float, tuple[str, str]]]:
    """(relative gap, (slower, faster)) for each pair `run_noise` compares."""
    odd = {n for n, _ in odd_builds(row, backends)}
    out = []
    for c in ["mix", *backends]:
        ranked = [n for n in _ranked(row, c) if n not in odd]
        if len(ranked) > 1:
            out.append((row[ranked[1]] / row[ranked[0]] - 1, (ranked[1], ranked[0])))
    whole_on = row.get("mix_whole_on")
    if whole_on in row and "mix" in row:
        mix, x = _ranked(row, "mix")[0], _ranked(row, whole_on)[0]
        out.append((abs(row[mix] / row[x] - 1), (mix, x) if row[mix] >= row[x] else (x, mix)))
    return out


def refinement_cell(refinement) -> str:
    """Each neighbour refinement tried, timed end to end, against the incumbent (what the
    measure table's per-op winners come to inside the chain), or why it was not timed."""
    if refinement is None or not refinement.trials or not refinement.incumbent_s:
        return "–"
    base = refinement.incumbent_s
    return "; ".join(f"{t.what} {t.measured_s / base - 1:+.1%}" + (" (kept)" if t.kept else "")
                     if t.measured_s else f"{t.what}: {t.why}" for t in refinement.trials)


def greedy_runners(mixed, path, shapes, runners: dict, row: dict, args) -> dict[str, tuple]:
    """Add the greedy baselines worth timing to `runners`; returns baseline name →
    (runner name, estimated ms). A build that fails is noted in `row`."""
    n_ops = sum(r.ops for r in mixed.report_rows)
    whole, built = greedy_to_time(mixed.baselines, n_ops, args.greedy_margin, args.greedy)
    estimates = {b.name: b.cost * 1e3 for b in mixed.baselines}
    out = {name: (backend, estimates[name]) for name, backend in whole.items()
           if backend in runners}
    for b in built:
        try:
            runners[f"greedy:{b.name}"] = build_baseline(path, shapes, b).run
            out[b.name] = (f"greedy:{b.name}", estimates[b.name])
        except Exception as e:
            row[f"{b.name}_error"] = str(e).splitlines()[0][:80] if str(e) else repr(e)
    return out


def greedy_cells(row: dict) -> tuple[str, str]:
    """("name ms (est. ms)" of the fastest greedy baseline, "apparent loss ms (%)")."""
    timed = {n: (contender_ms(row, key), est) for n, (key, est) in row["greedy"].items()
             if key in row}
    if not timed:
        return "–", "–"
    name = min(timed, key=lambda n: timed[n][0])
    got, est = timed[name]
    loss = contender_ms(row, "mix") - got
    return (f"{name} {got:.2f} (est. {est:.2f})",
            f"{loss:+.2f} ({loss / got:+.0%})")


def region_cell(errors: dict[str, tuple[float, float]]) -> str:
    """Median |estimate - measured| / measured over the regions, and how many."""
    rel = [abs(e - m) / m for e, m in errors.values() if m > 0 and math.isfinite(e)]
    return f"{statistics.median(rel):.0%} of {len(rel)}" if rel else "–"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(ZOO),
                   help="zoo names, light:NAME (light model-zoo) or .onnx paths")
    p.add_argument("--splat", action="store_true",
                   help="keep the light models' splat weights (default: random weights)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="static shape for a dynamic input (repeatable)")
    p.add_argument("--backends", default=",".join(available_backends()))
    p.add_argument("--rtol", type=float, default=None,
                   help="outputs' relative tolerance (as `collage-mlir partition --rtol`)")
    p.add_argument("--atol-scale", type=float, default=None,
                   help="outputs' absolute tolerance as a fraction of their magnitude")
    p.add_argument("--rounds", type=positive_int, default=20)
    p.add_argument("--cache", default=None)
    p.add_argument("--max-depth", type=int, default=None)
    p.add_argument("--no-single", dest="single", action="store_const", const="",
                   help="skip the single-backend partitions")
    p.add_argument("--whole", default=None, metavar="LIST",
                   help="backends whose whole model is compiled and timed (default: all)")
    p.add_argument("--single", default=None, metavar="LIST",
                   help="backends whose single-backend partition is built (default: all)")
    p.add_argument("--controls", default="mix,onnxruntime,openvino",
                   help="contenders built twice (the mix, backends' whole models): how far "
                        "apart builds of one contender land in this run; each runs as its "
                        "fastest build")
    p.add_argument("--greedy", type=int, default=2, metavar="N",
                   help="greedy baselines built and timed besides those that are one "
                        "backend's whole model (those are its column)")
    p.add_argument("--greedy-margin", type=float, default=1.5,
                   help="time a built baseline only when its estimate is within this factor "
                        "of the best baseline's")
    p.add_argument("--refine-budget", type=float, default=None, metavar="S",
                   help="seconds refinement may spend on the mix (default: the API's)")
    p.add_argument("--ceiling", action="store_true",
                   help="also bound what any onnxruntime/OpenVINO split could gain, from "
                        "both whole models' own profilers (bench/ceiling.py)")
    p.add_argument("--without-islands", action="store_true",
                   help="also partition without the archipelago offered to the search "
                        "(islands=False) and time that mix beside the others")
    p.add_argument("--per-region", action="store_true",
                   help="list each region's estimate against its measured call")
    p.add_argument("--differ", type=float, default=DIFFER, metavar="X",
                   help="per-op winners differ where the best backend op by op is at least "
                        "X times the per-op minima (the summary)")
    args = p.parse_args()
    unknown = [n for n in args.models.split(",") if not known_model(n)]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}: use {help_text()}")
    backends = usable_backends([b for b in args.backends.split(",") if b],  # skips, says why
                               say=lambda line: print(line, file=sys.stderr))
    args.single = set((args.backends if args.single is None else args.single).split(","))
    args.whole = set((args.backends if args.whole is None else args.whole).split(","))
    cols = ["mix"] + backends + [f"{b}/collage" for b in backends if b in args.single]
    print("| model | " + " | ".join(f"{c} ms" for c in cols)
          + " | mix/best | noise | best greedy ms | apparent loss ms | est. ms | est. err "
            "| region err | regions | check kept | max err "
            "| partition s | measure s | search s | verify s |")
    print("|---" * (len(cols) + 16) + "|")
    outcomes, failed = [], []
    for name in args.models.split(","):
        try:
            resolve(name, args.splat)  # exported once, here: a zoo model torch cannot export
        except Exception as e:  # is reported and the others still run
            why = (str(e).strip().splitlines() or [repr(e)])[0]
            print(f"| {name} | does not export: {why} |", flush=True)
            failed.append(name)
            continue
        try:
            row = bench_model(name, backends, args)
        except collage_mlir.CollageError as e:
            print(f"| {name} | failed: {e} |")
            failed.append(name)
            continue
        best = min(contender_ms(row, b) for b in backends if b in row)
        mix = contender_ms(row, "mix")
        noise = run_noise(row, backends)
        cells = [f"{contender_ms(row, c):.2f}" if c in row else "–" for c in cols]
        phases = row["phases"]
        err = (row["estimated_ms"] - mix) / mix
        greedy, loss = greedy_cells(row)
        print(f"| {name} | " + " | ".join(cells) + f" | {mix / best:.2f} | "
              f"±{noise:.0%} | {greedy} | {loss} | "
              f"{row['estimated_ms']:.2f} | {err:+.0%} | {region_cell(row['region_errors'])} | "
              f"{row['regions']} | {row['kept']} | "
              f"{row.get('max_err', 0):.1e} | {row['partition_s']:.1f} | "
              f"{phases.get('hand-offs', 0) + phases.get('measure', 0):.1f} | "
              f"{phases.get('search', 0):.2f} | "
              f"{phases.get('verify', 0):.1f} |", flush=True)
        singles = {k: v for k, v in row.items() if k.endswith("/collage_regions")}
        if singles:
            print("|   single-backend regions: "
                  + ", ".join(f"{k.split('/')[0]} {v}" for k, v in singles.items()) + " |")
        errors = {k: v for k, v in row.items() if k.endswith("_error")}
        for k, v in errors.items():
            print(f"|   {k}: {v} |")
        shares, headroom = row["op_winners"]
        outcomes.append(Outcome(name, mix / best, noise, headroom,
                                row["ceiling"] if isinstance(row.get("ceiling"), tuple)
                                else None))
        print("|   per-op winners (measure table): " + ", ".join(
            f"{b} {v:.0%}" for b, v in sorted(shares.items(), key=lambda t: -t[1]) if v)
            + f" of the per-op minima; best backend op by op {headroom:.2f}x that |")
        print(f"|   noise: {noise_cell(row, backends)} |")
        print(f"|   the mix as compiled (the instance `compile` returned): "
              f"{row[AS_COMPILED]:.2f} ms, {row[AS_COMPILED] / mix:.3f}x the loaded mix |")
        for line in row["islands"]:
            print(f"|   before the search: {line} |")
        if row["check"]:  # what the pick was kept on, minutes before the columns were timed
            print(f"|   {row['check']} |")
        if PLAIN in row:
            print(f"|   without the archipelago: {row[PLAIN]:.2f} ms (mix / that "
                  f"{mix / row[PLAIN]:.2f}), {row['plain_regions']} regions, check "
                  f"kept {row['plain_kept']} |")
        if isinstance(row.get("ceiling"), tuple):
            top, floor, priced = row["ceiling"]
            print(f"|   ceiling of any split, in the chain: {top:.3f} (noise ceiling "
                  f"{floor:.3f}, priced {priced:.3f}) |")
        elif "ceiling" in row:
            print(f"|   ceiling of any split, in the chain: {row['ceiling']} |")
        refined = row["refinement"]
        budget = (f"; {refined.seconds:.0f} s of a {refined.budget_s:.0f} s budget"
                  if getattr(refined, "budget_s", None) else "")
        print(f"|   refinement tried (vs the incumbent, end to end, noise "
              f"±{getattr(refined, 'noise', None) or 0:.1%}{budget}): "
              f"{refinement_cell(refined)} |")
        print("|   greedy: " + ", ".join(
            f"{n} {contender_ms(row, key):.2f} ms (est. {est:.2f})" if key in row
            else f"{n} not timed"
            for n, (key, est) in row["greedy"].items()) + " |")
        if args.per_region:
            for region, (e, m) in row["region_errors"].items():
                print(f"|   {region}: est. {e * 1e3:.3f} ms, measured {m * 1e3:.3f} ms "
                      f"({(e - m) / m:+.0%}) |")
    print("\n".join(summary(outcomes, args.differ)))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(guarded("bench/e2e.py", main))
