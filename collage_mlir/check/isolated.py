"""The final compile, probed in a child process first: a backend that crashes there costs
its region, not the run.

Measurement isolates every candidate in a worker, but the pick is compiled and run again
at the end, and the end-to-end check compiles whole-model alternatives: a backend that
segfaults, aborts, exits or hangs only there (or a kernel right alone and wrong in the
chain) used to kill the run with no message. So before the parent compiles anything, a
probe (`python -m collage_mlir.check.isolated`) outlines the pick, compiles it, runs it on
the user's inputs where given and on two sets of `tensors.make_inputs` inputs, and compares
every output with the reference
backend's whole model (the estimator's; onnxruntime under a cost table), does the same for each
whole-model alternative, and saves the pick's kernels to a scratch directory, which the
parent then loads (`PartitionedModel.from_module(saved=...)`; backends that save nothing
compile again, in the parent, what the probe just ran). The end-to-end timing stays in the
parent, all contenders in one process (`verify.check_pick`).

When the probe dies (a signal, an abort, an exit, silence past its stage's deadline) or
reports a failure (a raise, wrong numbers, shape or dtype), the region it was busy with is
blamed: every candidate on that backend holding one of the region's nodes costs +inf with
the reason (one line naming backend, region and what happened), the search runs again, and
a new probe tries the next-best pick — at most `MAX_PROBES`, then a one-line CollageError.
A probe that cannot start (a backend registered in this process only, no `module:Class`
path a fresh process can import) is skipped: the final compile then runs here, unprobed.
"""

from __future__ import annotations

import collections
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from iree.compiler import ir

from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.verify import whole_alternatives
from collage_mlir.cost.base import CostEstimator
from collage_mlir.cost.protocol import how_it_ended
from collage_mlir.dialects.func import function_name
from collage_mlir.errors import CollageError
from collage_mlir.export.resources import portable_text, store_of
from collage_mlir.graph.outline import region_name
from collage_mlir.runtime.report import Rejection
from collage_mlir.scratch import ScratchDir
from collage_mlir.search.partitioning import Partitioning
from collage_mlir.search.search import STATE_LIMIT_NOTE, search
from collage_mlir.tensors import Tolerance

MAX_PROBES = 4
"""Probes per run: after this many failed ones the run ends with a one-line CollageError."""
START_ALLOW_S = 120.0
"""Seconds a probe may take to start and parse the model."""
PROBE_RUNS = 2
"""Calls of the pick (and of each alternative) checked, each on its own inputs."""

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Probed:
    """What the probes settled on: the pick to build here, the alternatives worth timing
    against it, the kernels the last probe saved (region function → file stem), and the
    candidates the probes took out (for the report)."""

    partitioning: Partitioning
    alternatives: list[Partitioning]
    saved: dict[str, str] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    scratch: ScratchDir | None = None
    whole: dict[str, str] = field(default_factory=dict)
    """Backend → stem of its whole-model kernel, for the end-to-end check."""

    def saved_for(self, kept: Partitioning) -> dict[str, str]:
        """The saved kernel of an alternative the check kept, by its region's name."""
        backend = kept.choices[0].candidate.backend
        if backend not in self.whole:
            return {}
        return {_region_names(kept)[0]: self.whole[backend]}

    def close(self) -> None:
        """Remove the saved kernels (call once they are loaded)."""
        if self.scratch is not None:
            self.scratch.cleanup()
            self.scratch = None


@dataclass
class _Outcome:
    """One probe's end: `saved` when it passed; else the failing model ("pick" or
    "alt:<backend>"), its regions and the one-line reason."""

    ok: bool
    saved: dict[str, str] = field(default_factory=dict)
    whole: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    """Backends whose whole-model alternative raised (left out of the check, not blamed)."""
    model: str = ""
    regions: list[str] = field(default_factory=list)
    reason: str = ""
    notes: list[str] = field(default_factory=list)


# -- the parent -----------------------------------------------------------------------------


