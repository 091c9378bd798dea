"""Paths as users write them: `~` and `$VARS` expanded wherever the API or a command takes a
path, so `cache="~/.cache/collage_mlir/c.sqlite"` means the home directory, not `./~`."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(os.fspath(path))))
