"""The measurement cache: where a location leads (`open_cache`), and the embedded store.

A location is a path (an SQLite file, the default: `default_cache_path()`) or a
`postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE` URL (`postgres://` too; a database a
team shares, `cache_pg.PostgresCache`). Both keep the same tables under the same schema
version through one interface (`storage.CacheStore`); what the rows mean is in `records`.

Why SQLite by default: every write is an atomic transaction, so a run killed mid-measurement
leaves the file intact, and WAL mode with a busy timeout lets two `collage-mlir` processes
measure into the same file at once (readers never block, writers queue). Each result is
written as soon as it arrives, so an interrupted run keeps everything it measured.

SQLite's migration from schema 1 (plain SQL, `SqliteCache.MIGRATIONS[2]`): both tables are
rebuilt (SQLite cannot widen a CHECK) with every row and value kept, new columns at their
defaults; v1 `invalid` rows that were timeouts ("timed out after N s") become `timeout` rows
with `timeout_s` N, so a later run measures them again.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collage_mlir.cost.records import (
    BUSY_LOAD,
    CAPABILITY_COLUMNS,
    ERROR,
    INVALID,
    MEASUREMENT_COLUMNS,
    NOISY_SPREAD,
    OK,
    STATUSES,
    TIMEOUT,
    TIMEOUT_RETRY,
    TRANSITION_COLUMNS,
    TRANSITION_RETRY,
    Claimant,
    Measurement,
    RetryPolicy,
    Transition,
)
from collage_mlir.cost.storage import (
    MEASUREMENTS,
    MEASUREMENTS_INDEX,
    SCHEMA_VERSION,
    TRANSITIONS,
    CacheStore,
)
from collage_mlir.errors import CollageError
from collage_mlir.paths import cache_home, user_path

__all__ = [
    "BUSY_LOAD", "BUSY_TIMEOUT_S", "CAPABILITY_COLUMNS", "ERROR", "INVALID",
    "MEASUREMENT_COLUMNS", "NOISY_SPREAD", "OK", "SCHEMA_VERSION", "STATUSES", "TIMEOUT",
    "TIMEOUT_RETRY", "TRANSITION_COLUMNS", "TRANSITION_RETRY", "CacheStore", "Claimant",
    "Measurement", "MeasurementCache", "RetryPolicy", "SqliteCache", "Transition",
    "cache_exists", "default_cache_location", "default_cache_path", "is_cache_url",
    "open_cache",
]

BUSY_TIMEOUT_S = 60.0
URL_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def default_cache_path() -> Path:
    """`$COLLAGE_CACHE`, else `$XDG_CACHE_HOME/collage_mlir/cache.sqlite`, else ~/.cache/…"""
    if os.environ.get("COLLAGE_CACHE"):
        return user_path(os.environ["COLLAGE_CACHE"])
    return cache_home() / "cache.sqlite"


def default_cache_location() -> str | Path:
    """`$COLLAGE_CACHE` when it is a URL, else `default_cache_path()`."""
    env = os.environ.get("COLLAGE_CACHE", "")
    return env if is_cache_url(env) else default_cache_path()


def is_cache_url(location: str | os.PathLike | None) -> bool:
    """Whether `location` names a PostgreSQL database rather than a file; any other
    `scheme://` is a one-line CollageError (a typo must not become a file of that name)."""
    if not isinstance(location, str):
        return False
    m = _SCHEME.match(location)
    if m is None:
        return False
    if m.group(1).lower() in URL_SCHEMES:
        return True
    raise CollageError(f"{m.group(0)}…: not a cache location; pass a file path or a "
                       "postgresql://USER@HOST/DATABASE URL")


def open_cache(location: str | os.PathLike | None = None,
               readonly: bool = False) -> CacheStore:
    """The cache at `location` (default `default_cache_location()`): a PostgreSQL store for
    a `postgresql://` URL, else the SQLite file (created when writable and missing)."""
    if location is None:
        location = default_cache_location()
    if is_cache_url(location):
        from collage_mlir.cost.cache_pg import PostgresCache

        return PostgresCache(str(location), readonly=readonly)
    return SqliteCache(location, readonly=readonly)


def cache_exists(location: str | os.PathLike | None) -> bool:
    """Whether there is a cache to read at `location` (a URL is taken to hold one: opening
    it says when not)."""
    if location is None:
        location = default_cache_location()
    return is_cache_url(location) or user_path(location).is_file()


def _text(data: bytes) -> str:
    """TEXT columns as str; a byte a damaged file turned into invalid UTF-8 becomes U+FFFD."""
    return data.decode("utf-8", "replace")


def _read_only(path: Path) -> CollageError:
    return CollageError(f"{path}: the cache is read-only and measuring must store results; "
                        "pass a writable --cache (`cache stats` / `list` can read it)")


_V1_COLUMNS = {
    "measurements": ("key", "region", "backend", "version", "options", "host", "signature",
                     "status", "median", "p90", "spread", "runs", "error", "created"),
    "transitions": ("key", "src", "dst", "host", "status", "per_call", "per_byte", "points",
                    "error", "created"),
}


def _rebuilt(table: str, ddl: str) -> tuple[str, ...]:
    old = ", ".join(_V1_COLUMNS[table])
    return (f"ALTER TABLE {table} RENAME TO {table}_v1", ddl,
            f"INSERT INTO {table} ({old}) SELECT {old} FROM {table}_v1",
            f"DROP TABLE {table}_v1")


_V1_TIMEOUT_NUMBER = "substr(error, 17, instr(substr(error, 17), ' s') - 1)"
_V1_TIMEOUTS = f"""
UPDATE measurements SET status = 'timeout', attempts = 1,
    timeout_s = CAST({_V1_TIMEOUT_NUMBER} AS REAL)
