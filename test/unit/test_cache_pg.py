"""The PostgreSQL cache beyond the contract test_cache.py runs on both stores: two real
`collage-mlir measure` runs sharing one database, the command line's cache export/import,
and every way of failing to reach the database as one line naming the URL (password
masked). Each test skips with the reason where no PostgreSQL server can be had."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnx.parser
import pg_server as pg
import pytest
from pg_server import PASSWORD, pg_server
from test_measure import MODEL, NUMPY

from collage_mlir.cost.cache import Measurement, open_cache
from collage_mlir.errors import CollageError

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "collage_mlir.tools.cli"]


@pytest.fixture
def server():
    s = pg_server()
    if isinstance(s, str):
        pytest.skip(s)
    return s


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get(
        "PYTHONPATH", "")])}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_two_measure_runs_on_one_database_lose_no_rows(server, tmp_path):
    """Two `collage-mlir measure` runs started together on one new database (both create
    its tables at once): both succeed, every key is there once, each was measured by one
    run only (claims work across them), and no claim is left."""
    model = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(MODEL), model)
    url = server.new_database()
    cmd = [*CLI, "measure", str(model), "--backends", NUMPY, "--reference", NUMPY,
           "--cache", url, "--budget", "0.02", "--timeout", "60"]
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    measured = [int(re.search(r"(\d+) measured", out).group(1)) for out, _ in outs]
    with open_cache(url) as c:
        rows = c.measurements()
        assert c.claims() == []
        keys = c._rows("SELECT key, COUNT(*) FROM measurements GROUP BY key")
    assert len(rows) == 4 and all(r.status == "ok" for r in rows)  # 5 ops, 4 regions
    assert all(n == 1 for _, n in keys)
    assert sum(measured) == 4, outs  # each key measured by one of the runs
    shared = [int(m.group(1)) if (m := re.search(r"(\d+) measured by a concurrent run", out))
              else 0 for out, _ in outs]
    assert sum(measured) + sum(shared) == 8  # the other run took the rows it waited for


def test_the_estimator_opens_a_url_through_the_driver(server):
    """`collage_mlir.compile(cache=URL)` and `--cache URL` reach the measuring estimator
    as a PostgreSQL store (driver.make_estimator)."""
    from collage_mlir import driver
    from collage_mlir.cost.cache_pg import PostgresCache

    url = server.new_database()
    with driver.make_estimator("measure", [NUMPY], url, timeout_s=5) as est:
        assert isinstance(est.cache, PostgresCache) and PASSWORD not in est.cache.location


def test_cache_commands_take_a_url(server, tmp_path):
    """export from SQLite, import into PostgreSQL, stats / list / export there."""
    src = tmp_path / "c.sqlite"
    with open_cache(src) as c:
        c.put(Measurement("k", "r", "b", "v", "o", "h", "Relu", "ok", 1e-3, 1e-3, 0.0, 3))
    url = server.new_database()
    dump, back = tmp_path / "dump.jsonl", tmp_path / "back.jsonl"
    steps = [("export", str(dump), "--cache", str(src)), ("import", str(dump), "--cache", url),
             ("stats", "--cache", url), ("list", "--cache", url),
             ("export", str(back), "--cache", url)]
    outs = []
    for step in steps:
        done = _cli("cache", *step)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
    assert "imported 1 measurements" in outs[1]
    assert "1 measurements" in outs[2] and "Relu" in outs[3]
    assert PASSWORD not in "".join(outs) and "***" in outs[2]
    assert dump.read_text().splitlines()[1:] == back.read_text().splitlines()[1:]
    assert json.loads(back.read_text().splitlines()[0])["source"].startswith("postgresql://")


def _refused_port() -> int:
    import socket

    with socket.socket() as s:  # bound, never listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case, message", [
    ("password", "password authentication failed.*check the user and password"),
    ("refused", "Connection refused.*is the server running"),
    ("database", "database \"nowhere\" does not exist.*create the database"),
    ("malformed", "not a PostgreSQL URL.*expected postgresql://USER"),
])
def test_a_url_that_leads_nowhere_is_one_line_naming_it(server, case, message):
    url = {"password": server.url(password="wrong-pw"),
           "refused": f"postgresql://collage:wrong-pw@127.0.0.1:{_refused_port()}/x",
           "database": server.url("nowhere"),
           "malformed": "postgresql://collage:wrong-pw@127.0.0.1/x?nonsense=1"}[case]
    masked = re.sub(r":[^:@/]+@", ":***@", url, count=1)
    with pytest.raises(CollageError, match=message) as e:
        open_cache(url)
    assert str(e.value).startswith(masked + ":") and "\n" not in str(e.value)
    done = _cli("cache", "stats", "--cache", url)  # the command line: one line, no traceback
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("collage-mlir: error: ")
    assert masked in done.stderr
    for secret in ("wrong-pw", PASSWORD):
        assert secret not in str(e.value) and secret not in done.stderr


def test_without_the_driver_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(CollageError, match=r"postgres://u:\*\*\*@h/db: a PostgreSQL cache "
                                           r"needs psycopg 3: pip install 'collage-mlir\["
                                           r"postgres\]'"):
        open_cache("postgres://u:pw@h/db")


def test_a_connection_the_server_closed_is_made_again_and_a_lost_one_is_one_line(
        server, monkeypatch):
    """A server restart or an idle-session timeout between two calls closed the
    connection, and the run ended at its next call; it now connects again (a server on its
    way back is waited for). A connection lost in the middle of a call is one line."""
    import psycopg

    url = server.new_database()

    def cut(c) -> None:
        pid = c._rows("SELECT pg_backend_pid()")[0][0]
        with psycopg.connect(server.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.2)  # the server's goodbye reaches the socket

    with open_cache(url) as c:
        cut(c)
        assert c.get("k") is None  # read on a new connection
        cut(c)
        c.put(Measurement("k", "r", "onnxruntime", "1", "", "h", "Relu", "ok", 1e-3, 1e-3,
                          0.0, 5))
        assert c.get("k").median == 1e-3
        cut(c)
        monkeypatch.setattr(type(c), "_revive", lambda self: None)  # lost mid-call
        with pytest.raises(CollageError, match="postgresql://collage:\\*\\*\\*@.*(lost the "
                                               "connection|cannot read)"):
            c.get("k")


def test_a_server_that_stops_answering_mid_call_is_one_line_not_a_hang(server):
    """A server frozen in the middle of a call (a stopped process, a host gone silent)
    hung the run forever: libpq waits, and the server cannot enforce its own
    statement_timeout. The call's connection is now cut after `answer_timeout_s`, and the
    next call connects again."""
    import signal

    url = server.new_database()
    with open_cache(url) as c:
        c.answer_timeout_s = 1.0
        pid = c._rows("SELECT pg_backend_pid()")[0][0]
        try:
            os.kill(pid, signal.SIGSTOP)
        except PermissionError:
            pytest.skip("cannot stop the server's process here")
        try:
            start = time.monotonic()
            with pytest.raises(CollageError, match="no answer from PostgreSQL in 1 s"):
                c.get("k")
            assert time.monotonic() - start < 30
        finally:
            os.kill(pid, signal.SIGCONT)
        assert c.get("k") is None  # on a new connection


@pytest.mark.parametrize("url, says", [
    ("POSTGRESQL://collage:TopSecret99@127.0.0.1:{port}/c1", "Connection refused"),
    ("postgresql://collage:Top%Secret@127.0.0.1:{port}/c1", "invalid percent-encoded"),
    ("postgresql://collage@127.0.0.1:{port}/c1?password=Top%zzSecret", "percent-encoded"),
    ("postgresql://collage:p@ssTopSecret@db.example/c1", "holds '@': write it as %40"),
    ("postgresql://collage:TopSecret?x@127.0.0.1:{port}/c1", "holds '?': write it as %3F"),
])
def test_no_message_shows_the_password(url, says):
    """The driver's own message quoted the raw URL or the password after the masked one;
    an unencoded '@' in a password was blamed on a host named after part of it."""
    pytest.importorskip("psycopg")
    url = url.format(port=_refused_port())
    with pytest.raises(CollageError, match=re.escape(says)) as e:
        open_cache(url)
    assert "TopSecret" not in str(e.value) and "Top%" not in str(e.value)


def test_a_member_who_may_write_rows_but_not_create_tables_can_measure(server):
    """Every writable open ran CREATE TABLE IF NOT EXISTS, which needs CREATE on the schema
    (PostgreSQL 15 grants it to no one by default): "permission denied for schema public"
    for a role with every right on the cache's tables."""
    import psycopg

    url = server.new_database()
    with open_cache(url):  # the owner makes the tables
        pass
    role = f"member{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'member-pw'")
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public "
                      f"TO {role}")
    member = url.replace(f"{pg.USER}:{PASSWORD}@", f"{role}:member-pw@")
    with open_cache(member) as c:
        c.put(Measurement("k", "r", "onnxruntime", "1", "", "h", "Relu", "ok", 1e-3, 1e-3,
                          0.0, 5))
        assert c.get("k").median == 1e-3


def test_a_server_whose_session_was_killed_is_stopped_by_the_next(server, monkeypatch):
    # a pytest killed before its atexit leaves its server running: the next session's
    # start stops it and removes its folder; servers of live sessions are left alone
    folder = tempfile.mkdtemp(prefix="collage-reap-")
    os.chmod(folder, 0o755)  # the server's user must reach its base inside
    monkeypatch.setattr(tempfile, "tempdir", folder)
    try:
        orphan = pg._start()
        assert pg.reap_orphans(server.bin, folder) == []  # its owner (this process) lives
        dead = subprocess.Popen(["true"])
        dead.wait()
        Path(orphan.base, "owner").write_text(str(dead.pid))
        assert pg.reap_orphans(server.bin, folder) == [orphan.base]
        assert not os.path.exists(orphan.base)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", orphan.port), timeout=5).close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass  # the session's own server still serves
    finally:
        for base in Path(folder).glob("*"):
            pg.PgServer(server.bin, str(base), 0, 0.0).stop()
        os.rmdir(folder)
