"""The embedded ClickHouse engine (chdb) in a process of its own, confined before it runs any SQL.

The app talks to it over a socket (agent/db/wire.py frames). It starts with a scrubbed environment
and confines itself with Landlock (agent/db/sandbox.py) *before* chdb is loaded: Landlock binds the
thread that applies it and the threads it creates later, so every engine thread is confined. It can
read its data directory and its own code, write only its scratch folder, execute nothing and open
no TCP connection. So SQL that got past the statement check still cannot read the app's secrets or
files, write anything that lasts, or reach the network.

chdb facts this module is built around:
- Settings in the connection string are per connection: pool connections carry readonly=1 and the
  limits.
- One connection runs one query at a time; separate connections run in parallel.
- `StreamingResult.cancel()` does not interrupt a fetch blocked in the engine; `KILL QUERY` from
  another connection does. Queries are tagged with a leading comment so the kill can find them.
- After a query fails at run time, the next query on that connection can return the failed query's
  result. A connection is drained with a sentinel query before reuse.
- A policy's row filters (`additional_table_filters`, agent/db/access.py) go in the connection string
  too, before `readonly=1`, which then refuses any `SETTINGS` in a query that would change them. So
  each policy has a pool of its own, made when its first query arrives, reused, and the least recently
  used idle one closed past MAX_POLICY_POOLS.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from agent.db import sandbox, wire
from agent.db.access import RowFilters, filtered_settings
from agent.db.backend import CHUNK_BYTES, bounded_error

chdb: Any = None  # loaded after the sandbox is in place (see load_engine)

_KILL_WAIT_S = 10.0
MAX_POLICY_POOLS = 16  # pools of connections under a policy's filters, kept for reuse


class EngineError(Exception):
    pass


class TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


class _Jobs:
    """What each query tag is doing, so a kill can reach a query that has not started yet.

    A tag is registered when its request arrives (before it waits for a connection). A killed tag
    never starts; calls already running are killed until they have ended. A tag is forgotten when
    its last call leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._cancelled: set[str] = set()

    def arrive(self, tag: str) -> None:
        with self._lock:
            self._arrived[tag] = self._arrived.get(tag, 0) + 1

    def start(self, tag: str) -> None:
        with self._lock:
            if tag in self._cancelled:
                raise EngineError("Code: 394. DB::Exception: Query was cancelled. (QUERY_WAS_CANCELLED)")
            self._running[tag] = self._running.get(tag, 0) + 1

    def leave(self, tag: str, started: bool) -> None:
        with self._lock:
            if started:
                _decrement(self._running, tag)
            if not _decrement(self._arrived, tag):
                self._cancelled.discard(tag)

    def cancel(self, tag: str) -> bool:
        """Mark `tag` cancelled; True while calls of it are waiting or running."""
        with self._lock:
            if tag in self._arrived:
                self._cancelled.add(tag)
            return tag in self._arrived

    def running(self, tag: str) -> bool:
        with self._lock:
            return tag in self._running


def _decrement(counts: dict[str, int], tag: str) -> int:
    left = counts.get(tag, 1) - 1
    if left > 0:
        counts[tag] = left
    else:
        counts.pop(tag, None)
    return max(left, 0)


class _Pool:
    """Connections that share one connection string (the agent's settings, and a policy's filters),
    made as they are first needed, at most `size` of them."""

    def __init__(self, dsn: str, size: int) -> None:
        self.dsn = dsn
        self._size = size
        self._idle: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._made = 0
        self.in_use = 0
        self.closed = False

    def get(self) -> Any:
        with self._lock:
            self.in_use += 1
            make = self._idle.empty() and self._made < self._size
            if make:
                self._made += 1
        if make:
            try:
                return chdb.connect(self.dsn)
            except Exception:
                with self._lock:
                    self._made, self.in_use = self._made - 1, self.in_use - 1
                raise
        return self._idle.get()

    def put(self, conn: Any) -> None:
        with self._lock:
            self.in_use -= 1
            closed = self.closed
        if closed:  # evicted while this connection was out: it is not kept
            with suppress(Exception):
                conn.close()
            return
        self._idle.put(conn)

    def close_idle(self) -> None:
        self.closed = True
        while not self._idle.empty():
            with suppress(Exception):
                self._idle.get_nowait().close()


def _connection_string(path: Path, settings: dict[str, Any]) -> str:
    return f"{path}?{urlencode(settings)}" if settings else str(path)


