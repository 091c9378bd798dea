"""Test doubles for measurement: a tiny numpy backend and a fault-injecting backend.

`NumpyTestBackend` interprets a handful of elementwise/matmul ONNX ops with numpy, so tests
can measure without the real backends. `FaultInjectingBackend` behaves like it except on
regions holding the op type named by its `on` option ("*": every region), where it misbehaves
as its `mode` says:
- `segfault`: dereferences NULL through ctypes while running (the worker dies by SIGSEGV);
- `abort`: calls os.abort() while running (SIGABRT);
- `hang`: sleeps for an hour while running;
- `wrong`: returns outputs off by 0.5;
- `stale`: right on its first call, then returns that call's outputs whatever the inputs;
- `leak`: keeps 256 MiB more memory on every call;
- `compile_error`: raises while compiling;
- `poison`: raises while running and leaves the process unusable: every later compile or
  run in it raises too (a GPU kernel's fault loses the process's CUDA context so).
They are loaded by path ("fault_backend:FaultInjectingBackend"); nothing in the product
imports them. Without options the mode and op type come from `$COLLAGE_FAULT_MODE` and
`$COLLAGE_FAULT_ON` (default segfault on Relu), so a command line can pick them.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import Backend, BackendKind, Kernel
from collage_mlir.dialects import onnx as onnx_view

OPS: dict[str, Callable[..., np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Neg": np.negative,
    "Exp": np.exp,
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "MatMul": np.matmul,
}


class NumpyKernel(Kernel):
    """Runs a straight-line list of (op type, operand slots, result slot) steps."""

    def __init__(self, n_args: int, steps: list[tuple[str, list[int], int]],
                 outputs: list[int]) -> None:
        self.n_args, self.steps, self.outputs = n_args, steps, outputs

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        slots: dict[int, np.ndarray] = dict(enumerate(inputs))
        for op_type, operands, result in self.steps:
            slots[result] = np.asarray(OPS[op_type](*(slots[o] for o in operands)),
                                       dtype=np.float32)
        return [slots[o] for o in self.outputs]


def plan(module: ir.Module) -> tuple[int, list[tuple[str, list[int], int]], list[int], set[str]]:
    """Translate the module's function into NumpyKernel steps (and the op types seen)."""
    fn = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
    block = fn.regions[0].blocks[0]
    slot: dict[ir.Value, int] = {a: k for k, a in enumerate(block.arguments)}
    steps, seen = [], set()
    ops = [op.operation for op in block.operations]
    for op in ops[:-1]:
        op_type = onnx_view.op_type(op)
        if op_type not in OPS:
            raise NotImplementedError(f"numpy test backend has no {op_type or op.name}")
        seen.add(op_type)
        slot[op.results[0]] = len(slot)
        steps.append((op_type, [slot[v] for v in op.operands], slot[op.results[0]]))
    return len(block.arguments), steps, [slot[v] for v in ops[-1].operands], seen


class NumpyTestBackend(Backend):
    """A correct, slow-ish reference-quality backend for unit tests."""

    name = "numpy_test"
    kind = BackendKind.GRAPH

    @property
    def version(self) -> str:
        return f"numpy-{np.__version__}"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None

    def capability(self, graph: Any) -> int:
        return sum(1 << n.index for n in graph.op_nodes() if n.op_type in OPS)

    def compile(self, module: ir.Module) -> Kernel:
        n_args, steps, outputs, _ = plan(module)
        return NumpyKernel(n_args, steps, outputs)


_poisoned: list[str] = []
"""Set by a `poison` kernel's run: this process's (pretend) device is lost."""


def _check_device() -> None:
    if _poisoned:
        raise RuntimeError(f"device lost earlier in this process ({_poisoned[0]})")


class _FaultyKernel(NumpyKernel):
    def __init__(self, base: NumpyKernel, mode: str) -> None:
        super().__init__(base.n_args, base.steps, base.outputs)
        self.mode = mode
        self.first: list[np.ndarray] | None = None
        self.kept: list[np.ndarray] = []

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        _check_device()
        if self.mode == "poison":
            _poisoned.append("illegal address")
            raise RuntimeError("injected device fault: illegal address")
        if self.mode == "segfault":
            ctypes.string_at(0)
        elif self.mode == "abort":
            os.abort()
        elif self.mode == "hang":
            time.sleep(3600)
        elif self.mode == "leak":
            self.kept.append(np.ones(256 << 18, np.float32))  # touched, so resident
        if self.mode == "stale" and self.first is not None:
            return [o.copy() for o in self.first]
        outputs = super().run(inputs)
        if self.mode == "wrong":
            outputs = [o + np.float32(0.5) for o in outputs]
        if self.mode == "stale":
            self.first = [o.copy() for o in outputs]
        return outputs


class FaultInjectingBackend(NumpyTestBackend):
    """NumpyTestBackend that fails as `mode` says on regions containing op type `on`."""

    name = "fault"

    def __init__(self, mode: str | None = None, on: str | None = None,
                 **options: Any) -> None:
        mode = mode or os.environ.get("COLLAGE_FAULT_MODE", "segfault")
        on = on or os.environ.get("COLLAGE_FAULT_ON", "Relu")
        super().__init__(mode=mode, on=on, **options)
        self.mode, self.on = mode, on

    def compile(self, module: ir.Module) -> Kernel:
        _check_device()
        n_args, steps, outputs, seen = plan(module)
        if self.on != "*" and self.on not in seen:
            return _FaultyKernel(NumpyKernel(n_args, steps, outputs), "none")
        if self.mode == "compile_error":
            raise RuntimeError(f"injected compile error on {self.on}")
        return _FaultyKernel(NumpyKernel(n_args, steps, outputs), self.mode)


