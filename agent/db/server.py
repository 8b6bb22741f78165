"""A ClickHouse server through clickhouse-connect's async (aiohttp) client, raw text formats only.

At start-up it checks what the server gives this user: a ClickHouse new enough to parse for the
statement check (`parseQueryToJSON`), a read-only profile at least as strict as the agent's limits,
and least-privilege grants (SELECT and SHOW on the configured databases, nothing that reaches files,
the network or other databases). A user with more is refused, with a message saying what to change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, suppress
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import clickhouse_connect
from clickhouse_connect.driver._backend.http_async import release_lease
from clickhouse_connect.driver.asyncclient import AsyncClient
from clickhouse_connect.driver.common import StreamContext
from clickhouse_connect.driver.exceptions import DatabaseError as CCDatabaseError
from clickhouse_connect.driver.exceptions import OperationalError
from clickhouse_connect.driver.types import Closable

from agent import linear_re
from agent.db.access import RowFilters, pinned_settings
from agent.db.backend import (
    MAX_ERROR_CHARS,
    Backend,
    DatabaseUnavailable,
    EngineError,
    ReadStats,
    ResultTooLarge,
    bounded_error,
)
from agent.db.scope import Scope

_KILL_TIMEOUT_S = 10.0
NO_ROW_FILTERS = (
    "Access policies are configured, but the ClickHouse user's profile is readonly=1, so the agent cannot send "
    "their row filters: give the agent a user whose profile lets it set readonly itself (readonly=0; it sends "
    "readonly=1 with every query), or configure per-policy ClickHouse users with row policies."
)
_GRANT = linear_re.compile(r"GRANT (?P<privileges>.+?) ON (?P<target>\S+) TO ", ignore_case=True)
_COLUMN_LIST = linear_re.compile(r"\([^)]*\)")
_MAX_EXCEPTION_BLOCK = 4 * MAX_ERROR_CHARS + 1024  # the message as UTF-8, its tags and markers
_READ_PRIVILEGES = {"SELECT", "SHOW", "SHOW TABLES", "SHOW COLUMNS", "SHOW DATABASES", "SHOW DICTIONARIES"}
# How ClickHouse (25.11+) reports an error after the body started: between these markers, with the
# response's exception tag, and then it breaks the chunked body off.
_EXCEPTION_OPEN = b"__exception__\r\n"
_EXCEPTION_CLOSE = b"\r\n__exception__"


class ServerBackend(Backend):
    def __init__(self, url: str, settings: dict[str, Any], scope: Scope, *, row_filters: bool = False) -> None:
        self._url = urlsplit(url)
        self._wanted = settings
        self._scope = scope
        self._row_filters = row_filters  # policies are configured: the user must let the agent set filters
        self._client: AsyncClient | None = None
        self._connect_lock = asyncio.Lock()
        self._query_settings: dict[str, Any] = {}

    async def _connect(self) -> AsyncClient:
        async with self._connect_lock:
            if self._client is None:
                url = self._url
                database = url.path.strip("/") or self._wanted.get("database")
                try:
                    client = await clickhouse_connect.get_async_client(
                        host=url.hostname or "localhost",
                        port=url.port or (8443 if url.scheme == "https" else 8123),
                        username=unquote(url.username or "default"),
                        password=unquote(url.password or ""),
                        database=database or None,
                        secure=url.scheme == "https",
                        send_receive_timeout=int(self._wanted["max_execution_time"]) + 30,
                    )
                    try:
                        self._query_settings = await self._checked_settings(client)
                    except BaseException:
                        await client.close()  # a refused user's client must not leak its connections
                        raise
                except (OperationalError, OSError, CCDatabaseError) as exc:
                    raise DatabaseUnavailable(
                        f"ClickHouse at {url.hostname}:{url.port} is unreachable: {exc}"
                    ) from None
                self._client = client
            return self._client

    async def _checked_settings(self, client: AsyncClient) -> dict[str, Any]:
        has_parser = await client.query("SELECT count() FROM system.functions WHERE name = 'parseQueryToJSON'")
        if not has_parser.result_rows[0][0]:
            version = (await client.query("SELECT version()")).result_rows[0][0]
            raise DatabaseUnavailable(
                f"ClickHouse {version} is too old: the statement check needs parseQueryToJSON (ClickHouse 26.6 "
                "or newer)."
            )
        await self._check_grants(client)
        return await self._read_only_settings(client)

    async def _check_grants(self, client: AsyncClient) -> None:
        grants = [row[0] for row in (await client.query("SHOW GRANTS")).result_rows]
        too_much = [grant for grant in grants if not self._least_privilege(grant)]
        if too_much:
            raise DatabaseUnavailable(
                "The ClickHouse user has more access than the agent may use: "
                + "; ".join(too_much)
                + ". Give it only SELECT (and SHOW) on the configured databases; see docker/clickhouse/."
            )

    def _least_privilege(self, grant: str) -> bool:
        match = _GRANT.match(grant)
        if match is None:
            return False  # a role or an unparsed grant: refuse rather than guess
        # SELECT(a, b) is still SELECT: drop column lists before splitting on commas
        listed = _COLUMN_LIST.sub("", match.group("privileges"))
        privileges = {p.strip().upper() for p in listed.split(",")}
        database, _, table = match.group("target").replace("`", "").partition(".")
        if not privileges <= _READ_PRIVILEGES or database == "*":
            return False
        if database in ("system", "information_schema", "INFORMATION_SCHEMA"):
            return privileges <= {"SHOW", "SHOW TABLES", "SHOW COLUMNS", "SHOW DATABASES"} or table in (
                "tables",
                "columns",
                "databases",
            )
        return self._scope.database_in_scope(database)

    async def _read_only_settings(self, client: AsyncClient) -> dict[str, Any]:
        """Settings to send with every query, or none when the user's profile already enforces them.

        A user whose profile says readonly=1 cannot change any setting, so that profile must carry
        limits at least as strict as ours; anything weaker is refused at start-up."""
        wanted = {name: value for name, value in self._wanted.items() if name != "database"}
        names = ", ".join(f"'{name}'" for name in wanted)
        result = await client.query(f"SELECT name, value FROM system.settings WHERE name IN ({names})")
        current = {name: value for name, value in result.result_rows}
        if current.get("readonly", "0") == "0":
            return {"cancel_http_readonly_queries_on_client_close": 1, **wanted}
        if self._row_filters:
            raise DatabaseUnavailable(NO_ROW_FILTERS)
        if current["readonly"] != "1":  # readonly=2 lets queries change settings, and `readonly` itself not
            raise DatabaseUnavailable(
                f"The ClickHouse user's profile has readonly={current['readonly']}, which lets queries change "
                "settings; use readonly=1 with the agent's limits in the profile, or readonly=0 so the agent "
                "sets them (see docker/clickhouse)."
            )
        weaker = [
            name
            for name, value in wanted.items()
            if isinstance(value, int) and name != "readonly" and not 0 < int(current.get(name, "0")) <= value
        ]
        if weaker:
            raise DatabaseUnavailable(
                "The ClickHouse user is read-only, so the agent cannot set its limits, and the user's profile "
                f"is missing or looser on: {', '.join(weaker)}. Set them in the profile (see docker/clickhouse)."
            )
        return {}

    def _settings(self, tag: str, access: RowFilters | None) -> dict[str, Any]:
        """The request's settings: a policy's filters (and the settings pinned with them) first, then the
        agent's limits with `readonly=1` last, so that nothing in the query can change them after."""
        if access is None:
            return {**self._query_settings, "query_id": tag}
        if not self._query_settings:  # the profile is read-only: the filters could not be sent
            raise DatabaseUnavailable(NO_ROW_FILTERS)
        filters = {**pinned_settings(), "additional_table_filters": access.setting()}
        return {**filters, **self._query_settings, "query_id": tag}

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
        if max_bytes is not None:
            return await self._read_at_most(sql, fmt, tag, max_bytes, stats, access)
        client = await self._connect()
        settings = self._settings(tag, access)
        try:
            return await client.raw_query(sql, settings=settings, fmt=fmt)
        except CCDatabaseError as exc:
            raise EngineError(bounded_error(str(exc))) from None
        except (OperationalError, OSError) as exc:
            raise DatabaseUnavailable(f"Lost the connection to ClickHouse: {exc}") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(client, tag))
            raise

    async def _read_at_most(
        self, sql: str, fmt: str, tag: str, max_bytes: int, stats: ReadStats | None, access: RowFilters | None
    ) -> bytes:
        """The output read as it arrives, given up (and the query killed) once it passes `max_bytes`."""
        received = bytearray()
        async with aclosing(self.stream(sql, fmt, tag, stats=stats, access=access)) as chunks:
            async for chunk in chunks:
                received += chunk
                if len(received) > max_bytes:
                    raise ResultTooLarge(max_bytes)
        return bytes(received)

    async def stream(
        self, sql: str, fmt: str, tag: str, *, stats: ReadStats | None = None, access: RowFilters | None = None
    ) -> AsyncGenerator[bytes, None]:
        """With `stats`, the server holds the output until the query ends (`wait_end_of_query`), so the
        summary in the response's headers is the whole query's: only for outputs the caller caps."""
        client = await self._connect()
        finished = False
        settings = self._settings(tag, access)
        try:
            if stats is None:
                context = await client.raw_stream(sql, settings=settings, fmt=fmt)
            else:
                context, summary = await _raw_stream_with_summary(
                    client, sql, {**settings, "wait_end_of_query": 1}, fmt
                )
                stats.rows, stats.bytes = _summary_count(summary, "read_rows"), _summary_count(summary, "read_bytes")
            async with context, aclosing(_body_or_exception(context)) as body:
                async for chunk in body:
                    yield chunk
            finished = True
        except CCDatabaseError as exc:
            raise EngineError(bounded_error(str(exc))) from None
        except (OperationalError, OSError, aiohttp.ClientError) as exc:
            raise DatabaseUnavailable(f"Lost the connection to ClickHouse: {exc}") from None
        finally:
            if not finished:
                await asyncio.shield(self._kill(client, tag))

    async def _kill(self, client: AsyncClient, tag: str) -> None:
        with suppress(Exception):
            await asyncio.wait_for(client.command(f"KILL QUERY WHERE query_id = '{tag}' SYNC"), _KILL_TIMEOUT_S)

    async def running(self) -> list[str]:
        client = await self._connect()
        result = await client.query("SELECT query_id FROM system.processes WHERE startsWith(query_id, 'agent-')")
        return [row[0] for row in result.result_rows]

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


