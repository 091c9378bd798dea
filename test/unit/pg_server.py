"""A real PostgreSQL server for the tests: Debian's `postgresql`, installed when missing
(`apt-get install -y postgresql`, as root), initialised in a temporary folder and started on
127.0.0.1 at a free port (password authentication) and on a socket in that folder, once per
test session; stopped and removed when the session ends, or by the next session when this
one was killed first (`reap_orphans`).

`pg_server()` gives the server, or the reason it cannot be had (the tests that need it skip
with that reason). Running as root, the server runs as the `postgres` user the package
creates (PostgreSQL refuses to run as root). Durability is off (fsync, synchronous commit):
a test server loses nothing the tests need and starts and writes faster.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

USER = "collage"
PASSWORD = "s3cret-test"
_INSTALL_TIMEOUT_S = 600


@dataclass
class PgServer:
    bin: str
    base: str
    port: int
    startup_s: float
    install_s: float = 0.0
    _count: itertools.count = field(default_factory=itertools.count)

    def url(self, database: str = "postgres", password: str | None = PASSWORD,
            scheme: str = "postgresql") -> str:
        who = USER if password is None else f"{USER}:{password}"
        return f"{scheme}://{who}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._count)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        _as_server_user([f"{self.bin}/pg_ctl", "-D", f"{self.base}/data", "-m", "immediate",
                         "-w", "stop"], check=False)
        shutil.rmtree(self.base, ignore_errors=True)


_server: PgServer | str | None = None


def pg_server() -> PgServer | str:
    """The session's server (started on first call), or why there is none."""
    global _server
    if _server is None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            _server = "psycopg 3 is not installed (pip install 'collage-mlir[postgres]')"
            return _server
        try:
            _server = _start()
        except _NoServer as e:
            _server = f"no PostgreSQL server: {e}"
        else:
            atexit.register(_server.stop)
    return _server


class _NoServer(Exception):
    pass


def _bin_dir() -> tuple[str, float]:
    """The newest PostgreSQL's bin folder (installed first when none is), and the install's
    seconds."""
    def found() -> list[str]:
        return sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)

    if found():
        return os.path.dirname(found()[-1]), 0.0
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise _NoServer("initdb not found under /usr/lib/postgresql/*/bin and apt-get cannot "
                        "install it here (not root, or not Debian)")
    started = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "postgresql"]
    for attempt in (install, ["apt-get", "update", "-q"], install):
        try:
            subprocess.run(attempt, env=env, capture_output=True, timeout=_INSTALL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise _NoServer(f"apt-get install -y postgresql: {e}") from None
        if found():
            break
    if not found():
        raise _NoServer("apt-get install -y postgresql did not install initdb")
    return os.path.dirname(found()[-1]), time.monotonic() - started


def _server_user() -> str | None:
    """The user the server runs as: `postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise _NoServer("running as root and there is no `postgres` user to run the server "
                        "as") from None
    return "postgres"


def _as_server_user(cmd: list[str], check: bool = True, timeout: float = 120
                    ) -> subprocess.CompletedProcess:
    user = _server_user()
    if user is not None:
        cmd = ["runuser", "-u", user, "--", *cmd]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise _NoServer(f"{cmd[-1] if cmd else ''}: {e}") from None
    if check and done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise _NoServer(f"{os.path.basename(cmd[cmd.index('--') + 1] if '--' in cmd else cmd[0])}"
                        f" failed: {tail[0]}")
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process, alive
        return True
    return True


def reap_orphans(bin_dir: str, folder: str | None = None) -> list[str]:
    """Stop and remove the servers that test sessions killed before their atexit ran left
    behind in `folder` (the temp dir): each base names the pid that owns it. The bases
    removed."""
    removed = []
    for base in glob.glob(os.path.join(folder or tempfile.gettempdir(), _PREFIX + "*")):
        try:
            with open(f"{base}/owner") as f:
                owner = int(f.read())
        except (OSError, ValueError):
            continue  # not started by this module, or still being set up
        if _alive(owner):
            continue
        if os.path.isdir(f"{base}/data"):
            try:
                _as_server_user([f"{bin_dir}/pg_ctl", "-D", f"{base}/data", "-m",
                                 "immediate", "-w", "stop"], check=False)
            except _NoServer:
                pass
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


_PREFIX = "collage-pg-"


def _start() -> PgServer:
    bin_dir, install_s = _bin_dir()
    reap_orphans(bin_dir)
    started = time.monotonic()
    user = _server_user()
    base = tempfile.mkdtemp(prefix=_PREFIX)
    os.chmod(base, 0o700)
    with open(f"{base}/pw", "w") as f:
        f.write(PASSWORD + "\n")
    with open(f"{base}/owner", "w") as f:
        f.write(str(os.getpid()))
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (base, f"{base}/pw"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        _as_server_user([f"{bin_dir}/initdb", "-D", f"{base}/data", "-U", USER,
                         f"--pwfile={base}/pw", "--auth-local=trust",
                         "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"])
        for attempt in range(3):  # another session may take the free port first
            port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off "
                       "-c max_connections=60")
            try:
                _as_server_user([f"{bin_dir}/pg_ctl", "-D", f"{base}/data", "-l",
                                 f"{base}/log", "-w", "-t", "60", "-o", options, "start"])
                break
            except _NoServer:
                if attempt == 2:
                    raise
    except _NoServer:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return PgServer(bin_dir, base, port, time.monotonic() - started, install_s)
