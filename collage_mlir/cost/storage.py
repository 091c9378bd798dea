"""The storage interface of the measurement cache: one contract, two stores.

`CacheStore` is what the measuring estimator and `collage-mlir cache` use. Its two
implementations keep the same tables, written by the same SQL, under the same schema version:
- `cache.SqliteCache`: one embedded SQLite file (the default; a path);
- `cache_pg.PostgresCache`: a PostgreSQL database a team shares (a `postgresql://` URL).

A store only supplies a connection: how a statement runs (`_rows`, `_run`, `_run_many`), one
write transaction (`_write`), the size on disk and an integrity check. Everything a cache
does is written here once, in SQL both engines accept (`?` parameters, which the PostgreSQL
store turns into its own; `INSERT ... ON CONFLICT (key) DO UPDATE`, SQLite >= 3.24).

Concurrency, on both stores: each write is one transaction and writers take turns (SQLite:
`BEGIN IMMEDIATE`; PostgreSQL: a transaction-level advisory lock), so a claim's check and its
insert are atomic and no two writers deadlock on each other's rows; readers never wait.
Every row is written by an upsert keyed by `key`, so concurrent writers of one key leave one
whole row (the last writer's) and no writer's row is lost.

Schema and migrations (plain, versioned SQL): `SCHEMA` creates the current schema
(`SCHEMA_VERSION`, kept in `meta` as `schema`) and is run on every writable open (each
statement is `IF NOT EXISTS`). A store at version N < `SCHEMA_VERSION` is first brought up by
its engine's `MIGRATIONS[N + 1]`, `MIGRATIONS[N + 2]`, ... (SQL statements, in order, in the
same transaction as the version bump). Schema 1 existed on SQLite only (`cache.py` holds its
migration to 2); PostgreSQL stores start at 2. A store written by a newer schema is refused
for writing. A new schema version adds one entry to each engine's `MIGRATIONS`.
"""

from __future__ import annotations

import functools
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import astuple
from typing import Any, ClassVar, TypeVar

from collage_mlir.cost.records import (
    CAPABILITY_COLUMNS,
    MEASUREMENT_COLUMNS,
    STATUSES,
    TRANSITION_COLUMNS,
    Claimant,
    Measurement,
    Transition,
)
from collage_mlir.errors import CollageError

T = TypeVar("T")

SCHEMA_VERSION = 2
"""1: the first schema. 2: status `timeout`; measurements gain `timeout_s`, `attempts`,
`load`, `stale`; transitions gain `timeout_s`, `attempts`; claims."""

MEASUREMENTS = """
CREATE TABLE IF NOT EXISTS measurements (
    key TEXT PRIMARY KEY,
    region TEXT NOT NULL,
    backend TEXT NOT NULL,
    version TEXT NOT NULL,
    options TEXT NOT NULL,
    host TEXT NOT NULL,
    signature TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error', 'timeout')),
    median DOUBLE PRECISION, p90 DOUBLE PRECISION, spread DOUBLE PRECISION,
    runs INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    created DOUBLE PRECISION NOT NULL,
    timeout_s DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0,
    load DOUBLE PRECISION,
    stale INTEGER NOT NULL DEFAULT 0
)"""
TRANSITIONS = """
CREATE TABLE IF NOT EXISTS transitions (
    key TEXT PRIMARY KEY,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error', 'timeout')),
    per_call DOUBLE PRECISION, per_byte DOUBLE PRECISION,
    points TEXT NOT NULL DEFAULT '[]',
    error TEXT NOT NULL DEFAULT '',
    created DOUBLE PRECISION NOT NULL,
    timeout_s DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0
)"""
META = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
MEASUREMENTS_INDEX = ("CREATE INDEX IF NOT EXISTS measurements_backend "
                      "ON measurements (backend, status)")
SCHEMA: tuple[str, ...] = (META, MEASUREMENTS, TRANSITIONS, MEASUREMENTS_INDEX, """
CREATE TABLE IF NOT EXISTS capabilities (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    bits TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
)""", """
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    boot TEXT NOT NULL,
    pid INTEGER NOT NULL,
    beat DOUBLE PRECISION NOT NULL
)""")
"""Portable DDL (SQLite reads DOUBLE PRECISION as REAL; PostgreSQL's REAL is 4 bytes)."""