class BatchingTestBackend(NumpyTestBackend):
    """Shares compiles like IREE (overrides compile_many); its compiler aborts on op `on`."""

    name = "batching_test"

    def __init__(self, on: str = "", **options: Any) -> None:
        super().__init__(on=on, **options)
        self.on = on

    def compile(self, module: ir.Module) -> Kernel:
        if self.on and self.on in plan(module)[3]:
            os.abort()  # the compiler crashes on this op
        return super().compile(module)

    def compile_many(self, modules: Sequence[ir.Module]) -> list[Kernel | Exception]:
        return [self.compile(m) for m in modules]  # one crash takes the whole batch down


# -- faults at compile or at run, in measurement or in the final compile (issue 15 audit) ----

STAGED_RUN_MODES = ("segfault", "abort", "exit", "hang", "raise", "leak", "wrong_shape",
                    "wrong", "wrong_dtype", "stale", "nan")
"""What `StagedFaultBackend` can do while running (`wrong`: values off by 0.5; `nan`: the
first element of every output NaN). Two more modes are there, outside the audit: `finite`
(not a fault on finite inputs: outputs with NaN/Inf made finite, as OpenVINO's Relu maps
NaN to 0) and `large` (outputs doubled, but only where an input exceeds LARGE in
magnitude: right on made-up standard-normal inputs, wrong on data of another scale, as a
kernel with a narrower range than the data's is)."""
LARGE = 8.0
STAGED_COMPILE_MODES = ("segfault", "abort", "exit", "hang", "raise", "leak")
"""What it can do while compiling (a compile returns no values to get wrong)."""


def in_measuring_worker() -> bool:
    """True in a measuring worker process (`python -m collage_mlir.cost.worker`)."""
    import sys

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") == "collage_mlir.cost.worker"


def _strike(mode: str) -> None:
    """The faults that end or stall the process, or raise."""
    if mode == "segfault":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "exit":
        os._exit(3)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "raise":
        raise RuntimeError("injected fault")


class _StagedKernel(NumpyKernel):
    """A NumpyKernel that misbehaves as `mode` says on every call."""

    def __init__(self, base: NumpyKernel, mode: str) -> None:
        super().__init__(base.n_args, base.steps, base.outputs)
        self.mode = mode
        self.first: list[np.ndarray] | None = None
        self.kept: list[np.ndarray] = []

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        _strike(self.mode)
        if self.mode == "large":
            outputs = super().run(inputs)
            if max(float(np.abs(x).max(initial=0.0)) for x in inputs) <= LARGE:
                return outputs
            return [o * np.float32(2) for o in outputs]
        if self.mode == "leak":
            self.kept.append(np.ones(256 << 18, np.float32))
        if self.mode == "stale" and self.first is not None:
            return [o.copy() for o in self.first]
        outputs = super().run(inputs)
        if self.mode == "stale":
            self.first = [o.copy() for o in outputs]
        elif self.mode == "wrong":
            outputs = [o + np.float32(0.5) for o in outputs]
        elif self.mode == "wrong_shape":
            outputs = [o.reshape(-1) for o in outputs]
        elif self.mode == "wrong_dtype":
            outputs = [o.astype(np.float64) for o in outputs]
        elif self.mode == "nan":
            outputs = [o.copy() for o in outputs]
            for o in outputs:
                o.flat[0] = np.nan
        elif self.mode == "finite":
            outputs = [np.nan_to_num(o, nan=0.0, posinf=0.0, neginf=0.0) for o in outputs]
        return outputs


class StagedFaultBackend(NumpyTestBackend):
    """Test double for the fault audit: the numpy test backend, failing as `mode` says on
    regions holding op type `on`, only `when` ("compile" or "run") and only `where`
    ("measure": in measuring workers; "final": anywhere else — the probe of the final
    compile, the final compile, the end-to-end check; "both"). Options default to
    $COLLAGE_FAULT_MODE / _ON / _WHEN / _WHERE (segfault, Relu, run, both)."""

    name = "fault"

    def __init__(self, mode: str | None = None, on: str | None = None,
                 when: str | None = None, where: str | None = None, **options: Any) -> None:
        env = os.environ.get
        mode = mode or env("COLLAGE_FAULT_MODE", "segfault")
        on = on or env("COLLAGE_FAULT_ON", "Relu")
        when = when or env("COLLAGE_FAULT_WHEN", "run")
        where = where or env("COLLAGE_FAULT_WHERE", "both")
        super().__init__(mode=mode, on=on, when=when, where=where, **options)
        self.mode, self.on, self.when, self.where = mode, on, when, where

    def _active(self, seen: set[str]) -> bool:
        here = "measure" if in_measuring_worker() else "final"
        return (self.on == "*" or self.on in seen) and self.where in (here, "both")

    def compile(self, module: ir.Module) -> Kernel:
        n_args, steps, outputs, seen = plan(module)
        kernel = NumpyKernel(n_args, steps, outputs)
        if not self._active(seen):
            return kernel
        if self.when == "compile":
            _strike(self.mode)
            if self.mode == "leak":
                self.kept = np.ones(256 << 18, np.float32)
            return kernel
        return _StagedKernel(kernel, self.mode)