def probe_final(module: ir.Module, candidates: Sequence[CandidatePartition],
                costs: Sequence[float], pick: Partitioning, estimator: CostEstimator, *,
                verify: bool, timeout_s: float, say: Say = _stderr,
                inputs: Sequence[np.ndarray] | None = None) -> Probed:
    """Probe `pick` (and, when `verify`, its whole-model alternatives) in a child process
    until one probe passes; see the module docstring. `inputs` (the model's, arranged), when
    given, are checked first, before the made-up ones. `module` is not changed."""
    costs = list(costs)
    graph = pick.graph
    blamed: dict[int, str] = {}
    rejected: list[Rejection] = []

    def reason(c: CandidatePartition) -> str:
        k = _index(candidates, c)
        return blamed.get(k) or estimator.reason(c)

    reference = _reference_of(estimator)
    last = ""
    for _ in range(MAX_PROBES):
        alternatives = (whole_alternatives(graph, candidates, costs, pick,
                                           estimator.transition_cost) if verify else [])
        specs = _backend_specs(pick, alternatives, reference)
        if specs is None:  # a backend this process alone knows: no probe
            return Probed(pick, alternatives, costs=costs)
        scratch = ScratchDir("final")
        outcome = _probe(module, pick, alternatives, reference, specs, scratch.name, timeout_s,
                         estimator.tolerance, inputs)
        for note in outcome.notes:
            say(f"collage: final compile: {note}")
        if outcome.ok:
            kept = [a for a in alternatives
                    if a.choices[0].candidate.backend not in outcome.dropped]
            return Probed(pick, kept, outcome.saved, rejected, costs, scratch, outcome.whole)
        scratch.cleanup()
        if outcome.model == "reference":
            say(f"collage: final compile: {outcome.reason}; outputs not checked end to end")
            reference = None
            continue
        out = _blame(candidates, costs, pick, alternatives, outcome)
        if not out:
            raise CollageError(f"final compile: {outcome.reason}")
        last = outcome.reason
        say(f"collage: final compile: {last}; {len(out)} candidate(s) out, searching again")
        for k in out:
            blamed[k] = f"invalid: final compile: {last}"
        rejected.append(Rejection(candidates[out[0]].backend, f"invalid: final compile: {last}",
                                  len(out), _op_types(candidates, out)))
        pick = search(graph, candidates, costs, estimator.transition_cost, "raise", reason)
        if not pick.exact:
            say(f"collage: search: {STATE_LIMIT_NOTE}")
    tried = "; ".join(f"{r.backend} ({', '.join(r.op_types[:4])}"
                      f"{', …' if len(r.op_types) > 4 else ''})" for r in rejected)
    raise CollageError(f"final compile failed {MAX_PROBES} times; last: {last}; left out in "
                       f"turn: {tried} (--placement can pin these ops to a backend that runs "
                       "them right)")


def _index(candidates: Sequence[CandidatePartition], c: CandidatePartition) -> int:
    for k, other in enumerate(candidates):
        if other is c:
            return k
    return next(k for k, other in enumerate(candidates)
                if other.backend == c.backend and other.inside == c.inside)


def _op_types(candidates: Sequence[CandidatePartition], ks: Sequence[int]) -> list[str]:
    types: list[str] = []
    for k in ks:
        sg = candidates[k].sub_graph
        types.extend(t for t in (sg.graph.nodes[i].op_type for i in sg.nodes)
                     if t not in types)
    return types


def _blame(candidates: Sequence[CandidatePartition], costs: list[float], pick: Partitioning,
           alternatives: Sequence[Partitioning], outcome: _Outcome) -> list[int]:
    """Set +inf on every candidate of the failing backend that holds a node of a failing
    region of the pick (a crash on a node is expected of every region holding it), or on
    the failing whole-model alternative alone (the pick's regions of that backend ran
    fine); their indices."""
    failing = _failing_candidates(pick, alternatives, outcome)
    whole = outcome.model.startswith("alt:")
    out = []
    for k, c in enumerate(candidates):
        if math.isinf(costs[k]):
            continue
        if any(c.backend == f.backend and (c.inside == f.inside if whole else
                                           c.inside & f.inside) for f in failing):
            costs[k] = math.inf
            out.append(k)
    return out


