"""Transition cost: what handing a tensor from one backend's kernel to another's costs.

Measured, not guessed (the RFC leaves it out; it decides whether mixing pays for small
regions). The experiment runs in a measuring worker that has both backends loaded, on a
cheap elementwise region (Relu on a flat f32 tensor) at a few sizes, through the same
call path the runtime uses (`Kernel.run_borrowed`: each kernel writes into buffers of its
own and the next binds them by reference). Candidates are timed hot (one kernel, again and
again, input bound once); a partitioned model instead switches kernels at every region
boundary and hands over another kernel's buffer. Per size and round we time each kernel hot and then
a ring of RING distinct kernels per backend, alternating A, B, A, B, ...; the boundary cost
is what the ring takes beyond its hot calls, per kernel switch, at the median over rounds —
so that a cover's estimate, its candidates' costs plus these hand-offs, adds up to what the
chained calls really take. A and B may be
the same backend: two compiled kernels of one backend have a boundary too (a few µs on
onnxruntime, far more on runtimes that wake a thread pool per compiled model). A line
`per_call + per_byte * nbytes` (Theil–Sen, both clipped at 0) is fitted and cached per
backend pair and host.

Candidates are now timed cold (after a cache sweep, `MeasureSettings.cold_bytes`), so part
of what the ring's surplus holds — a backend's threads waking, data fetched from memory — is
in the candidates' costs as well; the overlap is small beside the copy cost per byte: on a
mixed alexnet the estimate came within 3% of the measured chain (8.30 vs 8.10 ms).
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from collage_mlir.backends.base import Backend, Kernel, aligned_empty
from collage_mlir.cost.key import KEY_VERSION, host_fingerprint

SIZES = (256, 16_384, 262_144, 1_048_576)
"""f32 elements per experiment: 1 KiB, 64 KiB, 1 MiB, 4 MiB."""

Point = tuple[int, float]
METHOD = "ring-3"  # part of the key: a changed experiment must not reuse old numbers


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


RING = 8
"""Distinct kernels per backend in the experiment: switching among many compiled kernels
costs more than between two (measured when outputs were fresh copies, METHOD ring-1: 30
distinct OpenVINO kernels ~270 µs per switch against ~50 µs for two alternating;
onnxruntime ~100 µs against ~25 µs). With reused buffers (ring-3, `bench/handoff.py`, 2
loaded cores) a switch costs 1-10 µs at 1 KiB, 1-40 µs at 256 KiB and 0.1-0.9 ms at 4 MiB
for every pair, onnxruntime↔openvino at 4 MiB 0.9 ms instead of 2.8 ms."""


def _timed(f: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _hand_offs(ring: list[Kernel], x: list[np.ndarray], repeats: int,
               budget_s: float) -> float:
    """Median seconds per region boundary along `ring` (kernels alternating backends).

    Candidates are measured hot: one kernel called again and again on a bound input. In a
    partitioned model every boundary instead switches kernels and hands over the previous
    kernel's output buffer. A round times each kernel hot (the second of two calls) and then
    the whole ring, each kernel fed its predecessor's output as the runtime feeds it
    (`run_borrowed`, `PartitionedModel._execute`); the boundary cost is what the ring takes
    beyond the hot calls, per kernel switch.
    """
    def hot(k: Kernel) -> float:
        k.run_borrowed(x)
        return _timed(lambda: k.run_borrowed(x))

    def walk() -> None:
        y = x
        for k in ring:
            y = k.run_borrowed(y)

    for _ in range(2):  # warm every path (first binds, page faults)
        walk()
    per_switch = []
    start = time.perf_counter()
    for r in range(repeats):
        solo = math.fsum(hot(k) for k in ring)
        per_switch.append((_timed(walk) - solo) / len(ring))
        if r >= 5 and time.perf_counter() - start > budget_s:
            break
    return statistics.median(per_switch)


def compile_rings(backend: Backend, sizes: Sequence[int] = SIZES
                  ) -> dict[tuple[int, int], list[Kernel]]:
    """(f32 elements, copy) → RING distinct Relu kernels compiled by `backend`, two copies
    per size (a same-backend pair rings two sets), all in one `compile_many`: an IREE
    compile costs about a second before any work, so one batch instead of one per ring."""
    from collage_mlir.importer import parse_mlir

    keys = [(n, copy) for n in sizes for copy in (0, 1)]
    compiled = backend.compile_many(
        [parse_mlir(relu_module_text(n), "transition") for n, _ in keys for _ in range(RING)])
    for k in compiled:
        if isinstance(k, Exception):
            raise k
    return {key: list(compiled[i * RING:(i + 1) * RING]) for i, key in enumerate(keys)}


class Rings:
    """Each backend's compiled rings, compiled on first use and kept for later pairs (a
    worker measures every pair of a run)."""

    def __init__(self, sizes: Sequence[int] = SIZES) -> None:
        self.sizes = tuple(sizes)
        self._by_backend: dict[int, tuple[Backend, dict[tuple[int, int], list[Kernel]]]] = {}

    def __call__(self, backend: Backend, n: int, copy: int) -> list[Kernel]:
        if id(backend) not in self._by_backend:
            self._by_backend[id(backend)] = (backend, compile_rings(backend, self.sizes))
        return self._by_backend[id(backend)][1][(n, copy)]


REPEATS = 20
"""Ring rounds per size at most (at least 6, `_hand_offs`), within BUDGET_S. The fitted
costs move as much between two runs of the experiment as between 20 and 40 rounds, so more
rounds buy time, not precision."""
BUDGET_S = 1.0
"""Seconds of rounds per size, after which the experiment moves on (once it has 6)."""


def measure_points(src: Backend, dst: Backend, sizes: Sequence[int] = SIZES,
                   repeats: int = REPEATS, budget_s: float = BUDGET_S,
                   rings: Rings | None = None) -> tuple[list[Point], list[Point]]:
    """(nbytes, seconds) hand-off points for src→dst and dst→src, one per size.

    A ring alternates RING distinct kernels of each backend, so it holds both directions
    equally and cannot tell them apart: both lists get the same points. `rings` supplies
    the kernels (a worker measuring several pairs passes its own, to reuse them).
    """
    rings = rings if rings is not None else Rings(sizes)
    points: list[Point] = []
    for n in sizes:
        kernels = (rings(src, n, 0), rings(dst, n, 1 if dst is src else 0))
        ring = [k for pair in zip(*kernels, strict=True) for k in pair]
        x = [aligned_empty((n,), np.float32)]  # as a kernel's output is (IREE copies others)
        x[0][...] = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
        points.append((4 * n, _hand_offs(ring, x, repeats, budget_s)))
    return points, list(points)


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
