"""A fake ClickHouse server for tests: ClickHouse's HTTP interface, as clickhouse-connect uses it,
served over the embedded engine (chdb) in a process of its own, on a data directory of its own.
tests/fakes/clickhouse_engine.py runs the queries and keeps users, settings profiles and grants;
tests/fakes/clickhouse_response.py writes the responses.

    with FakeClickHouse(data_dir).start() as server:  # default_users(): agent and admin
        database = open_database(make_settings(clickhouse_url=server.url("agent", "nycflights13")))

or `python -m tests.fakes.clickhouse_http --data DIR --config FILE --port 0`, which prints `port N`.

What it does as ClickHouse's HTTP handler does (src/Server/HTTPHandler.cpp and what it calls):
- GET, POST or HEAD `/` with the query in `query=`, in the body, or both (`query`, a newline, the
  body). A GET runs with readonly=2 for a user who is not read-only. A POST needs Content-Length or
  chunked transfer (411). A gzip/deflate/zstd/lz4 Content-Encoding of the body is undone.
  `/ping`, `/replicas_status` and `GET /` without a query answer `Ok.\n`; any other path is a 404.
- Credentials from X-ClickHouse-User/X-ClickHouse-Key, HTTP Basic, or `user`/`password`, else the
  user `default`; mixing them, or a wrong password, is 516 (HTTP 403).
- Reserved parameters (`query_id` or X-ClickHouse-Query-Id, `session_id`, `session_check`,
  `close_session`, `wait_end_of_query`, `buffer_size`, `client_protocol_version`, ...), `database`
  and `default_format` (or X-ClickHouse-Database and X-ClickHouse-Format), `param_*` query parameters.
  Every other parameter is a setting change, checked against the user's profile (see the engine).
  A query_id that is already running is 216.
- Responses carry X-ClickHouse-Server-Display-Name, X-ClickHouse-Query-Id, X-ClickHouse-Format (for a
  statement with a result), X-ClickHouse-Timezone, X-ClickHouse-Exception-Tag, X-ClickHouse-Summary
  (as of when the headers go out), a Content-Type per format family; chunked transfer, keep-alive.
  With enable_http_compression=1 (the default) and an Accept-Encoding it can serve, the body is
  compressed in the server's order of preference (zstd, lz4, gzip, deflate); clickhouse-connect's raw
  queries ask for identity and get it plain, its query() gets zstd.
- The first max(buffer_size, 1 MiB) bytes of output are held back, all of it with
  wait_end_of_query=1, so an error until then is a proper HTTP error: the status the server maps the
  code to (400, 403, 404, 408, 500, 501, ...), X-ClickHouse-Exception-Code, and the text
  `Code: N. DB::Exception: ... (NAME) (version V (official build))`. After that an error is written
  into the body between `__exception__` markers with the response's exception tag, and the chunked
  body is broken off without its last chunk (ClickHouse 25.11+).
- send_progress_in_http_headers=1: X-ClickHouse-Progress headers every
  http_headers_progress_interval_ms while nothing else was sent; an error after them keeps status
  200 and adds X-ClickHouse-Exception-Code to the headers, as the server does.
- A client that hangs up has its query killed when readonly > 0 and
  cancel_http_readonly_queries_on_client_close=1; one that hangs up while the body streams, always.

Where it differs from a server:
- `client_protocol_version` is ignored: Native output is protocol 0, so clickhouse-connect's probe
  fails and it falls back to protocol 0, as it does behind CHProxy.
- `compress=1`/`decompress=1` (ClickHouse's block compression) and multipart/form-data (external
  tables, form-encoded parameters) are 501 NOT_IMPLEMENTED. No br (unless brotli is installed),
  snappy, xz or bz2 response encoding: a client offering only those gets the body plain.
- A request body must be UTF-8 (chdb takes the query as text): binary insert data (Native,
  RowBinary, as clickhouse-connect's insert() sends) that is not valid UTF-8 is 501.
- Sessions keep no state between requests (SET, temporary tables), only the one-request-at-a-time
  lock (373) and session_check (372); they never expire.
- chdb streams SELECTs only, and only formats that are a concatenation of per-block output (TSV,
  CSV, Native, RowBinary, *EachRow, ...); anything else (JSON, JSONCompact, Pretty, *WithNames,
  Parquet, DESCRIBE, SHOW, ...) comes in one piece and so never fails mid-body. chdb can drop blocks
  it produced when the query fails before they were fetched, so an error right after the first
  block may still be a proper HTTP error where a server had sent the block.
- X-ClickHouse-Summary carries what chdb's results report (rows and bytes read and returned), with
  total_rows_to_read 0; X-ClickHouse-Progress what system.processes shows. Content-Type is by
  format family.
- Not there: HTTPS, quotas, roles (`role` is ignored), `stacktrace`, SSL-certificate and Kerberos
  authentication (516), OPTIONS/CORS headers, /play, /dashboard, /binary, http_handlers rules, an
  idle keep-alive timeout other than 30 s. HTTP/1.0 clients get an unchunked body and a closed
  connection.
- The process confines itself with Landlock (agent/db/sandbox.py) after start-up, as the embedded
  engine does: no file outside its data directory and Python's own, no TCP connection out.
"""

