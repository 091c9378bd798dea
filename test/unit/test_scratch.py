"""Held temporary folders: a killed run's are swept, a living run's and unmarked ones stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collage_mlir.scratch import GRACE_S, HELD, MARK, ScratchDir, sweep
from collage_mlir.sigstack import off_altstack

MAKE_AND_WAIT = """
import sys, time
from collage_mlir.scratch import ScratchDir
d = ScratchDir("scratch", sys.argv[1])
open(d.name + "/weights.bin", "wb").write(b"x" * 1000)
print(d.name, flush=True)
time.sleep(600)
"""


def _aged(path: str) -> None:
    past = time.time() - 2 * GRACE_S
    os.utime(path, (past, past))


def test_a_killed_runs_folder_is_swept_and_a_living_ones_is_not(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", MAKE_AND_WAIT, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    killed = child.stdout.readline().strip()
    living = ScratchDir("final", tmp_path)
    unmarked = tmp_path / "collage-weights-old"  # an older version's folder: no mark
    unmarked.mkdir()
    for d in (killed, living.name, unmarked):
        _aged(str(d))
    assert sweep(tmp_path) == (0, 0)  # the child still holds its folder
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert sweep(tmp_path) == (1, 1000 + len(MARK))
    assert not Path(killed).exists()
    assert Path(living.name, HELD).exists() and unmarked.exists()
    living.cleanup()
    assert not Path(living.name).exists()


def test_a_folder_younger_than_the_grace_is_left(tmp_path: Path) -> None:
    """Its maker may be between making it and holding it."""
    young = tmp_path / "collage-scratch-young"
    young.mkdir()
    (young / HELD).write_bytes(MARK)
    assert sweep(tmp_path) == (0, 0) and young.exists()
    _aged(str(young))
    assert sweep(tmp_path)[0] == 1 and not young.exists()


def test_a_users_folder_without_the_mark_is_never_swept(tmp_path: Path) -> None:
    mine = tmp_path / "collage-userdata"
    mine.mkdir()
    (mine / HELD).write_text("mine")
    (mine / "precious.txt").write_text("keep")
    _aged(str(mine))
    assert sweep(tmp_path) == (0, 0) and (mine / "precious.txt").exists()


def test_a_forked_child_leaves_its_parents_folder(tmp_path: Path) -> None:
    held = ScratchDir("weights", tmp_path)
    pid = os.fork()
    if pid == 0:  # the child exits normally, running its finalizers
        held.cleanup()
        os._exit(0)
    os.waitpid(pid, 0)
    assert Path(held.name, HELD).exists()
    held.cleanup()
    assert not Path(held.name).exists()


class _Terminated(Exception):
    pass


@pytest.mark.parametrize("step", ["mkdir", "open", "flock", "write"])
def test_a_signal_while_a_folder_is_made_leaves_nothing(tmp_path: Path, monkeypatch,
                                                        step: str) -> None:
    """SIGTERM landing right after any step of making the folder (as `kill` once hit a
    partition in CI) removes what was made, before the exception leaves the constructor."""
    import collage_mlir.scratch as scratch

    module = scratch.fcntl if step == "flock" else scratch.os
    real = getattr(module, step)
    sent = []

    def then_signal(*args, **kwargs):
        out = real(*args, **kwargs)
        if not sent:  # once: the removal calls some of these too
            sent.append(step)
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    def raise_terminated(signum, frame):
        raise _Terminated

    before = signal.signal(signal.SIGTERM, raise_terminated)
    off_altstack(signal.SIGTERM)  # as the command line's guard does (`sigstack`)
    try:
        monkeypatch.setattr(module, step, then_signal)
        with pytest.raises(_Terminated):
            ScratchDir("weights", tmp_path)
            time.sleep(1)  # the handler runs at the latest here
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGTERM, before)
    assert not list(tmp_path.glob("collage-weights-*"))


def test_a_name_taken_by_another_folder_is_left_alone(tmp_path: Path, monkeypatch) -> None:
    import collage_mlir.scratch as scratch

    names = iter(["taken", "free"])
    monkeypatch.setattr(scratch.secrets, "token_hex", lambda n: next(names))
    (tmp_path / "collage-weights-taken").mkdir()
    (tmp_path / "collage-weights-taken" / "theirs").write_bytes(b"x")
    held = ScratchDir("weights", tmp_path)
    assert held.name == str(tmp_path / "collage-weights-free")
    assert (tmp_path / "collage-weights-taken" / "theirs").exists()
    held.cleanup()
    assert not Path(held.name).exists()
    assert (tmp_path / "collage-weights-taken" / "theirs").exists()
