"""Per-switch hand-off cost for every backend pair, side by side, with the cross/same ratio.

A hand-off is what a region boundary costs beyond the two kernels' own calls. It is
measured exactly as the transition model measures it (`cost/transition.py`: a ring of
RING distinct Relu kernels per backend, alternating A, B, A, B; the ring's time beyond the
kernels' hot calls, per switch), through the call path the runtime uses. Rounds interleave
every pair and size, so load from other processes falls on all of them alike; each cell is
the median over rounds. `ratio` is a cross pair's cost over the mean of its two
same-backend costs at that size (the goal: within ~2x).

Usage: python bench/handoff.py [--rounds N] [--backends a,b,c] [--sizes 256,65536,1048576]
       [--json FILE]  (sizes in f32 elements: 1 KiB, 256 KiB, 4 MiB by default)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

import numpy as np

from collage_mlir.backends.registry import available_backends, get_backend
from collage_mlir.cost import transition
from collage_mlir.importer import parse_mlir

SIZES = (256, 65_536, 1_048_576)


def rings(names: list[str], n: int) -> dict[tuple[str, str], list]:
    """(a, b) → a ring alternating RING kernels of `a` and RING of `b` (a == b included)."""
    kernels = {}
    for name in names:
        compiled = get_backend(name).compile_many(
            [parse_mlir(transition.relu_module_text(n), "handoff")
             for _ in range(2 * transition.RING)])
        for k in compiled:
            if isinstance(k, Exception):
                raise k
        kernels[name] = compiled
    out = {}
    for a, b in itertools.combinations_with_replacement(names, 2):
        first = kernels[a][: transition.RING]
        second = kernels[b][transition.RING:] if a == b else kernels[b][: transition.RING]
        out[(a, b)] = [k for pair in zip(first, second, strict=True) for k in pair]
    return out


def label(size: int) -> str:
    nbytes = 4 * size
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--backends", default=",".join(available_backends()))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--json", help="also write the medians here")
    args = parser.parse_args()
    names = args.backends.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    by_size = {n: rings(names, n) for n in sizes}
    xs = {n: [np.random.default_rng(n).standard_normal(n, dtype=np.float32)] for n in sizes}
    samples: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(args.rounds):
        for n in sizes:
            for pair, ring in by_size[n].items():
                t = transition._hand_offs(ring, xs[n], repeats=6, budget_s=0.3)
                samples.setdefault((*pair, n), []).append(t)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"per-switch hand-off, µs (median of {args.rounds} interleaved rounds, "
          f"RING={transition.RING}, METHOD={transition.METHOD})")
    print("| pair | " + " | ".join(label(n) for n in sizes) + " | "
          + " | ".join(f"ratio {label(n)}" for n in sizes) + " |")
    print("|---|" + "---|" * (2 * len(sizes)))
    for a, b in itertools.combinations_with_replacement(names, 2):
        cells = [f"{med[(a, b, n)] * 1e6:.1f}" for n in sizes]
        ratios = []
        for n in sizes:
            same = (med[(a, a, n)] + med[(b, b, n)]) / 2
            ratios.append("–" if a == b else
                          f"{med[(a, b, n)] / same:.2f}" if same > 0 else "inf")
        print(f"| {a}↔{b} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"a": a, "b": b, "elements": n, "seconds": t}
                       for (a, b, n), t in med.items()], f, indent=1)


if __name__ == "__main__":
    main()
