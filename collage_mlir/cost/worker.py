"""The measuring worker: a child process that compiles, checks and times regions on one backend.

Why a process: a backend may segfault, hang or abort on some region. In a child that costs
one candidate (the parent sees the death or the silence, marks the region invalid and starts
a fresh worker for the rest); in process it would cost the run.

Protocol: JSON lines. The parent writes commands on stdin; the worker answers on a private
copy of the original stdout (fd 1 itself is pointed at stderr, so a backend that prints
cannot corrupt the channel). Commands:
- `{"cmd": "init", "backend": spec, "reference": spec|null, "settings": {...}}` →
  `{"event": "ready", "name", "version", "options", "reference_error"}`
- `{"cmd": "measure", "items": [{"id", "text"}], "batch": bool}` → per batch
  `{"event": "compiling", "ids"}`; per item `{"event": "start", "id"}` then
  `{"event": "result", "id", "status", "median", "p90", "spread", "runs", "error"}`;
  finally `{"event": "done"}`
- `{"cmd": "transition", "dst": spec}` → `{"event": "transition", "forward", "backward"}`
- `{"cmd": "exit"}`
A backend spec is `{"target": "onnxruntime" | "package.module:Class", "options": {...}}`.
Modules named by path are found on `sys.path` plus `$COLLAGE_WORKER_SYS_PATH` (os.pathsep
separated), which the parent sets (test doubles live in test/, never in the package).
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

import numpy as np

SYS_PATH_ENV = "COLLAGE_WORKER_SYS_PATH"


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how carefully one kernel is timed and checked.

    Timing: `warmup` calls, then calls until `min_runs` are done and the running median moved
    less than `settle` (relative) over the last `settle_window` calls, or `budget_s` is spent
    (at least `min_runs_on_budget` calls), or `max_runs`. Big kernels live on that floor: at
    3 calls one slow call in a busy moment moved IREE's whole-alexnet median by 10% and the
    search split a model that runs faster whole; 5 calls outvote two outliers.
    Check: the same dtype and shape as the reference, NaN where it has NaN, and every output
    element within `atol_scale * max|ref| + rtol * |ref|` of the reference — relative to the
    output's own magnitude, so an all-zero or doubled output of a small-valued reference fails
    (a floor of 1 on max|ref| let zeros pass for a reference of 1e-3). fp32 backends differ
    more than reordering alone suggests: OpenVINO's whole squeezenet (26 convolutions, some
    Winograd) is 1e-3 off onnxruntime on a softmax output of magnitude 1, which the first,
    tighter bounds (1e-4, 1e-3) wrongly called invalid. A wrong kernel is off by far more.
    """

    cold_bytes: int = 64 << 20
    """Before each timed call, stream through a buffer this large (untimed). In a
    partitioned model a region's call follows other regions' work: its weights were evicted
    and its backend's threads went idle. Timed hot, call after call, the regions of a mixed
    alexnet summed to 6.2 ms against 8.6 ms measured in the chain; timed after a 64 MiB
    sweep, to 8.2-8.5 ms (a sleep of the same length alone gave 7.6; a 16 MiB sweep 6.7).
    0 times hot."""
    warmup: int = 2
    min_runs: int = 10
    max_runs: int = 200
    budget_s: float = 1.0
    min_runs_on_budget: int = 5
    settle: float = 0.02
    settle_window: int = 5
    rtol: float = 1e-2
    atol_scale: float = 3e-3

    @property
    def method(self) -> str:
        """How kernels are timed, for the cache key (hot and cold numbers must not mix)."""
        return f"cold{self.cold_bytes}" if self.cold_bytes else "hot"


# -- loading backends ----------------------------------------------------------------------


def load_backend(spec: dict[str, Any]):
    """Instantiate a backend from a spec: a registry name or a `module:Class` path."""
    target, options = spec["target"], spec.get("options") or {}
    if ":" in target:
        module_name, _, cls_name = target.partition(":")
        cls = getattr(importlib.import_module(module_name), cls_name)
        reason = cls.unavailable_reason()
        if reason:
            raise RuntimeError(f"backend '{target}' is not usable here: {reason}")
        return cls(**options)
    from collage_mlir.backends.registry import get_backend

    return get_backend(target, **options)


