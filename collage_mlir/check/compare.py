"""Side-by-side latency of a partitioned model and each backend running the whole model.

Used by the end-to-end check, `collage-mlir demo`, `run --repeat` and `bench/`. Timings
interleave the contenders round by round so that machine noise hits them alike; only ratios
taken in one run are meaningful.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import Kernel
from collage_mlir.backends.registry import get_backend
from collage_mlir.dialects.func import public_functions
from collage_mlir.runtime.model import region_module

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


NOISE_FLOOR = 0.02
"""Smallest gain a timed decision acts on whatever the run's own noise: identical kernels
timed quietly side by side spread about ±2% on this project's machines."""
CONFIRM_ROUNDS = 10
"""Rounds, at least, of the second timing that confirms a winner before it is kept."""


def whole_model_runner(module: ir.Module, backend_name: str, saved: str | None = None
                       ) -> Runner:
    """Compile the whole (un-partitioned) model on one backend, or load the kernel saved
    at stem `saved` (by a probe, `check/isolated.py`)."""
    return whole_model_kernel(module, backend_name, saved).run


def whole_model_kernel(module: ir.Module, backend_name: str, saved: str | None = None
                       ) -> Kernel:
    """`whole_model_runner`'s kernel."""
    backend = get_backend(backend_name)
    whole = region_module(public_functions(module)[0])
    return backend.load_kernel(whole, saved) if saved else backend.compile(whole)


@dataclass
class Timing:
    name: str
    median_s: float
    p90_s: float
    min_s: float = math.nan
    """The fastest call (NaN: not recorded)."""
    max_s: float = math.nan
    """The slowest call (NaN: not recorded)."""


def time_side_by_side(runners: dict[str, Runner], inputs: Sequence[np.ndarray],
                      rounds: int = 20, warmup: int = 3, inner: int = 1,
                      seed: int = 0, rewarm: int = 1) -> list[Timing]:
    """Median and p90 per runner. Every round runs each runner in a shuffled order, so
    no runner always follows the same neighbour (a backend whose threads keep spinning
    after its call would otherwise slow the same victim every round), and slow drift of
    the machine hits all alike. Within a round a runner first gets `rewarm` untimed calls:
    what is compared is each runner's steady latency when it has the machine, as when it
    serves alone — not how well it survives the other contenders trampling its caches and
    thread pools (a mixed zfnet: 14.6 ms alone, 16-17 ms timed right after any one other
    contender, 21.5 ms among six)."""
    samples: dict[str, list[float]] = {n: [] for n in runners}
    args = list(inputs)
    order = list(runners.items())
    rng = np.random.default_rng(seed)
    for _ in range(warmup):
        for r in runners.values():
            r(args)
    for _ in range(rounds):
        for k in rng.permutation(len(order)):
            name, r = order[k]
            for _ in range(rewarm):
                r(args)
            t0 = time.perf_counter()
            for _ in range(inner):
                r(args)
            samples[name].append((time.perf_counter() - t0) / inner)
    return [Timing(n, float(np.median(s)), float(np.percentile(s, 90)), min(s), max(s))
            for n, s in samples.items()]


def wins_again(runners: dict[str, Runner], incumbent: str, challenger: str,
               inputs: Sequence[np.ndarray], rounds: int, margin: float,
               timer: Callable[..., list[Timing]] = time_side_by_side) -> bool:
    """Whether `challenger` beats `incumbent` by more than `margin` again, the two timed side
    by side alone (at least CONFIRM_ROUNDS rounds): of several contenders timed once, the
    fastest is as often the one whose timing erred lowest. `timer` is the caller's own
    `time_side_by_side` (tests replace it per module)."""
    medians = {t.name: t.median_s for t in timer(
        {n: runners[n] for n in (incumbent, challenger)}, inputs,
        rounds=max(rounds, CONFIRM_ROUNDS), warmup=1, seed=1)}
    return medians[challenger] < medians[incumbent] * (1 - margin)
