"""Signal handlers taken off the alternate signal stack, so that a library that leaves that
stack dangling cannot turn Ctrl-C or SIGTERM into a segmentation fault.

Python installs its handlers with SA_ONSTACK. OpenVINO's CPU plugin sets an alternate
signal stack on the thread that compiles a model and, when the model is freed, puts back
the one it found then: two models freed in the order they were made leave the thread
pointing at memory already freed, and the next signal handled on it kills the process
(SIGSEGV) before Python sees the signal, so no `finally` runs and no scratch folder is
removed. Python's own handler only notes the signal, which any thread's stack can hold.
"""

from __future__ import annotations

import ctypes
import platform
import signal
import sys

SA_ONSTACK = 0x08000000
_LAYOUT_KNOWN = (sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")
                 and platform.libc_ver()[0] == "glibc")
"""glibc's `struct sigaction` on these machines is `_Sigaction`; elsewhere nothing is done."""


class _Sigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def off_altstack(*signums: int) -> None:
    """Have the handlers of `signums` (default SIGINT and SIGTERM) run on the interrupted
    thread's own stack. A handler installed later (`signal.signal`) is on it again."""
    if not _LAYOUT_KNOWN:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for signum in signums or (signal.SIGINT, signal.SIGTERM):
        action = _Sigaction()
        if libc.sigaction(int(signum), None, ctypes.byref(action)) != 0:
            continue
        if action.handler in (None, 0, 1) or not action.flags & SA_ONSTACK:  # SIG_DFL, SIG_IGN
            continue
        action.flags &= ~SA_ONSTACK
        libc.sigaction(int(signum), ctypes.byref(action), None)
