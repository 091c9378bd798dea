"""Timing one kernel: calls until the median settles, each after a cache sweep."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from collage_mlir.cost.protocol import MeasureSettings


def time_kernel(kernel: Any, inputs: Sequence[np.ndarray], s: MeasureSettings,
                stop_above: float | None = None) -> list[float]:
    """Per-call seconds of `kernel.run_borrowed(inputs)` (the call the runtime makes between
    regions: outputs left in the kernel's buffers, not copied out), same input arrays each
    call (bound once), after untimed calls (`warm_up`), each call after a cache sweep unless
    `s.cold_bytes` is 0.

    `stop_above`: seconds beyond which the caller needs no precision (the candidate loses
    to something already measured); once `s.min_runs_on_budget` calls have a median above
    it, timing stops there, as it does for a kernel that spends the budget."""
    run = getattr(kernel, "run_borrowed", kernel.run)
    warm_up(run, inputs, s)
    sweep = _sweep_buffer(s.cold_bytes) if s.cold_bytes else None
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < s.max_runs:
        if sweep is not None:
            sweep.sum()  # evict caches, let the backend's threads idle (see cold_bytes)
        t0 = time.perf_counter()
        run(inputs)
        times.append(time.perf_counter() - t0)
        n = len(times)
        if (stop_above is not None and n >= s.min_runs_on_budget
                and statistics.median(times) > stop_above):
            break
        if n >= max(s.min_runs, 2 * s.settle_window) and n % s.settle_window == 0:
            now, before = statistics.median(times), statistics.median(times[:-s.settle_window])
            if abs(now - before) <= s.settle * now:
                break
        if n >= s.min_runs_on_budget and time.perf_counter() - start > s.budget_s:
            break
    return times


BIG_CALL_S = 5e-3
"""A kernel whose warm-up calls take this long each gets the longer warm-up
(`MeasureSettings.big_warmup_s`): on resnet50's cold run with three backends, 28 of ~600
rows, ~1.5 s of extra calls."""
MAX_WARMUP = 10


def warm_up(run: Any, inputs: Sequence[np.ndarray], s: MeasureSettings) -> None:
    """`s.warmup` untimed calls; then, for a big kernel (each call `BIG_CALL_S` or more),
    more until `s.big_warmup_s` is spent or `MAX_WARMUP` calls are made."""
    start = time.perf_counter()
    for _ in range(s.warmup):
        run(inputs)
    calls = s.warmup
    while 0 < calls < MAX_WARMUP:
        spent = time.perf_counter() - start
        if spent >= s.big_warmup_s or spent < BIG_CALL_S * calls:
            return
        run(inputs)
        calls += 1


CUT_SHORT = "timing cut short above its bound"
"""The note on a row whose timing stopped at `stop_above` (`stopped_at_bound`): a later run
that needs its precision measures it again."""


def stopped_at_bound(times: Sequence[float], s: MeasureSettings,
                     stop_above: float | None) -> bool:
    """Whether `time_kernel` stopped at `stop_above` (the bound is checked first after each
    call, so it stopped there exactly when the condition holds for all of `times`)."""
    return (stop_above is not None and len(times) >= s.min_runs_on_budget
            and statistics.median(times) > stop_above)


@functools.lru_cache(maxsize=1)
def _sweep_buffer(nbytes: int) -> np.ndarray:
    return np.ones(max(nbytes // 4, 1), np.float32)


def summarize(times: Sequence[float]) -> dict[str, float]:
    """median, p90 and spread = (p90 - p10) / median."""
    arr = np.asarray(times)
    median = float(np.median(arr))
    p10, p90 = (float(v) for v in np.percentile(arr, [10, 90]))
    return {"median": median, "p90": p90, "spread": (p90 - p10) / median if median > 0 else 0.0,
            "runs": len(times)}
