"""The Slack bot as `agent serve` composes it (mounted on the web app, on a real socket), driven with
signed HTTP requests, against the fake Slack Web API and the fake model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from agent.app import AgentApp
from bots.slack import SlackBot
from process.service import Service
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import Reply
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.fakes.slack_limits import SENT_AT_HEADER
from tests.web_helpers import LiveServer

FAST = {"slack_progress_interval_s": 0.02}


def slack_settings(fake: FakeSlack, **overrides: Any) -> dict[str, Any]:
    return {
        "slack_bot_token": fake.bot_token,
        "slack_signing_secret": events.SIGNING_SECRET,
        "slack_api_url": fake.base_url,
        **FAST,
        **overrides,
    }


def sql_call(question: str, sql: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": sql}]})


class _SentAt(Mapping[str, str]):
    """A client's headers and the moment of each call: the SDK copies them as it makes the call."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = dict(headers)

    def __getitem__(self, key: str) -> str:
        return repr(time.monotonic()) if key == SENT_AT_HEADER else self._headers[key]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._headers, SENT_AT_HEADER])

    def __len__(self) -> int:
        return len(self._headers) + 1


def stamp_sends(client: Any) -> None:
    """Every call `client` (an AsyncWebClient) makes tells the fake when it was made, so the fake counts Slack's
    tiers by the moment the bot sent it, as the bot's budget does (tests/fakes/slack_limits.py says why)."""
    client.headers = _SentAt(client.headers)


def held_first(script: list[Any]) -> tuple[threading.Event, list[Any]]:
    """The script, with its first model reply held back until the event is set: what happens before it is
    set happened before the model answered, however busy the machine."""
    gate = threading.Event()
    first = script[0]

    def held(body: dict[str, Any]) -> Any:
        gate.wait(30)
        return first

    return gate, [held, *script[1:]]


def carriers_script(answer: str = "UA flew the most flights: 58,665 [Q1].") -> list[Any]:
    """A query, the answer, and follow-ups."""
    return [
        Reply(
            tool_calls=[
                sql_call(
                    "Flights per carrier",
                    "SELECT carrier, count() AS n FROM nycflights13.flights GROUP BY carrier ORDER BY n DESC",
                )
            ]
        ),
        Reply(text=answer),
        Reply(text='["Which carrier was most punctual?", "How did UA do month by month?"]'),
    ]


class SlackHarness:
    """One bot, served by uvicorn on loopback; `restart()` starts another on the same conversation file."""

    def __init__(self, make_app: Callable[..., AgentApp], fake: FakeSlack, tmp_path: Path) -> None:
        self._make_app, self.fake, self._tmp_path = make_app, fake, tmp_path
        self._overrides: dict[str, Any] = {}
        self._workers = 1
        self.service: Service | None = None
        self._server: LiveServer | None = None
        self.http: httpx.AsyncClient | None = None

    async def start(
        self, *, workers: int = 1, prepare: Callable[[AgentApp], None] | None = None, **overrides: Any
    ) -> SlackHarness:
        """Settings from `overrides`. With `workers` > 1 the bot is one of several worker processes
        sharing the conversation file, as `agent serve --workers N` runs them (here, in one process).
        `prepare` sees the agent before the service is built (e.g. to record what its runner is given)."""
        self._overrides, self._workers = overrides, workers
        agent = self._make_app(agent_data_dir=self._tmp_path, **slack_settings(self.fake, **overrides))
        if prepare is not None:
            prepare(agent)
        self.service = await Service.open(agent.settings, web=True, slack=True, agent=agent, workers=workers)
        self._server = LiveServer(self.service.app)
        await self._server.__aenter__()
        self.http = httpx.AsyncClient(base_url=self._server.url, timeout=10)
        return self

    @property
    def bot(self) -> SlackBot:
        assert self.service is not None and self.service.bot is not None
        return self.service.bot

    @property
    def metrics(self) -> Any:
        assert self.service is not None
        return self.service.agent.metrics

    async def deliver(self, request: events.SignedRequest) -> httpx.Response:
        assert self.http is not None
        return await self.http.post("/slack/events", content=request.body, headers=request.headers)

    async def event(self, event: dict[str, Any], *, event_id: str | None = None, **options: Any) -> httpx.Response:
        """Deliver an Events API event_callback, signed (options as for slack_events.sign)."""
        return await self.deliver(events.events_request(events.event_callback(event, event_id=event_id), **options))

    async def click(self, payload: dict[str, Any]) -> httpx.Response:
        return await self.deliver(events.interactivity_request(payload))

    async def idle(self) -> None:
        # A limit on waiting, not a claim about speed: a chart's first render on a loaded machine (a
        # renderer process starting beside other work) has taken over 15 s.
        await asyncio.wait_for(self.bot.idle(), 60)

    async def ask(self, text: str, *, channel: str = GENERAL_ID, thread_ts: str | None = None) -> str:
        """A person mentions the bot (top level, or in a thread); returns the message's ts."""
        ts = self.fake.add_message(channel, f"<@{self.fake.bot_user_id}> {text}", thread_ts=thread_ts)
        response = await self.event(events.app_mention(text, channel=channel, ts=ts, thread_ts=thread_ts))
        assert response.status_code == 200
        await self.idle()
        return ts

    async def restart(self, **overrides: Any) -> SlackHarness:
        await self.stop()
        return await self.start(workers=self._workers, **{**self._overrides, **overrides})

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self._server is not None:
            await self._server.__aexit__()
            self._server = None
        if self.service is not None:
            await self.service.close()
            self.service = None


def bot_replies(fake: FakeSlack, channel: str, thread_ts: str) -> list[dict[str, Any]]:
    return [m for m in fake.replies(channel, thread_ts) if m.get("bot_id") == fake.bot_id]


def answer_message(fake: FakeSlack, channel: str, thread_ts: str) -> dict[str, Any]:
    [answer] = [m for m in bot_replies(fake, channel, thread_ts) if (m.get("metadata") or {}).get("event_type")]
    return answer


def sample(metrics: Any, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return float(value or 0)


async def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.01)
