"""collage-mlir demo — the whole pipeline on the bundled example, against each backend alone."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "alexnet.onnx"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from collage_mlir.tools.cmd_partition import add_common_arguments

    p.add_argument("model", nargs="?", default=str(EXAMPLE),
                   help=f"ONNX model (default: the bundled {EXAMPLE.name})")
    p.add_argument("--rounds", type=int, default=20, help="timed rounds per contender")
    add_common_arguments(p)


def run(args: argparse.Namespace) -> int:
    import collage_mlir
    from collage_mlir.check.compare import time_side_by_side, whole_model_runner
    from collage_mlir.tensors import max_abs_diff, model_inputs
    from collage_mlir.tools.cmd_partition import compile_from_args

    print(f"model: {args.model}")
    t0 = time.perf_counter()
    model = compile_from_args(args.model, args)
    print(f"partitioned in {time.perf_counter() - t0:.1f} s "
          f"(import, annotate, measure or cache, search, outline, compile)\n")
    print(model.report())
    original = collage_mlir.import_onnx(args.model)
    inputs = model_inputs(original)
    runners = {"collage (mixed)": lambda a: model.run(a)}
    for name in sorted(model.backends_considered):
        try:
            runners[f"{name} alone"] = whole_model_runner(original, name)
        except Exception as e:  # a backend that cannot take the whole model is reported
            print(f"{name} alone: cannot run the whole model ({str(e).splitlines()[0][:120]})")
    reference = runners.get("onnxruntime alone")
    if reference is not None:
        diff = max_abs_diff(model.run(inputs), reference(inputs))
        print(f"\nmax |collage - onnxruntime| over outputs: {diff:.3g}")
    timings = time_side_by_side(runners, inputs, rounds=args.rounds)
    best_single = min((t.median_s for t in timings if t.name != "collage (mixed)"),
                      default=None)
    print("\nend-to-end latency (median of interleaved rounds, this machine):")
    for t in timings:
        ratio = f"  x{t.median_s / best_single:.2f} of best single" if best_single else ""
        print(f"  {t.name:<18} {t.median_s * 1e3:8.3f} ms  (p90 {t.p90_s * 1e3:.3f}){ratio}")
    return 0
