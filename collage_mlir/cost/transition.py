"""Transition cost: what handing a tensor from one backend's kernel to another's costs.

Measured, not guessed (the RFC leaves it out; it decides whether mixing pays for small
regions). The experiment runs in a measuring worker that has both backends loaded, on a
cheap elementwise region (Relu on a flat f32 tensor) at a few sizes, through the same
`Kernel.run` call path the runtime uses: for each size it times the chains A→B, B→A, A→A and
B→B in round-robin (so machine noise hits all four alike) and takes

    hand-off(A→B, n) = median(A→B) - (median(A→A) + median(B→B)) / 2,

i.e. the extra over what the two calls cost when each stays on its own backend (whose own
per-call cost is already in every measured candidate). A least-squares line
`per_call + per_byte * nbytes` (both clipped at 0) is fitted per direction and cached per
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


def transition_key(src: str, src_version: str, dst: str, dst_version: str,
                   host: str | None = None) -> str:
    host = host_fingerprint() if host is None else host
    parts = [KEY_VERSION, "transition", src, src_version, dst, dst_version, host]
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


def _chain(first: Kernel, second: Kernel, x: list[np.ndarray]) -> Callable[[], float]:
    def once() -> float:
        t0 = time.perf_counter()
        second.run(first.run(x))
        return time.perf_counter() - t0
    return once


def measure_points(src: Backend, dst: Backend, sizes: Sequence[int] = SIZES,
                   repeats: int = 40, budget_s: float = 2.0,
                   ) -> tuple[list[Point], list[Point]]:
    """(nbytes, seconds) hand-off points for src→dst and dst→src, one per size."""
    from collage_mlir.importer import parse_mlir

    forward: list[Point] = []
    backward: list[Point] = []
    for n in sizes:
        a = src.compile(parse_mlir(relu_module_text(n), "transition"))
        b = dst.compile(parse_mlir(relu_module_text(n), "transition"))
        x = [np.random.default_rng(n).standard_normal(n, dtype=np.float32)]
        chains = {"ab": _chain(a, b, x), "ba": _chain(b, a, x),
                  "aa": _chain(a, a, x), "bb": _chain(b, b, x)}
        times: dict[str, list[float]] = {k: [] for k in chains}
        for f in chains.values():  # warm up every path (first binds, page faults)
            f(), f()
        start = time.perf_counter()
        for r in range(repeats):
            for k, f in chains.items():
                times[k].append(f())
            if r >= 5 and time.perf_counter() - start > budget_s:
                break
        med = {k: statistics.median(v) for k, v in times.items()}
        base = (med["aa"] + med["bb"]) / 2
        nbytes = 4 * n
        forward.append((nbytes, med["ab"] - base))
        backward.append((nbytes, med["ba"] - base))
    return forward, backward


def fit(points: Sequence[Point]) -> tuple[float, float]:
    """Least-squares `per_call + per_byte * nbytes` through the points, both clipped at 0."""
    xs = np.array([p[0] for p in points], dtype=np.float64)
    ys = np.array([p[1] for p in points], dtype=np.float64)
    if len(points) == 1 or np.ptp(xs) == 0:
        return max(0.0, float(ys.mean())), 0.0
    per_byte, per_call = np.polyfit(xs, ys, 1)
    if per_byte < 0:  # no growth with size: a constant is the better model
        return max(0.0, float(ys.mean())), 0.0
    if per_call < 0:  # a line through the origin instead
        return 0.0, max(0.0, float(xs @ ys / (xs @ xs)))
    return float(per_call), float(per_byte)