class Engine:
    def __init__(self, path: Path, settings: dict[str, Any], pool_size: int) -> None:
        self.path = path
        _require_database(path, settings.get("database"))
        self._database = settings.get("database")
        self._settings = settings
        self._pool_size = pool_size
        dsn = _connection_string(path, settings)
        self._pool = _Pool(dsn, pool_size)
        self._policy_pools: OrderedDict[RowFilters, _Pool] = OrderedDict()
        self._pools_lock = threading.Lock()
        self._control = chdb.connect(dsn)
        self._control_lock = threading.Lock()
        self._streams: dict[str, tuple[_Pool, Any, Any, str]] = {}
        self._held: dict[str, memoryview] = {}  # the rest of a block larger than CHUNK_BYTES
        self._streams_lock = threading.Lock()
        self.jobs = _Jobs()

    def pool(self, access: RowFilters | None) -> _Pool:
        """The connections for a policy's filters (the agent's own without one), made on first use."""
        if access is None:
            return self._pool
        with self._pools_lock:
            pool = self._policy_pools.get(access)
            if pool is None:
                pool = _Pool(_connection_string(self.path, filtered_settings(self._settings, access)), self._pool_size)
                self._policy_pools[access] = pool
                self._evict_idle_pools()
            self._policy_pools.move_to_end(access)
            return pool

    def _evict_idle_pools(self) -> None:
        """Past MAX_POLICY_POOLS, close the least recently used pools that no query is using."""
        for key in list(self._policy_pools):
            if len(self._policy_pools) <= MAX_POLICY_POOLS:
                return
            if self._policy_pools[key].in_use == 0:
                self._policy_pools.pop(key).close_idle()

    def policy_pools(self) -> int:
        with self._pools_lock:
            return len(self._policy_pools)

    # --- queries (the caller registered the tag with jobs.arrive) ---

    def query(
        self, sql: str, fmt: str, tag: str, max_bytes: int | None = None, access: RowFilters | None = None
    ) -> tuple[bytes, dict[str, int]]:
        """The whole output, or TooLarge past `max_bytes` (the app never receives it), and what the query
        read from storage (chdb's own statistics), on a connection under `access`'s filters."""
        started = False
        pool = self.pool(access)
        try:
            conn = pool.get()
            failed = False
            try:
                self.jobs.start(tag)
                started = True
                result = conn.query(_tagged(sql, tag), fmt)
                if max_bytes is not None and result.size() > max_bytes:
                    raise TooLarge(result.size())
                read = {"rows_read": int(result.storage_rows_read()), "bytes_read": int(result.storage_bytes_read())}
                return bytes(result.bytes()), read
            except TooLarge:
                raise
            except Exception as exc:
                failed = True
                raise EngineError(str(exc)) from None
            finally:
                self._release(pool, conn, failed, sql)
        finally:
            self.jobs.leave(tag, started)

    def open_stream(self, sql: str, fmt: str, tag: str, access: RowFilters | None = None) -> str:
        """The tag stays active until the stream is closed."""
        pool = self.pool(access)
        conn = pool.get()
        started = False
        try:
            self.jobs.start(tag)
            started = True
            stream = conn.send_query(_tagged(sql, tag), fmt)
        except Exception as exc:
            self._release(pool, conn, True, sql)
            self.jobs.leave(tag, started)
            raise EngineError(str(exc)) from None
        stream_id = uuid.uuid4().hex
        with self._streams_lock:
            self._streams[stream_id] = (pool, conn, stream, tag)
        return stream_id

    def next_chunk(self, stream_id: str) -> bytes | None:
        """The next piece of the stream's output: a block the engine produced, in pieces of at most
        CHUNK_BYTES, so the app never holds one huge block whole."""
        with self._streams_lock:
            _, _, stream, _ = self._streams[stream_id]
            held = self._held.get(stream_id)
        if held:
            piece, rest = held[:CHUNK_BYTES], held[CHUNK_BYTES:]
            with self._streams_lock:
                self._held[stream_id] = rest
            return bytes(piece)
        try:
            chunk = stream.fetch()
        except Exception as exc:
            self.close_stream(stream_id, failed=True)
            raise EngineError(str(exc)) from None
        if chunk is None:
            return None
        data = memoryview(chunk.bytes())
        if len(data) > CHUNK_BYTES:
            with self._streams_lock:
                self._held[stream_id] = data[CHUNK_BYTES:]
            data = data[:CHUNK_BYTES]
        return bytes(data)

    def close_stream(self, stream_id: str, failed: bool = False) -> None:
        with self._streams_lock:
            entry = self._streams.pop(stream_id, None)
            self._held.pop(stream_id, None)
        if entry is None:
            return
        pool, conn, stream, tag = entry
        with suppress(Exception):
            stream.cancel()
        self._release(pool, conn, failed, "use")  # a stream's SQL is not kept: check the database anyway
        self.jobs.leave(tag, started=True)

    def _release(self, pool: _Pool, conn: Any, failed: bool, sql: str = "") -> None:
        """Back to its pool, answering correctly and on its own database: `USE` is allowed under
        readonly=1, and the statement check resolves unqualified names against that database."""
        if (failed and not _drain(conn)) or not self._on_its_database(conn, sql):
            with suppress(Exception):
                conn.close()
            conn = chdb.connect(pool.dsn)
        pool.put(conn)

    def _on_its_database(self, conn: Any, sql: str) -> bool:
        if "use" not in sql.lower():  # a statement without the word cannot have switched it
            return True
        with suppress(Exception):
            current = conn.query("SELECT currentDatabase()", "TSVRaw").bytes().decode().strip()
            return current == (self._database or "default")
        return False

    # --- control ---

    def kill(self, tag: str) -> None:
        """Stop every call of `tag`: those waiting never start; running ones are killed, again until
        they have ended (a call can start between a KILL and its check)."""
        self.jobs.cancel(tag)
        deadline = time.monotonic() + _KILL_WAIT_S
        while time.monotonic() < deadline and (self.jobs.running(tag) or tag in self.running()):
            self._control_query(
                f"KILL QUERY WHERE query LIKE '%{_safe_tag(tag)}%' AND NOT startsWith(query, 'KILL') ASYNC"
            )
            time.sleep(0.02)

    def running(self) -> list[str]:
        raw = self._control_query(
            "SELECT query FROM system.processes WHERE startsWith(query, '/* agent-')", "JSONCompactColumns"
        )
        columns = json.loads(raw) if raw.strip() else []
        queries = columns[0] if columns else []
        return [q[3:].split(" */", 1)[0] for q in queries]

    def _control_query(self, sql: str, fmt: str = "CSV") -> bytes:
        with self._control_lock:
            try:
                return bytes(self._control.query(sql, fmt).bytes())
            except Exception as exc:
                raise EngineError(str(exc)) from None


