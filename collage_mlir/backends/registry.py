"""Finding backends: the `collage_mlir.backends` entry-point group, plus in-process registrations.

Tests register test doubles (a fault-injecting backend) with `register_backend`; products
ship real ones through entry points. A backend that is not installed is skipped with a
reason, never a crash.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from collage_mlir.backends.base import Backend
from collage_mlir.errors import CollageError

GROUP = "collage_mlir.backends"
_extra: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Register a backend class in this process (used by tests and embedding programs)."""
    _extra[cls.name] = cls
    return cls


def registered_backends() -> dict[str, type[Backend]]:
    """Every known backend class by name, installed or not."""
    found: dict[str, type[Backend]] = {}
    for ep in entry_points(group=GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception:  # a plugin that fails to import is reported by get_backend
            continue
    found.update(_extra)
    return found


def get_backend(name: str, **options) -> Backend:
    """Instantiate backend `name`, or raise a CollageError saying why it cannot be used."""
    classes = registered_backends()
    if name not in classes:
        known = ", ".join(sorted(classes)) or "none"
        raise CollageError(f"unknown backend '{name}' (known: {known})")
    cls = classes[name]
    reason = cls.unavailable_reason()
    if reason:
        raise CollageError(f"backend '{name}' is not usable here: {reason}")
    return cls(**options)


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine, sorted."""
    return sorted(n for n, c in registered_backends().items() if c.unavailable_reason() is None)
