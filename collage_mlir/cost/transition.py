"""Transition cost: what handing a tensor from one backend's kernel to another's costs.

Measured, not guessed (the RFC leaves it out; it decides whether mixing pays for small
regions). The experiment runs in a measuring worker that has both backends loaded, on a
cheap elementwise region (Relu on a flat f32 tensor) at a few sizes, through the same
`Kernel.run` call path the runtime uses. Candidates are timed hot (one kernel, again and
again, input bound once); a partitioned model instead switches kernels at every region
boundary and hands over a fresh array. Per size and round we time the hot calls and the
chains A→B→A and B→A→B; the boundary cost is what a chain takes beyond its hot calls, per
kernel switch, at the median over rounds — so that a cover's estimate, its candidates'
costs plus these hand-offs, adds up to what the chained calls really take. A and B may be
the same backend: two compiled kernels of one backend have a boundary too (a few µs on
onnxruntime, far more on runtimes that wake a thread pool per compiled model). A line
`per_call + per_byte * nbytes` (Theil–Sen, both clipped at 0) is fitted and cached per
backend pair and host.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from collage_mlir.backends.base import Backend, Kernel
from collage_mlir.cost.key import KEY_VERSION, host_fingerprint

SIZES = (256, 16_384, 262_144, 1_048_576)
"""f32 elements per experiment: 1 KiB, 64 KiB, 1 MiB, 4 MiB."""

Point = tuple[int, float]
METHOD = "alternating-1"  # part of the key: a changed experiment must not reuse old numbers


def transition_key(src: str, src_version: str, dst: str, dst_version: str,
                   host: str | None = None) -> str:
    host = host_fingerprint() if host is None else host
    parts = [KEY_VERSION, "transition", METHOD, src, src_version, dst, dst_version, host]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def relu_module_text(n: int) -> str:
    """A one-op ONNX-in-MLIR region on `n` f32 values: cheap, so the hand-off dominates."""
    t = f"!torch.vtensor<[{n}],f32>"
    return (
        "module {\n"
        f"  func.func @transition(%arg0: {t}) -> {t} attributes "
        "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 17 : si64} {\n"
        f'    %0 = torch.operator "onnx.Relu"(%arg0) : ({t}) -> {t}\n'
        f"    return %0 : {t}\n"
        "  }\n"
        "}\n")


def _timer(f: Callable[[], object]) -> Callable[[], float]:
    def once() -> float:
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0
    return once


def _hand_offs(a: Kernel, b: Kernel, x: list[np.ndarray], repeats: int,
               budget_s: float) -> tuple[float, float]:
    """Median seconds per region boundary between kernels a and b, at one size.

    Candidates are measured hot: one kernel called again and again on a bound input. In a
    partitioned model every boundary instead switches kernels and re-binds a fresh array. A
    round times the hot calls (the second of two) and the chains a→b→a and b→a→b, each
    with three kernel switches (the one into the chain's first kernel included); the
    boundary cost is what the chains take beyond their hot calls, per switch. The two
    directions are not told apart (a chain holds both), so the same value is returned twice.
    """
    def timed(f: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    def hot(k: Kernel) -> float:
        k.run(x)
        return timed(lambda: k.run(x))

    def chain(first: Kernel, second: Kernel) -> float:
        return timed(lambda: first.run(second.run(first.run(x))))

    for _ in range(2):  # warm every path (first binds, page faults)
        hot(a), hot(b), chain(a, b), chain(b, a)
    per_switch = []
    start = time.perf_counter()
    for r in range(repeats):
        ha, hb = hot(a), hot(b)
        ab, ba = chain(a, b), chain(b, a)
        per_switch.append(((ab - 2 * ha - hb) + (ba - 2 * hb - ha)) / 6)
        if r >= 10 and time.perf_counter() - start > budget_s:
            break
    cost = statistics.median(per_switch)
    return cost, cost


def measure_points(src: Backend, dst: Backend, sizes: Sequence[int] = SIZES,
                   repeats: int = 60, budget_s: float = 2.0,
                   ) -> tuple[list[Point], list[Point]]:
    """(nbytes, seconds) hand-off points for src→dst and dst→src, one per size."""
    from collage_mlir.importer import parse_mlir

    forward: list[Point] = []
    backward: list[Point] = []
    for n in sizes:
        a = src.compile(parse_mlir(relu_module_text(n), "transition"))
        b = dst.compile(parse_mlir(relu_module_text(n), "transition"))
        x = [np.random.default_rng(n).standard_normal(n, dtype=np.float32)]
        ab, ba = _hand_offs(a, b, x, repeats, budget_s)
        forward.append((4 * n, ab))
        backward.append((4 * n, ba))
    return forward, backward


def fit(points: Sequence[Point]) -> tuple[float, float]:
    """Robust `per_call + per_byte * nbytes` through the points, both clipped at 0.

    Theil–Sen (slope: median of pairwise slopes; intercept: median residual): one point
    spoiled by a noisy neighbour process cannot tilt the line, unlike least squares, which
    once turned a 14 µs hand-off into a 300 µs per-call cost here.
    """
    xs = [float(n) for n, _ in points]
    ys = [float(t) for _, t in points]
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    per_byte = max(0.0, statistics.median(slopes)) if slopes else 0.0
    per_call = statistics.median(y - per_byte * x for x, y in zip(xs, ys, strict=True))
    return max(0.0, per_call), per_byte