async def _raw_stream_with_summary(
    client: AsyncClient, sql: str, settings: dict[str, Any], fmt: str
) -> tuple[StreamContext, str | None]:
    """`client.raw_stream` and the response's X-ClickHouse-Summary header, which the public method keeps
    to itself: its own body (clickhouse-connect 1.12), one call deeper."""
    final_query, bind_params, runtime = client._prep_raw_query_runtime(sql, None, settings, fmt, True)
    response = await client._backend.execute_raw_stream(final_query, bind_params, None, runtime, None)

    async def chunks() -> AsyncGenerator[bytes, None]:
        async for chunk in response.content.iter_any():
            yield chunk

    class _Source(Closable):
        def close(self) -> None:
            try:
                response.close()
            finally:
                release_lease(response)

    # StreamContext takes an async generator too, as raw_stream passes it; its annotation says Generator.
    return StreamContext(_Source(), chunks()), response.headers.get("X-ClickHouse-Summary")  # type: ignore[arg-type]


def _summary_count(summary: str | None, name: str) -> int | None:
    try:
        value = int(json.loads(summary or "{}")[name])
    except (ValueError, KeyError, TypeError):
        return None
    return value if value >= 0 else None


async def _body_or_exception(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """A streamed body, or the server's exception when it broke off with one.

    Once the body has started, ClickHouse can no longer send an error status: it writes
    `__exception__\\r\\n<tag>\\r\\n<message>\\n<size> <tag>\\r\\n__exception__\\r\\n` into the body and
    breaks the chunked transfer off. Bytes from the opening marker on are held back: they are the
    exception (EngineError) when the block is complete or the transfer breaks, and data otherwise.
    (Text formats escape carriage returns, so their data never holds the marker.)"""
    pending = b""
    held: bytes | None = None
    try:
        async for chunk in chunks:
            if held is not None:
                held += chunk
                if len(held) <= _MAX_EXCEPTION_BLOCK:
                    continue
                pending, held = held, None  # longer than any exception block the server writes: data
            pending += chunk
            at = pending.find(_EXCEPTION_OPEN)
            if at >= 0:
                held, pending = pending[at:], pending[:at]
            keep = 0 if held is not None else len(_EXCEPTION_OPEN) - 1  # a marker may straddle two chunks
            if len(pending) > keep:
                yield pending[: len(pending) - keep]
                pending = pending[len(pending) - keep :]
    except aiohttp.ClientPayloadError:
        if held is None:
            raise
        raise EngineError(bounded_error(_exception_text(held))) from None
    if held is not None and _EXCEPTION_CLOSE in held:  # a complete block, even if the transfer ended well
        raise EngineError(bounded_error(_exception_text(held)))
    if held is not None or pending:
        yield pending + (held or b"")


def _exception_text(block: bytes) -> str:
    """The message inside an exception block (see _body_or_exception)."""
    tag, _, rest = block[len(_EXCEPTION_OPEN) :].partition(b"\r\n")
    message = rest.split(b" " + tag + _EXCEPTION_CLOSE, 1)[0].rpartition(b"\n")[0] or rest
    return message.decode("utf-8", errors="replace").strip()
