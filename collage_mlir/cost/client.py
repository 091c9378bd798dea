"""The parent side of a measuring worker: spawn, feed, watch, and restart after a death.

A worker that dies (segfault, abort) or goes silent past its deadline (hang) costs the one
region it was busy with: that region is reported invalid (a death) or timeout (silence, with
the timeout it had) with the reason, the process group is killed, and a fresh worker takes
the remaining regions, less those whose `Item.skip` now gives a reason. If it dies while compiling a
batch, nobody knows which region did it, so the batch is retried one region at a time.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collage_mlir.cost.protocol import SYS_PATH_ENV, how_it_ended


class WorkerError(Exception):
    """The worker could not be started or initialised (not any one region's fault)."""


@dataclass
class Item:
    """One region to measure: an id chosen by the caller and the module text, or a function
    that makes it when the item is sent (so only the regions in flight hold their weights)."""

    id: str
    text: str | Callable[[], str]
    solo: bool = False  # compile alone (after a batch compile crashed)
    skip: Callable[[], str | None] | None = None
    """Asked when the item is about to be sent: a reason not to measure it after all (it is
    then reported as an error with that reason), or None."""
    stop_above: float | None = None
    """Seconds beyond which its timing may stop early (`time_kernel`)."""

    def module_text(self) -> str:
        return self.text() if callable(self.text) else self.text

    def skip_reason(self) -> str | None:
        return self.skip() if self.skip is not None else None


@dataclass
class WorkerConfig:
    backend: dict[str, Any]
    reference: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    sys_path: Sequence[str] = ()
    timeout_s: float = 60.0
    batch_size: int = 16
    """Items per command to a backend that compiles them together (the estimator passes
    its own, `measure.COMPILE_BATCH`)."""
    start_timeout_s: float = 120.0
    memory_limit_bytes: int = 0
    """The worker ends itself past this resident size (0: no limit); the region it was on
    is invalid, with the reason."""
    environ: Mapping[str, str | None] = field(default_factory=dict)
    """Changes to the worker's environment over this process's: a value to set, or None to
    drop the variable (a Ray task drops Ray's OMP_NUM_THREADS=1)."""
    reference_dir: str | None = None
    """Where the run's workers share reference outputs (`cost/references.py`); None: each
    computes its own."""


Result = dict[str, Any]
PUMP_JOIN_S = 2.0
"""How long `stop` waits for the pipe readers to see a dead worker's end of output."""


class WorkerClient:
    """One worker process for one backend; restarted transparently after a crash."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.proc: subprocess.Popen | None = None
        self._pumps: list[threading.Thread] = []
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.ready: dict[str, Any] = {}
        self.starts = 0
        self._timed_out = False
        self._last_timeout = config.timeout_s

    @property
    def timed_out(self) -> bool:
        """Whether the worker was last lost to silence past its deadline (not a death)."""
        return self._timed_out

    @property
    def restarts(self) -> int:
        """How many times a worker had to be started again (after a death or a hang)."""
        return max(0, self.starts - 1)

    # -- process management -------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Spawn and initialise; returns the worker's `ready` message."""
        self.starts += 1
        env = dict(os.environ)
        paths = [*self.config.sys_path, env.get(SYS_PATH_ENV, "")]
        env[SYS_PATH_ENV] = os.pathsep.join(p for p in paths if p)
        for name, value in self.config.environ.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        self.lines = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "collage_mlir.cost.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
            start_new_session=True)  # its own process group: a kill takes its children too
        self._pumps = [threading.Thread(target=pump, args=(self.proc,), daemon=True)
                       for pump in (self._pump_stdout, self._pump_stderr)]
        for pump in self._pumps:
            pump.start()
        self._send(cmd="init", backend=self.config.backend, reference=self.config.reference,
                   settings=self.config.settings, memory_limit=self.config.memory_limit_bytes,
                   reference_dir=self.config.reference_dir)
        msg = self._next(self.config.start_timeout_s)
        if msg is None or msg.get("event") != "ready":
            why = msg.get("error") if msg else self._death("starting")
            self.stop()
            raise WorkerError(f"worker for {self.config.backend['target']} did not start: {why}")
        self.ready = msg
        return msg

    def stop(self) -> None:
        """Ask politely, then kill the process group."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                proc.stdin.flush()
                proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        if proc.poll() is None:
            self._kill(proc)
        # the readers end at the dead process's end of output; a pipe closed under a
        # reading thread raises in that thread
        for pump in self._pumps:
            pump.join(timeout=PUMP_JOIN_S)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _pump_stdout(self, proc: subprocess.Popen) -> None:
        try:
            for line in proc.stdout:
                self.lines.put(line)
        except (ValueError, OSError):  # closed by `stop` (a grandchild kept the pipe open)
            pass
        self.lines.put(None)

    def _pump_stderr(self, proc: subprocess.Popen) -> None:
        try:
            for line in proc.stderr:
                if line.strip():
                    self.stderr_tail.append(line.rstrip())
        except (ValueError, OSError):  # closed by `stop`, as above
            pass

    def _send(self, **msg: Any) -> None:
        assert self.proc is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def _next(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None on death or silence past `timeout` (worker then gone)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._timed_out = True
                if self.proc is not None:
                    self._kill(self.proc)
                return None
            if line is None:
                self._timed_out = False
                if self.proc is not None:
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        self._kill(self.proc)
                return None
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue  # not ours (cannot happen with the private channel, but be safe)

    def _death(self, doing: str) -> str:
        """Why the worker stopped answering, in one line."""
        if self._timed_out:
            return f"timed out after {self._last_timeout:g} s while {doing}"
        what = how_it_ended(self.proc.returncode if self.proc is not None else None)
        fatal = next((ln for ln in reversed(self.stderr_tail)
                      if "Fatal Python error" in ln or ln.startswith("collage worker:")), "")
        return f"worker {what} while {doing}" + (f" ({fatal.strip()})" if fatal else "")

    # -- commands -----------------------------------------------------------------------

    def measure(self, items: Sequence[Item], batch: bool,
                on_result: Callable[[str, Result], None]) -> None:
        """Measure every item; `on_result(id, result)` once per item, whatever happens."""
        pending = collections.deque(items)
        while pending:
            why = pending[0].skip_reason()
            if why:
                on_result(pending.popleft().id, {"status": "error", "error": why, "skipped": True})
                continue
            if self.proc is None or self.proc.poll() is not None:
                try:
                    self.start()
                except WorkerError as e:
                    for item in pending:
                        on_result(item.id, {"status": "error", "error": str(e)})
                    return
            if batch and not pending[0].solo:
                chunk = []
                while pending and not pending[0].solo and len(chunk) < self.config.batch_size:
                    chunk.append(pending.popleft())
            else:
                chunk = [pending.popleft()]
                while pending and (pending[0].solo or not batch):
                    chunk.append(pending.popleft())
            chunk = self._drop_skipped(chunk, on_result)
            if not chunk:
                continue
            leftover = self._run_chunk(chunk, batch and len(chunk) > 1 and not chunk[0].solo,
                                       on_result)
            pending.extendleft(reversed(leftover))

    @staticmethod
    def _drop_skipped(chunk: list[Item], on_result: Callable[[str, Result], None]
                      ) -> list[Item]:
        """The chunk less the items that say to skip them (reported as errors)."""
        kept = []
        for item in chunk:
            why = item.skip_reason()
            if why:
                on_result(item.id, {"status": "error", "error": why, "skipped": True})
            else:
                kept.append(item)
        return kept

    def _run_chunk(self, chunk: list[Item], batch: bool,
                   on_result: Callable[[str, Result], None]) -> list[Item]:
        """Run one command; returns the items still to do if the worker died."""
        by_id = {i.id: i for i in chunk}
        done: set[str] = set()
        try:
            self._send(cmd="measure", batch=batch,
                       items=[_message(i) for i in chunk])
        except OSError:  # it died since we last looked: the read below reports the death
            pass
        phase, current = "starting", None
        timeout = self.config.timeout_s * (len(chunk) if batch else 1)
        while True:
            self._last_timeout = timeout
            msg = self._next(timeout)
            if msg is None:
                break
            event = msg.get("event")
            if event == "compiling":
                phase = "compiling a batch"
                timeout = self.config.timeout_s * len(msg["ids"])
            elif event == "start":
                phase, current = "measuring", msg["id"]
                timeout = self.config.timeout_s
            elif event == "result":
                done.add(msg["id"])
                result = {k: v for k, v in msg.items() if k not in ("event", "id")}
                on_result(msg["id"], result)
            elif event == "done":
                return []
            elif event == "retiring":  # a kernel failed at run time: a fresh worker goes on
                self.stop()
                return [i for i in chunk if i.id not in done]
            elif event == "fatal":
                for i in chunk:
                    if i.id not in done:
                        on_result(i.id, {"status": "error", "error": msg.get("error", "")})
                return []
        # The worker died or hung.
        reason = self._death(phase)
        self.stop()
        left = [i for i in chunk if i.id not in done]
        if phase == "compiling a batch" and len(left) > 1:
            return [replace(i, solo=True) for i in left]
        blamed = current if current in by_id and current not in done else left[0].id
        if self._timed_out:  # maybe a hang, maybe a busy machine: retryable, with its timeout
            on_result(blamed, {"status": "timeout", "error": reason,
                               "timeout_s": self.config.timeout_s})
        else:
            on_result(blamed, {"status": "invalid", "error": reason})
        return [i for i in left if i.id != blamed]

    def transition(self, dst: dict[str, Any], timeout_s: float,
                   src: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the hand-off experiment from `src` (default: this worker's backend) to `dst`."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self._send(cmd="transition", dst=dst, src=src)
        except OSError as e:
            self.stop()
            raise WorkerError(f"worker died before the transition experiment: {e}") from None
        self._last_timeout = timeout_s
        msg = self._next(timeout_s)
        if msg is None:
            reason = self._death("measuring a transition")
            self.stop()
            raise WorkerError(reason)
        if msg.get("event") != "transition":
            raise WorkerError(msg.get("error", "transition failed"))
        return msg


def _message(item: Item) -> dict[str, Any]:
    """An item as the worker's `measure` command takes it."""
    msg: dict[str, Any] = {"id": item.id, "text": item.module_text()}
    if item.stop_above is not None:
        msg["stop_above"] = item.stop_above
    return msg
