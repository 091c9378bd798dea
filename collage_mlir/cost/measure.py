"""MeasuringEstimator: the CostEstimator that measures candidates on the real backends.

For each candidate: extract its region, key it (`cost.key`), and look the key up in the
persistent cache. Only misses reach a backend: they are grouped per backend, identical regions
(one key) are measured once, and each backend's regions go to its own worker process
(`cost.client` / `cost.worker`, kept between calls inside a `session`), one backend at a
time, the reference backend first, so that measurements do not compete for the cores; or,
with a `RemoteExecutor` (`cost.executor`: a Ray cluster), every backend's regions at once
on the executor's machines, keyed by those machines' host fingerprint and backend builds.
Each result is written to the cache as it arrives. Before measuring, a run claims its keys
in the cache; keys another live run has claimed are not measured again but waited for
(`_wait_for_others`), so concurrent runs on one cache share the work.

Backends are given as registry names ("onnxruntime") or `module:Class` paths (for plugins
and test doubles not installed as entry points), as a list or as a dict name → options.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from collage_mlir.backends.registry import GROUP as BACKEND_GROUP
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost import transition as transition_mod
from collage_mlir.cost.base import CostEstimator, Progress
from collage_mlir.cost.cache import (
    BUSY_LOAD,
    ERROR,
    INVALID,
    OK,
    TIMEOUT,
    TIMEOUT_RETRY,
    TRANSITION_RETRY,
    CacheStore,
    Claimant,
    Measurement,
    Transition,
    open_cache,
)
from collage_mlir.cost.client import Item, WorkerClient, WorkerConfig, WorkerError
from collage_mlir.cost.executor import ExecutorArg, make_executor
from collage_mlir.cost.key import (
    RegionKey,
    function_key,
    host_fingerprint,
    measurement_key,
    module_blob_tokens,
    module_text,
)
from collage_mlir.cost.key import region_key as compute_region_key
from collage_mlir.cost.protocol import (
    NO_REFERENCE,
    MeasureSettings,
    load_backend,
    settings_dict,
    shares_compiles,
)
from collage_mlir.cost.remote import Group, Outcome, RemoteExecutor, RemoteItem, store_token
from collage_mlir.cost.remote import machine_load as machine_load
from collage_mlir.cost.timing import CUT_SHORT
from collage_mlir.errors import CollageError
from collage_mlir.export import with_onnx_names
from collage_mlir.export.resources import WeightStore, portable_text, store_of
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.scratch import ScratchDir

log = logging.getLogger(__name__)

COMPILE_BATCH = 64
"""Regions a worker whose backend compiles many in one go (`shares_compiles`: IREE) gets
per command, compiled together: each joint compile has a fixed cost of seconds (IREE's
pipeline), which a larger batch spreads over more regions."""
CLAIM_POLL_S = 0.5
"""How often a run waiting for another run's rows looks for them."""

BackendsArg = Sequence[str] | Mapping[str, Mapping[str, Any]]

NAN_TAKEN_FOR_WRONG = "wrong numbers: max abs err inf"
"""The reason an older comparison gave outputs with NaN exactly where the reference had
NaN (a region whose made-up inputs give NaN, as an RMS norm's square root of a mean drawn
negative): no longer written (`tensors.compare` names a mismatch of infinities otherwise),
so a cached invalid row with it is measured again."""


def _never(reason: str) -> bool:
    return False


@dataclass(frozen=True)
class BackendInfo:
    """A backend as the estimator knows it: how to load it, and what goes into its keys."""

    spec: dict[str, Any]
    name: str
    version: str
    options: str
    batch: bool
    sys_path: tuple[str, ...] = ()
    capability_revision: int = 0
    outdated_failure: Callable[[str], bool] = _never
    """The backend's `Backend.outdated_failure`: which cached failures to measure again."""


@dataclass
class EstimateStats:
    """What the last `estimate` call did (for the CLI summary and tests)."""

    candidates: int = 0
    regions: int = 0
    """Distinct (region, backend) keys among the candidates."""
    hits: int = 0
    measured: int = 0
    invalid: int = 0
    errors: int = 0
    restarts: int = 0
    timeouts: int = 0
    skipped: int = 0
    """Keys not measured: their backend hung on one of their op types earlier in the run."""
    busy: int = 0
    """Keys measured while the machine was busy (load above `BUSY_LOAD`)."""
    max_load: float = 0.0
    """The highest load (other runnable tasks per core) seen while measuring."""
    shared: int = 0
    """Keys another run was measuring when this one came to them: their rows, not
    measured here."""
    by_backend: dict[str, int] = field(default_factory=dict)
    """Keys measured per backend (cache misses)."""