def shares_compiles(backend: Any) -> bool:
    """True when the backend overrides `compile_many` (it compiles a batch in one go)."""
    from collage_mlir.backends.base import Backend

    return type(backend).compile_many is not Backend.compile_many


# -- timing and checking -------------------------------------------------------------------


def time_kernel(kernel: Any, inputs: Sequence[np.ndarray], s: MeasureSettings) -> list[float]:
    """Per-call seconds of `kernel.run(inputs)`, same input arrays each call (bound once),
    each call after a cache sweep unless `s.cold_bytes` is 0."""
    for _ in range(s.warmup):
        kernel.run(inputs)
    sweep = _sweep_buffer(s.cold_bytes) if s.cold_bytes else None
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < s.max_runs:
        if sweep is not None:
            sweep.sum()  # evict caches, let the backend's threads idle (see cold_bytes)
        t0 = time.perf_counter()
        kernel.run(inputs)
        times.append(time.perf_counter() - t0)
        n = len(times)
        if n >= max(s.min_runs, 2 * s.settle_window) and n % s.settle_window == 0:
            now, before = statistics.median(times), statistics.median(times[:-s.settle_window])
            if abs(now - before) <= s.settle * now:
                break
        if n >= s.min_runs_on_budget and time.perf_counter() - start > s.budget_s:
            break
    return times


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


def compare(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray],
            s: MeasureSettings) -> str | None:
    """None when `outputs` match `reference`, else the reason ("wrong numbers: …")."""
    if len(outputs) != len(reference):
        return f"wrong numbers: {len(outputs)} outputs, reference has {len(reference)}"
    for k, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        out, ref = np.asarray(out), np.asarray(ref)
        if out.shape != ref.shape:
            return f"wrong numbers: output {k} has shape {out.shape}, reference {ref.shape}"
        if out.dtype != ref.dtype:
            return f"wrong numbers: output {k} is {out.dtype}, reference {ref.dtype}"
        if ref.dtype.kind not in "fc":
            if not np.array_equal(out, ref):
                return f"wrong numbers: output {k} differs in {int((out != ref).sum())} elements"
            continue
        out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
        finite = np.isfinite(ref64)
        if not np.array_equal(np.isnan(out64), np.isnan(ref64)):
            return f"wrong numbers: output {k} has NaN where the reference has none (or back)"
        scale = max(SCALE_FLOOR, float(np.abs(ref64[finite]).max(initial=0.0)))
        err = np.abs(out64 - ref64)
        err[~finite] = np.where(out64[~finite] == ref64[~finite], 0.0, np.inf)
        tol = s.atol_scale * scale + s.rtol * np.abs(np.where(finite, ref64, 0.0))
        if (err > tol).any():
            worst = float(err.max())
            return (f"wrong numbers: max abs err {worst:.3g} in output {k} "
                    f"(max |ref| {scale:.3g}, rtol {s.rtol:g})")
    return None


SCALE_FLOOR = 1e-6
"""max|ref| below this counts as this: an all-zero reference still allows round-off."""


# -- the worker ----------------------------------------------------------------------------


