"""The embedded engine, seen from the app: a confined child process (agent/db/engine_process.py)
reached over a socket. The app process never loads chdb itself.

- The child gets a scrubbed environment (no API keys or tokens) and confines itself with Landlock.
- Calls are multiplexed over one socket; cancelling a caller kills its query in the engine.
- If the child dies, callers get DatabaseUnavailable and the next call starts a new one.
- A call that outlives the engine's own time limit by a grace period is stuck in something the
  engine cannot interrupt (one huge function call): the child is restarted rather than left to
  hold a connection for minutes. That call fails as a timeout; the other calls in flight were
  innocent and are run once more on the new engine.
- chdb allows one engine process per data directory; an advisory lock file names the app process
  that holds the directory, so a second app gets a message a person can act on.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import itertools
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncGenerator
from contextlib import suppress
from pathlib import Path
from typing import Any

from agent.db import wire
from agent.db.access import RowFilters
from agent.db.backend import Backend, DatabaseUnavailable, EngineError, EngineRestarted, ReadStats, ResultTooLarge

log = logging.getLogger(__name__)
_LOCK_NAME = "agent.lock"
_START_TIMEOUT_S = 60.0  # for a small data folder; more for each table definition the engine reads first
_START_S_PER_MB = 30.0  # 366 tables of 111,000 columns (about 4.5 MB of definitions) took over 60 s
_START_S_PER_TABLE = 0.02
_KILL_TIMEOUT_S = 15.0
# What the engine process may inherit: nothing that names a secret.
_PASSED_ENV = ("PATH", "TZ", "LANG", "LC_ALL", "TMPDIR")

_process_lock = threading.Lock()
_claimed: set[Path] = set()


def start_timeout(path: Path) -> float:
    """How long the engine may take to start: it reads every table's definition before it answers, so
    the limit grows with them (a fixed 60 s failed on a folder of 366 tables and 111,000 columns)."""
    sizes = [f.stat().st_size for pattern in ("*.sql", "*/*.sql") for f in (path / "metadata").glob(pattern)]
    return _START_TIMEOUT_S + _START_S_PER_MB * sum(sizes) / 1_000_000 + _START_S_PER_TABLE * len(sizes)


def claim_data_dir(path: Path) -> None:
    """Hold `path` for this process, or fail naming the process that holds it."""
    path = path.resolve()
    with _process_lock:
        if path in _claimed:
            return
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / _LOCK_NAME, "a+")  # noqa: SIM115 - held for the life of the process
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise DatabaseUnavailable(
                f"The embedded ClickHouse data in {path} is in use by {holder}. Stop that process, "
                "or set CLICKHOUSE_URL to a ClickHouse server so several processes can share the data."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} ({_command_line()})\n")
        handle.flush()
        atexit.register(handle.close)
        _claimed.add(path)


def _command_line() -> str:
    try:
        raw = Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
    except OSError:
        return "unknown command"
    words = [Path(w).name if i == 0 else w for i, w in enumerate(raw.decode(errors="replace").split("\0")) if w]
    return " ".join(" ".join(words).split())[:200]


def engine_environment() -> dict[str, str]:
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # where the `agent` package lives
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class _Child:
    """One running engine process and the calls in flight to it."""

    def __init__(self, process: asyncio.subprocess.Process, reader: asyncio.StreamReader, writer: Any) -> None:
        self.process, self.reader, self.writer = process, reader, writer
        self.pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self.started: dict[int, float] = {}  # when each pending call was sent
        self.alive = True
        self.sandbox = ""
        self.read_task: asyncio.Task[None] | None = None
        self.watchdog: asyncio.Task[None] | None = None

    async def read_loop(self) -> None:
        try:
            while True:
                prefix = await self.reader.readexactly(wire.PREFIX_SIZE)
                header_len, payload_len = wire.decode_prefix(prefix)
                header = wire.decode_header(await self.reader.readexactly(header_len))
                payload = await self.reader.readexactly(payload_len)
                self.started.pop(header.get("id", -1), None)
                future = self.pending.pop(header.get("id", -1), None)
                if future is not None and not future.done():
                    future.set_result((header, payload))
        except (asyncio.IncompleteReadError, ConnectionError, wire.WireError) as exc:
            self.fail(f"the embedded ClickHouse engine stopped ({_exit_text(self.process, exc)})")

    def fail(self, reason: str, *, stuck: frozenset[int] = frozenset()) -> None:
        """Every call in flight fails. The calls in `stuck` are the reason the engine is being restarted;
        the others were innocent bystanders, and may be retried once on the next engine."""
        self.alive = False
        for request_id, future in self.pending.items():
            if future.done():
                continue
            if request_id in stuck:
                future.set_exception(EngineError(STUCK_ERROR))
            else:
                future.set_exception(EngineRestarted(reason) if stuck else DatabaseUnavailable(reason))
        self.pending.clear()
        self.started.clear()


def _access(access: RowFilters | None) -> dict[str, Any]:
    """A request's policy, as the engine process picks its connections by: its name and filters."""
    if access is None:
        return {}
    return {"policy": access.policy, "filters": [list(pair) for pair in access.filters]}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


