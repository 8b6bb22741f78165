"""Run events on the SSE wire: each event serialised once, here, with its id for reattaching."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent

from chats.runs import RunEvent

KEEPALIVE_S = 15
Shown = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def event_stream(chunks: AsyncIterator[bytes], shutdown_grace_s: float) -> EventSourceResponse:
    """On shutdown the stream goes on until its run is done (at most `shutdown_grace_s`), so a
    restart does not cut an answer being written."""
    return EventSourceResponse(
        chunks,
        ping=KEEPALIVE_S,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        shutdown_grace_period=shutdown_grace_s,
    )


async def live(batches: AsyncIterator[Sequence[RunEvent]], shown: Shown | None = None) -> AsyncIterator[bytes]:
    """Each batch of events that are ready together goes out in one write; `shown` is what of them the
    reader may see (web/withholding.py)."""
    async for batch in batches:
        events = [event.as_dict() for event in batch]
        if chunk := b"".join(_encoded(event) for event in (shown(events) if shown is not None else events)):
            yield chunk


async def singly(events: AsyncIterator[RunEvent]) -> AsyncIterator[Sequence[RunEvent]]:
    async for event in events:
        yield (event,)


async def replayed(events: list[dict[str, Any]], after: int) -> AsyncIterator[bytes]:
    """A stored run's events after id `after`, in one write."""
    if chunk := b"".join(_encoded(event) for event in events if event["id"] > after):
        yield chunk


def _encoded(event: dict[str, Any]) -> bytes:
    data = json.dumps(event["data"], ensure_ascii=False)
    return ServerSentEvent(id=str(event["id"]), event=event["event"], data=data).encode()
