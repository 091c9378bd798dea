"""Compiled artifacts kept between runs, keyed by what went into the compile.

A compiler backend compiles the same region many times over a user's work: the probe, the
end-to-end check's controls and the single-backend comparison each build the whole model,
and every later run of `partition` or `make demo` builds them again (IREE: ~17 s for the
demo's whole model). An artifact here is the compiler's output file, stored under a digest
of its input file and of everything else that shapes it (compiler version, flags, target,
this CPU), so a hit is the file the compiler would have written. Only successful compiles
are stored; a failure is always compiled again.

A hit is checked against the digest stored with it and copied into the caller's folder,
never handed out in place: each build then maps its own file, as a fresh compile's would
be, and a store evicted meanwhile loses nothing.

`$COLLAGE_ARTIFACTS` names the folder (default `cache_home()/artifacts`); `off` turns the
store off. The store keeps its newest files within `MAX_BYTES`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from collage_mlir.paths import cache_home, user_path

MAX_BYTES = 4 << 30
"""What the store keeps at most; the least recently used files go first past it."""
PARTIAL_GRACE_S = 3600.0
"""A half-written copy older than this was left by a killed run, and is removed."""
OFF = "off"
DIGEST_BYTES = 32
"""Each stored file ends with the SHA-256 of what comes before it: a file damaged in the
store (a disk error, a hand edit) is dropped and compiled again, never loaded."""
_CHUNK = 1 << 20


def store_dir() -> Path | None:
    """The store's folder, None when `$COLLAGE_ARTIFACTS` is `off`."""
    env = os.environ.get("COLLAGE_ARTIFACTS", "")
    if env.strip().lower() == OFF:
        return None
    return user_path(env) if env else cache_home() / "artifacts"


def artifact_key(source: Path, context: Sequence[str]) -> str:
    """A digest of the file `source` and of the strings in `context` (in order)."""
    h = hashlib.sha256()
    for part in context:
        h.update(part.encode())
        h.update(b"\0")
    with open(source, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fetch(key: str, dest: Path, suffix: str) -> bool:
    """Copy the artifact `key` to `dest`; False when the store is off, has none, or has one
    whose bytes no longer match the digest kept with them (that one is removed)."""
    root = store_dir()
    if root is None:
        return False
    path = root / f"{key}{suffix}"
    try:
        with open(path, "rb") as src, open(dest, "wb") as out:
            size = os.fstat(src.fileno()).st_size - DIGEST_BYTES
            h, left = hashlib.sha256(), size
            while left > 0 and (chunk := src.read(min(_CHUNK, left))):
                h.update(chunk)
                out.write(chunk)
                left -= len(chunk)
            intact = size >= 0 and left == 0 and src.read() == h.digest()
        if not intact:
            path.unlink(missing_ok=True)
            return False
        os.utime(path)  # used: the last to be evicted
    except OSError:
        return False
    return True


def keep(key: str, artifact: Path, suffix: str) -> None:
    """Store a copy of `artifact` as `key`, its digest after it, then evict past
    `MAX_BYTES`. Never raises: a store that cannot be written (read-only, full) only costs
    the next run a compile."""
    root = store_dir()
    if root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=root, prefix=".partial-")
        try:
            with open(artifact, "rb") as src, os.fdopen(fd, "wb") as out:
                h = hashlib.sha256()
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                out.write(h.digest())
            os.replace(partial, root / f"{key}{suffix}")  # whole or not at all
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        _evict(root)
    except OSError:
        pass


def usage() -> tuple[Path | None, int, int]:
    """(the store's folder or None when off, files, bytes) of what it holds now."""
    root = store_dir()
    if root is None or not root.is_dir():
        return root, 0, 0
    sizes = [p.stat().st_size for p in root.iterdir()
             if not p.name.startswith(".") and p.is_file()]
    return root, len(sizes), sum(sizes)


def _evict(root: Path) -> None:
    entries = []
    for p in root.iterdir():
        try:
            st = p.stat()
            if p.name.startswith(".partial-"):  # a copy a killed run left
                if time.time() - st.st_mtime > PARTIAL_GRACE_S:
                    p.unlink()
                continue
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= MAX_BYTES:
            break
        try:
            p.unlink()
        except OSError:
            continue
        total -= size
