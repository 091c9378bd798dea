"""How reproducible a cold measure phase is, with and without the host's pace (`cost/pace.py`).

    python bench/pace.py [MODEL.onnx ...] [--backends onnxruntime,openvino] [--rounds 3]

Per model, `--rounds` pairs of cold measure phases (each on a fresh cache, the measure phase
`partition` runs: hand-offs, then every candidate in stages, pruned), one with the pace
recorded and slow moments timed again, one without, in alternating order so that drift of the
machine hits both alike. Printed per mode: how far the same region's cached median moved
between two runs of that mode (|log ratio| over the regions both measured: median and p90),
the measure time, and with the pace on, how many timings fell in a slow moment and how many
of those a second timing replaced.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack

from collage_mlir import driver
from collage_mlir.cost.measure import MeasuringEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.export.resources import weight_store
from collage_mlir.graph import SubGraphConfig


def default_model() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_squeezenet.onnx")


def cold_run(path: str, backends: list[str], paced: bool) -> dict:
    """One cold measure phase: {key: median} of its ok rows, its seconds, and the timings
    taken in a slow moment and replaced by a second one (summed over its estimate calls)."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        module = driver.load(path)
        stack.enter_context(weight_store(module))
        graph = driver.entry_graph(module)
        config = SubGraphConfig(max_exits=driver.DEFAULT_MAX_EXITS, allow_taps=False,
                                max_depth=driver.DEFAULT_MAX_DEPTH)
        candidates = driver.annotate(graph, backends, config)
        est = MeasuringEstimator(backends, cache_path=os.path.join(tmp, "c.sqlite"),
                                 settings=MeasureSettings(pace=paced))
        stack.callback(est.close)
        counts = {"slow": 0, "retimed": 0}
        estimate = est.estimate

        def counted(cands, progress=None):
            costs = estimate(cands, progress)
            counts["slow"] += est.stats.slow
            counts["retimed"] += est.stats.retimed
            return costs

        est.estimate = counted  # stats are per call; this sums them
        start = time.perf_counter()
        driver.price_hand_offs(est, backends)
        driver.measure(est, candidates, graph=graph)
        seconds = time.perf_counter() - start
        medians = {m.key: m.median for m in est.cache.measurements() if m.median}
    return {"medians": medians, "seconds": seconds, **counts}


def spread(runs: list[dict]) -> tuple[float, float, int]:
    """Median and p90 of |log ratio| of one region's median between two runs, over every
    pair of runs and the regions both measured; and how many such comparisons."""
    moved = []
    for a, b in itertools.combinations(runs, 2):
        for key in a["medians"].keys() & b["medians"].keys():
            moved.append(abs(math.log(a["medians"][key] / b["medians"][key])))
    if not moved:
        return math.nan, math.nan, 0
    moved.sort()
    return statistics.median(moved), moved[int(0.9 * (len(moved) - 1))], len(moved)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", help=f"ONNX models (default: {default_model()})")
    p.add_argument("--backends", default="onnxruntime,openvino")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    backends = args.backends.split(",")
    for path in args.models or [default_model()]:
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for r in range(args.rounds):
            for paced in ((True, False) if r % 2 == 0 else (False, True)):
                runs[paced].append(cold_run(path, backends, paced))
                got = runs[paced][-1]
                print(f"{os.path.basename(path)} round {r + 1} pace {'on ' if paced else 'off'}: "
                      f"{got['seconds']:.1f} s, {len(got['medians'])} rows", file=sys.stderr)
        for paced in (False, True):
            med, p90, n = spread(runs[paced])
            seconds = statistics.mean(r["seconds"] for r in runs[paced])
            extra = (f"; {sum(r['slow'] for r in runs[paced])} timings in a slow moment, "
                     f"{sum(r['retimed'] for r in runs[paced])} replaced" if paced else "")
            print(f"{os.path.basename(path):24s} pace {'on ' if paced else 'off'}: region medians "
                  f"moved between runs by median {med:.3f} p90 {p90:.3f} (|log ratio|, {n} "
                  f"pairs); measure {seconds:.1f} s{extra}")


if __name__ == "__main__":
    main()
