"""Ctrl-C and SIGTERM stay clean exits after OpenVINO has left the alternate signal stack
dangling (two compiled models freed in the order they were made)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from collage_mlir.backends.openvino import OpenVinoBackend

SCRIPT = """
import gc, os, signal, sys, time
sys.path.insert(0, {unit!r})
from test_runtime import partitioned, stamped
from collage_mlir.tools import guard

if sys.argv[1] == "unfixed":
    from collage_mlir.backends import openvino
    guard.off_altstack = openvino.off_altstack = lambda *signums: None


def dangling() -> bool:
    import ctypes

    class Stack(ctypes.Structure):
        _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]

    stack = Stack()
    ctypes.CDLL(None).sigaltstack(None, ctypes.byref(stack))
    if stack.flags & 2 or not stack.sp:  # SS_DISABLE
        return False
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= stack.sp < hi:
            return False
    return True


def body() -> int:
    first = partitioned(stamped("openvino", "openvino"))
    second = partitioned(stamped("openvino", "openvino"))
    del first
    del second
    gc.collect()
    print("dangling" if dangling() else "intact", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    return 0


sys.exit(guard.guarded("sigstack-test", body))
"""


def _run(variant: str) -> subprocess.CompletedProcess:
    unit = os.path.dirname(__file__)
    return subprocess.run([sys.executable, "-c", SCRIPT.format(unit=unit), variant],
                          capture_output=True, text=True, timeout=120)


def test_sigterm_after_openvino_freed_its_models_is_a_clean_exit() -> None:
    reason = OpenVinoBackend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    unfixed = _run("unfixed")
    if unfixed.stdout.strip() != "dangling":
        pytest.skip(f"this OpenVINO leaves the signal stack intact ({unfixed.stdout.strip()})")
    assert unfixed.returncode == -signal.SIGSEGV  # what a user's Ctrl-C met before
    fixed = _run("fixed")
    assert fixed.stdout.strip() == "dangling"
    assert fixed.returncode == 143 and "sigstack-test: terminated" in fixed.stderr