from __future__ import annotations

import argparse
import base64
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, quote

from tests.fakes.clickhouse_engine import ClickHouseError, Config, Engine, Query, Run, User, users_from_xml
from tests.fakes.clickhouse_response import KEEP_ALIVE_S, Response, choose_encoder, decoded, make_encoder
from tests.fakes.http_server import FakeServer

__all__ = ["AGENT_USER_XML", "ClickHouseError", "FakeClickHouse", "User", "default_users", "users_from_xml"]

_ROOT = Path(__file__).resolve().parents[2]
AGENT_USER_XML = _ROOT / "docker" / "clickhouse" / "agent-user.xml"
_BUFFER_BYTES = 1 << 20  # DBMS_DEFAULT_BUFFER_SIZE: what the server holds back before sending
_POLL_S = 0.05
_RESERVED = {
    "compress", "decompress", "user", "password", "quota_key", "query_id", "stacktrace", "role", "buffer_size",
    "wait_end_of_query", "session_id", "session_timeout", "session_check", "client_protocol_version",
    "close_session", "query",
}  # fmt: skip
_NO_HANDLER = (
    "There is no handle {path}\n\nUse / or /ping for health checks.\nOr /replicas_status for more sophisticated "
    "health checks.\n\nSend queries from your program with POST method or GET /?query=...\n\nUse clickhouse-client:"
    "\n\nFor interactive data analysis:\n    clickhouse-client\n\nFor batch query processing:\n    clickhouse-client "
    "--query='SELECT 1' > result\n    clickhouse-client < query\n"
)


# --- the test's side ---


def default_users(agent_password: str = "password", admin_password: str = "admin-password") -> dict[str, User]:
    """`agent` as docker/clickhouse/agent-user.xml ships it (a read-only profile with the agent's
    limits; SELECT and SHOW on nycflights13 only), and `admin` with every grant, for setup."""
    agent = users_from_xml(AGENT_USER_XML, {"agent": agent_password})
    return {**agent, "admin": User(admin_password, {}, ["GRANT ALL ON *.* TO admin WITH GRANT OPTION"])}


