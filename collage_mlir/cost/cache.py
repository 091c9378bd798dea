"""The persistent measurement cache: one embedded SQLite file, shared by concurrent runs.

Why SQLite: every write is an atomic transaction, so a run killed mid-measurement leaves the
file intact, and WAL mode with a busy timeout lets two `collage-mlir` processes measure into
the same file at once (readers never block, writers queue). Each result is written as soon as
it arrives, so an interrupted run keeps everything it measured.

Rows are keyed by `collage_mlir.cost.key.measurement_key` (region structure + backend build +
host). Statuses:
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

import functools
import json
import math
import os
import re
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from collage_mlir.errors import CollageError
from collage_mlir.paths import user_path

T = TypeVar("T")

OK, INVALID, ERROR, TIMEOUT = "ok", "invalid", "error", "timeout"
STATUSES = (OK, INVALID, ERROR, TIMEOUT)
SCHEMA_VERSION = 2
"""1: the first schema. 2: status `timeout`; measurements gain `timeout_s`, `attempts`,
`load`, `stale`; transitions gain `timeout_s`, `attempts` (`_migrate` keeps every row)."""
BUSY_TIMEOUT_S = 60.0
NOISY_SPREAD = 0.5
"""(p90 - p10) / median above which a measurement is noisy (95% of the rows of a bench run
on a quiet machine were under 0.73, 90% under 0.39)."""
BUSY_LOAD = 0.5
"""Other runnable tasks per core above which the machine was busy while measuring."""

_MEASUREMENTS = """
CREATE TABLE IF NOT EXISTS measurements (
    key TEXT PRIMARY KEY,
    region TEXT NOT NULL,
    backend TEXT NOT NULL,
    version TEXT NOT NULL,
    options TEXT NOT NULL,
    host TEXT NOT NULL,
    signature TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error', 'timeout')),
    median REAL, p90 REAL, spread REAL,
    runs INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    timeout_s REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    load REAL,
    stale INTEGER NOT NULL DEFAULT 0
)"""
_TRANSITIONS = """
CREATE TABLE IF NOT EXISTS transitions (
    key TEXT PRIMARY KEY,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error', 'timeout')),
    per_call REAL, per_byte REAL,
    points TEXT NOT NULL DEFAULT '[]',
    error TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    timeout_s REAL,
    attempts INTEGER NOT NULL DEFAULT 0
)"""
_SCHEMA = _MEASUREMENTS + ";" + _TRANSITIONS + """;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS measurements_backend ON measurements (backend, status);
CREATE TABLE IF NOT EXISTS capabilities (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    bits TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    boot TEXT NOT NULL,
    pid INTEGER NOT NULL,
    beat REAL NOT NULL
);
"""


def default_cache_path() -> Path:
    """`$COLLAGE_CACHE`, else `$XDG_CACHE_HOME/collage_mlir/cache.sqlite`, else ~/.cache/…"""
    if os.environ.get("COLLAGE_CACHE"):
        return user_path(os.environ["COLLAGE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "collage_mlir" / "cache.sqlite"


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


def _damaged_is_an_error(read: Callable[..., T]) -> Callable[..., T]:
    """A read that finds the file damaged (a malformed page, a value SQLite cannot give
    back) raises one CollageError naming the cache, not an internal error."""
    @functools.wraps(read)
    def guarded(self: MeasurementCache, *args: Any, **kwargs: Any) -> T:
        try:
            return read(self, *args, **kwargs)
        except (sqlite3.DatabaseError, UnicodeDecodeError, ValueError, TypeError) as e:
            raise CollageError(f"{self.path}: damaged measurement cache ({e}); move it away "
                               "or pass another --cache") from None
    return guarded


def _text(data: bytes) -> str:
    """TEXT columns as str; a byte a damaged file turned into invalid UTF-8 becomes U+FFFD."""
    return data.decode("utf-8", "replace")


def _read_only(path: Path) -> CollageError:
    return CollageError(f"{path}: the cache is read-only and measuring must store results; "
                        "pass a writable --cache (`cache stats` / `list` can read it)")


class MeasurementCache:
    """Open (creating if needed) the cache at `path` (default: `default_cache_path()`)."""

    def __init__(self, path: str | os.PathLike | None = None, readonly: bool = False) -> None:
        self.path = user_path(path) if path is not None else default_cache_path()
        self.readonly = readonly
        try:
            self._conn = self._open()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:  # not SQLite, truncated,
            # not ours, or a damaged schema (whose error message is not even UTF-8)
            if "readonly" in str(e):
                raise _read_only(self.path) from None
            raise CollageError(f"{self.path}: not a usable measurement cache ({e}); move it "
                               "away or pass another --cache") from None
        except OSError as e:
            raise CollageError(f"{self.path}: cannot open the cache ({e.strerror})") from None

    def _open(self) -> sqlite3.Connection:
        if self.readonly:  # reading never writes: no WAL files, no schema
            if not self.path.is_file():
                raise CollageError(f"{self.path}: no cache here")
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            conn.text_factory = _text
            conn.execute("SELECT count(*) FROM measurements").fetchone()
            return conn
        parent = self.path.parent
        if (self.path.exists() and not os.access(self.path, os.W_OK)) or \
                (parent.is_dir() and not os.access(parent, os.W_OK)):
            raise _read_only(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                               isolation_level=None, check_same_thread=False)
        conn.text_factory = _text
        self._conn = conn
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; WAL-safe
        with self._write():
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(stmt)
            _migrate(conn)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)",
                         (str(SCHEMA_VERSION),))
        conn.execute("SELECT count(*) FROM measurements").fetchone()
        return conn

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> MeasurementCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction; IMMEDIATE takes the write lock up front (no upgrade deadlock)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- measurements -------------------------------------------------------------------

    def put(self, m: Measurement) -> None:
        """Store (or replace) one result, atomically."""
        self.put_many([m])

    def put_many(self, ms: Iterable[Measurement]) -> None:
        """Store (or replace) results, atomically; any claims on their keys end with them."""
        rows = [tuple(asdict(m).values()) for m in ms]
        if not rows:
            return
        with self._write():
            self._conn.executemany(_insert("measurements", MEASUREMENT_COLUMNS), rows)
            self._conn.executemany("DELETE FROM claims WHERE key = ?", [(r[0],) for r in rows])

    # -- claims -------------------------------------------------------------------------
    # Concurrent runs share the work: a run claims the keys it is about to measure, and a
    # run finding a key claimed by another live one waits for that run's row instead of
    # measuring it too.

    def claim(self, keys: Iterable[str], me: Claimant, stale_after_s: float,
              fresh_since: float) -> list[str]:
        """Claim `keys` for `me`, atomically; returns those now claimed. A key is not
        claimed while another claimant's claim on it stands (its process is alive on this
        host and its heartbeat is younger than `stale_after_s`), nor when a row for it was
        written at or after `fresh_since` (another run measured it meanwhile)."""
        keys = list(dict.fromkeys(keys))
        now = time.time()
        taken: list[str] = []
        with self._write():
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ", ".join("?" * len(chunk))
                claims = {r[0]: r for r in self._conn.execute(
                    f"SELECT key, owner, host, boot, pid, beat FROM claims WHERE key IN ({marks})",
                    chunk)}
                fresh = {r[0] for r in self._conn.execute(
                    f"SELECT key FROM measurements WHERE created >= ? AND key IN ({marks})",
                    [fresh_since, *chunk])}
                for key in chunk:
                    c = claims.get(key)
                    if key in fresh or (c is not None and c[1] != me.token and
                                        not _stale(c, me, stale_after_s, now)):
                        continue
                    self._conn.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                                       (key, me.token, me.host, me.boot, me.pid, now))
                    taken.append(key)
        return taken

    def release(self, keys: Iterable[str], me: Claimant) -> None:
        """End `me`'s claims on `keys` (those it did not measure after all)."""
        rows = [(k, me.token) for k in keys]
        with self._write():
            self._conn.executemany("DELETE FROM claims WHERE key = ? AND owner = ?", rows)

    def beat(self, me: Claimant) -> None:
        """`me` is still at work: its claims stand for another `stale_after_s`."""
        with self._write():
            self._conn.execute("UPDATE claims SET beat = ? WHERE owner = ?",
                               (time.time(), me.token))

    @_damaged_is_an_error
    def claims(self) -> list[tuple[str, str, int]]:
        """(key, owner token, pid) of every claim."""
        return list(self._conn.execute("SELECT key, owner, pid FROM claims ORDER BY key"))

    def get(self, key: str) -> Measurement | None:
        return self.get_many([key]).get(key)

    @_damaged_is_an_error
    def get_many(self, keys: Iterable[str]) -> dict[str, Measurement]:
        """Rows for the keys that are cached (in chunks: SQLite limits bound parameters)."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, Measurement] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT * FROM measurements WHERE key IN ({', '.join('?' * len(chunk))})"
            for row in self._conn.execute(q, chunk):
                out[row[0]] = _measurement(row)
        return out

    @_damaged_is_an_error
    def measurements(self, backend: str | None = None) -> list[Measurement]:
        q, args = "SELECT * FROM measurements", ()
        if backend is not None:
            q, args = q + " WHERE backend = ?", (backend,)
        return [_measurement(row) for row in self._conn.execute(q + " ORDER BY created", args)]

    def mark_stale(self, keys: Iterable[str]) -> int:
        """Mark ok rows to be measured again by the next run that needs them (they keep
        their cost meanwhile); returns how many were marked."""
        keys = list(dict.fromkeys(keys))
        n = 0
        with self._write():
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                n += self._conn.execute(
                    f"UPDATE measurements SET stale = 1 WHERE status = 'ok' AND key IN "
                    f"({', '.join('?' * len(chunk))})", chunk).rowcount
        return n

    # -- transitions --------------------------------------------------------------------

    def put_transition(self, t: Transition) -> None:
        row = asdict(t)
        row["points"] = json.dumps(row["points"])
        with self._write():
            self._conn.execute(_insert("transitions", TRANSITION_COLUMNS), tuple(row.values()))

    @_damaged_is_an_error
    def get_transition(self, key: str) -> Transition | None:
        row = self._conn.execute("SELECT * FROM transitions WHERE key = ?", (key,)).fetchone()
        return _transition(row) if row else None

    @_damaged_is_an_error
    def transitions(self) -> list[Transition]:
        rows = self._conn.execute("SELECT * FROM transitions ORDER BY src, dst")
        return [_transition(r) for r in rows]

    # -- capabilities -------------------------------------------------------------------
    # A backend's answer to `capability(graph)` for one whole function (an OpenVINO
    # query_model takes ~0.5 s on ResNet-50): a warm `measure` asks no backend anything.

    def put_capability(self, key: str, backend: str, bits: int) -> None:
        with self._write():
            self._conn.execute("INSERT OR REPLACE INTO capabilities VALUES (?, ?, ?, ?)",
                               (key, backend, format(bits, "x"), time.time()))

    @_damaged_is_an_error
    def get_capability(self, key: str) -> int | None:
        row = self._conn.execute("SELECT bits FROM capabilities WHERE key = ?",
                                 (key,)).fetchone()
        return int(row[0], 16) if row else None

    # -- maintenance --------------------------------------------------------------------

    @_damaged_is_an_error
    def stats(self) -> dict:
        """Entries per backend and status, transitions, and the file size in bytes."""
        per: dict[str, dict[str, int]] = {}
        for backend, status, n in self._conn.execute(
                "SELECT backend, status, COUNT(*) FROM measurements GROUP BY backend, status"):
            per.setdefault(backend, {s: 0 for s in STATUSES})[status] = n
        transitions = self._conn.execute("SELECT COUNT(*) FROM transitions").fetchone()[0]
        size = sum(p.stat().st_size for p in self._files() if p.exists())
        return {"path": str(self.path), "backends": per,
                "entries": sum(sum(v.values()) for v in per.values()),
                "transitions": transitions, "bytes": size}

    def clear(self, backend: str | None = None) -> int:
        """Delete measurements (of one backend, or all, with all transitions); returns count."""
        with self._write():
            if backend is None:
                n = self._conn.execute("DELETE FROM measurements").rowcount
                self._conn.execute("DELETE FROM transitions")
                self._conn.execute("DELETE FROM capabilities")
            else:
                n = self._conn.execute("DELETE FROM measurements WHERE backend = ?",
                                       (backend,)).rowcount
                self._conn.execute("DELETE FROM transitions WHERE src = ? OR dst = ?",
                                   (backend, backend))
                self._conn.execute("DELETE FROM capabilities WHERE backend = ?", (backend,))
        if backend is None:
            self._conn.execute("VACUUM")
        return n

    def integrity_ok(self) -> bool:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def _files(self) -> list[Path]:
        return [self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")]


def _insert(table: str, columns: Sequence[str]) -> str:
    return (f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})")


_V1_COLUMNS = {
    "measurements": ("key", "region", "backend", "version", "options", "host", "signature",
                     "status", "median", "p90", "spread", "runs", "error", "created"),
    "transitions": ("key", "src", "dst", "host", "status", "per_call", "per_byte", "points",
                    "error", "created"),
}
_TIMED_OUT = re.compile(r"timed out after ([0-9.eE+-]+) s")


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a schema-1 cache to the current schema inside the caller's transaction: both
    tables are rebuilt (SQLite cannot widen a CHECK) with every row and value kept, new
    columns at their defaults; v1 `invalid` rows that were timeouts ("timed out after N s")
    become `timeout` rows with `timeout_s` N, so a later run measures them again."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
    if "stale" in have:
        return
    for table, schema in (("measurements", _MEASUREMENTS), ("transitions", _TRANSITIONS)):
        old = ", ".join(_V1_COLUMNS[table])
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
        conn.execute(schema)
        conn.execute(f"INSERT INTO {table} ({old}) SELECT {old} FROM {table}_v1")
        conn.execute(f"DROP TABLE {table}_v1")
    conn.execute("CREATE INDEX IF NOT EXISTS measurements_backend "
                 "ON measurements (backend, status)")
    rows = conn.execute("SELECT key, error FROM measurements WHERE status = 'invalid' "
                        "AND error LIKE 'timed out after %'").fetchall()
    for key, error in rows:
        m = _TIMED_OUT.match(error)
        if m:
            conn.execute("UPDATE measurements SET status = 'timeout', timeout_s = ?, "
                         "attempts = 1 WHERE key = ?", (float(m.group(1)), key))


def _stale(claim: tuple, me: Claimant, stale_after_s: float, now: float) -> bool:
    """A claim (key, owner, host, boot, pid, beat) whose claimant is gone: its process
    ended (same host, same boot), the host rebooted, or it has not beaten for too long."""
    _, _, host, boot, pid, beat = claim
    if host == me.host and (boot != me.boot or not _alive(pid)):
        return True
    return now - beat > stale_after_s


def _measurement(row: tuple) -> Measurement:
    """A row as a Measurement (a schema-1 row, read-only, gets the new fields' defaults)."""
    m = Measurement(*row)
    return m if isinstance(m.stale, bool) else Measurement(*row[:-1], stale=bool(m.stale))


def _transition(row: tuple) -> Transition:
    values = list(row)
    values[7] = [tuple(p) for p in json.loads(values[7])]
    return Transition(*values)
