"""What a remote executor takes and gives back: groups of regions out, outcomes in.

`MeasuringEstimator` measures its cache misses here, by default: one worker process per
backend (`cost.client`), one backend at a time. A `RemoteExecutor` runs those workers on
other machines instead (`cost.ray_executor`). The contract:

- `bind` says which machines will measure: their host fingerprint and each backend as it
  loads there (version, options, with its thread count set explicitly). The estimator keys
  its cache lookups by these, so numbers from machines of another kind never answer them.
- `measure` runs `Group`s (regions of one backend, in order, through one crash-isolated
  worker on one machine) and calls `on_outcome` once per region, in this process, as the
  results arrive. Every region of every group gets exactly one outcome: a result, or an
  error saying why none came (its machine died twice, say). The estimator alone writes
  the cache.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collage_mlir.cost.client import WorkerConfig


@dataclass(frozen=True)
class RemoteItem:
    """One region to measure: its cache key (the id results come back under), its text as
    the worker parses it (`MeasuringEstimator.region_text`) and its op types (after a
    timeout on one of them, the group's later regions holding it are skipped)."""

    key: str
    text: str
    op_types: tuple[str, ...]
    stop_above: float | None = None
    """Seconds beyond which its timing may stop early (`time_kernel`)."""


@dataclass
class Group:
    """Regions of one backend, measured in order by one worker on one machine."""

    backend: str
    config: WorkerConfig
    """The worker's configuration; its backend spec is the bound one (`BoundBackend.spec`)."""
    batch: bool
    items: list[RemoteItem]
    stores: dict[str, str] = field(default_factory=dict)
    """Weight-store directory the texts name → its token (`store_token`): a machine that
    cannot read that directory is sent the store's files."""


@dataclass(frozen=True)
class BoundBackend:
    """A backend as the measuring machines load it."""

    spec: dict[str, Any]
    version: str
    options: str


@dataclass(frozen=True)
class HostKind:
    """The machines a remote executor measures on: one host fingerprint
    (`cost.key.host_fingerprint`) and each backend, by name, as loaded there."""

    fingerprint: str
    backends: dict[str, BoundBackend]


@dataclass(frozen=True)
class Outcome:
    """One region's result (the worker's result message, `cost.worker`), with what the
    machine that measured it said of itself: its fingerprint, the backend's version and
    options there, and its load while measuring."""

    backend: str
    key: str
    result: dict[str, Any]
    host: str
    version: str
    options: str
    load: float = 0.0


OutcomeCallback = Callable[[Outcome], None]


class RemoteExecutor(ABC):
    """Runs measuring workers on other machines (see the module docstring)."""

    @abstractmethod
    def bind(self, specs: Mapping[str, dict[str, Any]], sys_path: Sequence[str]) -> HostKind:
        """The measuring machines' kind, with each backend (name → spec) as loaded there.
        Raises a CollageError when there is no machine to measure on or a backend does not
        load there."""

    @abstractmethod
    def measure(self, groups: Sequence[Group], on_outcome: OutcomeCallback) -> None:
        """Measure every group; `on_outcome` once per region, in this thread."""

    def close(self) -> None:
        """Let go of what the executor holds (a cluster it started)."""
        return None

    def __enter__(self) -> RemoteExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def machine_load() -> float:
    """Other runnable tasks per core: the 1-minute load average less the one measuring
    worker, over the cores (0 where the load average cannot be read)."""
    try:
        average = os.getloadavg()[0]
    except OSError:
        return 0.0
    return max(0.0, average - 1.0) / (os.cpu_count() or 1)


STORE_FILES = ("weights.json", "weights.bin")
"""A weight store's files (`export.resources.WeightStore`): its index and its data."""

SAMPLES, SAMPLE_BYTES = 16, 4096
"""Slices of a store's data file that its token digests (`store_token`)."""


def store_token(directory: str | Path) -> str:
    """What identifies a weight store's contents cheaply: a digest of its index, of
    `SAMPLES` slices spread over its data file, and that file's size (two stores of one
    architecture with other weights differ in the slices). Raises OSError where the store
    cannot be read."""
    directory = Path(directory)
    digest = hashlib.sha256((directory / STORE_FILES[0]).read_bytes())
    with open(directory / STORE_FILES[1], "rb") as data:
        size = os.fstat(data.fileno()).st_size
        for k in range(SAMPLES):
            data.seek(size * k // SAMPLES)
            digest.update(data.read(SAMPLE_BYTES))
    return f"{digest.hexdigest()[:24]}:{size}"

