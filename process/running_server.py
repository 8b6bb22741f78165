"""The server that holds the embedded data, as another command in another terminal finds it.

chdb allows one engine process per data directory (agent/db/embedded.py holds its lock), so while
`agent web` or `make demo` serves, `agent ask` cannot open the data itself. The server writes its
address (and its web token, if any) in `server.json` beside the lock, readable by this user only; a
command finds it there while the lock is held, and asks the server over its HTTP API instead. A file
left by a server that was killed is ignored: nobody holds the lock then.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.config import Settings

FILE_NAME = "server.json"
LOCK_NAME = "agent.lock"  # agent/db/embedded.py's lock file


@dataclass(frozen=True)
class RunningServer:
    url: str
    pid: int
    token: str | None = None


def local_url(host: str, port: int) -> str:
    """Where a command on this machine reaches a server listening on `host`."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextlib.contextmanager
def recorded(settings: Settings, host: str, port: int) -> Iterator[None]:
    """While serving the embedded data: its address beside the lock, removed when the server stops."""
    if not settings.embedded:
        yield
        return
    path = settings.chdb_path / FILE_NAME
    token = settings.agent_web_token.get_secret_value() if settings.agent_web_token else None
    record = {"url": local_url(host, port), "pid": os.getpid(), "token": token}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token: this user only
    with os.fdopen(descriptor, "w") as handle:
        json.dump(record, handle)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if _read(path) == record:  # not another server's, written since
                path.unlink()


def find(settings: Settings) -> RunningServer | None:
    """The server holding the embedded data now, if one recorded itself there."""
    if not settings.embedded:
        return None
    path = settings.chdb_path / FILE_NAME
    record = _read(path)
    if record is None or not _lock_held(settings.chdb_path / LOCK_NAME):
        return None
    url, pid, token = record.get("url"), record.get("pid"), record.get("token")
    if not isinstance(url, str) or not isinstance(pid, int) or not isinstance(token, str | None):
        return None
    return RunningServer(url=url, pid=pid, token=token or None)


def _read(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _lock_held(lock: Path) -> bool:
    """True when another process holds the data directory's lock (a shared probe, let go at once)."""
    try:
        handle = open(lock)  # noqa: SIM115 - closed below
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