def _failing_candidates(pick: Partitioning, alternatives: Sequence[Partitioning],
                        outcome: _Outcome) -> list[CandidatePartition]:
    if outcome.model.startswith("alt:"):
        backend = outcome.model[len("alt:"):]
        return [a.choices[0].candidate for a in alternatives
                if a.choices[0].candidate.backend == backend]
    names = _region_names(pick)
    return [pick.choices[k].candidate for k, n in enumerate(names) if n in outcome.regions]


def _region_names(pick: Partitioning) -> list[str]:
    """The region functions `outline` makes of `pick`, in choice order."""
    fn = function_name(pick.graph.func_op)
    return [region_name(fn, c.candidate.backend, k) for k, c in enumerate(pick.choices)]


def _reference_of(estimator: CostEstimator) -> dict[str, Any] | None:
    """The backend whose whole model the probe checks outputs against: a measuring
    estimator's own (None where the user turned it off); for one that measures nothing (a
    table), onnxruntime where it is installed, so that no pick runs unchecked."""
    if hasattr(estimator, "reference"):
        return estimator.reference
    from collage_mlir.backends.registry import available_backends

    return ({"target": "onnxruntime", "options": {}}
            if "onnxruntime" in available_backends() else None)


def _backend_specs(pick: Partitioning, alternatives: Sequence[Partitioning],
                   reference: dict[str, Any] | None) -> dict[str, Any] | None:
    """How the probe loads each backend involved (`module:Class` targets plus the paths to
    import them from), or None when one is known to this process only."""
    from collage_mlir.cost.measure import resolve_backend

    names = {c.candidate.backend for p in [pick, *alternatives] for c in p.choices}
    targets: dict[str, str] = {}
    paths: list[str] = []
    for name in sorted(names):
        info = resolve_backend(name)
        if ":" not in info.spec["target"] and not _entry_point(name):
            return None
        targets[name] = info.spec["target"]
        paths.extend(info.sys_path)
    if reference is not None and ":" in reference["target"]:
        paths.extend(resolve_backend(reference["target"]).sys_path)
    return {"targets": targets, "sys_path": paths}


def _entry_point(name: str) -> bool:
    from importlib.metadata import entry_points

    from collage_mlir.backends.registry import GROUP

    return name in {ep.name for ep in entry_points(group=GROUP)}


def _job(module: ir.Module, pick: Partitioning, alternatives: Sequence[Partitioning],
         reference: dict[str, Any] | None, specs: dict[str, Any], scratch: str,
         timeout_s: float, tol: Tolerance, inputs: Sequence[np.ndarray] | None
         ) -> dict[str, Any]:
    store = store_of(module)
    text = portable_text(module, store) if store is not None else str(module)
    given = None
    if inputs is not None:  # arrays travel as a file beside the saved kernels
        given = str(Path(scratch) / "inputs.npz")
        np.savez(given, *inputs)
    return {"text": text, "scratch": scratch, "timeout_s": timeout_s, "inputs": given,
            "reference": reference, **specs,
            "tolerance": {"rtol": tol.rtol, "atol_scale": tol.atol_scale},
            "pick": [[hex(c.candidate.inside), c.candidate.backend, c.cost]
                     for c in pick.choices],
            "alternatives": [a.choices[0].candidate.backend for a in alternatives]}


