"""Test doubles for measuring on Ray (test_ray.py, bench/scale.py): numpy backends with a
fixed cost per call and per op, and one that kills the Ray task running its worker.

Loaded by path ("ray_doubles:PacedTestBackend") in measuring workers; nothing in the product
imports them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from fault_backend import NumpyKernel, NumpyTestBackend, plan
from iree.compiler import ir

from collage_mlir.backends.base import Kernel


class _PacedKernel(NumpyKernel):
    def __init__(self, base: NumpyKernel, seconds: float) -> None:
        super().__init__(base.n_args, base.steps, base.outputs)
        self.seconds = seconds

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        end = time.perf_counter() + self.seconds
        outputs = super().run(inputs)
        while time.perf_counter() < end:  # spin: a sleep's wake-up is late on a busy machine
            pass
        return outputs


class PacedTestBackend(NumpyTestBackend):
    """A numpy backend whose kernels take `per_call_ms` + `per_op_ms` per op (so the best
    partition is known whatever the machine's noise), refusing regions that hold the op type
    `refuse` (a compile error)."""

    name = "paced_test"

    def __init__(self, per_call_ms: float = 0.0, per_op_ms: float = 0.0, refuse: str = "",
                 **options: Any) -> None:
        super().__init__(per_call_ms=per_call_ms, per_op_ms=per_op_ms, refuse=refuse,
                         **options)
        self.per_call_ms, self.per_op_ms, self.refuse = per_call_ms, per_op_ms, refuse

    def compile(self, module: ir.Module) -> Kernel:
        n_args, steps, outputs, seen = plan(module)
        if self.refuse and self.refuse in seen:
            raise RuntimeError(f"paced_test refuses {self.refuse}")
        return _PacedKernel(NumpyKernel(n_args, steps, outputs),
                            (self.per_call_ms + self.per_op_ms * len(steps)) / 1e3)


class OtherPacedTestBackend(PacedTestBackend):
    """A second paced backend (another name), for two-backend partitions."""

    name = "paced_other"


class TaskKillingBackend(NumpyTestBackend):
    """Kills its worker's parent (on Ray: the Ray worker running the measuring task) when
    compiling a region holding op type `on`, at most `times` times: each kill leaves a file
    in `marks` (a directory)."""

    name = "task_killing"

    def __init__(self, on: str = "Sigmoid", times: int = 1, marks: str = "",
                 **options: Any) -> None:
        super().__init__(on=on, times=times, marks=marks, **options)
        self.on, self.times, self.marks = on, int(times), Path(marks)

    def compile(self, module: ir.Module) -> Kernel:
        if self.on in plan(module)[3] and len(list(self.marks.glob("kill-*"))) < self.times:
            (self.marks / f"kill-{time.time_ns()}").touch()
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)  # the watchdog ends this worker once its parent is gone
        return super().compile(module)


class EnvReportingBackend(NumpyTestBackend):
    """Fails every compile with the worker's OMP_NUM_THREADS in the reason."""

    name = "env_reporting"

    def compile(self, module: ir.Module) -> Kernel:
        raise RuntimeError(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
