"""Backends: the inference runtimes and compilers Collage chooses between (plugins)."""

from collage_mlir.backends.base import Backend, BackendKind, Kernel
from collage_mlir.backends.registry import available_backends, get_backend, registered_backends

__all__ = [
    "Backend", "BackendKind", "Kernel",
    "available_backends", "get_backend", "registered_backends",
]
