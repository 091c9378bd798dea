"""The measuring worker: a child process that compiles, checks and times regions on one backend.

Why a process: a backend may segfault, hang or abort on some region. In a child that costs
one candidate (the parent sees the death or the silence, marks the region invalid and starts
a fresh worker for the rest); in process it would cost the run.

Protocol: JSON lines. The parent writes commands on stdin; the worker answers on a private
copy of the original stdout (fd 1 itself is pointed at stderr, so a backend that prints
cannot corrupt the channel). Commands:
- `{"cmd": "init", "backend": spec, "reference": spec|null, "settings": {...},
  "reference_dir": path|null}` (where the run's workers share reference outputs,
  `cost/references.py`) →
  `{"event": "ready", "name", "version", "options", "reference_error"}`
- `{"cmd": "measure", "items": [{"id", "text", "stop_above"?}], "batch": bool}` → per batch
  `{"event": "compiling", "ids"}`; per item `{"event": "start", "id"}` then
  `{"event": "result", "id", "status", "median", "p90", "spread", "runs", "error"}`;
  finally `{"event": "done"}` (`stop_above`: seconds beyond which timing may stop early,
  `time_kernel`; an ok result's `error` holds its notes: unchecked and why, `CUT_SHORT`),
  or `{"event": "retiring"}` after a kernel failed at run time: the worker then exits, and
  a fresh one takes the items it did not answer (a GPU kernel's fault can leave the
  process's device context unusable, and every later region would fail there for no fault
  of its own)
- `{"cmd": "transition", "dst": spec, "src": spec|null}` → `{"event": "transition",
  "forward", "backward", "src_version", "dst_version"}` (src: this worker's backend when
  null; one worker measures every pair of a run, reusing the kernels it compiled)
- `{"cmd": "exit"}`
Backend specs and settings: `cost/protocol.py`.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from typing import IO, Any

import numpy as np

from collage_mlir.cost.protocol import NO_REFERENCE, SYS_PATH_ENV, MeasureSettings, load_backend
from collage_mlir.cost.references import Outputs, ReferenceOutputs, text_digest
from collage_mlir.cost.timing import CUT_SHORT, stopped_at_bound, summarize, time_kernel
from collage_mlir.cost.transition import Rings, measure_points
from collage_mlir.dialects.func import find_function
from collage_mlir.errors import one_line
from collage_mlir.tensors import compare, make_inputs, quantized_results

CHECKED_CALLS = 2
"""Calls checked against the reference, each on its own inputs, before timing."""
RUN_FAILED = "run failed: "
MEMORY_EXIT = 86
"""Exit status of a worker that went over its memory limit (the reason is on stderr)."""


class Watchdog(threading.Thread):
    """Ends the worker when its parent is gone (a hung kernel must not outlive the run that
    started it) or when its resident memory passes `limit_bytes` (0: no limit), saying so
    on stderr, where the parent reads the reason."""

    def __init__(self, period_s: float = 0.05) -> None:
        super().__init__(name="collage-watchdog", daemon=True)
        self.parent = os.getppid()
        self.limit_bytes = 0
        self.period_s = period_s

    def run(self) -> None:
        while True:
            if os.getppid() != self.parent:
                os._exit(0)
            if self.limit_bytes:
                rss = resident_bytes()
                if rss > self.limit_bytes:
                    sys.stderr.write(f"collage worker: memory limit exceeded: resident "
                                     f"{rss / 2**30:.2f} GiB > {self.limit_bytes / 2**30:.2f} "
                                     "GiB\n")
                    sys.stderr.flush()
                    os._exit(MEMORY_EXIT)
            time.sleep(self.period_s)


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Worker:
    """State of one worker process: its backend, the reference, the settings."""

    def __init__(self, out: IO[str], watchdog: Watchdog | None = None) -> None:
        self.out = out
        self.watchdog = watchdog
        self.backend: Any = None
        self.reference: Any = None
        self.references = ReferenceOutputs(None)
        self.is_reference = False
        """Whether this worker's backend is the reference, as configured: its kernels'
        outputs are the reference outputs."""
        self.settings = MeasureSettings()
        self.retiring = False
        self.spec_key = ""
        self.peers: dict[str, Any] = {}
        self.rings = Rings()

    def send(self, **msg: Any) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def init(self, msg: dict[str, Any]) -> None:
        self.settings = MeasureSettings(**(msg.get("settings") or {}))
        if self.watchdog is not None:
            self.watchdog.limit_bytes = int(msg.get("memory_limit") or 0)
        self.backend = load_backend(msg["backend"])
        self.spec_key = json.dumps(msg["backend"], sort_keys=True)
        self.references = ReferenceOutputs(msg.get("reference_dir"))
        self.is_reference = msg.get("reference") == msg["backend"]
        reference_error = None
        if msg.get("reference"):
            try:
                self.reference = load_backend(msg["reference"])
            except Exception as e:  # measure anyway, unchecked, and say so
                reference_error = f"{type(e).__name__}: {e}"
        self.send(event="ready", name=self.backend.name, version=self.backend.cache_version(),
                  options=self.backend.cache_options(), reference_error=reference_error)

    def measure(self, msg: dict[str, Any]) -> None:
        """Measure the command's items. One at a time, each is parsed after its `start`
        (its parse counts against its own timeout, not the first item's); a batch is
        parsed and compiled together after `compiling`."""
        items = msg["items"]
        if self.references.directory is not None:
            for item in items:
                item["digest"] = text_digest(item["text"])
        if msg.get("batch") and len(items) > 1:
            self.send(event="compiling", ids=[i["id"] for i in items])
            modules = [_parse(item) for item in items]
            good = [m for m in modules if not isinstance(m, Exception)]
            try:
                compiled = iter(self.backend.compile_many(good))
            except Exception as e:  # the batch failed as a whole: each item says so
                compiled = iter([e] * len(good))
            kernels = [m if isinstance(m, Exception) else next(compiled) for m in modules]
            for item, module, kernel in zip(items, modules, kernels, strict=True):
                if not self._answer(item, lambda m=module, k=kernel, i=item:
                                    self.measure_one(m, k, i.get("stop_above"),
                                                     i.get("digest"))):
                    return
        else:
            for item in items:
                if not self._answer(item, lambda i=item: self.measure_one(
                        _parse(i), None, i.get("stop_above"), i.get("digest"))):
                    return
        self.send(event="done")

    def _answer(self, item: dict[str, Any], measure: Any) -> bool:
        """Start, measure and answer one item; False (after `retiring`) when its kernel
        failed at run time and this process should not measure again."""
        self.send(event="start", id=item["id"])
        result = measure()
        self.send(event="result", id=item["id"], **result)
        if result["status"] == "invalid" and result["error"].startswith(RUN_FAILED):
            self.retiring = True
            self.send(event="retiring")
            return False
        return True

    def measure_one(self, module: Any, kernel: Any, stop_above: float | None = None,
                    digest: str | None = None) -> dict[str, Any]:
        """Compile (unless batch-compiled), check against the reference on CHECKED_CALLS
        calls with different inputs (a kernel right on its first call only is wrong), time
        (`time_kernel`, stopping early above `stop_above`). `digest` names the region's
        shared reference outputs. Never raises."""
        if isinstance(module, Exception):
            return {"status": "error", "error": f"region does not parse: {module}"}
        try:
            if kernel is None:
                kernel = self.backend.compile(module)
            if isinstance(kernel, Exception):
                raise kernel
        except Exception as e:
            return {"status": "invalid", "error": f"compile failed: {one_line(e)}"}
        try:
            fn = find_function(module)
            input_sets = [make_inputs(fn, variant=k) for k in range(CHECKED_CALLS)]
        except Exception as e:
            return {"status": "error", "error": f"no inputs: {one_line(e)}"}
        wants = self._reference_outputs(module, input_sets, digest)
        outputs, failure = self._checked_calls(kernel, input_sets, wants,
                                               quantized_results(fn))
        if failure:
            return failure
        if self.is_reference:
            self.references.put(digest, outputs)
        note = f"unchecked: {wants}" if isinstance(wants, str) else ""
        try:
            times = time_kernel(kernel, input_sets[0], self.settings, stop_above)
        except Exception as e:
            return {"status": "invalid", "error": f"{RUN_FAILED}{one_line(e)}"}
        if stopped_at_bound(times, self.settings, stop_above):
            note = "; ".join(filter(None, [note, CUT_SHORT]))
        return {"status": "ok", "error": note, **summarize(times)}

    def _checked_calls(self, kernel: Any, input_sets: list[list[np.ndarray]],
                       wants: Outputs | str, quantized: frozenset[int] = frozenset()
                       ) -> tuple[Outputs, dict[str, Any] | None]:
        """The kernel's outputs on each input set, each call compared with the reference's
        (`wants`; a string: unchecked; `quantized`: as `compare` takes it) before the next,
        so a wrong kernel costs its calls up to the first wrong one (a whole model on a
        slow backend: seconds each); with the invalid result to answer, if any."""
        outputs: Outputs = []
        for k, inputs in enumerate(input_sets):
            try:
                outputs.append([np.array(o, copy=True) for o in kernel.run(inputs)])
            except Exception as e:
                return outputs, {"status": "invalid", "error": f"{RUN_FAILED}{one_line(e)}"}
            wrong = None if isinstance(wants, str) else compare(outputs[k], wants[k],
                                                                 self.settings, quantized)
            if wrong:
                why = wrong if k == 0 else f"{wrong} (call {k + 1}, on other inputs)"
                return outputs, {"status": "invalid", "error": why}
        return outputs, None

    def _reference_outputs(self, module: Any, input_sets: list[list[np.ndarray]],
                           digest: str | None) -> Outputs | str:
        """The reference's outputs for each input set, or a string saying why there are
        none: shared ones if a worker left them, else computed here and left for others."""
        if self.reference is None:
            return NO_REFERENCE
        if self.reference.name == self.backend.name:
            return "this backend is the reference"
        wants = self.references.get(digest, len(input_sets))
        if wants is not None:
            return wants
        reference = self._reference_kernel(module)
        if isinstance(reference, str):
            return reference
        try:
            wants = [[np.array(o) for o in reference.run(x)] for x in input_sets]
        except Exception as e:
            return f"reference failed: {one_line(e)}"
        self.references.put(digest, wants)
        return wants

    def _reference_kernel(self, module: Any) -> Any:
        """The reference backend's kernel for `module`, or a string saying why there is none."""
        try:
            return self.reference.compile(module)
        except Exception as e:
            return f"reference failed: {one_line(e)}"

    def transition(self, msg: dict[str, Any]) -> None:
        """The hand-off experiment between `src` (default: this worker's backend) and `dst`.
        Backends and their compiled rings are kept for the worker's later pairs: a run
        measures every pair, and compiling the rings is most of the experiment's time."""
        src = self._peer(msg["src"]) if msg.get("src") else self.backend
        dst = self._peer(msg["dst"])
        forward, backward = measure_points(src, dst, rings=self.rings)
        self.send(event="transition", forward=forward, backward=backward,
                  src_version=src.cache_version(), dst_version=dst.cache_version())

    def _peer(self, spec: dict[str, Any]) -> Any:
        """The backend `spec` names, loaded once (this worker's own for its own spec)."""
        key = json.dumps(spec, sort_keys=True)
        if key not in self.peers:
            same = self.backend is not None and key == self.spec_key
            self.peers[key] = self.backend if same else load_backend(spec)
        return self.peers[key]


def _parse(item: dict[str, Any]) -> Any:
    """The item's module, or the exception that parsing it raised; its text is dropped (a
    whole model's text is twice its weights)."""
    from collage_mlir.importer import parse_mlir

    try:
        return parse_mlir(item["text"], f"region {item['id']}")
    except Exception as e:
        return e
    finally:
        item["text"] = None


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
    watchdog = Watchdog()
    watchdog.start()
    worker = Worker(_private_stdout(), watchdog)
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
            worker.send(event="fatal", error=one_line(e))
        if worker.retiring:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
