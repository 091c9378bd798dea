"""Measuring on a Ray cluster: each group of regions is one Ray task owning one worker.

Each backend's regions are dealt into a few groups per node (`split`); each group is one Ray
task (`run_group`, a streaming generator) that starts the usual crash-isolated measuring
worker (`cost.client`) on its node, so a backend that crashes or hangs costs one region,
never the task. A task takes one unit of the custom resource `collage_bench`
(`BENCH_RESOURCE`) and a measuring node offers one (`ray start --resources='{"collage_bench":
1}'`), so a node runs one measuring task at a time and measurements never share its cores;
Ray's scheduler places the groups. Results stream back to the driver as the worker gives
them; the driver alone writes the cache.

Host kinds: `bind` asks every measuring node for its host fingerprint and each backend as it
loads there; the nodes of the most common kind measure (a mixed cluster pins each group to
one of those nodes), and each result comes back with its node's fingerprint, so the driver
keys rows by the machine that measured them.

Threads: Ray sets OMP_NUM_THREADS=1 in its workers (its CPU accounting). The measuring worker
has the node to itself, so that variable is dropped from its environment, and every backend
that takes a `threads` option gets the node's default (all its cores) set explicitly in its
spec, the number a local run on that machine uses, so local and Ray rows of one host kind
share keys.

Weight stores: region texts name the model's weight store by path (`export.resources`). A
node that cannot read that path (or finds other contents there) asks for the store, and the
driver ships its files once through Ray's object store; the node keeps a copy under its temp
directory and points the texts at it. On one machine, or with the store on a shared file
system, nothing is copied.

Lost tasks: a task whose Ray worker or node dies has the regions it had not reported
re-queued once as a new task; lost again, each is an error naming the reason.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import resource
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collage_mlir.cost.client import Item, WorkerClient
from collage_mlir.cost.key import host_fingerprint
from collage_mlir.cost.protocol import load_backend
from collage_mlir.cost.remote import (
    STORE_FILES,
    BoundBackend,
    Group,
    HostKind,
    Outcome,
    OutcomeCallback,
    RemoteExecutor,
    RemoteItem,
    machine_load,
    store_token,
)
from collage_mlir.errors import CollageError, first_line, one_line

log = logging.getLogger(__name__)

BENCH_RESOURCE = "collage_bench"
"""The custom resource a measuring task takes one unit of; a measuring node offers 1."""
GROUPS_PER_NODE = 2
"""Groups per backend per measuring node: enough that a node finishing early takes another
group, few enough that each worker start is spread over several regions."""
MIN_GROUP = 8
"""Fewest regions in a group (a worker start costs a second or two: python, the IR bindings,
the backend and the reference)."""
REQUEUE = 1
"""How many times the regions of a lost task are sent again."""
LIVENESS_POLL_S = 10.0
"""How often the driver, waiting for results, checks that a measuring node is still alive."""
STORE_COPY_KEPT_S = 86400.0
"""How long a node keeps a weight store sent to it after its last use."""
DROPPED_ENV = ("OMP_NUM_THREADS",)
"""Variables Ray sets for its own accounting that a measuring worker must not inherit."""


def import_ray() -> Any:
    """The `ray` module, or a CollageError saying how to get it."""
    try:
        import ray
    except ImportError:
        raise CollageError("measuring on Ray needs the ray package: pip install "
                           "'collage-mlir[ray]'") from None
    return ray


class RayExecutor(RemoteExecutor):
    """Measures on the Ray cluster at `address`: "ray" (or None, "auto") connects to the
    cluster this machine belongs to, else starts a local one with one measuring node (this
    machine); "ray://HOST:PORT" connects through Ray Client; "HOST:PORT" to a head's GCS. A
    process where `ray.init` was already called uses that connection (and leaves it open
    on `close`). Results come back through streaming generators, or, through Ray Client
    (which has none) or with `queued`, through a Ray queue (`_Queued`)."""

    def __init__(self, address: str | None = None, requeue: int = REQUEUE,
                 queued: bool = False) -> None:
        self.ray = import_ray()
        self.address = address
        self.requeue = requeue
        self._owns_connection = self._connect(address)
        self._probe = self.ray.remote(probe_node)
        client = self.ray.util.client.ray.is_connected()
        self._streams: _Generators | _Queued = (_Queued(self.ray) if client or queued
                                                else _Generators(self.ray))
        self.kind: HostKind | None = None
        self._nodes: list[str] = []
        self._pinned = False
        self._next_node = 0
        self._shipped: dict[str, Any] = {}
        self.tasks: list[TaskRecord] = []
        """Every task that ended, in the order they ended (for the scaling benchmark)."""
        self.requeued = 0
        """Regions sent again after their task was lost."""
        self.waited_s = 0.0
        """Seconds the driver spent waiting for the cluster (the rest of a run's time in
        `measure` is the driver's own work)."""

    def _connect(self, address: str | None) -> bool:
        """Connect this process; True when it called `ray.init` (and so disconnects)."""
        ray = self.ray
        if ray.is_initialized():
            return False
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        try:
            if address in (None, "", "ray", "auto"):
                try:
                    ray.init(address="auto", **quiet)
                except ConnectionError:
                    ray.init(resources={BENCH_RESOURCE: 1}, include_dashboard=False, **quiet)
            else:
                _require_answer(address)
                ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise CollageError(f"cannot connect to the Ray cluster at {address}: "
                               f"{first_line(e)}") from None
        return True

    def close(self) -> None:
        self._shipped.clear()
        if self._owns_connection and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns_connection = False

    # -- where to measure ---------------------------------------------------------------

    def bench_nodes(self) -> list[str]:
        """Ids of the live nodes that offer the measuring resource."""
        return [n["NodeID"] for n in self.ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get(BENCH_RESOURCE, 0) >= 1]

    def bind(self, specs: Mapping[str, dict[str, Any]], sys_path: Sequence[str]) -> HostKind:
        ray = self.ray
        nodes = self.bench_nodes()
        if not nodes:
            raise CollageError(f"no node of the Ray cluster offers the '{BENCH_RESOURCE}' "
                               f"resource; start measuring nodes with ray start "
                               f"--resources='{{\"{BENCH_RESOURCE}\": 1}}'")
        refs = [self._probe.options(num_cpus=0, max_retries=1,
                              scheduling_strategy=_on_node(node)).remote(dict(specs),
                                                                          list(sys_path))
                for node in nodes]
        kinds: dict[tuple[str, str], list[str]] = {}
        answers: dict[tuple[str, str], dict[str, Any]] = {}
        try:
            answers_in_order = ray.get(refs)
        except ray.exceptions.RayError as e:
            raise CollageError(f"cannot ask the Ray cluster's measuring nodes what they are: "
                               f"{one_line(e)}") from None
        for node, answer in zip(nodes, answers_in_order, strict=True):
            kind = (answer["host"], repr(sorted(answer["backends"].items())))
            kinds.setdefault(kind, []).append(node)
            answers[kind] = answer
        chosen = max(kinds, key=lambda k: (len(kinds[k]), k))
        if len(kinds) > 1:
            log.warning("the Ray cluster has %d kinds of measuring node; measuring on the %d "
                        "of kind %s", len(kinds), len(kinds[chosen]), chosen[0])
        answer = answers[chosen]
        bound = {}
        for name, got in answer["backends"].items():
            if "error" in got:
                raise CollageError(f"backend '{name}' does not load on the Ray node "
                                   f"{kinds[chosen][0][:12]}: {got['error']}")
            bound[name] = BoundBackend(got["spec"], got["version"], got["options"])
        self._nodes, self._pinned = kinds[chosen], len(kinds) > 1
        self.kind = HostKind(answer["host"], bound)
        return self.kind

    # -- measuring ----------------------------------------------------------------------

    def split(self, group: Group) -> list[Group]:
        """One backend's group dealt into `GROUPS_PER_NODE` groups per measuring node (at
        least `MIN_GROUP` regions each): region k goes to group k mod n, so every group gets
        small and large regions alike."""
        n = max(1, min(len(group.items) // MIN_GROUP, GROUPS_PER_NODE * len(self._nodes)))
        return [replace(group, items=group.items[j::n]) for j in range(n)]

    def measure(self, groups: Sequence[Group], on_outcome: OutcomeCallback) -> None:
        if self.kind is None:
            raise RuntimeError("RayExecutor.measure before bind")
        pending = collections.deque(_Flight(g) for group in groups for g in self.split(group))
        live: dict[Any, _Flight] = {}
        try:
            self._run(pending, live, on_outcome)
        except BaseException:  # interrupted: the cluster's slots go back to others
            for handle in live:
                try:
                    self.ray.cancel(handle, force=True)
                except Exception:  # already ended, or the cluster is gone
                    pass
            raise

    def _run(self, pending: collections.deque, live: dict[Any, _Flight],
             on_outcome: OutcomeCallback) -> None:
        window = GROUPS_PER_NODE * max(1, len(self._nodes))
        idle_since = time.monotonic()
        while pending or live:
            while pending and len(live) < window:
                flight = pending.popleft()
                live[self._submit(flight)] = flight
            waiting = time.perf_counter()
            happened = self._streams.next(list(live))
            self.waited_s += time.perf_counter() - waiting
            if not happened:
                if time.monotonic() - idle_since > LIVENESS_POLL_S:
                    idle_since = time.monotonic()
                    if not self.bench_nodes():
                        for flight in [*live.values(), *pending]:
                            self._give_up(flight, "no Ray node offering "
                                          f"'{BENCH_RESOURCE}' is alive", on_outcome)
                        return
                continue
            idle_since = time.monotonic()
            for handle, what, payload in happened:
                flight = live[handle]
                if what == "event":
                    self._event(flight, payload, on_outcome)
                    continue
                del live[handle]
                if what == "end":
                    self._ended(flight, pending, on_outcome)
                else:
                    self._lost(flight, payload, pending, on_outcome)

    def _submit(self, flight: _Flight) -> Any:
        options: dict[str, Any] = {"resources": {BENCH_RESOURCE: 1}, "num_cpus": 0,
                                   "max_retries": 0}
        if self._pinned:  # a mixed cluster: only nodes of the bound kind
            options["scheduling_strategy"] = _on_node(self._nodes[self._next_node %
                                                                  len(self._nodes)])
            self._next_node += 1
        shipped = {path: self._shipped[path] for path in flight.group.stores
                   if path in self._shipped}
        flight.reset()
        return self._streams.submit(options, flight.group, shipped)

    def _event(self, flight: _Flight, event: dict[str, Any], on_outcome: OutcomeCallback
               ) -> None:
        kind = event["event"]
        if kind == "start":
            flight.host, flight.node, flight.started = event["host"], event["node"], event["at"]
        elif kind == "need_store":
            flight.needs_store = event["path"]
        elif kind == "result":
            flight.reported.add(event["key"])
            flight.results.append(event["at"])
            bound = self._bound(flight.group.backend)
            on_outcome(Outcome(flight.group.backend, event["key"], event["result"],
                               flight.host or self.kind.fingerprint,
                               event.get("version") or bound.version,
                               event.get("options") or bound.options,
                               float(event.get("load") or 0.0)))
        elif kind == "done":
            self.tasks.append(TaskRecord(flight.node, flight.group.backend,
                                         len(flight.group.items), flight.started, event["at"],
                                         tuple(flight.results), float(event.get("cpu", 0.0))))

    def _ended(self, flight: _Flight, pending: collections.deque, on_outcome: OutcomeCallback
               ) -> None:
        """A task's stream ended: resend it with the weight store it asked for, or report
        the regions it did not (cannot happen with a sound worker client; said anyway)."""
        if flight.needs_store is not None and flight.needs_store not in self._shipped:
            self._shipped[flight.needs_store] = self._ship(flight.needs_store)
            pending.appendleft(flight)
            return
        left = flight.left()
        if flight.needs_store is not None and left:
            self._give_up(flight, f"the node cannot use the weight store "
                          f"{flight.needs_store} even when sent", on_outcome)
        elif left:
            self._give_up(flight, "the measuring task ended without its result", on_outcome)

    def _ship(self, path: str) -> Any:
        """The store's files in Ray's object store (once per store and executor)."""
        try:
            files = {name: (Path(path) / name).read_bytes() for name in STORE_FILES}
        except OSError as e:
            raise CollageError(f"{path}: cannot read the weight store to send it to a Ray "
                               f"node ({e.strerror})") from None
        return self.ray.put(files)

    def _lost(self, flight: _Flight, error: Exception, pending: collections.deque,
              on_outcome: OutcomeCallback) -> None:
        """The task's Ray worker or node died: its unreported regions go again once."""
        left = flight.left()
        reason = one_line(error)
        log.warning("a measuring task on Ray was lost (%s); %d regions %s", reason, len(left),
                    "sent again" if flight.attempt < self.requeue else "given up")
        if not left:
            return
        if flight.attempt < self.requeue:
            self.requeued += len(left)
            again = _Flight(replace(flight.group, items=left), attempt=flight.attempt + 1)
            again.reasons = [*flight.reasons, reason]
            pending.append(again)
            return
        flight.reasons.append(reason)
        self._give_up(flight, f"lost {len(flight.reasons)} times on Ray (its worker or node "
                      f"died): {reason}", on_outcome)

    def _give_up(self, flight: _Flight, why: str, on_outcome: OutcomeCallback) -> None:
        bound = self._bound(flight.group.backend)
        for item in flight.group.items:
            if item.key not in flight.reported:
                flight.reported.add(item.key)
                on_outcome(Outcome(flight.group.backend, item.key,
                                   {"status": "error", "error": why},
                                   flight.host or self.kind.fingerprint, bound.version,
                                   bound.options))

    def _bound(self, backend: str) -> BoundBackend:
        return self.kind.backends[backend]


Happened = list[tuple[Any, str, Any]]
"""What a wait saw: (task handle, "event" | "end" | "lost", the event | None | the error),
each task's events in order and before its end."""


class _Generators:
    """Tasks as streaming generators: each result is an object the driver waits on."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.remote = ray.remote(run_group)

    def submit(self, options: dict[str, Any], group: Group, shipped: dict[str, Any]) -> Any:
        return self.remote.options(**options).remote(group, shipped)

    def next(self, handles: list[Any]) -> Happened:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=1.0)
        if not ready:
            return []
        try:
            return [(ready[0], "event", self.ray.get(next(ready[0])))]
        except StopIteration:
            return [(ready[0], "end", None)]
        except self.ray.exceptions.RayError as e:
            return [(ready[0], "lost", e)]


class _Queued:
    """Tasks that put their events into one Ray queue (an actor), tagged with the task's
    number; the driver reads the queue and waits on the tasks' own results for their end.
    For Ray Client, which has no streaming generators."""

    def __init__(self, ray: Any) -> None:
        from ray.util.queue import Queue

        self.ray = ray
        self.queue = Queue(actor_options={"num_cpus": 0})
        self.remote = ray.remote(run_group_into)
        self.tags: dict[int, Any] = {}
        self.tag_of: dict[Any, int] = {}
        self.count = 0

    def submit(self, options: dict[str, Any], group: Group, shipped: dict[str, Any]) -> Any:
        self.count += 1
        ref = self.remote.options(**options).remote(self.queue, self.count, group, shipped)
        self.tags[self.count] = ref
        self.tag_of[ref] = self.count
        return ref

    def next(self, handles: list[Any]) -> Happened:
        from ray.util.queue import Empty

        events = self._drain()
        if not events:
            try:
                events = [self.queue.get(block=True, timeout=0.5)]
            except Empty:
                events = []
        ready, _ = self.ray.wait(handles, num_returns=len(handles), timeout=0)
        if ready:
            events += self._drain()  # a task's last events are in before its end
        happened: Happened = [(self.tags[tag], "event", event) for tag, event in events]
        for ref in ready:
            try:
                self.ray.get(ref)
                happened.append((ref, "end", None))
            except self.ray.exceptions.RayError as e:
                happened.append((ref, "lost", e))
            del self.tags[self.tag_of.pop(ref)]
        return happened

    def _drain(self) -> list[tuple[int, dict[str, Any]]]:
        size = self.queue.qsize()
        return self.queue.get_nowait_batch(size) if size else []


@dataclass(frozen=True)
class TaskRecord:
    """One measuring task that ended: where, what, and when by its node's clock."""

    node: str
    backend: str
    regions: int
    started: float
    ended: float
    results: tuple[float, ...] = ()
    """When each of its results was ready, in order."""
    cpu: float = 0.0
    """CPU seconds its measuring workers used (what other work on the node cannot
    stretch, unlike its duration)."""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@dataclass
class _Flight:
    """One submission of a group, and what its stream said so far."""

    group: Group
    attempt: int = 0
    reported: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)
    host: str = ""
    node: str = ""
    started: float = 0.0
    needs_store: str | None = None
    results: list[float] = field(default_factory=list)

    def reset(self) -> None:
        """Before (re)submitting: what a previous stream of this submission said is void,
        except the results it gave."""
        self.needs_store = None

    def left(self) -> list[RemoteItem]:
        return [i for i in self.group.items if i.key not in self.reported]


ANSWER_TIMEOUT_S = 5.0


def _require_answer(address: str) -> None:
    """Refuse an address `HOST:PORT` (or `ray://HOST:PORT`) where nothing takes a TCP
    connection: `ray.init` retries such an address for about 14 minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # not host:port: ray.init says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), ANSWER_TIMEOUT_S).close()
    except OSError as e:
        raise CollageError(f"cannot connect to the Ray cluster at {address}: nothing answers "
                           f"there ({e.strerror or one_line(e)}); is the cluster running "
                           "(`ray start --head`) and is the port its GCS port?") from None


def _on_node(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


# -- on the node ----------------------------------------------------------------------------


def probe_node(specs: dict[str, dict[str, Any]], sys_path: list[str]) -> dict[str, Any]:
    """Runs on a node: its fingerprint and each backend as loaded there (name → spec with
    its threads explicit, version, options; or the error)."""
    _extend_sys_path(sys_path)
    backends: dict[str, dict[str, Any]] = {}
    for name, spec in specs.items():
        try:
            backend = load_backend(spec)
            explicit = explicit_threads(spec, backend)
            if explicit is not spec:
                backend = load_backend(explicit)
            backends[name] = {"spec": explicit, "version": backend.cache_version(),
                              "options": backend.cache_options()}
        except Exception as e:  # the driver says which backend and where
            backends[name] = {"error": one_line(e)}
    return {"host": host_fingerprint(), "backends": backends}


def explicit_threads(spec: dict[str, Any], backend: Any) -> dict[str, Any]:
    """`spec` with the backend's thread count written into its options where the backend
    takes one (a `threads` attribute) and the spec leaves it to the default; else `spec`."""
    options = spec.get("options") or {}
    threads = getattr(backend, "threads", None)
    if "threads" in options or not isinstance(threads, int):
        return spec
    return {**spec, "options": {**options, "threads": threads}}


def run_group(group: Group, shipped: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Runs on a node as a Ray task: measure the group's regions through one worker and
    yield, in order: `start` (the node's fingerprint), one `result` per region (with the
    backend's version and options as the worker loaded them, and the node's load), `done`.
    Yields `need_store` and stops when a weight store the texts name is not readable here
    and was not sent (`shipped`: store path → object ref of its files)."""
    import ray

    started = time.time()
    children = _children_cpu()
    yield {"event": "start", "host": host_fingerprint(), "at": started, "pid": os.getpid(),
           "node": ray.get_runtime_context().get_node_id()}
    moved: dict[str, str] = {}
    for path, token in group.stores.items():
        local = _usable_store(path, token, shipped.get(path))
        if local is None:
            yield {"event": "need_store", "path": path}
            return
        if local != path:
            moved[path] = local
    config = replace(group.config, environ={**group.config.environ,
                                            **dict.fromkeys(DROPPED_ENV)})
    client = WorkerClient(config)
    events: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
    hung: dict[str, str] = {}
    cleared: set[str] = set()
    types = {item.key: item.op_types for item in group.items}

    def on_result(key: str, result: dict[str, Any]) -> None:
        if result.get("status") == "timeout":
            for t in sorted(set(types[key]) - cleared):
                hung.setdefault(t, f"skipped: {group.backend} hung on {t} earlier in this run")
        elif not result.get("skipped"):
            cleared.update(types[key])
        events.put((key, result))

    def skip(key: str) -> str | None:
        return next((hung[t] for t in sorted(types[key]) if t in hung), None)

    items = [Item(i.key, _retarget(i.text, moved), skip=lambda k=i.key: skip(k),
                  stop_above=i.stop_above) for i in group.items]

    def work() -> None:
        try:
            client.measure(items, group.batch, on_result)
        finally:
            client.stop()
            events.put(None)

    threading.Thread(target=work, name="collage-group", daemon=True).start()
    while (got := events.get()) is not None:
        key, result = got
        yield {"event": "result", "key": key, "result": result, "load": machine_load(),
               "at": time.time(),
               "version": client.ready.get("version"), "options": client.ready.get("options")}
    yield {"event": "done", "at": time.time(), "restarts": client.restarts,
           "cpu": _children_cpu() - children}


def run_group_into(events: Any, tag: int, group: Group, shipped: dict[str, Any]) -> None:
    """Runs on a node as a Ray task: `run_group`'s events put into the Ray queue
    `events`, each as (tag, event)."""
    for event in run_group(group, shipped):
        events.put((tag, event))


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (the measuring workers it started)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _extend_sys_path(paths: Sequence[str]) -> None:
    for p in paths:
        if p and p not in sys.path:
            sys.path.append(p)


def _usable_store(path: str, token: str, shipped: Any) -> str | None:
    """A directory on this node holding the store `token` names: `path` itself where it
    does, else a copy made from the shipped files (kept under the temp folder for the
    run's later tasks; copies unused for `STORE_COPY_KEPT_S` go when a new one is made);
    None when neither can be had."""
    try:
        if store_token(path) == token:
            return path
    except OSError:
        pass
    if shipped is None:
        return None
    import ray

    local = Path(tempfile.gettempdir()) / f"collage-store-{token.replace(':', '-')}"
    try:
        if store_token(local) == token:
            os.utime(local)  # in use
            return str(local)
    except OSError:
        pass
    _forget_old_copies(local.parent)
    files = ray.get(shipped)
    scratch = Path(tempfile.mkdtemp(prefix="collage-store-", dir=local.parent))
    for name, data in files.items():
        (scratch / name).write_bytes(data)
    try:
        scratch.rename(local)
    except OSError:  # another task on this node made it first
        shutil.rmtree(scratch, ignore_errors=True)
    return str(local) if store_token(local) == token else None


def _forget_old_copies(folder: Path) -> None:
    for old in folder.glob("collage-store-*"):
        try:
            if time.time() - old.stat().st_mtime > STORE_COPY_KEPT_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def _retarget(text: str, moved: Mapping[str, str]) -> str:
    """The region text naming the node's copies of the stores instead of the originals."""
    for old, new in moved.items():
        text = text.replace(f'"{old}"', f'"{new}"')
    return text
