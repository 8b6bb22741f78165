"""A CSV download that cannot hold the engine for a client that stopped reading.

While a client does not read, sending a chunk waits, and the download keeps its query running and its
slot of the engine's downloads share. A chunk the client does not take within `send_timeout_s`, or a
download still sending at `deadline_s`, breaks the response off (an incomplete body, as any failure
mid-stream), and the query is stopped at once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections.abc import AsyncGenerator, Callable
from typing import Any
from urllib.parse import quote

from starlette.responses import StreamingResponse
from starlette.types import Message, Send

log = logging.getLogger(__name__)


MAX_NAME_CHARS = 80  # of a file name's stem: a question can be a paragraph


def attachment(question: str, fallback: str, suffix: str = ".csv") -> str:
    """A Content-Disposition naming the file after `question` (`departures-per-origin-airport.csv`):
    `filename` in ASCII for every client, and RFC 6266's `filename*` in UTF-8 when the question's words
    are not all ASCII (`retards-à-l-arrivée.csv`). `fallback` names it when no word is left."""
    words = _slug(unicodedata.normalize("NFC", question))
    ascii_words = _slug(unicodedata.normalize("NFKD", question).encode("ascii", "ignore").decode())
    disposition = f'attachment; filename="{ascii_words or fallback}{suffix}"'
    if words and words != ascii_words:
        disposition += f"; filename*=UTF-8''{quote(words + suffix, safe='')}"
    return disposition


def _slug(text: str) -> str:
    """Lower-case words joined by hyphens: no quote, slash, dot or control character survives."""
    words = re.findall(r"\w+", text.lower())
    return "-".join(words)[:MAX_NAME_CHARS].strip("-_")


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
