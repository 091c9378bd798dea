"""Paths as users write them: `~` and `$VARS` expanded wherever the API or a command takes a
path, so `cache="~/.cache/collage_mlir/c.sqlite"` means the home directory, not `./~`."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(os.fspath(path))))


def cache_home() -> Path:
    """Where collage_mlir keeps what it may recompute: `$XDG_CACHE_HOME/collage_mlir`,
    else `~/.cache/collage_mlir`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "collage_mlir"
