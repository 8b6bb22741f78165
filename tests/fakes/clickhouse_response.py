"""How the fake ClickHouse server (tests/fakes/clickhouse_http.py) writes a query's response, as
ClickHouse's WriteBufferFromHTTPServerResponse and HTTPHandler do: headers held back until the body
starts (or a progress header goes out), the status ClickHouse maps an error code to, a chunked and
possibly compressed body, and an error after the body started written in-band with the response's
exception tag, the chunked body then broken off.
"""

from __future__ import annotations

import json
import random
import string
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from tests.fakes.clickhouse_engine import ClickHouseError, Query, Run

KEEP_ALIVE_S = 30

# exceptionCodeToHTTPStatus (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp), by error name
_STATUS = {
    "REQUIRED_PASSWORD": 401,
    **dict.fromkeys(
        ("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED", "SET_NON_GRANTED_ROLE", "ACCESS_DENIED"), 403
    ),
    **dict.fromkeys(
        (
            "BAD_ARGUMENTS", "CANNOT_COMPILE_REGEXP", "CANNOT_PARSE_TEXT", "CANNOT_PARSE_ESCAPE_SEQUENCE",
            "CANNOT_PARSE_QUOTED_STRING", "CANNOT_PARSE_DATE", "CANNOT_PARSE_DATETIME", "CANNOT_PARSE_NUMBER",
            "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING", "CANNOT_PARSE_IPV4", "CANNOT_PARSE_IPV6",
            "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "CANNOT_PARSE_UUID", "DUPLICATE_COLUMN", "ILLEGAL_COLUMN",
            "UNKNOWN_ELEMENT_IN_AST", "UNKNOWN_TYPE_OF_AST_NODE", "THERE_IS_NO_COLUMN", "TOO_DEEP_AST",
            "TOO_BIG_AST", "UNEXPECTED_AST_STRUCTURE", "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH",
            "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
        ),
        400,
    ),
    **dict.fromkeys(
        (
            "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE", "UNKNOWN_STORAGE",
            "UNKNOWN_DATABASE", "UNKNOWN_SETTING", "UNKNOWN_DIRECTION_OF_SORTING", "UNKNOWN_AGGREGATE_FUNCTION",
            "UNKNOWN_FORMAT", "UNKNOWN_DATABASE_ENGINE", "UNKNOWN_TYPE_OF_QUERY", "UNKNOWN_ROLE",
        ),
        404,
    ),
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "CANNOT_SCHEDULE_TASK": 503,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}  # fmt: skip


class Response:
    """One query's response as the server writes it: headers held back until the body starts (or
    a progress header goes out), then a chunked, possibly compressed body."""

    def __init__(self, handler: BaseHTTPRequestHandler, *, version: str, display_name: str) -> None:
        self._handler = handler
        self._version = version
        self.status = 200
        self.headers = {"Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Server-Display-Name": display_name}
        self.tag = "".join(random.choices(string.ascii_uppercase + string.digits, k=16))
        self.encoder: Encoder | None = None
        self.summary: dict[str, int] = {}
        self._started_at = time.monotonic_ns()
        self._headers_started = False
        self.body_started = False

    def started_query(self, query: Query, run: Run, timezone: str) -> None:
        self.headers["X-ClickHouse-Query-Id"] = query.query_id
        if run.format is not None:
            self.headers["Content-Type"] = _content_type(run.format)
            self.headers["X-ClickHouse-Format"] = run.format
        self.headers["X-ClickHouse-Timezone"] = query.effective.get("session_timezone") or timezone
        self.headers["X-ClickHouse-Exception-Tag"] = self.tag

    def progress(self, stats: Mapping[str, int]) -> None:
        self._begin_headers()
        self._raw(f"X-ClickHouse-Progress: {self._progress_json(stats)}\r\n")

    def write(self, data: bytes) -> None:
        self._end_headers()
        if self.encoder is not None:
            data = self.encoder.compress(data)
        self._chunk(data)

    def finish(self) -> None:
        self._end_headers()
        if self.encoder is not None:
            self._chunk(self.encoder.flush())
        if self._chunked:
            self._raw("0\r\n\r\n")
        else:
            self._handler.close_connection = True

    def fail(self, error: ClickHouseError) -> None:
        message = error.body(self._version)
        if self.body_started:  # too late for a status: in the body, tagged, and the body broken off
            text = message.rstrip("\n")
            size = len(text.encode())
            self.write(f"__exception__\r\n{self.tag}\r\n{text}\n{size} {self.tag}\r\n__exception__\r\n".encode())
            if self.encoder is not None:
                self._chunk(self.encoder.flush())
            self._handler.close_connection = True
            return
        if self._headers_started:  # after progress headers: status 200 stays, the code joins the headers
            self._end_headers(error.code)
        else:
            self.status = _STATUS.get(error.name, 500)
            self.headers = {k: v for k, v in self.headers.items() if k not in ("X-ClickHouse-Format",)}
            self.headers["Content-Type"] = "text/plain; charset=UTF-8"
            self.headers["X-ClickHouse-Exception-Code"] = str(error.code)
        self.write(message.encode())
        self.finish()

    @property
    def _chunked(self) -> bool:
        return self._handler.request_version == "HTTP/1.1"

    def _begin_headers(self) -> None:
        if self._headers_started:
            return
        self._headers_started = True
        handler = self._handler
        handler.send_response_only(self.status)
        handler.send_header("Date", handler.date_time_string())
        handler.send_header("Connection", "Keep-Alive" if self._chunked else "Close")
        for name, value in self.headers.items():
            handler.send_header(name, value)
        if self._chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        if self.encoder is not None:
            handler.send_header("Content-Encoding", self.encoder.name)
        handler.send_header("Keep-Alive", f"timeout={KEEP_ALIVE_S}")
        handler.flush_headers()

    def _end_headers(self, exception_code: int | None = None) -> None:
        if self.body_started:
            return
        self._begin_headers()
        self.body_started = True
        summary = self._progress_json(self.summary)
        code = f"X-ClickHouse-Exception-Code: {exception_code}\r\n" if exception_code is not None else ""
        self._raw(f"X-ClickHouse-Summary: {summary}\r\n{code}\r\n")

    def _progress_json(self, stats: Mapping[str, int]) -> str:
        names = ("read_rows", "read_bytes", "written_rows", "written_bytes", "total_rows_to_read")
        values = {name: str(stats.get(name, 0)) for name in names}
        values |= {"result_rows": str(stats.get("result_rows", 0)), "result_bytes": str(stats.get("result_bytes", 0))}
        return json.dumps({**values, "elapsed_ns": str(time.monotonic_ns() - self._started_at)}, separators=(",", ":"))

    def _chunk(self, data: bytes) -> None:
        if not data or self._handler.command == "HEAD":
            return
        self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)

    def _raw(self, text: str) -> None:
        self._handler.wfile.write(text.encode("latin-1"))


