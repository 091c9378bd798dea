"""The host's pace: how fast this machine runs right now, read from a fixed canary kernel.

A shared machine's speed drifts with what its other tenants do. On the 2-core cloud VMs this
project is developed on, one whole model's median moved between 122 and 209 ms within two
minutes, steady for seconds at a time, with nothing else running in the VM (the process's
own CPU time grew with its wall time: its cores ran slower), and a cold measure phase cached
a run of regions at 1.9x their time in another. Such a row misleads every search that reads it.

So every timing records the pace: the median seconds of a small fixed kernel (a 3x3
convolution, 64 channels, 56x56, on onnxruntime with every core: multi-threaded compute like
the kernels it stands beside) timed just before and just after. A region timed while the
host ran more than `SLOW_PACE` times slower than the fastest pace recorded on it is timed
once more at the end of its backend's list, and the timing taken at the faster pace stands
(`MeasuringEstimator`). Medians are not scaled by the pace: kernels slow down by other
factors than the canary (regressed over three cold runs of two models, a region's median
moved with the canary's pace at a slope of 0.4-0.7, and scaling by the full pace left the
runs no closer to each other).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

CALLS = 7
"""Canary calls per reading (~10 ms on 2 cores); the reading is their median."""
MAX_AGE_S = 0.5
"""A reading this recent is reused: drift holds for seconds, kernels take milliseconds."""
SLOW_PACE = 1.15
"""A pace this many times the host's fastest is a slow moment (the canary's own readings
stay within a few percent of each other on a quiet host)."""


def _canary(threads: int) -> tuple[Any, dict[str, np.ndarray]]:
    """The canary session and its feed: fixed weights and input (seeded), no spinning."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        "pace", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session, {"x": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)}


class Pacer:
    """Readings of the host's pace, seconds per canary call (lower is faster). `read()`
    never raises: where the canary cannot run it answers None (costs stay unscaled)."""

    def __init__(self, threads: int | None = None, calls: int = CALLS,
                 max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.threads = threads or os.cpu_count() or 1
        self.calls = calls
        self.max_age_s = max_age_s
        self.clock = clock
        self._session: Any = None
        self._feed: dict[str, np.ndarray] = {}
        self._broken = False
        self._last: tuple[float, float] | None = None  # (when, seconds per call)

    def read(self) -> float | None:
        """The pace now: the last reading if under `max_age_s` old, else a new one."""
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.max_age_s:
            return self._last[1]
        pace = self._time()
        if pace is not None:
            self._last = (self.clock(), pace)
        return pace

    def _time(self) -> float | None:
        if self._broken:
            return None
        try:
            if self._session is None:
                self._session, self._feed = _canary(self.threads)
                self._session.run(None, self._feed)  # its first call allocates
            times = []
            for _ in range(self.calls):
                t0 = time.perf_counter()
                self._session.run(None, self._feed)
                times.append(time.perf_counter() - t0)
        except Exception:  # no onnxruntime, or it cannot run here: timings go unpaced
            self._broken = True
            return None
        return statistics.median(times)


def during(pacer: Pacer | None, timed: Callable[[], Any]) -> tuple[Any, float | None]:
    """`timed()`'s result and the pace around it: the geometric mean of the readings just
    before and just after (one reading when they coincide; None without a pacer)."""
    if pacer is None:
        return timed(), None
    before = pacer.read()
    result = timed()
    after = pacer.read()
    readings = [p for p in (before, after) if p is not None and p > 0]
    return result, (math.sqrt(math.prod(readings)) if len(readings) == 2 else
                    readings[0] if readings else None)