def _request_access(request: dict[str, Any]) -> RowFilters | None:
    """The policy a request runs under, as the app sent it (agent/db/embedded.py)."""
    if "filters" not in request:
        return None
    filters = tuple((str(table), str(condition)) for table, condition in request["filters"])
    return RowFilters(str(request["policy"]), filters)


def _require_database(path: Path, database: str | None) -> None:
    """chdb fails to open a connection whose default database is missing, with an opaque message."""
    if not database:
        return
    probe = chdb.connect(str(path))
    try:
        exists = probe.query(f"EXISTS DATABASE `{database.replace('`', '')}`", "CSV").bytes().strip() == b"1"
    finally:
        probe.close()
    if not exists:
        raise EngineError(
            f"the database {database} does not exist there; load the demo data with `agent demo load`, "
            "or set CLICKHOUSE_DATABASES to the databases you have"
        )


def _tagged(sql: str, tag: str) -> str:
    # The tag leads so system.processes shows it; the newline ends the comment's line for good measure.
    return f"/* {_safe_tag(tag)} */\n{sql}"


def _safe_tag(tag: str) -> str:
    if not tag.replace("-", "").isalnum():
        raise EngineError("bad query tag")
    return tag


def _drain(conn: Any) -> bool:
    """Clear a stale result left by a failed query; True when the connection answers correctly."""
    token = uuid.uuid4().hex
    for _ in range(3):
        with suppress(Exception):
            if token in str(conn.query(f"SELECT '{token}'", "CSV")):
                return True
    return False


# --- serving the app ---


