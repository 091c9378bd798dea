"""Transition cost: what handing a tensor from one backend's kernel to another's costs.

Measured, not guessed (the RFC leaves it out; it decides whether mixing pays for small
regions). The experiment runs in a measuring worker that has both backends loaded, on a
cheap elementwise region (Relu on a flat f32 tensor) at a few sizes, through the same
`Kernel.run` call path the runtime uses. Per size and round it times, back to back, the chains
A→B and B→A (the second kernel gets the first one's fresh output array) and the single calls
A and B with their input bound once — exactly how every candidate is measured. The hand-off
is the paired per-round difference, taken at the median over rounds:

    hand-off(A→B, n) = median_r( t_r(A→B) - t_r(A) - t_r(B) ),

so that a cover's estimate, the sum of its candidates' measured costs plus these hand-offs,
adds up to what the chained calls really take (pairing within a round cancels most of the
machine's drift). A line `per_call + per_byte * nbytes` (Theil–Sen, both clipped at 0) is
fitted per direction and cached per backend pair and host.
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
METHOD = "paired-2"  # part of the key: a changed experiment must not reuse old numbers


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
    """Median paired hand-off seconds (a→b, b→a) at one size."""
    runs = {"ab": _timer(lambda: b.run(a.run(x))), "ba": _timer(lambda: a.run(b.run(x))),
            "a": _timer(lambda: a.run(x)), "b": _timer(lambda: b.run(x))}
    for f in runs.values():  # warm up every path (first binds, page faults)
        f(), f()
    ab, ba = [], []
    start = time.perf_counter()
    for r in range(repeats):
        t = {k: f() for k, f in runs.items()}
        ab.append(t["ab"] - t["a"] - t["b"])
        ba.append(t["ba"] - t["a"] - t["b"])
        if r >= 10 and time.perf_counter() - start > budget_s:
            break
    return statistics.median(ab), statistics.median(ba)


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