def _where(conditions: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


CLAIM_COLUMNS = ("key", "owner", "host", "boot", "pid", "beat")
CHUNK = 500
"""Keys per `IN (...)` (SQLite bounds the parameters of one statement)."""


def upsert(table: str, columns: Sequence[str], newer_only: bool = False,
           key: str = "key") -> str:
    """Insert a row or replace the one with its `key` (`newer_only`: only by a row created
    after it; the same row imported again leaves the one held, with its remeasure mark)."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c != key)
    where = f" WHERE excluded.created > {table}.created" if newer_only else ""
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
            f"({', '.join('?' * len(columns))}) ON CONFLICT ({key}) DO UPDATE SET {sets}{where}")


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _chunks(keys: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(keys), CHUNK):
        yield list(keys[i:i + CHUNK])


def _reads(read: Callable[..., T]) -> Callable[..., T]:
    """A read that finds the store damaged (or gone) raises the store's one-line
    CollageError, not an internal error."""
    @functools.wraps(read)
    def guarded(self: CacheStore, *args: Any, **kwargs: Any) -> T:
        try:
            return read(self, *args, **kwargs)
        except self.read_errors as e:
            raise self._read_failed(e) from None
    return guarded


class CacheStore(ABC):
    """A measurement cache: rows keyed by `cost.key.measurement_key`, fitted hand-offs,
    backend capabilities and the claims of concurrent runs. Open one with
    `cache.open_cache(location)`; use it as a context manager or `close()` it."""

    location: str
    """Where it is, for messages (a URL's password masked)."""
    readonly: bool
    read_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """What a read of a damaged or lost store raises (`_read_failed` words it)."""
    MIGRATIONS: ClassVar[dict[int, tuple[str, ...]]] = {}
    """Schema N-1 → N, as SQL statements run in order."""

    # -- what a store supplies -----------------------------------------------------------

    @abstractmethod
    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement; its rows."""

    @abstractmethod
    def _run(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; the rows it changed."""

    @abstractmethod
    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row."""

    @abstractmethod
    def _write(self) -> AbstractContextManager[None]:
        """One write transaction; writers take turns, readers do not wait."""

    @abstractmethod
    def _columns(self, table: str) -> set[str]:
        """The columns `table` has (empty when there is no such table)."""

    @abstractmethod
    def _size_bytes(self) -> int:
        """Bytes the store takes on disk."""

    @abstractmethod
    def _read_failed(self, e: BaseException) -> CollageError:
        """The one-line error for a read that raised `e` (one of `read_errors`)."""

    @abstractmethod
    def integrity_ok(self) -> bool:
        """Whether the engine finds the store sound."""

    @abstractmethod
    def close(self) -> None: ...

    def _after_clear(self) -> None:
        """Give back the space a full `clear` freed (when the engine does not)."""
        return None

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------

    def _bring_schema_up(self) -> None:
        """Inside the caller's write transaction: create or migrate to `SCHEMA_VERSION`.
        A cache already there writes nothing (a team member may write rows without the
        right to create tables)."""
        if self._columns("meta") and [str(r[0]) for r in self._rows(
                "SELECT value FROM meta WHERE name = 'schema'")] == [str(SCHEMA_VERSION)]:
            return
        self._run(META)
        found = self._rows("SELECT value FROM meta WHERE name = 'schema'")
        columns = self._columns("measurements")
        if found and not str(found[0][0]).isdigit():
            raise CollageError(f"{self.location}: damaged measurement cache (schema version "
                               f"{found[0][0]!r}); move it away or pass another --cache")
        have = int(found[0][0]) if found else (0 if not columns else
                                               2 if "stale" in columns else 1)
        if have > SCHEMA_VERSION:
            raise CollageError(f"{self.location}: written by a newer collage-mlir (cache "
                               f"schema {have}, this one knows {SCHEMA_VERSION}); upgrade "
                               "collage-mlir or pass another --cache")
        if have:
            for version in range(have + 1, SCHEMA_VERSION + 1):
                for stmt in self.MIGRATIONS[version]:
                    self._run(stmt)
        for stmt in SCHEMA:
            self._run(stmt)
        self._run(upsert("meta", ("name", "value"), key="name"), ("schema", str(SCHEMA_VERSION)))

    # -- measurements --------------------------------------------------------------------

    def put(self, m: Measurement) -> None:
        """Store (or replace) one result, atomically."""
        self.put_many([m])

    def put_many(self, ms: Iterable[Measurement]) -> None:
        """Store (or replace) results, atomically; any claims on their keys end with them."""
        rows = sorted((_values(m) for m in ms), key=lambda r: r[0])
        if not rows:
            return
        with self._write():
            self._run_many(upsert("measurements", MEASUREMENT_COLUMNS), rows)
            self._run_many("DELETE FROM claims WHERE key = ?", [(r[0],) for r in rows])

    def get(self, key: str) -> Measurement | None:
        return self.get_many([key]).get(key)

    @_reads
    def get_many(self, keys: Iterable[str]) -> dict[str, Measurement]:
        """Rows for the keys that are cached."""
        out: dict[str, Measurement] = {}
        for chunk in _chunks(list(dict.fromkeys(keys))):
            q = f"SELECT * FROM measurements WHERE key IN ({_marks(len(chunk))})"
            for row in self._rows(q, chunk):
                out[row[0]] = measurement(row)
        return out

    @_reads
    def measurements(self, backend: str | None = None) -> list[Measurement]:
        """Every row (of one backend), oldest first."""
        q, args = "SELECT * FROM measurements", ()
        if backend is not None:
            q, args = q + " WHERE backend = ?", (backend,)
        return [measurement(row) for row in self._rows(q + " ORDER BY created, key", args)]

    def mark_stale(self, keys: Iterable[str]) -> int:
        """Mark ok rows to be measured again by the next run that needs them (they keep
        their cost meanwhile); returns how many were marked."""
        n = 0
        with self._write():
            for chunk in _chunks(sorted(set(keys))):
                n += self._run("UPDATE measurements SET stale = 1 WHERE status = 'ok' AND "
                               f"key IN ({_marks(len(chunk))})", chunk)
        return n

    # -- claims --------------------------------------------------------------------------
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
            for chunk in _chunks(keys):
                marks = _marks(len(chunk))
                claims = {r[0]: r for r in self._rows(
                    f"SELECT {', '.join(CLAIM_COLUMNS)} FROM claims WHERE key IN ({marks})",
                    chunk)}
                fresh = {r[0] for r in self._rows(
                    f"SELECT key FROM measurements WHERE created >= ? AND key IN ({marks})",
                    [fresh_since, *chunk])}
                mine = [k for k in chunk if k not in fresh and (
                    (c := claims.get(k)) is None or c[1] == me.token or
                    me.outlived(c, stale_after_s, now))]
                self._run_many(upsert("claims", CLAIM_COLUMNS),
                               [(k, me.token, me.host, me.boot, me.pid, now) for k in mine])
                taken += mine
        return taken

    def release(self, keys: Iterable[str], me: Claimant) -> None:
        """End `me`'s claims on `keys` (those it did not measure after all)."""
        rows = [(k, me.token) for k in sorted(set(keys))]
        with self._write():
            self._run_many("DELETE FROM claims WHERE key = ? AND owner = ?", rows)

    def beat(self, me: Claimant) -> None:
        """`me` is still at work: its claims stand for another `stale_after_s`."""
        with self._write():
            self._run("UPDATE claims SET beat = ? WHERE owner = ?", (time.time(), me.token))

    @_reads
    def claims(self) -> list[tuple[str, str, int]]:
        """(key, owner token, pid) of every claim."""
        return [tuple(r) for r in self._rows("SELECT key, owner, pid FROM claims ORDER BY key")]

    # -- transitions ---------------------------------------------------------------------

    def put_transition(self, t: Transition) -> None:
        with self._write():
            self._run(upsert("transitions", TRANSITION_COLUMNS), _transition_values(t))

    @_reads
    def get_transition(self, key: str) -> Transition | None:
        rows = self._rows("SELECT * FROM transitions WHERE key = ?", (key,))
        return transition(rows[0]) if rows else None

    @_reads
    def transitions(self) -> list[Transition]:
        return [transition(r) for r in self._rows(
            "SELECT * FROM transitions ORDER BY src, dst, key")]

    # -- capabilities --------------------------------------------------------------------
    # A backend's answer to `capability(graph)` for one whole function (an OpenVINO
    # query_model takes ~0.5 s on ResNet-50): a warm `measure` asks no backend anything.

    def put_capability(self, key: str, backend: str, bits: int) -> None:
        with self._write():
            self._run(upsert("capabilities", CAPABILITY_COLUMNS),
                      (key, backend, format(bits, "x"), time.time()))

    @_reads
    def get_capability(self, key: str) -> int | None:
        rows = self._rows("SELECT bits FROM capabilities WHERE key = ?", (key,))
        return int(rows[0][0], 16) if rows else None

    @_reads
    def capabilities(self) -> list[tuple[str, str, str, float]]:
        """(key, backend, bits in hex, created) of every capability, by key."""
        return [tuple(r) for r in self._rows(
            f"SELECT {', '.join(CAPABILITY_COLUMNS)} FROM capabilities ORDER BY key")]

    # -- maintenance ---------------------------------------------------------------------

    @_reads
    def stats(self) -> dict:
        """Entries per backend and status, transitions, and the bytes on disk."""
        per: dict[str, dict[str, int]] = {}
        for backend, status, n in self._rows(
                "SELECT backend, status, COUNT(*) FROM measurements GROUP BY backend, status"):
            per.setdefault(backend, {s: 0 for s in STATUSES})[status] = n
        transitions = self._rows("SELECT COUNT(*) FROM transitions")[0][0]
        return {"path": self.location, "backends": per,
                "entries": sum(sum(v.values()) for v in per.values()),
                "transitions": transitions, "bytes": self._size_bytes()}

    def clear(self, backend: str | None = None, host: str | None = None) -> int:
        """Delete measurements and hand-off prices (of one backend, or all; of one host, or
        every host's); returns how many measurements. What a backend can run is no host's
        own: it goes only when a whole backend, or everything, is cleared on every host."""
        where, args = [], []
        if backend is not None:
            where.append("backend = ?")
            args.append(backend)
        if host is not None:
            where.append("host = ?")
            args.append(host)
        pairs = ([] if backend is None else ["(src = ? OR dst = ?)"]) + \
            ([] if host is None else ["host = ?"])
        pair_args = ([] if backend is None else [backend, backend]) + \
            ([] if host is None else [host])
        with self._write():
            n = self._run("DELETE FROM measurements" + _where(where), args)
            self._run("DELETE FROM transitions" + _where(pairs), pair_args)
            if host is None:
                self._run("DELETE FROM capabilities" + _where(where), args)
        if backend is None and host is None:
            self._after_clear()
        return n

    def merge(self, measurements: Iterable[Measurement], transitions: Iterable[Transition],
              capabilities: Iterable[tuple[str, str, str, float]]) -> tuple[int, int, int]:
        """Add rows from elsewhere (`cache import`) in one transaction: a row replaces the
        one with its key only when it is newer. Returns the rows written per table
        (measurements, transitions, capabilities)."""
        ms = sorted((_values(m) for m in measurements), key=lambda r: r[0])
        ts = sorted((_transition_values(t) for t in transitions), key=lambda r: r[0])
        cs = sorted((tuple(c) for c in capabilities), key=lambda r: r[0])
        with self._write():
            return (self._merge_table("measurements", MEASUREMENT_COLUMNS, ms),
                    self._merge_table("transitions", TRANSITION_COLUMNS, ts),
                    self._merge_table("capabilities", CAPABILITY_COLUMNS, cs))

    def _merge_table(self, table: str, columns: Sequence[str], rows: list[tuple]) -> int:
        """Inside a write: upsert `rows` newer-wins; how many were written."""
        created = columns.index("created")
        written = 0
        for i in range(0, len(rows), CHUNK):
            chunk = rows[i:i + CHUNK]
            have = dict(self._rows(f"SELECT key, created FROM {table} WHERE key IN "
                                   f"({_marks(len(chunk))})", [r[0] for r in chunk]))
            written += sum(r[0] not in have or r[created] > have[r[0]] for r in chunk)
            self._run_many(upsert(table, columns, newer_only=True), chunk)
        return written


def _values(m: Measurement) -> tuple:
    """A measurement as the row it is stored as (`stale` as 0 / 1 on both engines)."""
    values = astuple(m)
    return (*values[:-1], int(values[-1]))


def _transition_values(t: Transition) -> tuple:
    values = list(astuple(t))
    values[7] = json.dumps(t.points)
    return tuple(values)


def measurement(row: Sequence[Any]) -> Measurement:
    """A stored row as a Measurement (a schema-1 row, read-only, gets the new fields'
    defaults)."""
    m = Measurement(*row)
    return m if isinstance(m.stale, bool) else Measurement(*row[:-1], stale=bool(m.stale))


def transition(row: Sequence[Any]) -> Transition:
    values = list(row)
    values[7] = [tuple(p) for p in json.loads(values[7])]
    return Transition(*values)
