"""What the measurement cache holds, whichever store keeps it: the rows (`Measurement`,
`Transition`), their statuses, who claims keys (`Claimant`) and when a cached failure is
tried again (`RetryPolicy`).

Statuses:
- `ok`: measured, numbers checked (or `error` holds why they could not be checked);
- `invalid`: the backend failed on this region (compile error, crash, hang, wrong numbers):
  cost +inf, and the reason is kept so users can see why a backend was never chosen. Not
  measured again while the key holds (a new backend version, options or host is a new key;
  `collage-mlir cache clear` forgets it);
- `error`: the measurement could not be made (the region did not parse, no inputs could be
  made for it, the worker could not start): not known to be the backend's fault, so the
  candidate is out of this search only (+inf, never an unknown NaN) and is measured again
  by the next run that needs it;
- `timeout`: the region took longer than the run's timeout (`timeout_s`, kept): a hang, or
  a machine too busy. Out of the search (+inf) until it is due again (`TIMEOUT_RETRY`: a run
  with a longer timeout, one of the first `attempts` runs at the same timeout, or after
  `after_s`); `attempts` counts the timeouts in a row.

Every row also keeps the machine's `load` when it was measured (other runnable tasks per
core, from the load average); `stale` marks an `ok` row to be measured again by the next run
that needs it (`collage-mlir cache remeasure --noisy`). Transitions that failed keep their
timeout and attempts too and are retried by `TRANSITION_RETRY`.
"""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from dataclasses import dataclass, field, fields

OK, INVALID, ERROR, TIMEOUT = "ok", "invalid", "error", "timeout"
STATUSES = (OK, INVALID, ERROR, TIMEOUT)
NOISY_SPREAD = 0.5
"""(p90 - p10) / median above which a measurement is noisy (95% of the rows of a bench run
on a quiet machine were under 0.73, 90% under 0.39)."""
BUSY_LOAD = 0.5
"""Other runnable tasks per core above which the machine was busy while measuring."""


@dataclass(frozen=True)
class Measurement:
    """One cached result. Times are seconds; `spread` is (p90 - p10) / median."""

    key: str
    region: str
    backend: str
    version: str
    options: str
    host: str
    signature: str
    status: str
    median: float | None = None
    p90: float | None = None
    spread: float | None = None
    runs: int = 0
    error: str = ""
    created: float = field(default_factory=time.time)
    timeout_s: float | None = None
    """The timeout in force when it was measured (what a `timeout` row ran out of)."""
    attempts: int = 0
    """`timeout` rows: timeouts in a row at this timeout or shorter."""
    load: float | None = None
    """Other runnable tasks per core while it was measured (None: not recorded)."""
    stale: bool = False
    """Marked to be measured again by the next run that needs it."""

    @property
    def noisy(self) -> bool:
        """An ok row whose spread was wide or that was measured on a busy machine."""
        return self.status == OK and ((self.spread or 0.0) > NOISY_SPREAD or
                                      (self.load or 0.0) > BUSY_LOAD)

    @property
    def cost(self) -> float:
        """Seconds for the search: the median, or +inf when the candidate is out (invalid,
        or an error this time; `status` and `error` say which and why)."""
        if self.status == OK and self.median is not None:
            return self.median
        return math.inf


@dataclass(frozen=True)
class Transition:
    """A fitted hand-off cost `per_call + per_byte * nbytes` from `src` to `dst`."""

    key: str
    src: str
    dst: str
    host: str
    status: str
    per_call: float | None = None
    per_byte: float | None = None
    points: list[tuple[int, float]] = field(default_factory=list)
    """(nbytes, seconds) the fit was made from."""
    error: str = ""
    created: float = field(default_factory=time.time)
    timeout_s: float | None = None
    """The experiment's timeout (a failed experiment is retried by `TRANSITION_RETRY`)."""
    attempts: int = 0
    """Failed experiments in a row at this timeout or shorter."""

    def cost(self, nbytes: int) -> float:
        if self.status != OK or self.per_call is None or self.per_byte is None:
            return math.nan
        return self.per_call + self.per_byte * nbytes


@dataclass(frozen=True)
class RetryPolicy:
    """When a cached failure that may not be the backend's fault (a timeout: the machine
    may have been busy) is tried again: under a longer timeout than it had, while it has
    failed fewer than `attempts` times in a row, or once it is older than `after_s`."""

    attempts: int
    after_s: float

    def due(self, timeout_then: float | None, attempts: int, created: float,
            timeout_now: float, now: float | None = None) -> bool:
        if timeout_then is None or timeout_now > timeout_then or attempts < self.attempts:
            return True
        return (time.time() if now is None else now) - created > self.after_s

    def next_attempts(self, timeout_then: float | None, attempts: int,
                      timeout_now: float) -> int:
        """`attempts` after another failure at `timeout_now` (a longer timeout starts
        the count again)."""
        if timeout_then is None or timeout_now > timeout_then:
            return 1
        return attempts + 1


TIMEOUT_RETRY = RetryPolicy(attempts=3, after_s=7 * 86400.0)
"""A timed-out region is measured again by the next two runs at the same timeout (a busy
moment passes), by any run with a longer timeout, and after a week."""
TRANSITION_RETRY = RetryPolicy(attempts=1, after_s=86400.0)
"""A failed hand-off experiment (each try may cost minutes) is tried again only under a
longer timeout or after a day; meanwhile its hand-offs cost 0."""

MEASUREMENT_COLUMNS = tuple(f.name for f in fields(Measurement))
TRANSITION_COLUMNS = tuple(f.name for f in fields(Transition))
CAPABILITY_COLUMNS = ("key", "backend", "bits", "created")
"""A backend's capability bits (hex) for one whole function."""


@dataclass(frozen=True)
class Claimant:
    """Who claims keys before measuring them: one estimator (`token`) in one process (`pid`)
    on one host since its last boot (a pid is only a process's name within one boot)."""

    token: str
    pid: int
    host: str
    boot: str

    @classmethod
    def here(cls) -> Claimant:
        return cls(uuid.uuid4().hex, os.getpid(), socket.gethostname(), _boot_id())

    def outlived(self, claim: tuple, stale_after_s: float, now: float) -> bool:
        """Whether `claim` (key, owner, host, boot, pid, beat) is another claimant's that
        is gone as seen from here: its process ended (same host, same boot), its host
        rebooted, or it has not beaten for `stale_after_s`."""
        _, _, host, boot, pid, beat = claim
        if host == self.host and (boot != self.boot or not _alive(pid)):
            return True
        return now - beat > stale_after_s


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