def _module_root(module_name: str) -> str | None:
    """The sys.path entry `module_name` was imported from (so the worker can import it too)."""
    module = importlib.import_module(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    return str(Path(path).resolve().parents[module_name.count(".")])


def resolve_backend(target: str, options: Mapping[str, Any] | None = None) -> BackendInfo:
    """Load a backend in this process to learn its name, version and options."""
    spec = {"target": target, "options": dict(options or {})}
    try:
        backend = load_backend(spec)
    except CollageError:
        raise
    except Exception as e:
        raise CollageError(f"backend '{target}' cannot be loaded: {e}") from None
    spec["target"] = _worker_target(target, type(backend))
    roots = ()
    if ":" in spec["target"]:
        root = _module_root(spec["target"].partition(":")[0])
        roots = (root,) if root else ()
    return BackendInfo(spec, backend.name, backend.cache_version(), backend.cache_options(),
                       shares_compiles(backend), roots, backend.capability_revision,
                       type(backend).outdated_failure)


def _worker_target(target: str, cls: type) -> str:
    """How a worker process loads the backend: as named, unless the name was registered in
    this process only (`register_backend`: a worker, a fresh process, does not know it),
    then by its `module:Class` path where it has one."""
    if ":" in target or target in {ep.name for ep in entry_points(group=BACKEND_GROUP)}:
        return target
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return target
    return f"{cls.__module__}:{cls.__qualname__}"


def require_known(target: str) -> None:
    """Raise a CollageError if `target` names no registered backend (module:Class paths are
    checked when loaded)."""
    from collage_mlir.backends.registry import registered_backends

    known = registered_backends()
    if ":" not in target and target not in known:
        raise CollageError(f"unknown backend '{target}' (known: {', '.join(sorted(known))})")


def backend_infos(backends: BackendsArg) -> tuple[dict[str, BackendInfo], dict[str, str]]:
    """(usable backends by name, unusable target → reason). A name no backend is registered
    under is a typo, not an unusable backend: that raises at once."""
    items = list(backends.items() if isinstance(backends, Mapping) else
                 ((b, {}) for b in backends))
    for target, _ in items:
        require_known(target)
    usable: dict[str, BackendInfo] = {}
    problems: dict[str, str] = {}
    for target, options in items:
        try:
            info = resolve_backend(target, options)
        except CollageError as e:
            problems[target] = str(e)
            continue
        if info.name in usable:
            raise CollageError(f"backend '{info.name}' given twice")
        usable[info.name] = info
    return usable, problems


class MeasuringEstimator(CostEstimator):
    """Costs candidates by measuring them (through a persistent cache).

    `reference`: the backend whose outputs every kernel is checked against (None: unchecked).
    `timeout_s`: longest one region may take to compile, check and time before it is
    declared hung. `skip_unusable`: drop unknown or unavailable backends (see `skipped`)
    instead of raising a CollageError. `worker_memory_bytes`: the resident size past which a
    worker ends itself and its region is invalid (default `default_worker_memory()`; 0: none).
    `load_probe`: the machine's load, recorded with each measurement (default
    `machine_load`). `transition_timeout_s`: longest one hand-off experiment may take
    (default max(120 s, 4 × `timeout_s`)). `executor`: where cache misses are measured
    (`cost.executor.make_executor`; default here); one named by a string is closed with
    the estimator, a given `RemoteExecutor` stays open (its owner closes it).
    """

    def __init__(self, backends: BackendsArg, cache_path: str | Path | None = None,
                 timeout_s: float = 60.0, reference: str | None = "onnxruntime",
                 settings: MeasureSettings | None = None, batch_size: int = COMPILE_BATCH,
                 sys_path: Sequence[str] = (), skip_unusable: bool = False,
                 cache: CacheStore | None = None,
                 worker_memory_bytes: int | None = None,
                 load_probe: Callable[[], float] | None = None,
                 transition_timeout_s: float | None = None,
                 executor: ExecutorArg = None) -> None:
        self.backends, self.skipped = backend_infos(backends)
        if self.skipped and not skip_unusable:
            raise CollageError("; ".join(self.skipped.values()))
        self.reference = self._reference_spec(reference)
        self.cache = cache if cache is not None else open_cache(cache_path)
        self.timeout_s = timeout_s
        self.settings = settings or MeasureSettings()
        self.batch_size = batch_size
        self.sys_path = tuple(sys_path)
        self.worker_memory_bytes = (default_worker_memory() if worker_memory_bytes is None
                                    else worker_memory_bytes)
        self.load_probe = load_probe or machine_load
        self.claimant = Claimant.here()
        self._sleep = time.sleep
        self._transition_timeout_s = transition_timeout_s
        self.stats = EstimateStats()
        self._seen = _Run()  # what earlier `estimate` calls of this run learnt
        self._bounds: dict[int, float | None] = {}
        """id(candidate) → `stop_above`, during an `estimate_bounded` call."""
        self._transitions: dict[tuple[str, str], Transition] = {}
        self._workers: dict[str, WorkerClient] = {}
        """Backend name → its measuring worker, kept between `estimate` calls inside a
        `session`."""
        self._sessions = 0
        self._transition_client: WorkerClient | None = None
        """One worker measures every pair of backends, reusing its compiled rings; it ends
        when candidates are measured (a run prices its hand-offs first) or at `close`."""
        self._graphs: WeakKeyDictionary[DataflowGraph, _GraphMemo] = WeakKeyDictionary()
        self._stores_written = 0
        self._scratch: ScratchDir | None = None
        self.host: str | None = None
        """The host fingerprint in this estimator's keys (None: this machine's)."""
        self.executor: RemoteExecutor | None = None
        self._owns_executor = not isinstance(executor, RemoteExecutor)
        if executor is not None:
            self._bind(executor)

    def _bind(self, where: ExecutorArg) -> None:
        """Measure on `where`: keys take its machines' fingerprint and each backend as
        loaded there (its version, and its options with the thread count explicit)."""
        executor = make_executor(where)
        if executor is None:
            return
        self.executor = executor
        try:
            kind = executor.bind({n: i.spec for n, i in self.backends.items()},
                                 self._sys_paths())
        except BaseException:
            self.close()
            raise
        self.host = kind.fingerprint
        self.backends = {n: dataclasses.replace(i, spec=kind.backends[n].spec,
                                                version=kind.backends[n].version,
                                                options=kind.backends[n].options)
                         for n, i in self.backends.items()}

    def _reference_spec(self, reference: str | None) -> dict[str, Any] | None:
        if reference is None:
            return None
        try:
            require_known(reference)
        except CollageError as e:
            raise CollageError(f"reference: {e}") from None
        if reference in self.backends:
            return self.backends[reference].spec
        return {"target": reference, "options": {}}

    @property
    def tolerance(self) -> MeasureSettings:
        return self.settings

    @contextmanager
    def session(self) -> Iterator[None]:
        """Inside, each backend's worker process is kept from one `estimate` call to the
        next (a start costs 0.4-0.6 s, and a cold run's measure phase makes a dozen calls);
        at the end they are stopped: an idle worker still holds its runtimes' memory while
        the run checks its pick end to end."""
        self._sessions += 1
        try:
            yield
        finally:
            self._sessions -= 1
            if not self._sessions:
                self._stop_workers()

    def _stop_workers(self) -> None:
        for client in self._workers.values():
            client.stop()
        self._workers.clear()

    def close(self) -> None:
        self._stop_transition_worker()
        self._stop_workers()
        self.cache.close()
        if self.executor is not None and self._owns_executor:
            self.executor.close()
        self.executor = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
        for memo in self._graphs.values():
            memo.store = None


    # -- capability ---------------------------------------------------------------------

    def capability(self, graph: DataflowGraph, backend: str) -> int:
        """`backend.capability(graph)`, remembered in the cache per function structure."""
        info = self.backends[backend]
        fk = function_key(graph.func_op)
        revision = info.capability_revision or ""
        key = f"{measurement_key(fk, info.name, info.version, info.options)}:capability{revision}"
        bits = self.cache.get_capability(key)
        if bits is None:
            bits = load_backend(info.spec).capability(graph)
            self.cache.put_capability(key, info.name, bits)
        return bits

    # -- regions and keys ---------------------------------------------------------------

    def region(self, sub_graph: SubGraph) -> RegionKey:
        """The region key of a SubGraph, computed once per SubGraph. The region's text
        (weights included) is not kept: `region_text` makes it again for a cache miss, so
        memory holds one region's weights at a time, not every candidate's."""
        memo = self._memo(sub_graph.graph)
        if sub_graph.inside not in memo.regions:
            try:
                module = sub_graph.extract("region")
                if memo.tokens is None:
                    memo.tokens = module_blob_tokens(sub_graph.graph.func_op.parent)
                memo.regions[sub_graph.inside] = compute_region_key(module, memo.tokens)
            except Exception as e:  # a region that cannot be extracted: out, with the reason
                memo.regions[sub_graph.inside] = e
        got = memo.regions[sub_graph.inside]
        if isinstance(got, Exception):
            raise got
        return got

    def _memo(self, graph: DataflowGraph) -> _GraphMemo:
        if graph not in self._graphs:
            self._graphs[graph] = _GraphMemo()
        return self._graphs[graph]

    def _store(self, graph: DataflowGraph) -> WeightStore | None:
        """The weight store of the graph's module: the one it names (the driver writes one
        while it partitions), else one written once per graph into this estimator's scratch
        directory; None (regions then carry their weights) if that fails."""
        memo = self._memo(graph)
        if not memo.store_tried:
            memo.store_tried = True
            memo.store = store_of(graph.func_op.parent) or self._write_store(graph)
        return memo.store

    def _write_store(self, graph: DataflowGraph) -> WeightStore | None:
        try:
            directory = self._scratch_dir() / str(self._stores_written)
            self._stores_written += 1
            return WeightStore.write(graph.func_op.parent, directory)
        except OSError as e:
            log.warning("cannot write a weight store (%s); regions carry their weights", e)
            return None

    def _scratch_dir(self) -> Path:
        """This estimator's temporary directory (weight stores, shared reference outputs),
        removed at `close`."""
        if self._scratch is None:
            self._scratch = ScratchDir("scratch")
        return Path(self._scratch.name)

    def _reference_dir(self) -> str | None:
        """Where this machine's workers share reference outputs (`cost/references.py`);
        None without a reference or where no directory can be made."""
        if self.reference is None:
            return None
        try:
            directory = self._scratch_dir() / "references"
            directory.mkdir(exist_ok=True)
        except OSError:
            return None
        return str(directory)

    def region_text(self, sub_graph: SubGraph) -> str:
        """The extracted region as the worker parses it: large weights stay in the graph's
        weight store, which the worker maps."""
        module = sub_graph.extract("region")
        store = self._store(sub_graph.graph)
        return module_text(module) if store is None else portable_text(module, store)

    def key(self, candidate: CandidatePartition) -> str | None:
        """The cache key of a candidate, None for a backend this estimator does not know."""
        info = self.backends.get(candidate.backend)
        if info is None:
            return None
        rk = self.region(candidate.sub_graph)
        return measurement_key(rk, info.name, info.version, info.options, host=self.host,
                               method=self.settings.method)

    def remeasure(self, candidates: Sequence[CandidatePartition]) -> int:
        """Mark the cached rows of `candidates` stale (`CacheStore.mark_stale`)."""
        keys = [k for k in (self.key(c) for c in candidates) if k is not None]
        return self.cache.mark_stale(keys) if keys else 0

    # -- estimate -----------------------------------------------------------------------

    def reason(self, candidate: CandidatePartition) -> str:
        memo = self._graphs.get(candidate.sub_graph.graph)
        return memo.reasons.get(_reason_key(candidate), "") if memo else ""

    def estimate_bounded(self, candidates: Sequence[CandidatePartition],
                         stop_above: Sequence[float | None],
                         progress: Progress | None = None) -> list[float]:
        """`estimate`, each region's timing stopping early beyond the largest bound of the
        candidates it stands for (none if one of them has none). The bounds go through
        `estimate` itself, so a subclass that wraps `estimate` keeps working."""
        self._bounds = {id(c): b for c, b in zip(candidates, stop_above, strict=True)}
        try:
            return self.estimate(candidates, progress)
        finally:
            self._bounds = {}

    def estimate(self, candidates: Sequence[CandidatePartition],
                 progress: Progress | None = None) -> list[float]:
        """Cached costs, the rest measured."""
        self._stop_transition_worker()
        total = len(candidates)
        costs = [math.nan] * total
        waiting: dict[str, list[int]] = {}  # key → candidate indices
        rows: dict[str, tuple[BackendInfo, SubGraph, RegionKey]] = {}
        done = 0
        for i, c in enumerate(candidates):
            info = self.backends.get(c.backend)
            if info is None:
                done += 1  # a backend this estimator does not know: unknown (NaN)
                continue
            try:
                rk = self.region(c.sub_graph)
            except Exception as e:  # out of the search, with the reason
                costs[i] = math.inf
                self._memo(c.sub_graph.graph).reasons[_reason_key(c)] = \
                    f"cannot extract the region: {e}"
                done += 1
                continue
            key = measurement_key(rk, info.name, info.version, info.options, host=self.host,
                                  method=self.settings.method)
            waiting.setdefault(key, []).append(i)
            rows[key] = (info, c.sub_graph, rk)
        bounds = {key: _loosest(self._bounds.get(id(candidates[i])) for i in ks)
                  for key, ks in waiting.items()}
        self.stats = EstimateStats(candidates=total, regions=len(waiting))

        def settle(key: str, m: Measurement) -> None:
            nonlocal done
            for i in waiting.pop(key, []):
                costs[i] = m.cost
                if m.status != OK:
                    c = candidates[i]
                    self._memo(c.sub_graph.graph).reasons[_reason_key(c)] = \
                        f"{m.status}: {with_onnx_names(m.error or '', c.sub_graph)}"
                done += 1
            if progress:
                progress(done, total)

        previous: dict[str, Measurement] = {}
        run = _Run(self._seen.cleared, {b: dict(h) for b, h in self._seen.hung.items()})
        timed_out: list[Measurement] = []
        for key, m in self.cache.get_many(waiting).items():
            if self._is_hit(m, bounds[key]):
                self.stats.hits += 1
                if m.status == TIMEOUT:
                    timed_out.append(m)
                else:
                    run.cleared.setdefault(m.backend, set()).update(_op_types(rows[key][1]))
                settle(key, m)
            else:
                previous[key] = m
        for m in timed_out:  # a timeout that stands (see TIMEOUT_RETRY) skips its op types too
            cleared = run.cleared.get(m.backend, set())
            for t in sorted(_op_types(rows[m.key][1]) - cleared):
                run.hung.setdefault(m.backend, {}).setdefault(
                    t, f"skipped: {m.backend} hung on {t} in earlier runs (cached timeout)")
        if progress:
            progress(done, total)
        started = time.time()
        deferred: list[str] = []  # claimed by another run when we came to them
        remote: dict[str, list[str]] = {}  # backend → keys, measured together on the executor
        for backend in sorted({rows[k][0].name for k in waiting}, key=self._measuring_order):
            keys = sorted((k for k in waiting if rows[k][0].name == backend),
                          key=lambda k: len(rows[k][1].nodes))  # single ops first
            self.stats.by_backend[backend] = len(keys)
            mine = set(self.cache.claim(keys, self.claimant, self.claim_stale_s, started))
            deferred += [k for k in keys if k not in mine]
            if self.executor is not None:
                remote[backend] = [k for k in keys if k in mine]
                continue
            self._measure_backend(self.backends[backend], [k for k in keys if k in mine], rows,
                                  settle, previous, run, bounds)
        if remote:
            self._measure_remote(remote, rows, settle, previous, run, bounds)
        if deferred:
            self._wait_for_others(deferred, rows, settle, previous, run, started, bounds)
        return costs

    @property
    def reference_backend(self) -> str | None:
        return next((name for name, info in self.backends.items()
                     if info.spec == self.reference), None)

    def alternates(self, backend: str) -> bool:
        """On this machine, a backend that compiles region by region: windows of a few
        regions cost nothing more (its worker is held for the session). A batching backend
        (IREE) would pay its joint compile's fixed cost per window; an executor measures
        every backend at once on its own machines."""
        info = self.backends.get(backend)
        return self.executor is None and info is not None and not info.batch

    def _measuring_order(self, backend: str) -> tuple[bool, str]:
        """The reference backend first: its worker leaves its outputs as the others'
        reference (`cost/references.py`), so that no other worker compiles and runs the
        reference itself (for a whole model, seconds)."""
        return (backend != self.reference_backend, backend)

    @property
    def claim_stale_s(self) -> float:
        """How long a claim stands without a heartbeat (one result of its run): the longest
        a batch compile may take, plus a worker's start."""
        return self.timeout_s * self.batch_size + 180.0

    def _wait_for_others(self, keys: list[str],
                         rows: dict[str, tuple[BackendInfo, SubGraph, RegionKey]], settle,
                         previous: Mapping[str, Measurement], run: _Run,
                         started: float, bounds: Mapping[str, float | None]) -> None:
        """Settle `keys`, claimed by other runs, with the rows those runs write (whatever
        their status: they are this run's answers too); a key whose claim lapses (its run
        ended or died without a row) is claimed and measured here."""
        pending = list(keys)
        said = False
        while pending:
            done = set()
            for key, m in self.cache.get_many(pending).items():
                if m.created >= started or self._is_hit(m, bounds.get(key)):
                    self.stats.shared += 1
                    settle(key, m)
                    done.add(key)
            pending = [k for k in pending if k not in done]
            mine = set(self.cache.claim(pending, self.claimant, self.claim_stale_s, started))
            remote: dict[str, list[str]] = {}
            for backend in sorted({rows[k][0].name for k in mine}):
                keys = [k for k in pending if k in mine and rows[k][0].name == backend]
                if self.executor is not None:
                    remote[backend] = keys
                    continue
                self._measure_backend(self.backends[backend], keys, rows, settle, previous,
                                      run, bounds)
            if remote:
                self._measure_remote(remote, rows, settle, previous, run, bounds)
            pending = [k for k in pending if k not in mine]
            if pending and not mine:
                if not said:  # a wait may be long: say what it is for
                    log.warning("collage: waiting for %d region(s) another run is measuring "
                                "(if that run died on another machine, its claims lapse "
                                "after %.0f s without a result)", len(pending),
                                self.claim_stale_s)
                    said = True
                self._sleep(CLAIM_POLL_S)

    def _older_failure(self, m: Measurement) -> bool:
        """Whether an invalid row's reason is one an older version gave and this one would
        not: NaN matched as wrong (`NAN_TAKEN_FOR_WRONG`), or what its backend calls
        outdated (`Backend.outdated_failure`)."""
        info = self.backends.get(m.backend)
        return m.error.startswith(NAN_TAKEN_FOR_WRONG) or (
            info is not None and info.outdated_failure(m.error))

    def _is_hit(self, m: Measurement, bound: float | None = None) -> bool:
        """Whether a cached row stands for this run: not an error, not marked stale, not a
        timeout that is due again (`TIMEOUT_RETRY`, against this estimator's timeout), and
        not a timing that an earlier run cut short at its `stop_above` where this run needs
        the precision (`bound`: this run's; none, or one above the row's median), nor a
        row refused for a reason an older version gave (`_older_failure`), nor,
        when this run checks numbers, a row measured by a run that named no reference."""
        if m.status == ERROR or m.stale or (m.status == INVALID and self._older_failure(m)):
            return False
        if m.status == OK and not (m.median is not None and 0 <= m.median < math.inf):
            return False  # a row edited by hand or by another tool: measured again
        if m.status == TIMEOUT:
            return not TIMEOUT_RETRY.due(m.timeout_s, m.attempts, m.created, self.timeout_s)
        if m.status == OK and CUT_SHORT in m.error:
            return bound is not None and m.median > bound
        if m.status == OK and f"unchecked: {NO_REFERENCE}" in m.error:
            return self.reference is None  # a run that checks numbers checks this one
        return True

    def _measure_backend(self, info: BackendInfo, keys: list[str],
                         rows: dict[str, tuple[BackendInfo, SubGraph, RegionKey]], settle,
                         previous: Mapping[str, Measurement], run: _Run,
                         bounds: Mapping[str, float | None]) -> None:
        """Measure `keys` on one backend's worker, each result into the cache as it comes.
        After the backend's first timeout on an op type, the regions holding that type
        that are still to measure are skipped in this run (errors, not cached)."""
        if not keys:
            return
        client = self._workers.pop(info.name, None) or WorkerClient(self._worker_config(info))
        restarts, kept = client.restarts, False
        hung = run.hung.setdefault(info.name, {})
        load = self.load_probe()

        def on_result(key: str, result: dict[str, Any]) -> None:
            nonlocal load
            _, sub_graph, rk = rows[key]
            if result.get("skipped"):
                self.stats.skipped += 1
                before = previous.get(key)
                if before is not None and before.status == OK:
                    settle(key, before)  # a stale row keeps its cost
                    return
                settle(key, Measurement(
                    key=key, region=rk.digest, backend=info.name, version=info.version,
                    options=info.options, host=host_fingerprint(), signature=rk.signature,
                    status=ERROR, error=result["error"]))
                return
            now = self.load_probe()
            before = previous.get(key)
            m = self._measurement(info, key, rk, result, before, max(load, now))
            load = now
            kept = self._keep(m, before)
            self._learn(info.name, sub_graph, m.status, run)
            if m.status != OK:
                log.info("%s on %s: %s: %s", rk.signature, info.name, m.status, m.error)
            settle(key, kept)

        def skip(key: str) -> str | None:
            return next((hung[t] for t in sorted(_op_types(rows[key][1])) if t in hung), None)

        try:
            client.measure([Item(k, functools.partial(self.region_text, rows[k][1]),
                                 skip=functools.partial(skip, k), stop_above=bounds.get(k))
                            for k in keys],
                           info.batch, on_result)
            kept = self._sessions > 0
        finally:
            self.stats.restarts += client.restarts - restarts
            if kept:
                self._workers[info.name] = client
            else:  # outside a session, or interrupted mid-command
                client.stop()
            self.cache.release(keys, self.claimant)  # those not measured after all

    def _measure_remote(self, plan: Mapping[str, list[str]],
                        rows: dict[str, tuple[BackendInfo, SubGraph, RegionKey]], settle,
                        previous: Mapping[str, Measurement], run: _Run,
                        bounds: Mapping[str, float | None]) -> None:
        """Measure `plan` (backend → keys) on the executor, every backend at once; each
        result into the cache as it comes, keyed by the machine that measured it. A result
        from a machine of another kind than the one bound (its key differs) is cached
        under its own key and is no answer here: the candidate is an error of this run.
        Regions holding an op type their backend hung on earlier in the run are not sent
        (a group skips them itself after a hang within it)."""
        sent: dict[str, list[str]] = {}
        skipped: list[tuple[str, str, str]] = []
        for backend, keys in plan.items():
            hung = run.hung.get(backend, {})
            for k in keys:
                why = next((hung[t] for t in sorted(_op_types(rows[k][1])) if t in hung), None)
                if why is None:
                    sent.setdefault(backend, []).append(k)
                else:
                    skipped.append((backend, k, why))
        groups = [self._group(self.backends[b], keys, rows, bounds) for b, keys in sent.items()]

        def on_outcome(o: Outcome) -> None:
            info = self.backends[o.backend]
            _, _, rk = rows[o.key]
            before = previous.get(o.key)
            if o.result.get("skipped"):
                self.stats.skipped += 1
                settle(o.key, before if before is not None and before.status == OK else
                       self._measurement(info, o.key, rk, o.result, None, o.load, o.host))
                return
            there = dataclasses.replace(info, version=o.version, options=o.options)
            key = measurement_key(rk, there.name, there.version, there.options, host=o.host,
                                  method=self.settings.method)
            m = self._measurement(there, key, rk, o.result, before, o.load, o.host)
            if key != o.key:
                self.cache.put(m)
                settle(o.key, dataclasses.replace(
                    m, key=o.key, status=ERROR, median=None,
                    error=f"measured on a machine of another kind ({o.host}, {o.version}, "
                          f"{o.options}): cached as its own, not used here"))
                return
            kept = self._keep(m, before)
            self._learn(info.name, rows[o.key][1], m.status, run)
            if m.status != OK:
                log.info("%s on %s: %s: %s", rk.signature, info.name, m.status, m.error)
            settle(o.key, kept)

        try:
            for backend, key, why in skipped:
                info = self.backends[backend]
                on_outcome(Outcome(backend, key, {"status": ERROR, "error": why,
                                                  "skipped": True},
                                   self.host or host_fingerprint(), info.version,
                                   info.options))
            self.executor.measure(groups, on_outcome)
        finally:
            self.cache.release([k for keys in plan.values() for k in keys], self.claimant)

    def _keep(self, m: Measurement, before: Measurement | None) -> Measurement:
        """The row a new result leaves: into the cache (and counted), except that a stale
        row not measured again (busy, broken) keeps its cost."""
        self._count(m)
        if m.status in (ERROR, TIMEOUT) and before is not None and before.status == OK:
            return before
        self.cache.put(m)
        self.cache.beat(self.claimant)
        return m

    def _learn(self, backend: str, sub_graph: SubGraph, status: str, run: _Run) -> None:
        """After a result: a timeout marks its op types hung for the rest of the run (and
        the estimator's later calls), any other result clears them."""
        types = _op_types(sub_graph)
        cleared = run.cleared.setdefault(backend, set())
        if status != TIMEOUT:
            cleared.update(types)
            return
        for t in sorted(types - cleared):
            why = f"skipped: {backend} hung on {t} earlier in this run"
            run.hung.setdefault(backend, {}).setdefault(t, why)
            self._seen.hung.setdefault(backend, {}).setdefault(t, why)

    def _group(self, info: BackendInfo, keys: list[str],
               rows: dict[str, tuple[BackendInfo, SubGraph, RegionKey]],
               bounds: Mapping[str, float | None]) -> Group:
        """One backend's keys as the executor takes them: region texts naming the weight
        stores, which the group lists with their tokens."""
        items, stores = [], {}
        for k in keys:
            sub_graph = rows[k][1]
            items.append(RemoteItem(k, self.region_text(sub_graph),
                                    tuple(sorted(_op_types(sub_graph))), bounds.get(k)))
            store = self._store(sub_graph.graph)
            if store is not None and str(store.path) not in stores:
                stores[str(store.path)] = store_token(store.path)
        config = dataclasses.replace(self._worker_config(info), reference_dir=None)
        return Group(info.name, config, info.batch, items, stores)

    def _measurement(self, info: BackendInfo, key: str, rk: RegionKey, result: dict[str, Any],
                     before: Measurement | None, load: float, host: str | None = None
                     ) -> Measurement:
        """The cache row for one worker result (a timeout counts its attempts in a row),
        measured on `host` (None: this machine)."""
        status = result.get("status", ERROR)
        attempts = 0
        if status == TIMEOUT:
            attempts = (TIMEOUT_RETRY.next_attempts(before.timeout_s, before.attempts,
                                                    self.timeout_s)
                        if before is not None and before.status == TIMEOUT else 1)
        return Measurement(
            key=key, region=rk.digest, backend=info.name, version=info.version,
            options=info.options, host=host or host_fingerprint(), signature=rk.signature,
            status=status, median=result.get("median"), p90=result.get("p90"),
            spread=result.get("spread"), runs=int(result.get("runs") or 0),
            error=result.get("error") or "", timeout_s=self.timeout_s, attempts=attempts,
            load=load)

    def _count(self, m: Measurement) -> None:
        s = self.stats
        s.measured += 1
        s.invalid += m.status == INVALID
        s.errors += m.status == ERROR
        s.timeouts += m.status == TIMEOUT
        s.busy += (m.load or 0.0) > BUSY_LOAD
        s.max_load = max(s.max_load, m.load or 0.0)

    def _sys_paths(self) -> tuple[str, ...]:
        """Where workers find the backends loaded by module path (and the reference)."""
        paths = list(self.sys_path)
        for b in self.backends.values():
            paths.extend(b.sys_path)
        return tuple(dict.fromkeys(paths))

    def _worker_config(self, info: BackendInfo) -> WorkerConfig:
        paths = [*self.sys_path, *info.sys_path]
        for b in self.backends.values():
            paths.extend(b.sys_path)  # the reference may be a path-loaded backend too
        return WorkerConfig(backend=info.spec, reference=self.reference,
                            settings=settings_dict(self.settings),
                            sys_path=tuple(dict.fromkeys(paths)), timeout_s=self.timeout_s,
                            batch_size=self.batch_size,
                            memory_limit_bytes=self.worker_memory_bytes,
                            reference_dir=self._reference_dir())

    # -- transitions --------------------------------------------------------------------

    def transition(self, src: str, dst: str) -> Transition | None:
        """The fitted hand-off src → dst: cached, else measured now (both directions). A
        cached failure stands until `TRANSITION_RETRY` says it is due again."""
        if (src, dst) in self._transitions:
            return self._transitions[(src, dst)]
        a, b = self.backends.get(src), self.backends.get(dst)
        if a is None or b is None:
            return None
        key = transition_mod.transition_key(a.name, a.version, b.name, b.version)
        cached = self.cache.get_transition(key)
        if cached is None or (cached.status != OK and TRANSITION_RETRY.due(
                cached.timeout_s, cached.attempts, cached.created, self.transition_timeout_s)):
            self._measure_transition(a, b)
            cached = self.cache.get_transition(key)
        if cached is not None:
            self._transitions[(src, dst)] = cached
        return cached

    @property
    def transition_timeout_s(self) -> float:
        """How long one hand-off experiment may take (the first pair of a backend compiles its
        rings: 64 kernels in one batch)."""
        if self._transition_timeout_s is not None:
            return self._transition_timeout_s
        return max(120.0, 4 * self.timeout_s)

    def _measure_transition(self, a: BackendInfo, b: BackendInfo) -> None:
        host = host_fingerprint()
        if self._transition_client is None:
            self._transition_client = WorkerClient(self._worker_config(a))
        client = self._transition_client
        directions = ((a, b, "forward"), (b, a, "backward"))
        timeout = self.transition_timeout_s
        try:
            msg = client.transition(b.spec, timeout_s=timeout, src=a.spec)
        except WorkerError as e:
            self._stop_transition_worker()
            status = TIMEOUT if client.timed_out else ERROR
            keys = {transition_mod.transition_key(src.name, src.version, dst.name,
                                                  dst.version): (src, dst)
                    for src, dst, _ in directions}  # one key when src is dst
            for key, (src, dst) in keys.items():
                before = self.cache.get_transition(key)
                attempts = (TRANSITION_RETRY.next_attempts(before.timeout_s, before.attempts,
                                                           timeout)
                            if before is not None and before.status != OK else 1)
                self.cache.put_transition(Transition(key, src.name, dst.name, host, status,
                                                     error=str(e), timeout_s=timeout,
                                                     attempts=attempts))
            return
        for src, dst, side in directions:
            points = [(int(n), float(t)) for n, t in msg[side]]
            per_call, per_byte = transition_mod.fit(points)
            key = transition_mod.transition_key(src.name, src.version, dst.name, dst.version)
            self.cache.put_transition(Transition(key, src.name, dst.name, host, OK,
                                                 per_call, per_byte, points,
                                                 timeout_s=timeout))

    def _stop_transition_worker(self) -> None:
        """End the worker that measured hand-offs (and the kernels it keeps for more pairs)."""
        if self._transition_client is not None:
            self._transition_client.stop()
            self._transition_client = None

    def transition_cost(self, src_backend: str, dst_backend: str, nbytes: int) -> float:
        """Measured hand-off seconds (two regions of one backend included: a boundary
        costs the switch between compiled kernels); 0 when it cannot be measured."""
        t = self.transition(src_backend, dst_backend)
        cost = t.cost(nbytes) if t is not None else math.nan
        return 0.0 if math.isnan(cost) else cost


def default_worker_memory() -> int:
    """Half the machine's memory: a measuring worker past it (a leaking kernel, a compiler
    blowing up on a whole model) ends with that reason instead of starving the run (0 where
    the size cannot be read: no limit)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 0


def _loosest(bounds: Iterable[float | None]) -> float | None:
    """The largest bound, or None when one of them is None (that candidate needs precision)."""
    out = -math.inf
    for b in bounds:
        if b is None:
            return None
        out = max(out, b)
    return out if math.isfinite(out) else None


def _op_types(sub_graph: SubGraph) -> set[str]:
    return {sub_graph.graph.nodes[i].op_type for i in sub_graph.nodes}


@dataclass
class _Run:
    """What one `estimate` call learns across backends. The estimator keeps the op types
    cleared and the hangs seen live for its later calls (the driver measures one partition
    run in stages: a hang on an op type in one stage skips it in the next); a cached
    timeout that stands counts in its own call only."""

    cleared: dict[str, set[str]] = field(default_factory=dict)
    """backend → op types it did not hang on in this run (cached rows included)."""
    hung: dict[str, dict[str, str]] = field(default_factory=dict)
    """backend → op type it hung on in this run → why its other regions are skipped."""


def _reason_key(candidate: CandidatePartition) -> tuple[str, int]:
    return candidate.backend, candidate.sub_graph.inside


@dataclass
class _GraphMemo:
    """What the estimator remembers of one graph; dropped with the graph."""

    regions: dict[int, RegionKey | Exception] = field(default_factory=dict)
    """SubGraph.inside → its region key (or why it has none)."""
    reasons: dict[tuple[str, int], str] = field(default_factory=dict)
    """(backend, inside) → why that candidate costs +inf."""
    tokens: dict[str, str] | None = None
    store: WeightStore | None = None
    store_tried: bool = False
