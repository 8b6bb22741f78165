"""A CSV download that cannot hold the engine for a client that stopped reading.

While a client does not read, sending a chunk waits, and the download keeps its query running and its
slot of the engine's downloads share. A chunk the client does not take within `send_timeout_s`, or a
download still sending at `deadline_s`, breaks the response off (an incomplete body, as any failure
mid-stream), and the query is stopped at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Message, Send

log = logging.getLogger(__name__)


class _GaveUp(Exception):
    pass


class DownloadSlots:
    """How many downloads each client has running (in this process). A client past `per_client` is
    refused until one of its downloads ends, so stalled connections cannot queue up for the share of
    the engine every client's downloads draw on."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._running: dict[str, int] = {}

    def take(self, client: str) -> bool:
        if self._running.get(client, 0) >= self.per_client:
            return False
        self._running[client] = self._running.get(client, 0) + 1
        return True

    def give_back(self, client: str) -> None:
        left = self._running.get(client, 0) - 1
        if left > 0:
            self._running[client] = left
        else:
            self._running.pop(client, None)


class DownloadResponse(StreamingResponse):
    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None],
        *,
        send_timeout_s: float,
        deadline_s: float,
        on_end: Callable[[], None] = lambda: None,
        **options: Any,
    ) -> None:
        super().__init__(chunks, **options)
        self._chunks = chunks
        self._send_timeout_s = send_timeout_s
        self._deadline_s = deadline_s
        self._on_end = on_end

    async def stream_response(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_s

        async def bounded_send(message: Message) -> None:
            left = min(self._send_timeout_s, deadline - loop.time())
            try:
                await asyncio.wait_for(send(message), max(left, 0.0))
            except TimeoutError:
                raise _GaveUp from None

        try:
            await super().stream_response(bounded_send)
        except _GaveUp:
            # Returning with the body unfinished makes the server close the connection: the client
            # sees a broken transfer, never a complete-looking file.
            log.warning("a CSV download was broken off: its client stopped reading, or it ran past its deadline")
        finally:
            try:
                await self._chunks.aclose()  # stops the query now, not when the generator is collected
            finally:
                self._on_end()
