"""One process serves the web chat and the bot (`agent serve`), or the bot alone (`agent slack`): Slack
over HTTP at /slack/events, or over Socket Mode (a real websocket) as a task on the same event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agent.app import AgentApp
from agent.config import ConfigError
from bots.slack import SlackBot
from chats.state import ChatState
from process.service import Service
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import BOT_USER_ID, GENERAL_ID, FakeSlack, FakeSocketMode
from tests.slack_helpers import carriers_script, held_first, slack_settings
from tests.web_helpers import LiveServer
from web.exposure import server_options


class Running:
    """The service's app on a real socket, as `agent serve` runs it, until stopped."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(service.app, log_level="warning", **server_options(service.agent.settings))
        self.server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Running:
        self._task = asyncio.create_task(self.server.serve(sockets=[self._socket]))
        while not self.server.started:
            assert not self._task.done(), self._task.exception()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_: Any) -> None:
        self.server.should_exit = True
        if self._task is not None:
            await self._task
        await self.service.close()
        self._socket.close()


@pytest.fixture
async def open_service(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    opened: list[Service] = []

    async def open_(*, web: bool, slack: bool, **overrides: Any) -> Service:
        agent = make_app(agent_data_dir=tmp_path, **slack_settings(fake_slack, **overrides))
        service = await Service.open(agent.settings, web=web, slack=slack, agent=agent)
        opened.append(service)
        return service

    yield open_
    for service in opened:
        await service.close()


async def test_serve_answers_over_socket_mode_beside_the_web_chat(
    open_service, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    socket_mode = fake_slack.socket_mode
    assert isinstance(socket_mode, FakeSocketMode)
    connections = socket_mode.connections
    service = await open_service(web=True, slack=True, slack_app_token=fake_slack.app_token, slack_signing_secret=None)
    assert service.slack_mode == "Socket Mode"
    async with Running(service) as running, httpx.AsyncClient(base_url=running.url, timeout=10) as http:
        await socket_mode.wait_connected(connections + 1)
        model_answers, script = held_first(carriers_script())
        fake_anthropic.script(*script)
        question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
        payload = events.event_callback(events.app_mention("which carrier flew the most?", ts=question))
        first = socket_mode.events_api(payload)
        await socket_mode.wait_for_ack(first)  # acknowledged while the model has not answered yet
        model_answers.set()
        retried = socket_mode.events_api(payload, retry_attempt=1, retry_reason="timeout")
        await socket_mode.wait_for_ack(retried)
        assert service.bot is not None
        await asyncio.wait_for(service.bot.idle(), 10)

        answers = [m for m in fake_slack.replies(GENERAL_ID, question) if m.get("metadata")]
        assert [m["text"] for m in answers] == ["UA flew the most flights: 58,665 [Q1]."]
        assert (await http.get("/")).status_code == 200
        examples = await http.get("/api/examples")  # the page is a shell; its script asks for these
        assert examples.status_code == 200 and "Which NYC airport had the most departures in 2013?" in examples.text
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.post("/slack/events", json={})).status_code == 404  # Socket Mode: no HTTP endpoint
    assert fake_slack.last("apps.connections.open").ok


async def test_slack_alone_serves_its_endpoint_health_and_metrics(
    open_service, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    service = await open_service(web=False, slack=True)
    assert service.slack_mode == "HTTP at /slack/events"
    async with Running(service) as running, httpx.AsyncClient(base_url=running.url, timeout=10) as http:
        challenge = events.events_request(events.url_verification("xyz"))
        verified = await http.post("/slack/events", content=challenge.body, headers=challenge.headers)
        fake_anthropic.script(*carriers_script())
        question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
        mention = events.events_request(events.event_callback(events.app_mention("which carrier?", ts=question)))
        assert (await http.post("/slack/events", content=mention.body, headers=mention.headers)).status_code == 200
        assert service.bot is not None
        await asyncio.wait_for(service.bot.idle(), 10)
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
        metrics = (await http.get("/metrics")).text
        page = await http.get("/")
    assert verified.json() == {"challenge": "xyz"}
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ready.status_code == 200 and ready.json()["database"] == "ok" and ready.json()["schema"] == "ok"
    assert 'agent_slack_answers_total{delivery="stream"} 1.0' in metrics
    assert page.status_code == 404, "the web chat is not served by `agent slack`"


async def test_serve_without_slack_settings_is_the_web_chat_alone(open_service, fake_slack: FakeSlack) -> None:
    service = await open_service(web=True, slack=False)
    assert service.slack_mode == "off" and service.bot is None
    async with LiveServer(service.app) as server, httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.post("/slack/events", json={})).status_code == 404
    assert fake_slack.calls() == []


async def test_missing_or_refused_slack_settings_are_one_line_naming_the_variable(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, tmp_path: Path
) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    try:
        with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN: "):
            SlackBot(make_app(), state)
        with pytest.raises(ConfigError, match=r"^SLACK_SIGNING_SECRET: "):
            SlackBot(make_app(slack_bot_token="xoxb-1"), state)
        refused = SlackBot(make_app(**slack_settings(fake_slack, slack_bot_token="xoxb-wrong")), state)
        with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN: Slack refused it \(invalid_auth\)"):
            await refused.start()
    finally:
        state.close()


async def test_the_bot_is_built_without_walking_the_stack(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bolt names an unnamed app from `inspect.stack()`, which reads the source of every frame: a quarter
    of a second of CPU per bot built under pytest's deep stacks (py-spy). The bot names itself."""
    import inspect

    walks: list[int] = []
    stack = inspect.stack
    monkeypatch.setattr(inspect, "stack", lambda *args, **kwargs: walks.append(1) or stack(*args, **kwargs))
    state = ChatState(tmp_path / "c.sqlite3")
    try:
        bot = SlackBot(make_app(**slack_settings(fake_slack)), state)
        assert walks == [] and bot.app.name == "clickhouse-analyst"
    finally:
        state.close()
