"""Run events on the SSE wire: each event serialised once, here, with its id for reattaching."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse

from agent.chats.runs import RunEvent

KEEPALIVE_S = 15


def event_stream(events: AsyncIterator[dict[str, Any]], shutdown_grace_s: float) -> EventSourceResponse:
    """On shutdown the stream goes on until its run is done (at most `shutdown_grace_s`), so a
    restart does not cut an answer being written."""
    return EventSourceResponse(
        events,
        ping=KEEPALIVE_S,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        shutdown_grace_period=shutdown_grace_s,
    )


async def live(events: AsyncIterator[RunEvent]) -> AsyncIterator[dict[str, Any]]:
    async for event in events:
        yield _wire(event.as_dict())


async def replayed(events: list[dict[str, Any]], after: int) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        if event["id"] > after:
            yield _wire(event)


def _wire(event: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(event["id"]), "event": event["event"], "data": json.dumps(event["data"], ensure_ascii=False)}
