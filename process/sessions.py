"""Where `agent ask` and `agent chat` get their answers: this process (its own engine and model client),
or the server that holds the embedded data (`make demo`, `agent web`), asked over its HTTP API.

Either way a question belongs to a conversation kept in the same store as the web's, and the answer
arrives as the same wire events the web chat reads (agent/runner.py, `WireEvent`). The conversation a
command last used is remembered in the data folder, for `--continue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent.config import Settings
from process import running_server
from process.errors import UsageError
from process.running_server import RunningServer, find

if TYPE_CHECKING:
    from agent.runner import FinalAnswer, Outcome, RunResult, WireEvent
    from chats.run_view import RunView

OnEvent = Callable[["WireEvent"], Awaitable[None]]
LAST_FILE = "cli-conversation"  # in AGENT_DATA_DIR: the conversation `--continue` goes on with


@dataclass
class Asked:
    """What came of one question: its conversation, the run as its events told it, and (this process's runs
    only) the whole result."""

    conversation_id: str
    result: RunResult | None = None
    view: RunView = field(default_factory=lambda: _run_view())

    def record(self, event: WireEvent) -> None:
        self.view.apply(event)

    @property
    def final(self) -> FinalAnswer | None:
        return self.view.result

    @property
    def outcome(self) -> Outcome | None:
        if self.result is not None:
            return self.result.outcome
        return self.final.outcome if self.final is not None else None

    def summary(self) -> dict[str, Any]:
        """The JSON of `agent ask --json`: the whole result's, or, from a server, what its events carried
        (each query's preview rows)."""
        if self.result is not None:
            summary = self.result.summary()
        elif self.final is not None:
            final = self.final.model_dump(mode="json")
            keys = ("question", "answer", "classification", "followups", "model", "figures", "receipt", "metrics")
            summary = {key: final[key] for key in keys}
            queries = [query.summary() for query in self.view.queries.values()]
            summary |= {"queries": queries, "charts": [chart.summary() for chart in self.view.charts]}
        else:
            summary = {"answer": "", "error": "The server ended the answer without a result."}
        return {**summary, "conversation_id": self.conversation_id}


def _run_view() -> RunView:
    from chats.run_view import RunView  # when a question is asked: `agent --help` loads no engine

    return RunView()


class Session(Protocol):
    where: str  # "" for this process; the server's address otherwise

    async def check(self) -> None:
        """Raise (DatabaseUnavailable, UsageError) when no question could be answered."""

    async def ask(self, question: str, conversation_id: str | None, on_event: OnEvent, *, followups: bool) -> Asked:
        """Ask in the conversation (a new one when None), passing each event on as it comes."""

    async def close(self) -> None: ...


def open_session(settings: Settings) -> Session:
    """The running server's, when one holds the embedded data; else this process's own."""
    if (server := find(settings)) is not None:
        return RemoteSession(server)
    return LocalSession(settings)


def last_conversation(settings: Settings) -> str | None:
    try:
        return (settings.agent_data_dir / LAST_FILE).read_text().strip() or None
    except OSError:
        return None


def remember(settings: Settings, conversation_id: str) -> None:
    path: Path = settings.agent_data_dir / LAST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(conversation_id + "\n")


class LocalSession:
    """This process answers, through the same run registry and store as the web chat."""

    where = ""

    def __init__(self, settings: Settings) -> None:
        from agent.app import AgentApp
        from agent.llm import LLMConfigError
        from chats.runs import RunRegistry
        from chats.state import ChatState

        if problem := settings.missing_model_key():
            raise LLMConfigError(problem)
        self._app = AgentApp.start(settings)
        self._state = ChatState.of(settings)
        self._store = self._state.conversations
        self._runs = RunRegistry(self._app.runner, self._store, max_event_bytes=settings.max_event_bytes)

    async def check(self) -> None:
        await self._app.db.ping()  # an unreachable ClickHouse: DatabaseUnavailable, as `agent sql` says it

    async def ask(self, question: str, conversation_id: str | None, on_event: OnEvent, *, followups: bool) -> Asked:
        from chats.audit import Origin
        from chats.people import LOCAL, person_owner

        if conversation_id is None:
            conversation_id = await self._store.create_conversation(
                question, interface="cli", owner=person_owner(LOCAL)
            )
        elif not await self._store.exists(conversation_id):
            raise UsageError(f"No conversation {conversation_id} in {self._state.path}.")
        asked = Asked(conversation_id)

        async def keep(result: RunResult) -> None:
            asked.result = result

        history = await self._store.history(conversation_id)
        handle = self._runs.start(
            conversation_id,
            question,
            history,
            platform="cli",
            interface="cli",
            followups=followups,
            on_done=keep,
            origin=Origin(person_owner(LOCAL), "cli"),
        )
        try:
            async for event in self._runs.follow(handle):
                asked.record(event.body)
                await on_event(event.body)
        except asyncio.CancelledError:  # Ctrl-C: the model call stops, the queries are killed, stored as cancelled
            if handle.task is not None:
                handle.task.cancel()
                await asyncio.gather(handle.task, return_exceptions=True)
            raise
        return asked

    async def close(self) -> None:
        await self._runs.shutdown()
        await self._app.close()
        self._state.close()


class RemoteSession:
    """The server that holds the data answers; its events come back over SSE, as the web chat reads them."""

    def __init__(self, server: RunningServer) -> None:
        import httpx

        self.where = server.url
        self._server = server
        self._proven = False
        # No read timeout: an answer's events may be minutes apart while a query runs (the server pings).
        # No token yet: it is sent once the listener proved it wrote server.json (`_prove`).
        self._client = httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(10, read=None))

    async def check(self) -> None:
        await self._prove()

    async def _prove(self) -> None:
        """Ask /healthz, unauthenticated, to prove it knows server.json's key; only then carry the token.
        A stale record's port may be anyone's now: they get a random challenge and nothing else."""
        import httpx

        if self._proven:
            return
        challenge = running_server.new_challenge()
        try:
            response = await self._client.get("/healthz", headers={running_server.CHALLENGE_HEADER: challenge})
        except httpx.TransportError as exc:
            raise UsageError(f"The server at {self.where} holds the data but does not answer ({exc}).") from None
        if not running_server.proves(self._server, challenge, response.headers.get(running_server.PROOF_HEADER)):
            raise UsageError(
                f"What answers at {self.where} is not the server that wrote server.json (process "
                f"{self._server.pid}); stop process {self._server.pid} and ask again."
            )
        if response.status_code != 200:
            raise UsageError(f"The server at {self.where} answered /healthz with {response.status_code}.")
        if self._server.token:
            self._client.headers["Authorization"] = f"Bearer {self._server.token}"
        self._proven = True

    async def ask(self, question: str, conversation_id: str | None, on_event: OnEvent, *, followups: bool) -> Asked:
        from httpx_sse import aconnect_sse

        from agent.runner import WIRE_EVENT

        await self._prove()
        asked = Asked(conversation_id or "")
        body = {"message": question, "conversation_id": conversation_id}
        async with aconnect_sse(self._client, "POST", "/api/chat", json=body) as source:
            if source.response.status_code != 200:
                await source.response.aread()
                raise UsageError(f"The server at {self.where} refused the question: {_error(source.response)}")
            async for sse in source.aiter_sse():
                data = json.loads(sse.data)
                asked.conversation_id = str(data.get("conversation_id") or asked.conversation_id)
                event = WIRE_EVENT.validate_python({**data, "type": sse.event})
                asked.record(event)
                await on_event(event)
        return asked

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._client.aclose()


def _error(response: Any) -> str:
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"
