"""Reference outputs shared between the measuring workers of one run.

A worker checks each region's outputs against the reference backend's on the same inputs
before timing it. A run measures most regions on every backend, and each backend has its
own worker, so without sharing every worker compiled and ran the reference again for the
same region. Instead, the first worker that has the reference's outputs for a region — the
reference backend's own worker, whose kernel computed them, or a worker that ran the
reference — leaves them in a directory the run owns, and the others read them there.

Outputs are keyed by a digest of the region's text as the worker receives it: its weights
are named there by their place in the run's weight store (or inlined), so two regions that
share a cache key (same ops and shapes, other weights) do not share outputs. Inputs need no
key of their own: they follow from the region's argument types (`tensors.make_inputs`).
Sharing is an optimisation only: a missing, unreadable or unwritable store means the
worker computes the reference itself, as it did before.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MAX_BYTES = 64 << 20
"""Outputs of one region above this size (all checked calls together) are not shared: a
worker recomputes them rather than the run writing and holding them on disk."""
TOTAL_BYTES = 2 << 30
"""Nothing more is written once the directory holds this much (a cold resnet50 with three
backends leaves ~0.5 GB; the directory goes when the run's estimator closes)."""

Outputs = list[list[np.ndarray]]
"""Per checked call, the region's outputs."""


def text_digest(text: str) -> str:
    """The key of a region's reference outputs: a digest of its text."""
    return hashlib.sha256(text.encode()).hexdigest()


class ReferenceOutputs:
    """The reference outputs left in `directory` (None: sharing is off)."""

    def __init__(self, directory: str | os.PathLike | None) -> None:
        self.directory = Path(directory) if directory else None

    def get(self, digest: str | None, calls: int) -> Outputs | None:
        """The outputs stored for `digest` over `calls` checked calls, or None."""
        path = self._path(digest)
        if path is None or not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                outs = int(data["outputs"])
                if int(data["calls"]) != calls:
                    return None
                return [[np.array(data[f"c{k}o{j}"]) for j in range(outs)]
                        for k in range(calls)]
        except (OSError, ValueError, KeyError):
            return None

    def put(self, digest: str | None, outputs: Sequence[Sequence[np.ndarray]]) -> None:
        """Leave `outputs` for `digest`, unless they are too big or cannot be stored; written
        under a temporary name and renamed, so a reader never sees half a file."""
        path = self._path(digest)
        if path is None or not outputs or path.exists():
            return
        arrays = {f"c{k}o{j}": np.asarray(o) for k, call in enumerate(outputs)
                  for j, o in enumerate(call)}
        if (sum(a.nbytes for a in arrays.values()) > MAX_BYTES
                or any(a.dtype.hasobject for a in arrays.values())
                or self._held() >= TOTAL_BYTES):
            return
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, calls=len(outputs), outputs=len(outputs[0]), **arrays)
            os.replace(tmp, path)
        except OSError:  # a full disk, a directory gone: the others compute their own
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def _held(self) -> int:
        """Bytes in the directory now."""
        try:
            with os.scandir(self.directory) as entries:
                return sum(e.stat().st_size for e in entries if e.is_file())
        except OSError:
            return TOTAL_BYTES

    def _path(self, digest: str | None) -> Path | None:
        if self.directory is None or digest is None or not self.directory.is_dir():
            return None
        return self.directory / f"{digest}.npz"