class Server:
    def __init__(self, sock: socket.socket, engine: Engine, workers: int) -> None:
        self._sock = sock
        self._engine = engine
        self._send_lock = threading.Lock()
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engine")
        # Kills must get through while every worker waits for a connection.
        self._control = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engine-control")

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        frame = wire.encode(header, payload)
        with self._send_lock:
            self._sock.sendall(frame)

    def serve(self) -> None:
        while True:
            try:
                header, _ = wire.read_frame_blocking(self._sock)
            except (wire.WireError, OSError):
                return  # the app went away; exit with it
            if header.get("op") in ("query", "open") and isinstance(header.get("tag"), str):
                self._engine.jobs.arrive(header["tag"])  # before it waits, so a kill can find it
            pool = self._control if header.get("op") in ("kill", "running") else self._workers
            pool.submit(self._handle, header)

    def _handle(self, request: dict[str, Any]) -> None:
        request_id = request.get("id")
        try:
            header, payload = self._dispatch(request)
            self.send({"id": request_id, "ok": True, **header}, payload)
        except TooLarge as exc:
            self.send({"id": request_id, "ok": False, "too_large": exc.size, "error": "output too large"})
        except EngineError as exc:
            self.send({"id": request_id, "ok": False, "error": bounded_error(str(exc))})
        except Exception as exc:  # a bug here must answer, not hang the caller
            self.send({"id": request_id, "ok": False, "error": bounded_error(f"engine process error: {exc!r}")})

    def _dispatch(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        op = request.get("op")
        engine = self._engine
        if op == "query":
            sql, fmt, tag, access = request["sql"], request["format"], request["tag"], _request_access(request)
            payload, read = engine.query(sql, fmt, tag, request.get("max_bytes"), access)
            return read, payload
        if op == "open":
            access = _request_access(request)
            return {"stream": engine.open_stream(request["sql"], request["format"], request["tag"], access)}, b""
        if op == "pools":
            return {"policy_pools": engine.policy_pools()}, b""
        if op == "next":
            chunk = engine.next_chunk(request["stream"])
            return {"end": chunk is None}, chunk or b""
        if op == "close":
            engine.close_stream(request["stream"])
            return {}, b""
        if op == "kill":
            engine.kill(request["tag"])
            return {}, b""
        if op == "running":
            return {"tags": engine.running()}, b""
        raise EngineError(f"unknown operation {op!r}")


def sandbox_paths(data_dir: Path) -> tuple[list[str], list[str]]:
    """What the confined engine may read and write. chdb reads its own /proc/self/maps (thread
    stacks) and cgroup limits; it writes its status file and scratch folder (also its TMPDIR)."""
    paths = sysconfig.get_paths()
    read = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], str(Path(__file__).parents[1])}
    read |= {str(data_dir), "/dev/urandom", f"/proc/{os.getpid()}/maps", "/sys/fs/cgroup"}
    # What chdb's allocator (jemalloc) reads as the library loads: refused, it went on with values it
    # never set and crashed the engine as it started, depending on the process's memory layout.
    read |= {f"/proc/{os.getpid()}/auxv", "/proc/sys/vm/overcommit_memory", "/sys/kernel/mm/transparent_hugepage"}
    write = [str(data_dir / "tmp"), str(data_dir / "status"), "/dev/null"]
    return sorted(read), write


def initialize(data_dir: Path) -> None:
    """A new data directory gets its layout from a short, unconfined chdb process of its own (the
    confined engine can write nothing but its scratch folder)."""
    if (data_dir / "metadata").is_dir() and (data_dir / "status").exists():
        return
    code = "import sys, chdb; chdb.connect(sys.argv[1]).close()"
    done = subprocess.run([sys.executable, "-c", code, str(data_dir)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise EngineError(f"could not create the engine's data directory: {done.stderr.strip()[-300:]}")


def load_engine() -> None:
    global chdb
    import chdb as loaded

    chdb = loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The agent's embedded ClickHouse engine (started by the app).")
    parser.add_argument("--fd", type=int, required=True, help="socket to serve on")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    config, _ = wire.read_frame_blocking(sock)
    data_dir = Path(config["path"])
    try:
        (data_dir / "tmp").mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = str(data_dir / "tmp")  # chdb makes a scratch server there on import
        initialize(data_dir)
        (data_dir / "status").touch()  # chdb rewrites it at start; a Landlock rule needs it to exist
        status = sandbox.SandboxStatus(False, 0, False, "disabled by the app", filter_reason="disabled by the app")
        if config.get("sandbox", True):
            read, write = sandbox_paths(data_dir)
            status = sandbox.confine(read=read, write=write)  # before any engine thread exists
        load_engine()
        engine = Engine(data_dir, config["settings"], int(config["pool_size"]))
    except Exception as exc:
        sock.sendall(wire.encode({"ready": False, "error": str(exc)}))
        return 1
    server = Server(sock, engine, workers=int(config["pool_size"]) * 2 + 4)
    server.send({"ready": True, "pid": os.getpid(), "sandbox": status.__dict__, "sandbox_text": status.describe()})
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
