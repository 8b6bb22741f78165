"""A ClickHouse server through clickhouse-connect's async (aiohttp) client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any
from urllib.parse import unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.asyncclient import AsyncClient
from clickhouse_connect.driver.exceptions import DatabaseError as CCDatabaseError
from clickhouse_connect.driver.exceptions import OperationalError

from agent.db.database import Block, Database, DatabaseError, DatabaseUnavailable, QueryLimits

_KILL_TIMEOUT_S = 10.0


class ServerDatabase(Database):
    def __init__(self, url: str, limits: QueryLimits) -> None:
        super().__init__(limits)
        self._url = urlsplit(url)
        self._client: AsyncClient | None = None
        self._connect_lock = asyncio.Lock()
        self._query_settings: dict[str, Any] = {}

    async def _connect(self) -> AsyncClient:
        async with self._connect_lock:
            if self._client is None:
                url = self._url
                try:
                    client = await clickhouse_connect.get_async_client(
                        host=url.hostname or "localhost",
                        port=url.port or (8443 if url.scheme == "https" else 8123),
                        username=unquote(url.username or "default"),
                        password=unquote(url.password or ""),
                        database=url.path.strip("/") or None,
                        secure=url.scheme == "https",
                        send_receive_timeout=self.limits.max_execution_time + 30,
                    )
                except (OperationalError, OSError) as exc:
                    raise DatabaseUnavailable(
                        f"ClickHouse at {url.hostname}:{url.port} is unreachable: {exc}"
                    ) from None
                self._query_settings = await self._read_only_settings(client)
                self._client = client
            return self._client

    async def _read_only_settings(self, client: AsyncClient) -> dict[str, Any]:
        """Settings to send with every query, or none when the user's profile already enforces them.

        A user whose profile says readonly=1 cannot change any setting, so that profile must carry
        limits at least as strict as ours; anything weaker is refused at start-up.
        """
        wanted = self.limits.engine_settings()
        names = ", ".join(f"'{name}'" for name in wanted)
        result = await client.query(f"SELECT name, value FROM system.settings WHERE name IN ({names})")
        current = {name: value for name, value in result.result_rows}
        if current.get("readonly", "0") != "1":
            return {"cancel_http_readonly_queries_on_client_close": 1, **wanted}
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

    async def _stream(self, sql: str, query_id: str) -> AsyncIterator[Block]:
        client = await self._connect()
        finished = False
        try:
            stream = await client.query_row_block_stream(
                sql, settings={**self._query_settings, "query_id": query_id}, use_none=True
            )
            async with stream:
                source: Any = stream.source  # the QueryResult that owns the stream
                columns = list(source.column_names)
                types = [t.name for t in source.column_types]
                yielded = False
                async for rows in stream:
                    yielded = True
                    yield Block(columns, types, [list(row) for row in rows])
                if not yielded:
                    yield Block(columns, types, [])
            finished = True
        except CCDatabaseError as exc:
            raise DatabaseError(str(exc)) from None
        except (OperationalError, OSError) as exc:
            raise DatabaseUnavailable(f"Lost the connection to ClickHouse: {exc}") from None
        finally:
            # Cancelled, or closed early by a caller that has its N+1 rows: stop the query now
            # rather than when the server notices the closed connection.
            if not finished:
                await self._kill(client, query_id)

    async def _kill(self, client: AsyncClient, query_id: str) -> None:
        with suppress(Exception):
            await asyncio.wait_for(client.command(f"KILL QUERY WHERE query_id = '{query_id}' SYNC"), _KILL_TIMEOUT_S)

    async def ping(self) -> None:
        client = await self._connect()
        if not await client.ping():
            raise DatabaseUnavailable("ClickHouse did not answer a ping.")

    async def running_queries(self) -> list[str]:
        client = await self._connect()
        result = await client.query("SELECT query_id FROM system.processes WHERE startsWith(query_id, 'agent-')")
        return [row[0] for row in result.result_rows]

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
