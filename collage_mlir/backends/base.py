"""The backend plugin interface.

A backend is found through the `collage_mlir.backends` entry-point group. It says what it is
(name, version, kind), whether it can run here (`available`), which ops it can take
(`capability`, asked of the backend itself where it can answer), how it wants its candidate
regions formed (`partition_rule`), and compiles one extracted region (a module holding a
single ONNX-in-MLIR `func.func`) into a `Kernel` that runs on numpy arrays.
"""

from __future__ import annotations

import abc
import enum
import functools
import hashlib
import os
import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from iree.compiler import ir

from collage_mlir.rules.base import PartitionRule
from collage_mlir.rules.defaults import compiler_rule, graph_rule, library_rule

if TYPE_CHECKING:
    from collage_mlir.graph.dataflow import DataflowGraph


class BackendKind(enum.StrEnum):
    """How a backend takes work (RFC: this decides its default partition rule)."""

    GRAPH = "graph"  # runs whole sub-graphs of supported ops (onnxruntime, openvino, TensorRT)
    LIBRARY = "library"  # runs fixed composite patterns (cuDNN, cuBLAS)
    COMPILER = "compiler"  # compiles anything it can lower, best on fusable groups (IREE, TVM)


class Kernel(abc.ABC):
    """One compiled region, ready to run. Inputs and outputs follow the function signature.

    Inputs may be bound by reference: a kernel may keep the arrays it was given and read
    them again on a later call with the same array objects, so an in-place update of an
    input between calls is seen by the next call (never a stale copy). A kernel never
    writes into its inputs.
    """

    @abc.abstractmethod
    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on host arrays; returns host arrays owned by the caller (no later call of
        this or any kernel changes them)."""

    def run_borrowed(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Like `run`, but the returned arrays may be the kernel's own buffers, reused by
        its next call: they hold this call's values only until this kernel runs again and
        must not be written. For a caller that knows nobody else holds them (the runtime's
        values between regions, the hand-off experiment); a region boundary then moves no
        data and allocates nothing. By default `run`."""
        return self.run(inputs)

    def fused(self) -> list[tuple[str, ...]]:
        """Groups of the region's ONNX node names (as exported: `export.exported_owners`)
        that the backend computes as one step of its own, two or more names each: a region
        cut between them loses that fusion, which no cost of the parts alone shows. [] where
        the backend does not say (the default)."""
        return []


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: `taskset`, a container's CPU
    set), the default thread count of every backend; all cores where affinity is unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@functools.cache
def cpu_identity() -> str:
    """Machine, CPU model and a digest of its feature flags: what code compiled for this
    host (`-mcpu=host`) is tied to."""
    model, flags = platform.processor() or "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model.strip():
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.strip()
    except OSError:
        pass
    flag_digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    return f"{platform.machine()}|{model}|flags:{flag_digest}"


ALIGNMENT = 64
"""Bytes a kernel-owned buffer is aligned to: IREE imports host memory only at this
alignment (and copies otherwise), and vector loads like it too."""


def aligned_empty(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts at an ALIGNMENT boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class Backend(abc.ABC):
    """A plugin. Subclasses set `name` and `kind` and may take keyword options."""

    name: str = ""
    kind: BackendKind = BackendKind.GRAPH

    def __init__(self, **options: Any) -> None:
        self.options: dict[str, Any] = dict(options)

    @property
    @abc.abstractmethod
    def version(self) -> str:
        """Version of the underlying runtime; part of every cache key."""

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> str | None:
        """None when the backend can run here, else a short reason ("openvino is not installed")."""

    @classmethod
    def available(cls) -> bool:
        return cls.unavailable_reason() is None

    @property
    def artifact_target(self) -> str:
        """What a saved artifact is tied to besides the backend's version ("" for nothing):
        a model loaded where this differs compiles such regions again."""
        return ""

    capability_revision: int = 0
    """Raised when `capability` changes its answer for the same backend version, so that
    answers the cache remembers are asked again."""
    call_revision: int = 0
    """Raised when the way a kernel is called changes what it costs for the same backend
    version (a copy dropped from every call), so that costs the cache remembers, measured
    through the old call, are measured again (`cache_version`)."""

    @classmethod
    def outdated_failure(cls, reason: str) -> bool:
        """Whether a cached failure (`reason`, as this backend's kernel raised it) came from
        an older version of this code that has since learnt to run such regions, so that
        the region is measured again; none does by default."""
        return False

    @abc.abstractmethod
    def capability(self, graph: DataflowGraph) -> int:
        """Bitset (over `graph`'s post-dfs indices) of the op nodes this backend can run."""

    def refusal(self, graph: DataflowGraph, node: int) -> str:
        """Why `capability` leaves op node `node` of `graph` out, for error messages."""
        return "not among the ops it runs"

    def partition_rule(self) -> PartitionRule:
        """The rule that forms this backend's candidates; by default the one for its kind."""
        return default_rule_for(self)

    @abc.abstractmethod
    def compile(self, module: ir.Module) -> Kernel:
        """Compile the single `func.func` in `module` (an extracted region)."""

    def compile_many(self, modules: Sequence[ir.Module]) -> list[Kernel | Exception]:
        """Compile several regions; backends that can share one compile override this."""
        out: list[Kernel | Exception] = []
        for m in modules:
            try:
                out.append(self.compile(m))
            except Exception as e:  # one bad region must not stop the others
                out.append(e)
        return out

    def save_kernel(self, kernel: Kernel, module: ir.Module, stem: str) -> list[str]:
        """Write `kernel`'s compiled artifact as files named `stem.*`; returns their paths.

        The default writes nothing, and `load_kernel` compiles the region again. Backends
        with a serialisable artifact (an IREE .vmfb, an ONNX model) override both.
        """
        return []

    def load_kernel(self, module: ir.Module, stem: str) -> Kernel:
        """Load what `save_kernel` wrote for this region (`module`), or compile it again."""
        return self.compile(module)

    def cache_version(self) -> str:
        """The version cache keys carry: `version`, and `call_revision` once raised."""
        return self.version + (f"+call{self.call_revision}" if self.call_revision else "")

    def cache_options(self) -> str:
        """The options that change compiled code, as a stable string for cache keys."""
        return ",".join(f"{k}={self.options[k]}" for k in sorted(self.options))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cache_options()})"


def default_rule_for(backend: Backend) -> PartitionRule:
    """The rule for a backend of this kind (see `collage_mlir.rules.defaults`)."""
    kind = BackendKind(backend.kind)
    if kind is BackendKind.GRAPH:
        return graph_rule()
    if kind is BackendKind.COMPILER:
        return compiler_rule()
    return library_rule()