class FakeClickHouse:
    """The fake server in a process of its own, on a data directory no other process uses."""

    def __init__(
        self,
        data_dir: Path,
        users: Mapping[str, User] | None = None,
        *,
        hidden_functions: Sequence[str] = (),
        version: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.config = Config(dict(users or default_users()), list(hidden_functions), version)
        self.host = "127.0.0.1"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> FakeClickHouse:
        config = self.data_dir.parent / f"{self.data_dir.name}.fake-clickhouse.json"
        config.write_text(self.config.dumps())
        command = [sys.executable, "-m", "tests.fakes.clickhouse_http", "--data", str(self.data_dir)]
        self._process = subprocess.Popen(
            [*command, "--config", str(config), "--host", self.host, "--port", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(_ROOT)},
            cwd=_ROOT,
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        line = self._process.stdout.readline() if ready else b""
        if not line.startswith(b"port "):
            self.stop()
            raise RuntimeError(f"the fake ClickHouse server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def url(self, user: str, database: str = "") -> str:
        password = quote(self.config.users[user].password, safe="")
        return f"http://{quote(user, safe='')}:{password}@{self.host}:{self.port}/{database}"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()  # the server exits when its stdin closes
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def __enter__(self) -> FakeClickHouse:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


# --- the server's side ---


@dataclass
class _Parameters:
    """A request's URL parameters (and headers that stand for them), sorted as the handler sorts them."""

    database: str
    default_format: str
    reserved: dict[str, str]
    query_params: dict[str, str]
    changes: list[tuple[str, str]]  # every other parameter is a setting

    @classmethod
    def of(cls, params: Sequence[tuple[str, str]], headers: Message) -> _Parameters:
        given = cls(headers.get("X-ClickHouse-Database", ""), headers.get("X-ClickHouse-Format", ""), {}, {}, [])
        for key, value in params:
            if key == "database":
                given.database = given.database or value
            elif key == "default_format":
                given.default_format = given.default_format or value
            elif key.startswith("param_"):
                given.query_params.setdefault(key.removeprefix("param_"), value)
            elif key in _RESERVED:
                given.reserved.setdefault(key, value)
            elif key:
                given.changes.append((key, value))
        return given


@dataclass
class _Options:
    """How a request's output is sent (reserved parameters and HTTP settings)."""

    wait_end: bool
    buffer_bytes: int
    cancel_on_close: bool
    progress_ms: int | None

    @classmethod
    def of(cls, reserved: Mapping[str, str], effective: Mapping[str, str]) -> _Options:
        def on(value: str | None) -> bool:
            return value in ("1", "true")

        wait_end = reserved.get("wait_end_of_query", effective.get("http_wait_end_of_query"))
        buffer_size = reserved.get("buffer_size", effective.get("http_response_buffer_size")) or "0"
        readonly = int(effective.get("readonly", "0")) > 0
        progress = on(effective.get("send_progress_in_http_headers"))
        return cls(
            wait_end=on(wait_end),
            buffer_bytes=max(int(buffer_size), _BUFFER_BYTES),
            cancel_on_close=readonly and on(effective.get("cancel_http_readonly_queries_on_client_close")),
            progress_ms=int(effective.get("http_headers_progress_interval_ms", "100")) if progress else None,
        )


class _Server(FakeServer):
    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        super().__init__(address, _Handler)
        self.engine = engine


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each write of a kept-alive answer waits on the client's delayed ACK
    timeout = KEEP_ALIVE_S
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def _handle(self) -> None:
        path, _, query_string = self.path.partition("?")
        if path in ("/ping", "/replicas_status") or (path == "/" and not query_string and self.command != "POST"):
            self._static(200, "Ok.\n", "text/html; charset=UTF-8")
        elif path != "/":
            self._static(404, _NO_HANDLER.format(path=path), "text/plain; charset=UTF-8")
        else:
            self._query(parse_qsl(query_string, keep_blank_values=True))

    def _static(self, status: int, text: str, content_type: str) -> None:
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        body = text.encode()
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Keep-Alive", f"timeout={KEEP_ALIVE_S}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # --- one query ---

    def _query(self, params: list[tuple[str, str]]) -> None:
        engine = self.server.engine
        response = Response(self, version=engine.version, display_name=engine.config.display_name)
        session: tuple[str, str, bool] | None = None
        try:
            try:
                body = self._body()
                name, user = self._authenticate(params)
                query, options, session = self._prepare(name, user, params, body)
                response.encoder = choose_encoder(self.headers.get("Accept-Encoding", ""), query.effective)
                run = engine.execute(query)
            except ClickHouseError as exc:
                response.fail(exc)
                return
            except Exception as exc:  # a bug in the fake must answer, not drop the connection
                response.fail(ClickHouseError.of(1001, f"fake ClickHouse server error: {exc!r}"))
                return
            response.started_query(query, run, engine.timezone)
            self._pump(run, query, options, response)
        except OSError:  # the client went away while the response was written
            self.close_connection = True
        finally:
            if session is not None:
                engine.release_session(*session)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
        elif self.headers.get("Content-Length") is not None:
            data = bytearray(self.rfile.read(int(self.headers["Content-Length"])))
        elif self.command == "POST":
            self.close_connection = True
            raise ClickHouseError.of(
                381, "The Transfer-Encoding is not chunked and there is no Content-Length header for POST request"
            )
        else:
            return b""
        return decoded(bytes(data), self.headers.get("Content-Encoding", ""))

    def _authenticate(self, params: list[tuple[str, str]]) -> tuple[str, User]:
        name, password = self.headers.get("X-ClickHouse-User", ""), self.headers.get("X-ClickHouse-Key", "")
        basic = self.headers.get("Authorization")
        in_params = any(key in ("user", "password") for key, _ in params)
        mixed = "Invalid authentication: it is not allowed to use {} and {} simultaneously"
        if name or password:
            if basic or in_params:
                other = "Authorization HTTP header" if basic else "authentication via parameters"
                raise ClickHouseError.of(516, mixed.format("X-ClickHouse HTTP headers", other))
            source = "X-ClickHouse HTTP headers"
        elif basic:
            if in_params:
                raise ClickHouseError.of(
                    516, mixed.format("Authorization HTTP header", "authentication via parameters")
                )
            scheme, _, info = basic.partition(" ")
            if scheme.lower() != "basic":
                raise ClickHouseError.of(
                    516, f"Invalid authentication: '{scheme}' HTTP Authorization scheme is not supported"
                )
            try:
                decoded = base64.b64decode(info, validate=True).decode("utf-8", errors="replace")
            except ValueError:
                raise ClickHouseError.of(516, "Invalid authentication: bad Basic credentials") from None
            name, _, password = decoded.partition(":")
            source = "Authorization HTTP header"
        else:
            given = dict(params)
            name, password, source = (
                given.get("user", "default"),
                given.get("password", ""),
                "authentication via parameters",
            )
        if not name:
            raise ClickHouseError.of(516, f"Got an empty user name from {source}")
        return name, self.server.engine.authenticate(name, password)

    def _prepare(
        self, name: str, user: User, params: list[tuple[str, str]], body: bytes
    ) -> tuple[Query, _Options, tuple[str, str, bool] | None]:
        engine = self.server.engine
        given = _Parameters.of(params, self.headers)
        reserved = given.reserved
        multipart = self.headers.get("Content-Type", "").startswith("multipart/form-data")
        if multipart or "1" in (reserved.get("compress"), reserved.get("decompress")):
            raise ClickHouseError.of(48, "The fake ClickHouse server has no compress, decompress or multipart forms")
        settings, effective = engine.request_settings(user, given.changes, get=self.command != "POST")
        if given.database:
            engine.check_database(given.database)
        try:
            text = body.decode("utf-8")  # chdb takes the query as text: binary data would not pass intact
        except UnicodeDecodeError:
            raise ClickHouseError.of(48, "The fake ClickHouse server takes text bodies only (TSV, JSON, ...)") from None
        session = None
        if session_id := reserved.get("session_id"):
            if not reserved.get("session_timeout", "60").isdigit():
                raise ClickHouseError.of(374, f"Invalid session timeout: '{reserved['session_timeout']}'")
            engine.hold_session(name, session_id, reserved.get("session_check") == "1")
            session = (name, session_id, reserved.get("close_session") == "1")
        head = reserved.get("query", "")
        query = Query(
            name,
            (head + "\n" if head else "") + text,
            reserved.get("query_id") or self.headers.get("X-ClickHouse-Query-Id", "") or str(uuid.uuid4()),
            settings,
            effective,
            given.default_format or "TabSeparated",
            given.database,
            given.query_params,
        )
        return query, _Options.of(reserved, effective), session

    def _pump(self, run: Run, query: Query, options: _Options, response: Response) -> None:
        """Send the output as the engine produces it, watching the client meanwhile."""
        engine = self.server.engine
        items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=4)
        stop = threading.Event()
        threading.Thread(target=_produce, args=(run, items, stop), daemon=True, name="fake-ch-query").start()
        held = bytearray()
        last_progress = time.monotonic()
        gone = False
        try:
            while True:
                try:
                    kind, payload = items.get(timeout=_POLL_S)
                except queue.Empty:
                    if not gone and self._client_gone():
                        gone = True
                        if options.cancel_on_close:
                            engine.kill([query.tag])
                    every = options.progress_ms
                    if every is not None and not response.body_started and _since(last_progress) >= every / 1000:
                        response.progress(engine.progress(query.tag))
                        last_progress = time.monotonic()
                    continue
                response.summary.update(run.stats)
                if kind == "error":
                    response.fail(payload)
                    return
                if kind == "data":
                    held += payload
                    if response.body_started or (not options.wait_end and len(held) >= options.buffer_bytes):
                        response.write(bytes(held))
                        held.clear()
                    continue
                response.write(bytes(held))
                response.finish()
                return
        except OSError:
            engine.kill([query.tag])  # as a failed write cancels the query on the server
            raise
        finally:
            stop.set()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


def _since(moment: float) -> float:
    return time.monotonic() - moment


def _produce(run: Run, items: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for chunk in run.chunks:
            if not put(("data", chunk)):
                return
        put(("end", None))
    except ClickHouseError as exc:
        put(("error", exc))
    except Exception as exc:  # a bug in the fake must answer, not hang the client
        put(("error", ClickHouseError.of(1001, f"fake ClickHouse server error: {exc!r}")))
    finally:
        close = getattr(run.chunks, "close", None)
        if close is not None:
            close()


# --- the process ---


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake ClickHouse HTTP server over chdb (for tests).")
    parser.add_argument("--data", type=Path, required=True, help="chdb data directory (this process's alone)")
    parser.add_argument("--config", type=Path, required=True, help="users and options (JSON, see Config)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    engine = Engine(args.data, Config.loads(args.config.read_text()))
    server = _Server((args.host, args.port), engine)
    make_encoder("zstd"), make_encoder("lz4")  # imported before the sandbox closes the filesystem

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    def stop_when_stdin_closes() -> None:
        while sys.stdin.buffer.read(65536):
            pass
        stop()

    signal.signal(signal.SIGTERM, stop)
    threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    _confine(args.data)
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        engine.close()
    return 0


def _confine(data_dir: Path) -> None:
    """Landlock, as the embedded engine has it (agent/db/sandbox.py): chdb reads any path it is
    given (clickhouse-local has no user_files_path), so hostile SQL a test sends past the statement
    check must not reach the host's files. Everything this process runs is imported by now, and the
    listening socket is bound; accepting needs no rule."""
    from agent.db.sandbox import confine

    paths = sysconfig.get_paths()
    read = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")} | {"/dev/urandom"}
    status = confine(read=sorted(read), write=[str(data_dir), "/dev/null"])
    if not status.applied:
        print(f"fake ClickHouse server: {status.describe()}; chdb can read any file", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
