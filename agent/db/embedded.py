"""The embedded ClickHouse engine (chdb), read-only and limited, with killable queries.

chdb facts this module is built around (each is covered by tests/test_db_embedded.py):
- Settings in the connection string are per connection, so the agent's connections are opened
  with `readonly=1` and the limits, while a loader in the same process may write.
- One connection runs one query at a time; separate connections run in parallel.
- `StreamingResult.cancel()` does not interrupt a fetch that is blocked in the engine, but
  `KILL QUERY` from another connection does; queries are tagged with their id so it can find them.
- After a query fails at run time, the next query on that connection can return the failed
  query's (empty) result. The connection is drained with a sentinel query before reuse.
- One data directory per process; a second process gets an opaque error, so an advisory lock
  file names the process that holds the directory.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime as dt
import fcntl
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import chdb
import chdb._exceptions
from clickhouse_connect.driver import ctypes as cc_ctypes
from clickhouse_connect.driver.query import QueryContext
from clickhouse_connect.driver.transform import NativeTransform

from agent.db.database import Block, Database, DatabaseError, DatabaseUnavailable, QueryLimits

T = TypeVar("T")
# chdb raises two unrelated ChdbError classes (the package's and the streaming module's) and
# plain RuntimeError from its C layer.
_ENGINE_ERRORS = (chdb.ChdbError, chdb._exceptions.ChdbError, RuntimeError)
_KILL_WAIT_S = 10.0
_LOCK_NAME = "agent.lock"

_process_lock = threading.Lock()
_engine_path: Path | None = None
_lock_handle: Any = None

cc_ctypes.connect_c_modules()


def claim_data_dir(path: Path) -> None:
    """Hold `path` for this process, or fail naming the process that holds it."""
    global _engine_path, _lock_handle
    path = path.resolve()
    with _process_lock:
        if _engine_path == path:
            return
        if _engine_path is not None:
            raise DatabaseUnavailable(
                f"This process already uses the embedded ClickHouse data in {_engine_path}; chdb allows "
                f"one data directory per process, so {path} cannot be opened too."
            )
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
        _engine_path, _lock_handle = path, handle


def _command_line() -> str:
    try:
        raw = Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
    except OSError:
        return "unknown command"
    words = [Path(w).name if i == 0 else w for i, w in enumerate(raw.decode(errors="replace").split("\0")) if w]
    return " ".join(" ".join(words).split())[:200]


def open_connection(path: Path, settings: dict[str, Any] | None = None) -> Any:
    """A chdb connection on `path` (claimed for this process first)."""
    claim_data_dir(path)
    query = f"?{urlencode(settings)}" if settings else ""
    try:
        return chdb.connect(f"{path.resolve()}{query}")
    except Exception as exc:  # chdb raises plain RuntimeError/ChdbError with an opaque message
        raise DatabaseUnavailable(f"Could not open the embedded ClickHouse data in {path}: {exc}") from None


class _ByteSource:
    """The minimal source clickhouse-connect's Native reader pulls bytes from."""

    def __init__(self, data: bytes) -> None:
        self.gen = iter((data,))

    def close(self) -> None:
        self.gen = iter(())


def decode_native(data: bytes) -> Block:
    """Decode ClickHouse Native format with clickhouse-connect's reader, as the server backend does."""
    result: Any = NativeTransform.parse_response(cc_ctypes.RespBuffCls(_ByteSource(data)), QueryContext(use_none=True))
    return Block(
        columns=list(result.column_names),
        types=[t.name for t in result.column_types],
        rows=[list(row) for row in result.result_rows],
    )


