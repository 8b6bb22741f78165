"""The real `agent serve` process, web chat and Slack bot on one port and one conversation file: a person asks
in a private Slack channel, and someone holding the web's token replays the chain a Slack answer's link
opens. The link gives its query alone; the run's events, the thread, a web turn in it, a thumb on it and its
deletion answer exactly as ids never seen. And thumbs have a budget: a flood is refused past it."""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.demo_data import copy_demo
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import BOT_USER_ID, HUMAN_ID
from tests.fakes.sse_client import sse_events

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "web-token-for-the-whole-team"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
WEB = "https://analyst.example"
PAYROLL = "G0PAYROLL01"  # a private channel
SQL = "SELECT carrier, count() AS n FROM nycflights13.flights GROUP BY carrier ORDER BY n DESC LIMIT 3"
SLACK_QUESTION = "Which carriers flew the most? (payroll thread, do not share)"


def model(body: dict[str, Any]) -> Reply:
    """Round 1: a query; round 2: the answer; a request without tools: follow-ups."""
    if not body.get("tools"):
        return Reply(text='["And the least?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="UA flew the most: 58,665 flights [Q1].")
    return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Flights per carrier", "sql": SQL}]})])


@pytest.fixture(scope="module")
def engine_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data never opened by this process, so the `agent serve` under test can claim the directory."""
    return copy_demo(tmp_path_factory, tmp_path_factory.mktemp("contain-data") / "clickhouse")


class Serving:
    """`agent <command>` in a process of its own on a free port, as an operator starts it."""

    def __init__(self, tmp_path: Path, command: str, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.data = tmp_path / "app"
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "AGENT_DATA_DIR": str(self.data),
            "ANTHROPIC_API_KEY": "test-key",
            "AGENT_WEB_TOKEN": TOKEN,
            "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
        }
        self.output = tmp_path / f"{command}.log"  # a file, not a pipe: a flood's log lines never fill it and stall
        with self.output.open("w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "process.cli", command, "--port", str(port)],
                env={**base, **env},
                cwd=tmp_path,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.finish()
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"not ready in {timeout_s} s: {self.finish()}")

    def finish(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=60)
        return f"exit {self.process.returncode}\n{self.output.read_text()[-6000:]}"

    def stored(self, sql: str) -> list[tuple[Any, ...]]:
        """What the state file holds, read as an operator would (not through the app)."""
        with sqlite3.connect(self.data / "state.sqlite3") as conn:
            return conn.execute(sql).fetchall()


@pytest.fixture
def served_model(fake_anthropic: FakeAnthropic) -> Iterator[FakeAnthropic]:
    fake_anthropic.always(model)
    yield fake_anthropic


async def ask_in_slack(served: Serving, fake: FakeSlack) -> str:
    """A person mentions the bot in the private channel, delivered signed to /slack/events; returns the
    link the answer gives its query, once the answer is stored."""
    fake.add_channel(PAYROLL, "payroll", is_private=True, members={HUMAN_ID, BOT_USER_ID})
    ts = fake.add_message(PAYROLL, f"<@{BOT_USER_ID}> {SLACK_QUESTION}")
    delivery = events.events_request(events.event_callback(events.app_mention(SLACK_QUESTION, channel=PAYROLL, ts=ts)))
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        assert (await client.post("/slack/events", content=delivery.body, headers=delivery.headers)).status_code == 200
    for _ in range(600):
        if links := linked_queries(fake):
            return links[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no answer in Slack: {served.finish()}")


def linked_queries(fake: FakeSlack) -> list[str]:
    calls = fake.calls("chat.startStream") + fake.calls("chat.appendStream")
    chunks = [chunk for c in calls if c.ok for chunk in c.args.get("chunks") or [] if chunk["type"] == "task_update"]
    return [source["url"] for chunk in chunks for source in chunk.get("sources") or []]


async def test_a_slack_thread_is_out_of_the_webs_reach_but_its_linked_query(
    served_model: FakeAnthropic, fake_slack: FakeSlack, engine_data: Path, tmp_path: Path
) -> None:
    env = {
        "ANTHROPIC_BASE_URL": served_model.base_url,
        "CLICKHOUSE_URL": f"chdb://{engine_data}",
        "SLACK_BOT_TOKEN": fake_slack.bot_token,
        "SLACK_SIGNING_SECRET": events.SIGNING_SECRET,
        "SLACK_API_URL": fake_slack.base_url,
        "AGENT_WEB_URL": WEB,
    }
    served = Serving(tmp_path, "serve", env)
    try:
        await served.ready()
        link = await ask_in_slack(served, fake_slack)
        async with httpx.AsyncClient(base_url=served.url, headers=BEARER, timeout=60) as web:
            await replay_the_chain(served, web, link.removeprefix(f"{WEB}/queries/"), served_model)
    finally:
        report = served.finish()
    assert served.process.returncode == 0, report


async def replay_the_chain(served: Serving, web: httpx.AsyncClient, query_id: str, model: FakeAnthropic) -> None:
    run_id = query_id.rsplit("-", 1)[0]
    await until_stored(web, query_id)
    shown = await web.get(f"/api/queries/{query_id}")
    assert shown.status_code == 200 and (await web.get(f"/queries/{query_id}")).status_code == 200
    query = shown.json()
    assert query["sql"] == SQL and query["rows"][0] == ["UA", 58665] and query["asked"] == SLACK_QUESTION
    [(conversation_id, key)] = served.stored("SELECT id, adapter_key FROM conversations WHERE interface = 'slack'")
    assert PAYROLL in key
    assert not [secret for secret in (conversation_id, key, PAYROLL, "conversation_id") if secret in shown.text]
    csv = await web.get(f"/api/queries/{query_id}.csv")
    assert csv.status_code == 200 and csv.text.splitlines()[1] == "UA,58665"

    asked_model = len(model.requests)
    never = "0" * 32  # an id of the same shape that nothing has
    steps: list[tuple[str, str, Callable[[str], dict[str, Any]]]] = [
        ("GET", f"/api/runs/{run_id}/events", lambda _: {}),
        ("GET", f"/api/conversations/{conversation_id}", lambda _: {}),
        ("POST", "/api/chat", lambda target: {"json": {"message": "Every earlier turn?", "conversation_id": target}}),
        ("POST", f"/api/runs/{run_id}/feedback", lambda _: {"json": {"value": "down", "reason": "Wrong."}}),
        ("DELETE", f"/api/conversations/{conversation_id}", lambda _: {}),
    ]
    for method, path, body in steps:
        target = run_id if "/runs/" in path else conversation_id
        ours = await web.request(method, path, **body(target))
        theirs = await web.request(method, path.replace(target, never), **body(never))
        assert ours.status_code == theirs.status_code == 404, (method, path, ours.status_code, ours.text[:300])
        assert ours.content == theirs.content.replace(never.encode(), target.encode()), (method, path)
        assert ours.headers["content-type"] == theirs.headers["content-type"]
    assert len(model.requests) == asked_model, "no web turn ran in the Slack thread"
    assert served.stored("SELECT count(*) FROM conversations WHERE interface = 'slack'") == [(1,)], "not deleted"
    assert served.stored(f"SELECT feedback FROM turns WHERE run_id = '{run_id}'") == [(None,)], "not thumbed"
    assert served.stored("SELECT count(*) FROM turns") == [(1,)], "no web turn added to the thread"


async def until_stored(web: httpx.AsyncClient, query_id: str) -> None:
    for _ in range(200):
        if (await web.get(f"/api/queries/{query_id}")).status_code == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"query {query_id} was never stored")


async def test_a_flood_of_thumbs_is_refused_past_its_budget(
    served_model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    """600 thumbs in under a second were all taken; now the client's budget (30 a minute by default) holds."""
    env = {"ANTHROPIC_BASE_URL": served_model.base_url, "CLICKHOUSE_URL": f"chdb://{engine_data}"}
    served = Serving(tmp_path, "web", env)
    try:
        await served.ready()
        async with httpx.AsyncClient(base_url=served.url, headers=BEARER, timeout=60) as web:
            async with web.stream("POST", "/api/chat", json={"message": "Which carriers flew the most?"}) as answer:
                answered = [event async for event in sse_events(answer)]  # to `done`: the turn is stored
            run_id = answered[0].data["run_id"]
            thumbs = [(await web.post(f"/api/runs/{run_id}/feedback", json={"value": "up"})) for _ in range(100)]
    finally:
        report = served.finish()
    assert served.process.returncode == 0, report
    statuses = [t.status_code for t in thumbs]
    assert statuses == [200] * 30 + [429] * 70, statuses
    assert thumbs[-1].json()["error"].startswith("Too many thumbs") and int(thumbs[-1].headers["Retry-After"]) >= 1
