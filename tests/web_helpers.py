"""Running the web app on a real socket, and reading its SSE streams incrementally."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn


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


class LiveServer:
    """uvicorn serving `app` on a free loopback port, inside the running event loop."""

    def __init__(self, app: Any) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveServer:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_: Any) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()
