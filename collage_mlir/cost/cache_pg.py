"""The measurement cache on PostgreSQL: one database a team shares.

`--cache postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (or `postgres://`; libpq's
query parameters such as `?sslmode=require` or `?host=/run/postgresql` pass through, and
`~/.pgpass` / `PGPASSWORD` supply a password the URL leaves out). The driver is psycopg 3
(`pip install 'collage-mlir[postgres]'`). The tables, the SQL and the schema version are
`storage.CacheStore`'s, as on SQLite; tables live in the connection's current schema (the
database's `public` unless the URL sets `?options=-csearch_path%3DNAME`).

Writers take turns through one transaction-level advisory lock (`_LOCK`), as SQLite's
`BEGIN IMMEDIATE` makes them: a claim's check and insert are atomic across machines, and
transactions never deadlock on each other's rows. Readers take no lock. Creating or
migrating the schema happens under the same lock, so two runs opening a new database at
once do not race on `CREATE TABLE`. PostgreSQL's own history starts at schema 2
(`MIGRATIONS` holds the steps after it).

Every failure to reach the database (no driver, a malformed URL, a refused connection, a
wrong password, a missing database, a connection lost mid-run) is one CollageError naming the
URL with its password masked, and what to do.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from collage_mlir.cost.storage import SCHEMA_VERSION, CacheStore
from collage_mlir.errors import CollageError, first_line

CONNECT_TIMEOUT_S = 10
"""Seconds to wait for the server before giving up (unless the URL says
`connect_timeout`)."""
RECONNECT_S = 60.0
"""How long a run waits for a server that closed its connection to take a new one."""
ANSWER_TIMEOUT_S = 120.0
"""How long one call (a read, or a write with its wait for the cache's lock) may go
unanswered before its connection is cut: libpq waits forever on a server that stopped
mid-call (it cannot enforce its own statement_timeout then), and on a writer that stopped
holding the lock."""
_LOCK = 0x636F6C6C616765  # "collage": the advisory lock every writer of a cache takes
_TABLES = ("measurements", "transitions", "capabilities", "claims", "meta")


def _user_part(url: str) -> str:
    """What a URL holds before its host: `user[:password]`, up to the last `@` before the
    first `/` after the scheme ("" when none). A password may hold `?` or `#` unencoded
    (libpq misreads it, but it must still be masked)."""
    _, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    return authority[:authority.rfind("@")] if sep and "@" in authority else ""


def mask_url(url: str) -> str:
    """`url` with any password replaced by `***` (in the user part, `_user_part`, and as a
    `password=` parameter)."""
    scheme, sep, rest = url.partition("://")
    user = _user_part(url)
    if ":" in user:
        rest = user.split(":", 1)[0] + ":***" + rest[len(user):]
    return re.sub(r"([?&]password=)[^&]*", r"\1***", scheme + sep + rest)


def secrets_of(url: str) -> list[str]:
    """The strings of `url` a message must not show: the URL itself and its password, whole
    and in pieces (an unencoded `@` in a password makes the driver quote part of it as a
    host), longest first."""
    user = _user_part(url)
    passwords = [user.split(":", 1)[1]] if ":" in user else []
    passwords += re.findall(r"[?&]password=([^&]*)", url)
    found = {url} | {p for pw in passwords for p in (pw, *re.split("[@?#]", pw)) if len(p) >= 3}
    return sorted(found, key=len, reverse=True)


def scrubbed(text: str, url: str) -> str:
    """`text` with every secret of `url` replaced by `***` (the URL by its masked form)."""
    for secret in secrets_of(url):
        text = text.replace(secret, mask_url(url) if secret == url else "***")
    return text


def _first_line(e: BaseException) -> str:
    """The driver's message in one line, without its "connection failed: " preamble."""
    return re.sub(r"^connection failed: ", "", first_line(e) or type(e).__name__)


def _connect_hint(message: str) -> str:
    if "password authentication failed" in message or "no password supplied" in message:
        return "check the user and password in the URL (or ~/.pgpass, PGPASSWORD)"
    if "does not exist" in message and "database" in message:
        return "create the database first (createdb) or fix its name in the URL"
    if "Connection refused" in message or "No such file or directory" in message:
        return "is the server running and listening there? check the host and port"
    if "timeout" in message:
        return "the server did not answer; check the host, port and firewall"
    if "resolve host" in message or "could not translate host name" in message:
        return "check the host name (and that the port is a number)"
    return "check the URL: postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"


class PostgresCache(CacheStore):
    """Open the cache in the PostgreSQL database at `url`, creating its tables when
    writable; `readonly` writes nothing (and needs the tables to exist)."""

    MIGRATIONS: dict[int, tuple[str, ...]] = {}

    def __init__(self, url: str, readonly: bool = False) -> None:
        self.url = url
        self.location = mask_url(url)
        self.readonly = readonly
        try:
            import psycopg
        except ImportError:
            raise CollageError(f"{self.location}: a PostgreSQL cache needs psycopg 3: pip "
                               "install 'collage-mlir[postgres]'") from None
        self._psycopg = psycopg
        self.read_errors = (psycopg.Error, ValueError, TypeError)
        self._turn = threading.RLock()  # a transaction is not interleaved with other threads'
        self.answer_timeout_s = ANSWER_TIMEOUT_S
        self._depth = 0  # calls inside calls: the outermost one holds the deadline
        self._unanswered = False
        self._conn = self._connect()
        try:
            if readonly:
                self._conn.execute("SET default_transaction_read_only = on")
                if self._rows("SELECT to_regclass('measurements')")[0][0] is None:
                    raise CollageError(f"{self.location}: no cache here yet (run "
                                       "`collage-mlir measure --cache URL` first)")
            else:
                with self._write():
                    self._bring_schema_up()
        except psycopg.Error as e:
            self._conn.close()
            raise self._failed("cannot set up the cache", e) from None
        except CollageError:
            self._conn.close()
            raise

    def _connect(self) -> Any:
        psycopg = self._psycopg
        try:
            from psycopg.conninfo import conninfo_to_dict

            scheme, sep, rest = self.url.partition("://")
            held = [c for c in "@?#" if c in _user_part(self.url)]
            if held:
                raise CollageError(f"{self.location}: the user or password holds "
                                   f"{held[0]!r}: write it as %{ord(held[0]):02X} "
                                   "(percent-encoded)")
            params = conninfo_to_dict(scheme.lower() + sep + rest)  # libpq: lower case only
        except psycopg.Error as e:
            raise CollageError(f"{self.location}: not a PostgreSQL URL "
                               f"({scrubbed(_first_line(e), self.url)}); "
                               "expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                               ) from None
        params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        params.setdefault("application_name", "collage-mlir")
        try:
            return psycopg.connect(autocommit=True, **params)
        except psycopg.Error as e:
            line = scrubbed(_first_line(e), self.url)
            raise CollageError(f"{self.location}: cannot connect to PostgreSQL ({line}); "
                               f"{_connect_hint(line)}") from None

    def _revive(self) -> None:
        """Connect again when the server has closed this idle connection (a restart, an
        idle-session timeout: its socket is readable with nothing asked of it), waiting up
        to RECONNECT_S for a server that is coming back. Inside a transaction, nothing."""
        conn = self._conn
        idle = self._psycopg.pq.TransactionStatus.IDLE
        if not conn.closed and not conn.broken:
            if conn.info.transaction_status != idle:
                return
            try:
                if not select.select([conn.pgconn.socket], [], [], 0)[0]:
                    return
            except (OSError, ValueError, self._psycopg.Error):
                pass
        with contextlib.suppress(Exception):
            conn.close()
        deadline = time.monotonic() + RECONNECT_S
        while True:
            try:
                self._conn = self._connect()
                break
            except CollageError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        if self.readonly:
            self._conn.execute("SET default_transaction_read_only = on")

    def _failed(self, doing: str, e: BaseException) -> CollageError:
        return CollageError(f"{self.location}: {doing} ({scrubbed(_first_line(e), self.url)})")

    def close(self) -> None:
        self._conn.close()

    # -- statements ----------------------------------------------------------------------

    def _sql(self, sql: str, args: Sequence[Any]) -> str:
        return sql.replace("%", "%%").replace("?", "%s") if args else sql

    @staticmethod
    def _clean(args: Sequence[Any]) -> list[Any]:
        """PostgreSQL TEXT holds no NUL (a crashed worker's output may): U+FFFD instead."""
        return [a.replace("\x00", "\ufffd") if isinstance(a, str) else a for a in args]

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lost_is_an_error():
            return self._conn.execute(self._sql(sql, args), self._clean(args) or None).fetchall()

    def _run(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._lost_is_an_error():
            return self._conn.execute(self._sql(sql, args), self._clean(args) or None).rowcount

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self._lost_is_an_error(), self._conn.cursor() as cur:
            cur.executemany(self._sql(sql, rows[0]), [self._clean(r) for r in rows])

    @contextmanager
    def _lost_is_an_error(self) -> Iterator[None]:
        try:
            with self._turn:
                if self._depth == 0:
                    self._revive()
                with self._deadline():
                    yield
        except self._psycopg.OperationalError as e:
            if self._unanswered:
                raise CollageError(
                    f"{self.location}: no answer from PostgreSQL in "
                    f"{self.answer_timeout_s:.0f} s (the server, or a run holding the "
                    "cache's lock, stopped answering); the connection was cut") from None
            raise self._failed("lost the connection to PostgreSQL", e) from None

    @contextmanager
    def _deadline(self) -> Iterator[None]:
        """Cut the connection's socket when the outermost call is not answered in time
        (`ANSWER_TIMEOUT_S`): the waiting read then fails instead of hanging."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._unanswered = False
        conn = self._conn

        def cut() -> None:
            self._unanswered = True
            with contextlib.suppress(OSError, ValueError, self._psycopg.Error):
                fd = os.dup(conn.pgconn.socket)
                with socket.socket(fileno=fd) as s:
                    s.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.answer_timeout_s, cut)
        timer.daemon = True
        self._depth = 1
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            self._depth = 0

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction holding the cache's advisory lock (released at its end)."""
        try:
            with self._lost_is_an_error(), self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
                yield
        except self._psycopg.Error as e:
            raise self._failed("cannot write the cache", e) from None

    def _columns(self, table: str) -> set[str]:
        return {r[0] for r in self._rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = ?", (table,))}

    def _size_bytes(self) -> int:
        sizes = self._rows(
            "SELECT COALESCE(SUM(pg_total_relation_size(t)), 0) FROM "
            f"(SELECT to_regclass(n) AS t FROM unnest(ARRAY[{', '.join('?' * len(_TABLES))}])"
            " AS n) AS tables WHERE t IS NOT NULL", _TABLES)
        return int(sizes[0][0])

    def _read_failed(self, e: BaseException) -> CollageError:
        if isinstance(e, CollageError):
            return e
        return self._failed("cannot read the cache", e)

    def integrity_ok(self) -> bool:
        """The tables are there and readable and hold the current schema (PostgreSQL keeps
        its pages sound itself)."""
        for table in _TABLES:
            self._rows(f"SELECT COUNT(*) FROM {table}")
        found = self._rows("SELECT value FROM meta WHERE name = 'schema'")
        return bool(found) and found[0][0] == str(SCHEMA_VERSION)
