"""Which cache sweep prices a mix's regions as they run in it: each region of a saved mix
timed the way the measure phase times a candidate (`cost.timing.time_kernel`, its
inputs as the chain hands them over), under each sweep size, against the region's median
call inside whole runs of the mix (`PartitionedModel.profile`).

`bench/sweep.py` says how a sweep moves the measure table; this says which table is right
for the chain. Sizes are timed in the order A B C C B A and each region keeps its faster
timing per size, so the VM's drift cancels. Prints each region's in-chain median and its
timing per size, their sums, and per size the geomean over regions of timing / in-chain.

    python bench/sweep_chain.py SAVED_DIR MODEL.onnx [--sizes 64,16,8]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

import collage_mlir
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.cost.timing import time_kernel
from collage_mlir.runtime.model import PartitionedModel, load
from collage_mlir.tensors import model_inputs

MIB = 1 << 20


def step_inputs(model: PartitionedModel, inputs: list[np.ndarray]) -> dict[str, list]:
    """Each region's inputs in one run of `model`, copied out of the chain."""
    slots: list = [None] * model.plan.slot_count
    arrays = model.arrange(inputs)
    slots[: len(arrays)] = arrays
    for i, constant in model.plan.constants.items():
        slots[i] = constant.value
    args = {}
    for step in model.plan.steps:
        args[step.callee] = [np.array(slots[i], copy=True) for i in step.args]
        results = model.kernels[step.callee].run_borrowed(args[step.callee])
        for i, r in zip(step.results, results, strict=True):
            slots[i] = np.array(r, copy=True)
    return args


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("saved", help="a directory `collage-mlir partition -o` wrote")
    p.add_argument("model", help="the ONNX model it was partitioned from (for its inputs)")
    p.add_argument("--sizes", default="64,16,8", help="sweep sizes in MiB")
    p.add_argument("--rounds", type=int, default=20, help="whole runs per profile")
    args = p.parse_args()
    sizes = [int(float(s) * MIB) for s in args.sizes.split(",")]
    model = load(args.saved)
    inputs = list(model_inputs(collage_mlir.import_onnx(args.model)))
    profiles = [model.profile(inputs, rounds=args.rounds) for _ in range(2)]
    chain = {k: min(p[k] for p in profiles) for k in profiles[0]}
    step_args = step_inputs(model, inputs)
    timed: dict[int, dict[str, float]] = {s: {} for s in sizes}
    for size in sizes + sizes[::-1]:
        settings = MeasureSettings(cold_bytes=size)
        for name, kernel in model.kernels.items():
            median = statistics.median(time_kernel(kernel, step_args[name], settings))
            timed[size][name] = min(timed[size].get(name, math.inf), median)
    print(f"{'region':32s} {'in chain':>9s} " + " ".join(f"{s // MIB:>6d}MiB" for s in sizes))
    for name in chain:
        print(f"{name:32s} {chain[name] * 1e3:9.3f} "
              + " ".join(f"{timed[s][name] * 1e3:9.3f}" for s in sizes))
    print(f"{'sum':32s} {sum(chain.values()) * 1e3:9.3f} "
          + " ".join(f"{sum(timed[s].values()) * 1e3:9.3f}" for s in sizes))
    for s in sizes:
        geo = math.exp(statistics.fmean(math.log(timed[s][k] / chain[k]) for k in chain))
        print(f"sweep {s // MIB} MiB: regions timed / in chain, geomean {geo:.3f}; "
              f"sum {sum(timed[s].values()) / sum(chain.values()):.3f}")


if __name__ == "__main__":
    main()
