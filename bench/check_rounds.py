"""How often the end-to-end check keeps the faster of two whole models, by its rounds.

The check (`check/verify.fastest`) keeps a one-region pick unless another whole model beats
it by more than the run's own noise, twice. On a near tie that takes rounds: this builds
the model whole on PICK (twice: the check's second build) and on RIVAL, times the three
side by side for `--reference` rounds to say which is faster, then runs the check `--trials`
times at each of `--rounds` and counts how often it kept the rival, and times the three
again at the end (the machine drifts). No measuring and no search.

    python bench/check_rounds.py MODEL [--pick openvino] [--rival onnxruntime]
                                 [--rounds 5,15] [--trials 6] [--reference 30]
"""

from __future__ import annotations

import argparse
import os
import sys

import collage_mlir
from collage_mlir.check.compare import time_side_by_side, whole_model_runner
from collage_mlir.check.verify import PICK, fastest
from collage_mlir.export.resources import weight_store
from collage_mlir.tensors import model_inputs

sys.path.insert(0, os.path.dirname(__file__))
from naming import help_text, known_model, resolve  # noqa: E402


def reference(runners: dict, inputs: list, rounds: int) -> str:
    """The contenders' medians over `rounds`, in ms, as one line."""
    times = {t.name: t.median_s for t in time_side_by_side(runners, inputs, rounds=rounds)}
    return ", ".join(f"{n} {t * 1e3:.2f}" for n, t in times.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help=help_text())
    p.add_argument("--pick", default="openvino")
    p.add_argument("--rival", default="onnxruntime")
    p.add_argument("--rounds", default="5,15", help="comma-separated rounds to compare")
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--reference", type=int, default=30)
    args = p.parse_args(argv)
    if not known_model(args.model):
        p.error(f"unknown model {args.model!r}: {help_text()}")
    label, model = resolve(args.model)
    module = collage_mlir.import_onnx(model)
    with weight_store(module):
        inputs = model_inputs(module)
        rival = f"{args.rival} whole"
        runners = {PICK: whole_model_runner(module, args.pick),
                   "pick (second build)": whole_model_runner(module, args.pick),
                   rival: whole_model_runner(module, args.rival)}
        for run in runners.values():
            run(inputs)
        print(f"{label}: reference, {args.reference} rounds (ms): "
              f"{reference(runners, inputs, args.reference)}", flush=True)
        for rounds in (int(r) for r in args.rounds.split(",")):
            kept = 0
            for _ in range(args.trials):
                verdict = fastest({PICK: runners[PICK], rival: runners[rival]}, inputs, rounds,
                                  {PICK: 1, rival: 1}, {PICK: runners["pick (second build)"]})
                kept += verdict.kept == rival
                print(f"  {rounds} rounds: kept {verdict.kept} (noise ±{verdict.noise:.1%}; "
                      + ", ".join(f"{n} {t * 1e3:.1f}" for n, t in verdict.timings.items())
                      + ")", flush=True)
            print(f"{rounds} rounds: kept {rival} in {kept} of {args.trials}", flush=True)
        print(f"reference again (ms): {reference(runners, inputs, args.reference)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
