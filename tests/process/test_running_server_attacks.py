"""The CLI asking a running server (process/running_server.py): server.json holds the web token, so a
record is trusted only when its writer still holds the data and proves it, and it is never written where
others can read it. The first four cases are the outside review's reproductions (review 3, section 4)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from process import running_server
from process.errors import UsageError
from process.sessions import RemoteSession, open_session
from tests.conftest import make_settings

TOKEN = "the-web-token-of-the-dead-server"


class _Foreign(BaseHTTPRequestHandler):
    """Whatever now listens on the port a dead server had: it keeps the headers it is sent."""

    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        _Foreign.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


def _hold_lock(lock: Path, names: str = "") -> subprocess.Popen[str]:
    """Another process holding the data directory's lock (as `agent serve --slack` only, `agent sql`,
    `agent chat` or `make demo`'s loader do), which never wrote server.json; it writes `names` in the lock
    file ({pid} is its own pid), as agent/db/embedded.py does."""
    code = (
        "import fcntl, os, sys, time\n"
        f"h = open({str(lock)!r}, 'a+'); fcntl.flock(h, fcntl.LOCK_EX)\n"
        f"h.write({names!r}.format(pid=os.getpid())); h.flush()\n"
        "print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.fixture
def foreign() -> Iterator[str]:
    """A listener that is not the server, at the URL yielded."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Foreign.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_stale_server_json_does_not_send_the_token_to_whoever_holds_its_port_now(tmp_path: Path) -> None:
    """`agent web` killed (SIGKILL, OOM, a reboot of the container keeps the volume) leaves server.json with
    its address and token. `find` only asks whether *anyone* holds the lock, never whether the recorded
    pid is the one holding it (the lock file names it) or alive: while another process holds the lock,
    `agent ask` sends `Authorization: Bearer <token>` to whatever listens on the recorded port now."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    dead_pid = 2**22 + 12345  # no such process
    record = {"url": f"http://127.0.0.1:{foreign.server_address[1]}", "pid": dead_pid, "token": TOKEN}
    (chdb / running_server.FILE_NAME).write_text(json.dumps(record))
    holder = _hold_lock(chdb / running_server.LOCK_NAME)
    _Foreign.seen.clear()
    try:
        settings = make_settings(clickhouse_url=f"chdb://{chdb}", agent_data_dir=tmp_path / "app")
        server = running_server.find(settings)
        if server is not None:  # what `agent ask` does with it
            session = open_session(settings)
            assert isinstance(session, RemoteSession)
            await session.check()
            await session.close()
    finally:
        holder.kill()
        holder.communicate()
        foreign.shutdown()
        foreign.server_close()
    assert f"Bearer {TOKEN}" not in _Foreign.seen, "the token went to a listener that is not the server"
    assert server is None, f"a record of pid {dead_pid}, which holds nothing, was trusted: {server}"


def test_server_json_is_this_users_only_even_when_a_file_was_there_before(tmp_path: Path) -> None:
    """os.open(..., 0o600) sets the mode only when it creates the file: a server.json already there
    (left by an older version, a restore, a `touch` with umask 022) keeps its mode, and the token is
    written into a world-readable file."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    path = chdb / running_server.FILE_NAME
    path.write_text("{}")
    path.chmod(0o644)
    settings = make_settings(clickhouse_url=f"chdb://{chdb}", agent_web_token="s3cret-token-value")
    with running_server.recorded(settings, "127.0.0.1", 8000, running_server.new_key()):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert "s3cret-token-value" in path.read_text()
    assert mode & 0o077 == 0, f"server.json holding the token has mode {oct(mode)}"


def test_server_json_is_not_written_through_a_symlink(tmp_path: Path) -> None:
    """No O_NOFOLLOW (nor O_EXCL): a symlink named server.json in the data folder sends the token to its
    target, e.g. a file another user can read, and the target keeps its own mode."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    elsewhere = tmp_path / "shared-with-others.txt"
    elsewhere.write_text("")
    elsewhere.chmod(0o644)
    (chdb / running_server.FILE_NAME).symlink_to(elsewhere)
    settings = make_settings(clickhouse_url=f"chdb://{chdb}", agent_web_token="s3cret-token-value")
    try:
        with running_server.recorded(settings, "127.0.0.1", 8000, running_server.new_key()):
            pass
    except OSError:
        pass  # refusing the symlink is a fine outcome
    assert "s3cret-token-value" not in elsewhere.read_text(), "the token was written through the symlink"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_server_json_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    """`find` reads server.json whoever wrote it: in a data folder another user can write to (a shared
    group volume), their file sends `agent ask`'s questions, and the data's answers, to their listener."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    path = chdb / running_server.FILE_NAME
    path.write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": os.getpid(), "token": None}))
    os.chown(path, 65534, 65534)
    holder = _hold_lock(chdb / running_server.LOCK_NAME)
    try:
        found = running_server.find(make_settings(clickhouse_url=f"chdb://{chdb}"))
    finally:
        holder.kill()
        holder.communicate()
    assert found is None, f"trusted a server.json owned by uid 65534: {found}"


