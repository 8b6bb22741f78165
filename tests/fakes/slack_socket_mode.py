"""Slack's end of Socket Mode: a websocket server (aiohttp, on its own thread and event loop) that
apps.connections.open points to. On connect it sends `hello`; it pushes `events_api`, `interactive`,
`slash_commands` and `disconnect` envelopes and records the acks (`{"envelope_id": ...}`) the client
sends back. Message shapes follow docs.slack.dev/apis/events-api/using-socket-mode.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.slack_workspace import APP_ID


@dataclass
class Ack:
    envelope_id: str
    payload: dict[str, Any] | None
    raw: dict[str, Any]


class FakeSocketMode:
    def __init__(self, *, app_id: str = APP_ID) -> None:
        self.app_id = app_id
        self.connections = 0
        self._received: list[dict[str, Any]] = []
        self._acks: list[Ack] = []
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-slack-socket-mode", daemon=True)
        self._runner: web.AppRunner | None = None
        self._port = 0

    # --- control ---

    def start(self) -> FakeSocketMode:
        self._thread.start()
        self._run(self._start())
        return self

    def stop(self) -> None:
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def reset(self) -> None:
        with self._lock:
            self._received.clear()
            self._acks.clear()

    def issue_url(self) -> str:
        """A fresh ws:// URL, as apps.connections.open returns (wss://wss-primary.slack.com/link/?ticket=...)."""
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
        return f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"

    # --- what the client sent ---

    @property
    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    @property
    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._received)

    async def wait_for_ack(self, envelope_id: str, timeout: float = 30.0) -> Ack:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((a for a in self.acks if a.envelope_id == envelope_id), None)
            if found is not None:
                return found
            await asyncio.sleep(0.005)
        raise TimeoutError(f"no ack for envelope {envelope_id} within {timeout}s")

    async def wait_connected(self, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.connections < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.connections} Socket Mode connection(s), expected {count}")
            await asyncio.sleep(0.005)

    # --- what Slack sends ---

    def events_api(
        self,
        payload: dict[str, Any],
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        accepts_response_payload: bool = False,
    ) -> str:
        """Push an Events API payload (an `event_callback`, see slack_events.event_callback)."""
        return self._envelope(
            "events_api",
            payload,
            accepts_response_payload,
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
        )

    def interactive(self, payload: dict[str, Any]) -> str:
        """Push an interactivity payload (e.g. slack_events.block_actions(...))."""
        return self._envelope("interactive", payload, True)

    def slash_command(self, payload: dict[str, Any]) -> str:
        return self._envelope("slash_commands", payload, True)

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask clients to reconnect (`warning`, `refresh_requested` or `link_disabled`)."""
        self.send({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

    def send(self, message: dict[str, Any]) -> None:
        self._run(self._send(message))

    def _envelope(self, kind: str, payload: dict[str, Any], accepts_response_payload: bool, **extra: Any) -> str:
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": accepts_response_payload,
            **extra,
        }
        self.send(envelope)
        return envelope_id

    # --- the server, on its own loop ---

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._link)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, message: dict[str, Any]) -> None:
        if not self._sockets:
            raise RuntimeError("no Socket Mode client is connected")
        await self._sockets[-1].send_str(json.dumps(message))

    async def _link(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            known = request.query.get("ticket") in self._tickets
        if not known:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        await ws.send_str(json.dumps(self._hello()))
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._record(json.loads(message.data))
        finally:
            self._sockets.remove(ws)
        return ws

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": len(self._sockets),
            "debug_info": {"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.app_id},
        }

    def _record(self, message: Any) -> None:
        with self._lock:
            self._received.append(message)
            if isinstance(message, dict) and isinstance(message.get("envelope_id"), str):
                self._acks.append(Ack(message["envelope_id"], message.get("payload"), message))
