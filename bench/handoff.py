"""Per-switch hand-off cost for every backend pair, side by side, with the cross/same ratio.

A hand-off is what a region boundary costs beyond the two kernels' own calls. It is
measured as the transition model measures it (`cost/transition.py`: a ring of RING
distinct Relu kernels per backend, alternating A, B, A, B; the ring's time beyond the
kernels' hot calls, per switch), through the call path the runtime uses (`run_borrowed`
where the kernels have it, else `run`: the same file times an older checkout, run with
PYTHONPATH pointing there). `chain` is the ring's own time per kernel call, what a
partitioned model pays per region. Rounds interleave every pair and size, so load from
other processes falls on all of them alike; each cell is the median over rounds. `ratio`
is a cross pair's hand-off over the mean of its two same-backend ones at that size (the
goal: within ~2x; near 0 µs it is noise).

`--settings` instead times the chain per call of every cross pair under thread settings
and wait policies other than the backends' own (onnxruntime's spinning threads, OpenVINO's
core pinning, one thread each), interleaved with the defaults in one process.

Usage: python bench/handoff.py [--rounds N] [--backends a,b,c] [--sizes 256,65536,1048576]
       [--json FILE] [--settings]  (sizes in f32 elements: 1 KiB, 256 KiB, 4 MiB by default)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time

import numpy as np

from collage_mlir.backends.registry import available_backends, get_backend
from collage_mlir.cost import transition
from collage_mlir.driver import usable_backends
from collage_mlir.importer import parse_mlir
from collage_mlir.tools.args import check_output_file, positive_int
from collage_mlir.tools.guard import guarded

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


def ring_input(n: int) -> np.ndarray:
    """The ring's first input, laid out like any kernel's output (64-byte aligned: IREE
    copies an unaligned input on every call, which would be charged to its hot calls)."""
    x = np.empty(n + 16, np.float32)
    start = (-x.ctypes.data % 64) // 4
    x = x[start:start + n]
    x[...] = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    return x


def call(kernel):
    """The runtime's call of a kernel between regions."""
    return getattr(kernel, "run_borrowed", kernel.run)


def timed_ring(ring: list, x: list[np.ndarray], repeats: int = 6) -> tuple[float, float]:
    """(median seconds per switch beyond the hot calls, median seconds per call in the
    ring), as `transition._hand_offs` takes them."""
    def hot(k) -> float:
        call(k)(x)
        t0 = time.perf_counter()
        call(k)(x)
        return time.perf_counter() - t0

    def walk() -> float:
        y = x
        t0 = time.perf_counter()
        for k in ring:
            y = call(k)(y)
        return time.perf_counter() - t0

    walk(), walk()
    surplus, per_call = [], []
    for _ in range(repeats):
        solo = math.fsum(hot(k) for k in ring)
        t = walk()
        surplus.append((t - solo) / len(ring))
        per_call.append(t / len(ring))
    return statistics.median(surplus), statistics.median(per_call)


SETTINGS: dict[str, dict[str, dict[str, str]]] = {
    "default": {},
    "ort spinning": {"onnxruntime": {"session.intra_op.allow_spinning": "1"}},
    "ov pinning": {"openvino": {"ENABLE_CPU_PINNING": "YES"}},
    "ov throughput hint": {"openvino": {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "1"}},
    "1 thread (ort, ov)": {"onnxruntime": {"threads": "1"}, "openvino": {"threads": "1"}},
    "1 thread (all)": {"onnxruntime": {"threads": "1"}, "openvino": {"threads": "1"},
                       "iree": {"threads": "1"}},
}
"""Variants of the backends' thread settings and wait policies."""


def variant_kernels(name: str, extra: dict[str, str], n: int, count: int) -> list:
    """`count` Relu kernels of backend `name` compiled with the settings in `extra`."""
    from collage_mlir.backends import onnxruntime as ort_backend

    options = {"threads": int(extra["threads"])} if "threads" in extra else {}
    backend = get_backend(name, **options)
    entries = {k: v for k, v in extra.items() if k != "threads"}
    real = ort_backend.session_options
    if name == "onnxruntime" and entries:
        def patched(threads: int, optimize: bool = True):
            so = real(threads, optimize)
            for k, v in entries.items():
                so.add_session_config_entry(k, v)
            return so
        ort_backend.session_options = patched
    if name == "openvino" and entries:
        base = backend.config
        backend.config = lambda: {**base(), **entries}
    try:
        compiled = backend.compile_many(
            [parse_mlir(transition.relu_module_text(n), "settings") for _ in range(count)])
    finally:
        ort_backend.session_options = real
    for k in compiled:
        if isinstance(k, Exception):
            raise k
    return compiled


