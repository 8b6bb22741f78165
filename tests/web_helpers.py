"""Running the web app on a real socket (configured as `agent web` configures uvicorn), and reading its
SSE streams incrementally."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from agent.app import AgentApp
from agent.limits import Limits
from chats.conversations import ConversationStore
from chats.state import STATE_FILE, ChatState
from tests.fakes.sse_client import Sse, sse_events
from web.app import create_app
from web.exposure import server_options

__all__ = ["LiveServer", "Sse", "WebApps", "bound_socket", "chat", "read_all", "sse_events"]


class LiveServer:
    """uvicorn serving `app` (from `create_app`) on a free loopback port, inside the running event loop,
    with the options `agent web` gives it."""

    def __init__(self, app: Any, bound: socket.socket | None = None) -> None:
        """`bound`: a loopback socket bound beforehand (from `bound_socket`), for an app that must know its
        own address before it exists (an OpenID Connect client registered with its redirect URI)."""
        self._socket = bound or bound_socket()
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        options = server_options(app.state.settings)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
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


def bound_socket() -> socket.socket:
    """A socket on a free loopback port, bound as `agent serve` binds, for a LiveServer to serve on."""
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    bound.bind(("127.0.0.1", 0))
    return bound


class WebApps:
    """Web apps started on real sockets during one test; all stopped (and their stores closed) at the end."""

    def __init__(self, make_app: Callable[..., AgentApp], tmp_path: Path) -> None:
        self._make_app = make_app
        self._tmp_path = tmp_path
        self._servers: list[LiveServer] = []
        self.states: list[ChatState] = []

    async def start(
        self, grace_s: float = 0.3, store_path: Path | None = None, **overrides: Any
    ) -> tuple[str, ConversationStore]:
        """Serve a new app; keyword arguments go to settings. Returns its URL and conversation store (its
        whole state is the last of `states`)."""
        app = self._make_app(**overrides)
        state = ChatState(store_path or self._tmp_path / STATE_FILE, limits=Limits.of(app.settings))
        self.states.append(state)
        server = LiveServer(create_app(app, state, reattach_grace_s=grace_s))
        await server.__aenter__()
        self._servers.append(server)
        return server.url, state.conversations

    async def close(self) -> None:
        for server in self._servers:
            await server.__aexit__()
        for state in self.states:
            state.close()


async def read_all(response: httpx.Response) -> list[Sse]:
    return [event async for event in sse_events(response)]


async def chat(client: httpx.AsyncClient, message: str, conversation_id: str | None = None) -> list[Sse]:
    async with client.stream("POST", "/api/chat", json={"message": message, "conversation_id": conversation_id}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return await read_all(r)