WHERE status = 'invalid' AND substr(error, 1, 16) = 'timed out after '
    AND instr(substr(error, 17), ' s') > 1 AND {_V1_TIMEOUT_NUMBER} NOT GLOB '*[^0-9.eE+-]*'"""
"""v1 kept a timeout as `invalid`, "timed out after N s…": a `timeout` row of N s."""


class SqliteCache(CacheStore):
    """Open (creating if needed) the SQLite cache at `path` (default:
    `default_cache_path()`); `readonly` never writes (no WAL files, no schema)."""

    read_errors = (sqlite3.DatabaseError, UnicodeDecodeError, ValueError, TypeError)
    MIGRATIONS = {2: (*_rebuilt("measurements", MEASUREMENTS),
                      *_rebuilt("transitions", TRANSITIONS), MEASUREMENTS_INDEX, _V1_TIMEOUTS)}

    def __init__(self, path: str | os.PathLike | None = None, readonly: bool = False) -> None:
        if isinstance(path, str) and _SCHEME.match(path):
            raise CollageError(f"{path}: a URL, not a file; open it with cache.open_cache")
        self.path = user_path(path) if path is not None else default_cache_path()
        self.location = str(self.path)
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
            self._refuse_other_databases()
            self._bring_schema_up()
        conn.execute("SELECT count(*) FROM measurements").fetchone()
        return conn

    def _refuse_other_databases(self) -> None:
        """An SQLite file that holds tables, none of them a cache's, is some application's
        database: the schema is not written into it."""
        tables = {name for (name,) in self._rows(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if tables and not tables & {"meta", "measurements"}:
            shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
            raise CollageError(f"{self.path}: an SQLite database of something else (tables: "
                               f"{shown}), not a measurement cache; pass another --cache")

    def close(self) -> None:
        self._conn.close()

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self._conn.execute(sql, args).fetchall()

    def _run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, args).rowcount

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction; IMMEDIATE takes the write lock up front (no upgrade deadlock)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if "readonly" in str(e):  # opened read-only, or the file became so
                raise _read_only(self.path) from None
            raise

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}

    def _size_bytes(self) -> int:
        files = (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
        return sum(p.stat().st_size for p in files if p.exists())

    def _read_failed(self, e: BaseException) -> CollageError:
        return CollageError(f"{self.path}: damaged measurement cache ({e}); move it away "
                            "or pass another --cache")

    def _after_clear(self) -> None:
        self._conn.execute("VACUUM")

    def integrity_ok(self) -> bool:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


MeasurementCache = SqliteCache
"""The SQLite store under the name its callers (and files it is given as paths) know;
`open_cache` is the one that also takes a URL."""