# --- beyond the reproductions: each condition of trust on its own ---


def _record(chdb: Path, url: str, pid: int, *, mode: int = 0o600, key: str = "k" * 64) -> None:
    path = chdb / running_server.FILE_NAME
    path.write_text(json.dumps({"url": url, "pid": pid, "token": TOKEN, "key": key}))
    path.chmod(mode)


async def test_a_live_lock_holder_whose_listener_cannot_prove_the_key_gets_no_token(
    tmp_path: Path, foreign: str
) -> None:
    """Every check on the file passes (the pid named in the lock holds it and lives: say the pid was reused
    by a process that took the lock), but the port is someone else's: the token is never sent, and the
    person is told what to do in one line."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    holder = _hold_lock(chdb / running_server.LOCK_NAME, names="process {pid} (agent web)\n")
    try:
        _record(chdb, foreign, holder.pid)
        settings = make_settings(clickhouse_url=f"chdb://{chdb}", agent_data_dir=tmp_path / "app")
        assert running_server.find(settings) is not None  # the file alone is trusted
        session = open_session(settings)
        assert isinstance(session, RemoteSession)
        with pytest.raises(UsageError) as refused:
            await session.check()
        with pytest.raises(UsageError):
            await session.ask("How many flights?", None, _ignore, followups=False)
        await session.close()
    finally:
        holder.kill()
        holder.communicate()
    assert _Foreign.seen and all(seen is None for seen in _Foreign.seen), _Foreign.seen
    assert f"stop process {holder.pid}" in str(refused.value) and "\n" not in str(refused.value)


async def _ignore(event: object) -> None:
    pass


@pytest.mark.parametrize(
    ("names", "mode", "key"),
    [
        ("process {pid} (agent web)\n", 0o640, "k" * 64),  # readable by the group
        ("process {pid} (agent web)\n", 0o600, ""),  # no key: an older server's record, nothing to prove
        ("process 1 (agent web)\n", 0o600, "k" * 64),  # the lock names another pid than the record's
        ("", 0o600, "k" * 64),  # the lock names nobody
    ],
)
def test_a_record_failing_one_condition_is_not_trusted(tmp_path: Path, names: str, mode: int, key: str) -> None:
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    holder = _hold_lock(chdb / running_server.LOCK_NAME, names=names)
    try:
        _record(chdb, "http://127.0.0.1:9", holder.pid, mode=mode, key=key)
        found = running_server.find(make_settings(clickhouse_url=f"chdb://{chdb}"))
    finally:
        holder.kill()
        holder.communicate()
    assert found is None, found


async def test_the_server_proves_the_key_on_healthz_only_when_challenged() -> None:
    """What `agent web` answers (process/service.py wraps its app): the proof of a challenge under its key,
    which `proves` accepts, and nothing for another key, another path or no challenge."""

    async def healthz(request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    key = running_server.new_key()
    app = running_server.proving(Starlette(routes=[Route("/healthz", healthz), Route("/other", healthz)]), key)
    challenge = running_server.new_challenge()
    asked = {running_server.CHALLENGE_HEADER: challenge}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://server") as client:
        answer = (await client.get("/healthz", headers=asked)).headers.get(running_server.PROOF_HEADER)
        unasked = await client.get("/healthz")
        elsewhere = await client.get("/other", headers=asked)
    ours = running_server.RunningServer(url="http://server", pid=1, key=key)
    theirs = running_server.RunningServer(url="http://server", pid=1, key=running_server.new_key())
    assert running_server.proves(ours, challenge, answer)
    assert not running_server.proves(theirs, challenge, answer)
    assert not running_server.proves(ours, running_server.new_challenge(), answer)
    assert running_server.PROOF_HEADER not in unasked.headers and running_server.PROOF_HEADER not in elsewhere.headers


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_server_json_of_another_user_is_left_alone_by_the_server(tmp_path: Path) -> None:
    """A shared folder: another user's server.json is neither overwritten with the token nor removed."""
    chdb = tmp_path / "clickhouse"
    chdb.mkdir()
    path = chdb / running_server.FILE_NAME
    path.write_text("theirs")
    os.chown(path, 65534, 65534)
    settings = make_settings(clickhouse_url=f"chdb://{chdb}", agent_web_token="s3cret-token-value")
    with running_server.recorded(settings, "127.0.0.1", 8000, running_server.new_key()):
        during = path.read_text()
    assert during == "theirs" and path.read_text() == "theirs"
    assert [p.name for p in chdb.iterdir()] == [running_server.FILE_NAME]  # no temporary file left either
