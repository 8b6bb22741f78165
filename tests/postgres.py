"""A real PostgreSQL server for the tests of the kit's state on PostgreSQL (AGENT_STATE_URL): Debian's
binaries (`initdb`, `pg_ctl`) from PATH or /usr/lib/postgresql/*/bin, one server per xdist worker in a
temporary directory on a free port, and a fresh database per test.

    with running_postgres() as server:              # or the `postgres_server` fixture (tests/chats/conftest.py)
        url = server.new_database()                 # postgresql://postgres@127.0.0.1:port/test_1

initdb refuses to run as root, and CI runs as root: there the server runs as the `postgres` user that
Debian's package creates (or `nobody`), through `runuser`. Without the binaries the tests that need them
skip and say why; in CI (`CI` set, as .ci/run sets it) they fail instead, since .ci/run installs them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

DEBIAN_BINARIES = "/usr/lib/postgresql"
SERVER_USERS = ("postgres", "nobody")  # who runs the server when the tests run as root


@dataclass
class PostgresServer:
    port: int
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """An empty database of its own, for one test."""
        name = f"test_{next(self._numbers)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def unavailable(reason: str) -> None:
    """Skip, saying why; in CI, where .ci/run installs PostgreSQL, fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is needed in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, else Debian's newest under /usr/lib/postgresql."""
    if (found := shutil.which("initdb")) and shutil.which("pg_ctl"):
        return Path(found).parent
    versions = sorted(Path(DEBIAN_BINARIES).glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name), reverse=True)
    return versions[0].parent if versions else None


def server_user() -> str | None:
    """Who runs the server: None for whoever runs the tests, unless that is root, which initdb refuses."""
    if os.geteuid() != 0:
        return None
    for name in SERVER_USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError(f"running as root and none of {SERVER_USERS} exists to run PostgreSQL")


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    folder = binaries()
    if folder is None:
        unavailable("PostgreSQL's initdb is not installed (apt-get install postgresql)")
        raise AssertionError  # unreachable: skip and fail raise
    user = server_user()
    base = Path(tempfile.mkdtemp(prefix="agent-postgres-"))
    data = base / "data"
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(base, entry.pw_uid, entry.pw_gid)
        _as(user, [folder / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
        port = _start(folder, user, base, data)
        try:
            yield PostgresServer(port)
        finally:
            _as(user, [folder / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _start(folder: Path, user: str | None, base: Path, data: Path) -> int:
    # A free port can be taken between asking and binding (the other xdist worker): try a few.
    for _ in range(5):
        port = _free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {base} -c fsync=off -c full_page_writes=off"
        started = _as(
            user,
            [folder / "pg_ctl", "-D", data, "-o", options, "-l", base / "server.log", "-w", "-t", "60", "start"],
            check=False,
        )
        if started.returncode == 0:
            return port
    log = (base / "server.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"PostgreSQL did not start:\n{log}")


def _as(user: str | None, command: list[object], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(part) for part in command]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd="/")
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    return done


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