def settings_table(names: list[str], sizes: list[int], rounds: int) -> None:
    """Chain per call (µs) of every cross pair under each of SETTINGS, interleaved."""
    rings_by: dict[tuple[str, int], dict[tuple[str, str], list]] = {}
    for label_, variant in SETTINGS.items():
        for n in sizes:
            ks = {b: variant_kernels(b, variant.get(b, {}), n, transition.RING) for b in names}
            rings_by[(label_, n)] = {
                (a, b): [k for pair in zip(ks[a], ks[b], strict=True) for k in pair]
                for a, b in itertools.combinations(names, 2)}
    xs = {n: [ring_input(n)] for n in sizes}
    samples: dict[tuple[str, int, tuple[str, str]], list[float]] = {}
    for _ in range(rounds):
        for (label_, n), by_pair in rings_by.items():
            for pair, ring in by_pair.items():
                samples.setdefault((label_, n, pair), []).append(timed_ring(ring, xs[n])[1])
    pairs = list(itertools.combinations(names, 2))
    print(f"chain per call, µs, by thread setting (median of {rounds} interleaved rounds)")
    print("| setting | " + " | ".join(f"{a}↔{b} {label(n)}" for n in sizes for a, b in pairs)
          + " |")
    print("|---|" + "---|" * (len(sizes) * len(pairs)))
    for label_ in SETTINGS:
        cells = [f"{statistics.median(samples[(label_, n, p)]) * 1e6:.1f}"
                 for n in sizes for p in pairs]
        print(f"| {label_} | " + " | ".join(cells) + " |", flush=True)


def _sizes(text: str) -> list[int]:
    """`--sizes`: element counts, comma-separated, each at least 1."""
    return [positive_int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=9)
    parser.add_argument("--backends", default=",".join(available_backends()))
    parser.add_argument("--sizes", type=_sizes, default=list(SIZES))
    parser.add_argument("--json", help="also write the medians here")
    parser.add_argument("--settings", action="store_true",
                        help="compare thread settings and wait policies instead")
    args = parser.parse_args()
    if args.json:
        check_output_file(args.json)  # before the run, not after it
    names = usable_backends([b for b in args.backends.split(",") if b])
    sizes = args.sizes
    if args.settings:
        settings_table(names, sizes, args.rounds)
        return 0
    by_size = {n: rings(names, n) for n in sizes}
    xs = {n: [ring_input(n)] for n in sizes}
    samples: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for n in sizes:
            for pair, ring in by_size[n].items():
                samples.setdefault((*pair, n), []).append(timed_ring(ring, xs[n]))
    med = {k: statistics.median(t for t, _ in v) for k, v in samples.items()}
    chain = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
    print(f"per-switch hand-off and chain per call, µs (median of {args.rounds} interleaved "
          f"rounds, RING={transition.RING})")
    print("| pair | " + " | ".join(f"hand-off {label(n)}" for n in sizes) + " | "
          + " | ".join(f"chain {label(n)}" for n in sizes) + " | "
          + " | ".join(f"ratio {label(n)}" for n in sizes) + " |")
    print("|---|" + "---|" * (3 * len(sizes)))
    for a, b in itertools.combinations_with_replacement(names, 2):
        cells = [f"{med[(a, b, n)] * 1e6:.1f}" for n in sizes]
        cells += [f"{chain[(a, b, n)] * 1e6:.1f}" for n in sizes]
        for n in sizes:
            same = (med[(a, a, n)] + med[(b, b, n)]) / 2
            cells.append("–" if a == b else
                         f"{med[(a, b, n)] / same:.2f}" if same > 0 else "n/a")
        print(f"| {a}↔{b} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"a": a, "b": b, "elements": n, "seconds": t, "chain": chain[(a, b, n)]}
                       for (a, b, n), t in med.items()], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(guarded("bench/handoff.py", main))