class Worker:
    """State of one worker process: its backend, the reference, the settings."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.backend: Any = None
        self.reference: Any = None
        self.settings = MeasureSettings()

    def send(self, **msg: Any) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def init(self, msg: dict[str, Any]) -> None:
        self.settings = MeasureSettings(**(msg.get("settings") or {}))
        self.backend = load_backend(msg["backend"])
        reference_error = None
        if msg.get("reference"):
            try:
                self.reference = load_backend(msg["reference"])
            except Exception as e:  # measure anyway, unchecked, and say so
                reference_error = f"{type(e).__name__}: {e}"
        self.send(event="ready", name=self.backend.name, version=self.backend.version,
                  options=self.backend.cache_options(), reference_error=reference_error)

    def measure(self, msg: dict[str, Any]) -> None:
        from collage_mlir.importer import parse_mlir

        items = msg["items"]
        modules, kernels = [], []
        for item in items:
            try:
                modules.append(parse_mlir(item["text"], f"region {item['id']}"))
            except Exception as e:
                modules.append(e)
            item["text"] = None  # a whole model's text is twice its weights: free it now
        if msg.get("batch") and len(items) > 1:
            self.send(event="compiling", ids=[i["id"] for i in items])
            good = [m for m in modules if not isinstance(m, Exception)]
            try:
                compiled = iter(self.backend.compile_many(good))
            except Exception as e:  # the batch failed as a whole: each item says so
                compiled = iter([e] * len(good))
            kernels = [m if isinstance(m, Exception) else next(compiled) for m in modules]
        for k, item in enumerate(items):
            self.send(event="start", id=item["id"])
            kernel = kernels[k] if kernels else None
            self.send(event="result", id=item["id"], **self.measure_one(modules[k], kernel))
        self.send(event="done")

    def measure_one(self, module: Any, kernel: Any) -> dict[str, Any]:
        """Compile (unless batch-compiled), check against the reference, time. Never raises."""
        from collage_mlir.cost.inputs import make_inputs
        from collage_mlir.cost.key import find_function

        if isinstance(module, Exception):
            return {"status": "error", "error": f"region does not parse: {module}"}
        try:
            if kernel is None:
                kernel = self.backend.compile(module)
            if isinstance(kernel, Exception):
                raise kernel
        except Exception as e:
            return {"status": "invalid", "error": f"compile failed: {_one_line(e)}"}
        try:
            inputs = make_inputs(find_function(module))
        except Exception as e:
            return {"status": "error", "error": f"no inputs: {_one_line(e)}"}
        try:
            outputs = [np.array(o, copy=True) for o in kernel.run(inputs)]
        except Exception as e:
            return {"status": "invalid", "error": f"run failed: {_one_line(e)}"}
        note = ""
        reference = self._reference_outputs(module, inputs)
        if isinstance(reference, str):
            note = f"unchecked: {reference}"
        else:
            wrong = compare(outputs, reference, self.settings)
            if wrong:
                return {"status": "invalid", "error": wrong}
        try:
            times = time_kernel(kernel, inputs, self.settings)
        except Exception as e:
            return {"status": "invalid", "error": f"run failed: {_one_line(e)}"}
        return {"status": "ok", "error": note, **summarize(times)}

    def _reference_outputs(self, module: Any, inputs: list[np.ndarray]) -> list | str:
        """The reference backend's outputs, or a string saying why there are none."""
        if self.reference is None:
            return "no reference backend"
        if self.reference.name == self.backend.name:
            return "this backend is the reference"
        try:
            return [np.array(o) for o in self.reference.compile(module).run(inputs)]
        except Exception as e:
            return f"reference failed: {_one_line(e)}"

    def transition(self, msg: dict[str, Any]) -> None:
        from collage_mlir.cost.transition import measure_points

        dst = load_backend(msg["dst"])
        forward, backward = measure_points(self.backend, dst)
        self.send(event="transition", forward=forward, backward=backward,
                  dst_version=dst.version)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}"[:500]


def _private_stdout() -> IO[str]:
    """A private channel on the real stdout; fd 1 then goes to stderr (stray prints)."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def main() -> int:
    faulthandler.enable()  # a segfault leaves "Fatal Python error: …" for the parent's reason
    extra = os.environ.get(SYS_PATH_ENV, "")
    sys.path[:0] = [p for p in extra.split(os.pathsep) if p]
    worker = Worker(_private_stdout())
    handlers = {"init": worker.init, "measure": worker.measure, "transition": worker.transition}
    for line in sys.stdin:
        msg = json.loads(line)
        del line  # the command holds the region texts; the raw line need not
        if msg["cmd"] == "exit":
            break
        try:
            handlers[msg["cmd"]](msg)
        except Exception as e:  # a whole command failed: tell the parent, keep serving
            traceback.print_exc()
            worker.send(event="fatal", error=_one_line(e))
    return 0


def settings_dict(settings: MeasureSettings) -> dict[str, Any]:
    return asdict(settings)


if __name__ == "__main__":
    sys.exit(main())