class EmbeddedDatabase(Database):
    def __init__(self, path: Path, limits: QueryLimits, pool_size: int = 4) -> None:
        super().__init__(limits)
        self.path = path
        self._settings = limits.engine_settings()
        self._pool_size = pool_size
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        self._slots = asyncio.Semaphore(pool_size)
        self._executor = ThreadPoolExecutor(max_workers=pool_size + 2, thread_name_prefix="chdb")
        self._control: Any = None
        self._closed = False

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _blocking(self, fn: Callable[[], T], query_id: str) -> T:
        """Run a blocking engine call; if the caller is cancelled, kill the query and wait for it."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with suppress(Exception):
                await self._kill(query_id)
            await asyncio.wait([future], timeout=_KILL_WAIT_S)
            if future.done() and not future.cancelled():
                future.exception()  # the engine's "query was cancelled"; expected, not an error
            with suppress(Exception):
                await self._wait_until_gone(query_id)
            raise

    async def _control_connection(self) -> Any:
        if self._control is None:
            self._control = await self._run(lambda: open_connection(self.path, self._settings))
        return self._control

    async def _kill(self, query_id: str) -> None:
        control = await self._control_connection()
        await self._run(
            lambda: control.query(
                f"KILL QUERY WHERE query LIKE '%{query_id}%' AND NOT startsWith(query, 'KILL')", "CSV"
            )
        )

    async def _wait_until_gone(self, query_id: str) -> None:
        """A killed query can linger in system.processes briefly after its fetch returns."""
        deadline = time.monotonic() + _KILL_WAIT_S
        while query_id in await self.running_queries() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _acquire(self) -> Any:
        if self._closed:
            raise DatabaseUnavailable("The database connection is closed.")
        await self._slots.acquire()
        if not self._idle.empty():
            return self._idle.get_nowait()
        try:
            conn = await self._run(lambda: open_connection(self.path, self._settings))
        except BaseException:
            self._slots.release()
            raise
        return conn

    async def _release(self, conn: Any, failed: bool) -> None:
        try:
            if failed and not await self._run(lambda: _drain(conn)):
                with suppress(Exception):
                    await self._run(conn.close)
                return
            self._idle.put_nowait(conn)
        finally:
            self._slots.release()

    async def _stream(self, sql: str, query_id: str) -> AsyncIterator[Block]:
        conn = await self._acquire()
        # The leading tag lets KILL QUERY find this query in system.processes.
        tagged = f"/* {query_id} */ {sql}"
        stream = None
        failed = False
        yielded = False
        try:
            try:
                stream = await self._blocking(lambda: conn.send_query(tagged, "Native"), query_id)
            except _ENGINE_ERRORS as exc:
                if "Streaming query is not supported" not in str(exc):
                    raise
                # SHOW and friends cannot stream; their results are small metadata lists, and the
                # engine's max_result_rows still caps them.
                raw = await self._blocking(lambda: conn.query(tagged, "Native"), query_id)
                yield decode_native(raw.bytes())
                return
            exact_types: list[str] | None = None
            while True:
                chunk = await self._blocking(stream.fetch, query_id)
                if chunk is None:
                    break
                block = decode_native(chunk.bytes())
                if exact_types is None:
                    exact_types = await self._exact_types(sql, block.types, query_id)
                yielded = True
                yield _localize(block, exact_types)
            if not yielded:
                yield await self._empty_block(sql, query_id)
        except _ENGINE_ERRORS as exc:
            failed = True
            raise DatabaseError(str(exc)) from None
        except BaseException:
            failed = True
            raise
        finally:
            if stream is not None:
                with suppress(Exception):
                    await self._run(stream.cancel)
            await self._release(conn, failed)

    async def _describe(self, sql: str, query_id: str) -> list[list[Any]]:
        """`DESCRIBE (sql)`: the result's exact columns and types, without running the query.

        It runs on the control connection: a second query on a connection with an open stream
        breaks that stream."""
        if not sql.lstrip()[:6].upper().startswith(("SELECT", "WITH", "(")):
            return []
        control = await self._control_connection()
        try:
            described = await self._blocking(lambda: control.query(f"DESCRIBE ({sql})", "Native"), query_id)
        except _ENGINE_ERRORS:
            return []
        return decode_native(described.bytes()).rows

    async def _empty_block(self, sql: str, query_id: str) -> Block:
        rows = await self._describe(sql, query_id)
        return Block([r[0] for r in rows], [r[1] for r in rows], [])

    async def _exact_types(self, sql: str, types: list[str], query_id: str) -> list[str]:
        """chdb's Native header drops a DateTime column's time zone; DESCRIBE still has it."""
        if not any(t.startswith(("DateTime", "Nullable(DateTime", "LowCardinality(Nullable(DateTime")) for t in types):
            return types
        described = [row[1] for row in await self._describe(sql, query_id)]
        return described if len(described) == len(types) else types

    async def ping(self) -> None:
        rows = [row async for block in self._stream("SELECT 1", f"agent-ping-{uuid.uuid4().hex}") for row in block.rows]
        if rows != [[1]]:
            raise DatabaseUnavailable("The embedded ClickHouse engine did not answer SELECT 1.")

    async def running_queries(self) -> list[str]:
        control = await self._control_connection()
        raw = await self._run(
            lambda: control.query(
                "SELECT query FROM system.processes WHERE query LIKE '%/* agent-%' "
                "AND NOT startsWith(query, 'SELECT query FROM system.processes')",
                "Native",
            )
        )
        found = []
        for (query,) in decode_native(raw.bytes()).rows:
            tag = query.split("/* ", 1)[-1].split(" */", 1)[0]
            found.append(tag)
        return found

    async def close(self) -> None:
        self._closed = True
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            with suppress(Exception):
                await self._run(conn.close)
        if self._control is not None:
            with suppress(Exception):
                await self._run(self._control.close)
            self._control = None
        self._executor.shutdown(wait=False, cancel_futures=True)


_ZONE = re.compile(r"DateTime(?:64)?\((?:\d+,\s*)?'([^']+)'\)")


def _localize(block: Block, exact_types: list[str]) -> Block:
    """Give naive UTC datetimes the time zone their column declares."""
    zones = {i: ZoneInfo(m.group(1)) for i, t in enumerate(exact_types) if (m := _ZONE.search(t))}
    if not zones:
        return block
    rows = [
        [
            v.replace(tzinfo=dt.UTC).astimezone(zones[i]) if i in zones and isinstance(v, dt.datetime) else v
            for i, v in enumerate(row)
        ]
        for row in block.rows
    ]
    return Block(block.columns, exact_types, rows)


def _drain(conn: Any) -> bool:
    """Clear a stale result left by a failed query; True when the connection answers correctly."""
    token = uuid.uuid4().hex
    for _ in range(3):
        try:
            if token in str(conn.query(f"SELECT '{token}'", "CSV")):
                return True
        except Exception:
            continue
    return False