def _probe(module: ir.Module, pick: Partitioning, alternatives: Sequence[Partitioning],
           reference: dict[str, Any] | None, specs: dict[str, Any], scratch: str,
           timeout_s: float, tol: Tolerance, inputs: Sequence[np.ndarray] | None = None
           ) -> _Outcome:
    """Run one probe to its end: passed, failed with a reason, died or went silent."""
    job = _job(module, pick, alternatives, reference, specs, scratch, timeout_s, tol, inputs)
    proc = subprocess.Popen([sys.executable, "-m", "collage_mlir.check.isolated"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    watch = _Watch(proc)
    threading.Thread(target=_feed, args=(proc.stdin, json.dumps(job)), daemon=True).start()
    try:
        return watch.until_end()
    finally:
        watch.kill()


def _feed(stream: IO[str], text: str) -> None:
    try:
        stream.write(text)
        stream.close()
    except OSError:  # the probe died before reading its job: its exit says why
        pass


class _Watch:
    """Reads a probe's events; knows the stage it is in and that stage's deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=40)
        self.stage: dict[str, Any] = {"doing": "starting", "allow": START_ALLOW_S}
        self.notes: list[str] = []
        self.t0 = time.monotonic()
        threading.Thread(target=self._pump, args=(proc.stdout, self.lines.put), daemon=True
                         ).start()
        threading.Thread(target=self._pump, args=(proc.stderr, self._stderr_line),
                         daemon=True).start()

    def _stderr_line(self, line: str | None) -> None:
        """Keep the probe's stderr tail for the reason (shown as it comes with
        COLLAGE_DEBUG=1)."""
        if line is None:
            return
        self.stderr.append(line)
        if os.environ.get("COLLAGE_DEBUG"):
            print(f"[probe] {line}", file=sys.stderr, flush=True)

    @staticmethod
    def _pump(stream: IO[str], put: Callable[[Any], None]) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def until_end(self) -> _Outcome:
        deadline = time.monotonic() + self.stage["allow"]
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                return self._failed(f"no progress for {self.stage['allow']:g} s")
            if line is None:
                return self._failed(self._death())
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if os.environ.get("COLLAGE_DEBUG"):
                print(f"[probe +{time.monotonic() - self.t0:.2f} s] {line}", file=sys.stderr,
                      flush=True)
            if "stage" in msg:
                self.stage = msg["stage"]
                deadline = time.monotonic() + float(self.stage["allow"])
            elif "note" in msg:
                self.notes.append(msg["note"])
            elif "bad_inputs" in msg:
                raise CollageError(f"the given inputs do not suit the model: "
                                   f"{msg['bad_inputs']}")
            elif "failed" in msg:
                self.stage = msg["failed"]
                return self._failed(msg["failed"]["reason"])
            elif "done" in msg:
                done = msg["done"]
                return _Outcome(True, saved=done["saved"], whole=done["whole"],
                                dropped=done["dropped"], notes=self.notes)

    def _failed(self, what: str) -> _Outcome:
        """The outcome of a probe that failed `what` in its current stage."""
        s = self.stage
        model, backend = s.get("model", ""), s.get("backend", "")
        regions = list(s.get("regions", []))
        where = (f"{backend} region {', '.join(regions)}" if model == "pick" else
                 f"{backend} whole model" if model.startswith("alt:") else
                 f"reference {backend}" if model == "reference" else "")
        text = what + (f" while {s['doing']}" if s.get("doing") else "")
        return _Outcome(False, model=model, regions=regions,
                        reason=f"{where}: {text}" if where else text, notes=self.notes)

    def _death(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        what = how_it_ended(rc)
        said = next((ln.strip() for ln in reversed(self.stderr)
                     if ln.startswith("collage worker:") or "Error" in ln), "")
        return what + (f" ({said[:200]})" if said and rc != 0 else "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


# -- the probe ------------------------------------------------------------------------------


def main() -> int:
    """The probe: read the job on stdin, report stages, failures and the end on stdout."""
    import faulthandler

    from collage_mlir.cost.measure import default_worker_memory
    from collage_mlir.cost.worker import Watchdog

    faulthandler.enable()
    job = json.loads(sys.stdin.read())
    watchdog = Watchdog()
    watchdog.limit_bytes = default_worker_memory()
    watchdog.start()
    from collage_mlir.check import probe_child

    return probe_child.run(job, _private_stdout())


def _private_stdout() -> IO[str]:
    """A private channel on the real stdout; fd 1 then goes to stderr (stray prints)."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


if __name__ == "__main__":
    sys.exit(main())