# Read by the model (with the timeout hint of code 159) and by a person in the query's card.
STUCK_ERROR = (
    "Code: 159. DB::Exception: The statement ran past the time limit and could not be stopped, so the engine "
    "was restarted. Do not run it again; compute less in one function call. (TIMEOUT_EXCEEDED)"
)


def _exit_text(process: asyncio.subprocess.Process, exc: BaseException) -> str:
    if process.returncode is not None:
        return f"exit code {process.returncode}"
    return type(exc).__name__


class EmbeddedBackend(Backend):
    def __init__(
        self,
        path: Path,
        settings: dict[str, Any],
        *,
        pool_size: int = 4,
        sandbox: bool = True,
        stuck_grace_s: float = 15.0,
    ) -> None:
        self.path = path.resolve()
        self._stuck_after_s = float(settings.get("max_execution_time", 30)) + stuck_grace_s
        self._settings = settings
        self._pool_size = pool_size
        self._sandbox = sandbox
        self._child: _Child | None = None
        self._start_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def sandbox_status(self) -> str:
        return self._child.sandbox if self._child else "not started"

    async def _ensure_child(self) -> _Child:
        if self._closed:
            raise DatabaseUnavailable("The database connection is closed.")
        async with self._start_lock:
            if self._child is None or not self._child.alive:
                if self._child is not None:
                    await self._stop(self._child)
                self._child = await self._start()
            return self._child

    async def _start(self) -> _Child:
        claim_data_dir(self.path)
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent.db.engine_process",
                "--fd",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                env=engine_environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                cwd=str(self.path),
                # A group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) is the app's to
                # handle (it kills the queries, then stops the engine); it killed the engine mid-query with
                # a traceback on the person's terminal.
                process_group=0,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        child = _Child(process, reader, writer)
        config = {"path": str(self.path), "settings": self._settings, "pool_size": self._pool_size}
        writer.write(wire.encode({**config, "sandbox": self._sandbox}))
        try:
            header = await asyncio.wait_for(self._read_ready(reader), start_timeout(self.path))
        except (TimeoutError, asyncio.IncompleteReadError, wire.WireError) as exc:
            await self._stop(child)
            raise DatabaseUnavailable(
                f"The embedded ClickHouse engine did not start ({_exit_text(process, exc)})."
            ) from None
        if not header.get("ready"):
            await self._stop(child)
            raise DatabaseUnavailable(f"Could not open the embedded ClickHouse data in {self.path}: {header['error']}")
        child.sandbox = str(header.get("sandbox_text", ""))
        if not header.get("sandbox", {}).get("applied") and self._sandbox:
            log.warning("embedded engine is %s; only the statement check guards files and network", child.sandbox)
        child.read_task = asyncio.create_task(child.read_loop(), name="engine-reader")
        child.watchdog = asyncio.create_task(self._watch(child), name="engine-watchdog")
        return child

    async def _watch(self, child: _Child) -> None:
        """Restart the engine when a call outlives its time limit by the grace period: only that call
        fails (as a timeout); the others in flight are retried once on the new engine."""
        while child.alive:
            await asyncio.sleep(1)
            now = time.monotonic()
            stuck = frozenset(rid for rid, sent in child.started.items() if now - sent > self._stuck_after_s)
            if stuck:
                log.warning("a query outlived the engine's time limit and could not be killed; restarting the engine")
                child.fail("the embedded ClickHouse engine was restarted: a query would not stop", stuck=stuck)
                await self._stop(child, watchdog=False)
                return

    @staticmethod
    async def _read_ready(reader: asyncio.StreamReader) -> dict[str, Any]:
        header_len, payload_len = wire.decode_prefix(await reader.readexactly(wire.PREFIX_SIZE))
        header = wire.decode_header(await reader.readexactly(header_len))
        await reader.readexactly(payload_len)
        return header

    async def _call(self, request: dict[str, Any], *, on: _Child | None = None) -> tuple[dict[str, Any], bytes]:
        """One request to the engine; with `on`, only to that engine (a stream lives in one engine)."""
        child = await self._ensure_child()
        if on is not None and child is not on:
            raise EngineRestarted("the embedded ClickHouse engine was restarted while this result was being read")
        request_id = next(self._ids)
        future: asyncio.Future[tuple[dict[str, Any], bytes]] = asyncio.get_running_loop().create_future()
        child.pending[request_id] = future
        child.started[request_id] = time.monotonic()
        child.writer.write(wire.encode({**request, "id": request_id}))
        header, payload = await future
        if not header.get("ok"):
            if "too_large" in header:
                raise ResultTooLarge(int(request.get("max_bytes") or 0))
            raise EngineError(str(header.get("error", "unknown engine error")))
        return header, payload

    async def _call_retrying(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """A call interrupted by a restart that another statement caused is run once more."""
        try:
            return await self._call(request)
        except EngineRestarted:
            log.info("retrying a query interrupted by an engine restart")
            return await self._call(request)

    async def query(
        self,
        sql: str,
        fmt: str,
        tag: str,
        *,
        max_bytes: int | None = None,
        stats: ReadStats | None = None,
        access: RowFilters | None = None,
    ) -> bytes:
        request = {"op": "query", "sql": sql, "format": fmt, "tag": tag, "max_bytes": max_bytes, **_access(access)}
        task = asyncio.ensure_future(self._call_retrying(request))
        try:
            header, payload = await asyncio.shield(task)
            if stats is not None:
                stats.rows, stats.bytes = _count(header.get("rows_read")), _count(header.get("bytes_read"))
            return payload
        except asyncio.CancelledError:
            await self._kill_and_wait(tag, task)
            raise

    async def stream(
        self, sql: str, fmt: str, tag: str, *, access: RowFilters | None = None
    ) -> AsyncGenerator[bytes, None]:
        request = {"op": "open", "sql": sql, "format": fmt, "tag": tag, **_access(access)}
        header, _ = await self._call_retrying(request)
        stream_id, engine = header["stream"], self._child
        finished = False
        try:
            while True:
                task = asyncio.ensure_future(self._call({"op": "next", "stream": stream_id}, on=engine))
                try:
                    header, chunk = await asyncio.shield(task)
                except asyncio.CancelledError:
                    await self._kill_and_wait(tag, task)
                    raise
                if header.get("end"):
                    finished = True
                    return
                yield chunk
        finally:
            if not finished:
                with suppress(Exception):
                    await asyncio.shield(self._kill(tag))
            with suppress(Exception):
                await asyncio.shield(self._call({"op": "close", "stream": stream_id}, on=engine))

    async def _kill_and_wait(self, tag: str, task: asyncio.Future[Any]) -> None:
        with suppress(Exception):
            await asyncio.shield(self._kill(tag))
        await asyncio.wait([task], timeout=_KILL_TIMEOUT_S)
        if task.done() and not task.cancelled():
            task.exception()  # the engine's "query was cancelled": expected

    async def _kill(self, tag: str) -> None:
        await asyncio.wait_for(self._call({"op": "kill", "tag": tag}), _KILL_TIMEOUT_S)

    async def running(self) -> list[str]:
        header, _ = await self._call({"op": "running"})
        return [str(tag) for tag in header["tags"]]

    async def close(self) -> None:
        self._closed = True
        if self._child is not None:
            await self._stop(self._child)
            self._child = None

    @staticmethod
    async def _stop(child: _Child, *, watchdog: bool = True) -> None:
        child.fail("the embedded ClickHouse engine was stopped")
        if watchdog and child.watchdog is not None:
            child.watchdog.cancel()
            with suppress(BaseException):
                await child.watchdog
        with suppress(Exception):
            child.writer.close()
        if child.read_task is not None:
            child.read_task.cancel()
            with suppress(BaseException):
                await child.read_task
        if child.process.returncode is None:
            with suppress(ProcessLookupError):
                child.process.terminate()
            try:
                await asyncio.wait_for(child.process.wait(), 5)
            except TimeoutError:
                with suppress(ProcessLookupError):
                    child.process.kill()
                await child.process.wait()
