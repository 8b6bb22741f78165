"""The server that holds the embedded data, as another command in another terminal finds it.

chdb allows one engine process per data directory (agent/db/embedded.py holds its lock and writes its
pid in it), so while `agent web` or `make demo` serves, `agent ask` cannot open the data itself. The
server writes its address, its web token (if any) and a random key in `server.json` beside the lock; a
command asks the server over its HTTP API instead.

A record is a secret that can go stale (a killed server leaves it; its port may be someone else's now), so
it is trusted only when all of these hold: the file is a regular file of this user that no one else can
read; the lock is held, by the very pid the record names (the lock file says who holds it), and that pid is
alive; and, before the token is sent, the listener proves it knows the record's key (an HMAC of a fresh
challenge, on the unauthenticated /healthz). The file is written to a fresh 0600 temporary file and
renamed over, so a file or symlink already there never keeps its mode or redirects the token.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.config import Settings

log = logging.getLogger(__name__)
FILE_NAME = "server.json"
LOCK_NAME = "agent.lock"  # agent/db/embedded.py's lock file: "process <pid> (<command>)"
CHALLENGE_HEADER = "x-agent-challenge"
PROOF_HEADER = "x-agent-proof"
_CHALLENGE = re.compile(r"[0-9a-f]{32,128}")
_HOLDER = re.compile(r"process (\d+)\b")
_MAX_BYTES = 64 * 1024  # a record is a few hundred bytes


@dataclass(frozen=True)
class RunningServer:
    url: str
    pid: int
    token: str | None = None
    key: str = ""  # what the server proves it knows (see `proof`)


def local_url(host: str, port: int) -> str:
    """Where a command on this machine reaches a server listening on `host`."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def new_key() -> str:
    return secrets.token_hex(32)


def new_challenge() -> str:
    return secrets.token_hex(32)


def proof(key: str, challenge: str) -> str:
    return hmac.new(key.encode(), b"agent-server-proof:" + challenge.encode(), hashlib.sha256).hexdigest()


def proves(server: RunningServer, challenge: str, answer: str | None) -> bool:
    """True when `answer` is the proof of `challenge` under the record's key (compared in constant time)."""
    if not server.key or answer is None:
        return False
    return hmac.compare_digest(proof(server.key, challenge).encode(), answer.encode(errors="replace"))


def proving(app: ASGIApp, key: str) -> ASGIApp:
    """`app`, whose /healthz answers a challenge header with its proof: a command finding server.json learns
    that this listener wrote it before it sends the token (a stale record's port may be anyone's now)."""

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        challenge = _challenge_of(scope)
        if challenge is None:
            await app(scope, receive, send)
            return

        async def send_with_proof(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (PROOF_HEADER.encode(), proof(key, challenge).encode())]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_proof)

    return answer


def _challenge_of(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope.get("path") != "/healthz":
        return None
    for name, value in scope.get("headers", []):
        if name.lower() == CHALLENGE_HEADER.encode():
            text = value.decode("latin-1")
            return text if _CHALLENGE.fullmatch(text) else None
    return None


@contextlib.contextmanager
def recorded(settings: Settings, host: str, port: int, key: str) -> Iterator[None]:
    """While serving the embedded data: its address beside the lock, removed when the server stops."""
    if not settings.embedded:
        yield
        return
    path = settings.chdb_path / FILE_NAME
    token = settings.agent_web_token.get_secret_value() if settings.agent_web_token else None
    record = {"url": local_url(host, port), "pid": os.getpid(), "token": token, "key": key}
    written = _write(path, record)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if written and _read(path) == record:  # not another server's, written since
                path.unlink()


def _write(path: Path, record: dict[str, object]) -> bool:
    """Write `record` to a new 0600 file renamed over `path` (a symlink there is replaced, not followed).
    A server.json of another user is left alone (the folder is shared): False, and `agent ask` won't find us."""
    with contextlib.suppress(FileNotFoundError):
        owner = path.lstat().st_uid
        if owner != os.getuid():
            log.warning(
                "%s belongs to uid %d, not this user: left alone; `agent ask` will not find this server", path, owner
            )
            return False
    temporary = path.with_name(f".{FILE_NAME}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    descriptor = os.open(temporary, flags, 0o600)  # the token: this user only, whatever the umask
    try:
        with os.fdopen(descriptor, "w") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return True


def find(settings: Settings) -> RunningServer | None:
    """The server holding the embedded data now, if it recorded itself there and the record can be trusted
    (see the module's docstring; the listener's proof is `proves`, asked before the token is sent)."""
    if not settings.embedded:
        return None
    record = _read(settings.chdb_path / FILE_NAME)
    if record is None:
        return None
    url, pid, token, key = record.get("url"), record.get("pid"), record.get("token"), record.get("key")
    if not isinstance(url, str) or not isinstance(pid, int) or not isinstance(token, str | None):
        return None
    if not isinstance(key, str) or not key or _lock_holder(settings.chdb_path / LOCK_NAME) != pid or not _alive(pid):
        return None
    return RunningServer(url=url, pid=pid, token=token or None, key=key)


def _read(path: Path) -> dict[str, object] | None:
    """The record, if `path` is a regular file (not a symlink) of this user that no one else can read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o077:
            return None
        try:
            record = json.loads(handle.read(_MAX_BYTES))
        except (OSError, ValueError):
            return None
    return record if isinstance(record, dict) else None


def _lock_holder(lock: Path) -> int | None:
    """The pid the lock file names, when a process holds the lock (a shared probe, let go at once)."""
    try:
        handle = open(lock)  # noqa: SIM115 - closed below
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            named = _HOLDER.match(handle.read(512))
            return int(named.group(1)) if named else None
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def _alive(pid: int) -> bool:
    """True when `pid` is a live process of this user (a signal 0 reaches it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OverflowError):
        return False
    return True
