"""A client of the text/event-stream wire format, for the tests and the benchmarks: events as they
arrive, parsed as a browser's EventSource parses them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Sse:
    event: str
    data: dict[str, Any]
    id: int


async def sse_events(response: httpx.Response) -> AsyncIterator[Sse]:
    """Events from a text/event-stream response, as they arrive."""
    name, data, event_id = "message", [], 0
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield Sse(name, json.loads("\n".join(data)), event_id)
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = int(value)
