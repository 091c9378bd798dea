"""A small stderr progress bar (no dependency): `ProgressBar(label)` is a `progress(done, total)`.

It draws in place only when stderr is a terminal (or `force=True`), at most ~10 times a
second, and never writes to stdout, so tables and pipes stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Callable as `bar(done, total)`; call `close()` to end the line."""

    def __init__(self, label: str = "", width: int = 30, stream: TextIO | None = None,
                 force: bool = False, min_interval_s: float = 0.1) -> None:
        self.label = label
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval_s = min_interval_s
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False
        self.status = ""

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        self.stream.write("\r" + self.render(done, total, now - self.start))
        self.stream.flush()
        self._drawn = True

    def render(self, done: int, total: int, elapsed: float) -> str:
        """One line: label, bar, counts, elapsed time and an optional status."""
        frac = done / total if total else 1.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        status = f" {self.status}" if self.status else ""
        return f"{self.label} [{bar}] {done}/{total} {elapsed:5.1f}s{status}\x1b[K"

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
