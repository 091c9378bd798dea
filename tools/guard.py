"""The last line of defence of every command: whatever goes wrong becomes one line on stderr.

A CollageError is the expected kind (its message names the file, node or op) and exits 1.
Anything else is a bug or an unforeseen input; it still gets one line — the exception's type
and first line, and how to see the traceback (`COLLAGE_DEBUG=1`) — and exit 2. A closed pipe
(`collage-mlir cache list | head`) ends the command quietly. SIGTERM (`kill`, `timeout`, a
CI job cancelled) unwinds like Ctrl-C, so scratch folders are removed, and exits 143.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from collage_mlir.errors import CollageError
from collage_mlir.sigstack import off_altstack

DEBUG_ENV = "COLLAGE_DEBUG"


class Terminated(BaseException):
    """SIGTERM arrived: raised where the program was, so every `finally` runs."""


TERM_GRACE_S = 30.0
"""After SIGTERM, seconds to unwind before the default action ends the process: a library
that swallows the exception (a bare `except` around an import) must not keep it running."""
_terminated = threading.Event()
_grace: list[threading.Timer] = []


def _terminate(signum: int, frame: object) -> None:
    _terminated.set()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    timer = threading.Timer(TERM_GRACE_S, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    _grace.append(timer)
    raise Terminated


def guarded(prog: str, body: Callable[[], int]) -> int:
    """Run `body`; map every failure to (one stderr line, exit status)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    if main:
        off_altstack(signal.SIGINT, signal.SIGTERM)
    _terminated.clear()
    try:
        return body()
    except Terminated:
        return _said_terminated(prog)
    except CollageError as e:
        if _terminated.is_set():  # the exception was lost on the way: this is why we end
            return _said_terminated(prog)
        _say(f"{prog}: error: {_one_line(str(e))}")
        return 1
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted")
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except Exception as e:
        if _terminated.is_set():
            return _said_terminated(prog)
        if os.environ.get(DEBUG_ENV):
            raise
        _say(f"{prog}: internal error: {type(e).__name__}: {_one_line(str(e))} "
             f"(set {DEBUG_ENV}=1 for the traceback)")
        return 2
    finally:
        while _grace:  # unwound: the caller exits now
            _grace.pop().cancel()
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _said_terminated(prog: str) -> int:
    _say(f"{prog}: terminated")
    return 143


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:1000]


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass


def _quiet_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush
    does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
