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
Backend specs and settings: `cost/protocol.py`.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import IO, Any

import numpy as np

from collage_mlir.cost.protocol import SYS_PATH_ENV, MeasureSettings, load_backend
from collage_mlir.cost.timing import summarize, time_kernel
from collage_mlir.dialects.func import find_function
from collage_mlir.tensors import compare, make_inputs


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


if __name__ == "__main__":
    sys.exit(main())
