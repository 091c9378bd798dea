"""Temporary folders of a run, marked as held, and the sweep of those a killed run left.

A folder made here holds a file, `.collage-held` (marked as ours), on which the making
process keeps an exclusive `flock` until it removes the folder. The kernel drops that lock when the process ends,
however it ends (SIGKILL, the OOM killer), so `sweep` removes exactly the folders no living
process holds: a killed partition of bert_base otherwise left ~400 MB of weights behind for
good. Folders without the mark (older versions', or a user's) are left alone.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import tempfile
import time
import weakref
from pathlib import Path

HELD = ".collage-held"
MARK = b"collage_mlir scratch folder\n"
"""What the held file says: a folder without it is not one of ours and is never swept."""
PREFIX = "collage-"
_ATTEMPTS = 100
GRACE_S = 60.0
"""A folder younger than this is never swept: its maker may not hold it yet."""


class ScratchDir:
    """A held temporary folder `collage-KIND-XXXX` (a `TemporaryDirectory` that `sweep`
    can tell from one a dead process left); removed by `cleanup`, on leaving a `with`, or
    when garbage collected or at exit."""

    def __init__(self, kind: str, parent: str | os.PathLike | None = None) -> None:
        parent = os.path.abspath(parent or tempfile.gettempdir())
        for _ in range(_ATTEMPTS):
            self.name = os.path.join(parent, f"{PREFIX}{kind}-{secrets.token_hex(6)}")
            fds: list[int] = []
            # registered before the folder exists: whatever raises from here on (a signal's
            # handler included) leaves nothing behind
            self._finalizer = weakref.finalize(self, _remove, self.name, fds, os.getpid())
            try:
                os.mkdir(self.name, 0o700)
            except FileExistsError:
                self._finalizer.detach()
                continue
            except BaseException:
                self._finalizer()
                raise
            try:
                fds.append(os.open(os.path.join(self.name, HELD), os.O_CREAT | os.O_RDWR, 0o600))
                fcntl.flock(fds[0], fcntl.LOCK_EX)
                os.write(fds[0], MARK)
                return
            except BaseException:
                self._finalizer()
                raise
        raise FileExistsError(f"no free scratch folder name under {parent} after {_ATTEMPTS} tries")

    def cleanup(self) -> None:
        self._finalizer()

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _remove(name: str, fds: list[int], owner: int) -> None:
    if os.getpid() == owner:  # a forked child's exit leaves its parent's folder alone
        shutil.rmtree(name, ignore_errors=True)
    for fd in fds:
        os.close(fd)  # the lock goes with the last descriptor


def sweep(root: str | os.PathLike | None = None) -> tuple[int, int]:
    """Remove the held folders under `root` (default: the temporary folder) that no living
    process holds; returns (folders, bytes) removed."""
    folders = size = 0
    for d in Path(root or tempfile.gettempdir()).glob(PREFIX + "*"):
        held = d / HELD
        try:
            if (d.is_symlink() or not d.is_dir() or not held.is_file()
                    or time.time() - d.stat().st_mtime < GRACE_S):
                continue
        except OSError:  # gone meanwhile
            continue
        try:
            fd = os.open(held, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a living run holds it
            os.close(fd)
            continue
        try:
            if os.read(fd, len(MARK) + 1) != MARK:
                continue
            # bytes freed: neither a link's target nor a file linked elsewhere too
            held = sum(st.st_size for f in d.rglob("*")
                       if not f.is_symlink() and f.is_file()
                       and (st := f.lstat()).st_nlink == 1)
            shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                folders, size = folders + 1, size + held
        finally:
            os.close(fd)
    return folders, size