def _content_type(fmt: str) -> str:
    name = fmt.lower()
    if name.startswith(("tabseparated", "tsv")):
        return "text/tab-separated-values; charset=UTF-8"
    if name.startswith("csv"):
        return f"text/csv; charset=UTF-8; header={'present' if 'withnames' in name else 'absent'}"
    if name.startswith("json"):
        return "application/json; charset=UTF-8"
    if name in ("native", "rowbinary", "parquet", "arrow", "arrowstream", "orc", "avro", "msgpack", "protobuf"):
        return "application/octet-stream"
    return "text/plain; charset=UTF-8"


@dataclass
class Encoder:
    name: str
    compress: Callable[[bytes], bytes]
    flush: Callable[[], bytes]


def choose_encoder(accept: str, effective: Mapping[str, str]) -> Encoder | None:
    """The response encoding the server would choose (chooseHTTPCompressionMethod), if it can be served."""
    if effective.get("enable_http_compression") not in ("1", "true"):
        return None
    for name in ("zstd", "br", "lz4", "gzip", "deflate"):
        if name in accept and (encoder := make_encoder(name)) is not None:
            return encoder
    return None


def make_encoder(name: str) -> Encoder | None:
    if name in ("gzip", "deflate"):
        z = zlib.compressobj(wbits=31 if name == "gzip" else 15)
        return Encoder(name, lambda data: z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH), z.flush)
    if name == "zstd":
        try:
            from backports import zstd  # type: ignore[import-not-found]
        except ImportError:
            return None
        c = zstd.ZstdCompressor()
        return Encoder(name, lambda data: c.compress(data, zstd.ZstdCompressor.FLUSH_BLOCK), c.flush)
    if name == "lz4":
        try:
            import lz4.frame  # type: ignore[import-not-found]
        except ImportError:
            return None
        frame = lz4.frame.LZ4FrameCompressor(auto_flush=True)
        header = [frame.begin()]
        return Encoder(name, lambda data: (header.pop() if header else b"") + frame.compress(data), frame.flush)
    return None  # br: no brotli module here


def decoded(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity", "none"):
        return data
    if encoding in ("gzip", "deflate"):
        return zlib.decompress(data, wbits=47)  # zlib or gzip header, detected
    if encoding == "zstd":
        from backports import zstd

        return bytes(zstd.decompress(data))
    if encoding == "lz4":
        import lz4.frame

        return bytes(lz4.frame.decompress(data))
    raise ClickHouseError.of(48, f"The fake ClickHouse server cannot decode Content-Encoding {encoding}")
