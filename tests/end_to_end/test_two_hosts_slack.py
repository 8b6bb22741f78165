"""Slack over two `agent serve` hosts on one PostgreSQL (tests/hosts.py), with Slack's signed HTTP deliveries
sent to one host or the other as a load balancer would: an event redelivered to the other host is answered
once, and a thread's messages that reach different hosts are answered in order, each with the ones before."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.hosts import Hosts, host_environment, running_hosts
from tests.postgres import PostgresServer
from tests.slack_helpers import bot_replies, wait_for

pytestmark = pytest.mark.timeout(300)

AIRLINES = "SELECT count() FROM nycflights13.airlines"


def _question(body: dict[str, Any]) -> str:
    """The text of the last person's message the model is sent (the question now being answered)."""
    for message in reversed(body["messages"]):
        content = message["content"]
        if message["role"] != "user":
            continue
        if isinstance(content, str):
            return content
        texts = [block["text"] for block in content if block.get("type") == "text"]
        if texts:
            return texts[-1]
    return ""


class ThreadModel:
    """Each question: a query, then "Answer to <question>", then follow-ups. A question that says "held"
    gets its answer only once `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Event()  # a held question is waiting for its answer

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text='["Which carrier flew the most?"]')
        question = _question(body)
        if body["messages"][-1]["content"][0]["type"] == "tool_result":
            if "held" in question:
                self.held.set()
                self.release.wait(120)
            return Reply(text=f"Answer to {_words(question)} [Q1].")
        return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": AIRLINES}]})])


def _words(question: str) -> str:
    return re.sub(r"<@\w+>", "", question).strip()


@pytest.fixture
def model() -> Iterator[tuple[FakeAnthropic, ThreadModel]]:
    fake, script = FakeAnthropic().start(), ThreadModel()
    fake.always(script)
    yield fake, script
    script.release.set()
    fake.stop()


@pytest.fixture
def hosts(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, ThreadModel],
    fake_slack: FakeSlack,
    tmp_path: Path,
) -> Iterator[Hosts]:
    env = host_environment(
        postgres_server.new_database(),
        clickhouse_fake.url("agent", "nycflights13"),
        model_url=model[0].base_url,
        slack_api_url=fake_slack.base_url,
        slack_bot_token=fake_slack.bot_token,
    )
    with running_hosts(tmp_path, env) as started:
        yield started


async def _deliver(url: str, request: events.SignedRequest) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{url}/slack/events", content=request.body, headers=request.headers)
        return response.status_code


def _answers(fake: FakeSlack, thread_ts: str) -> list[str]:
    """The bot's answers in the thread, oldest first (its progress and notes left out)."""
    return [m["text"] for m in bot_replies(fake, GENERAL_ID, thread_ts) if "Answer to" in m.get("text", "")]


def _finished(fake: FakeSlack, thread_ts: str) -> int:
    """The answers in the thread whose words have all arrived: an answer is posted at its first words and
    edited as the rest stream in, so one that merely exists may still read 'Answer to '."""
    return sum(answer.endswith("[Q1].") for answer in _answers(fake, thread_ts))


async def _duplicates(hosts: Hosts) -> float:
    """Deliveries the hosts dropped as an event already handled, over both."""
    total = 0.0
    async with httpx.AsyncClient(timeout=10) as client:
        for host in hosts.hosts:
            text = (await client.get(f"{host.url}/metrics")).text
            found = re.search(r'^agent_slack_duplicates_total\{kind="event"\} (\S+)$', text, re.MULTILINE)
            total += float(found.group(1)) if found else 0.0
    return total


async def test_an_event_redelivered_to_the_other_host_is_answered_once(
    hosts: Hosts, fake_slack: FakeSlack, model: tuple[FakeAnthropic, ThreadModel]
) -> None:
    model[1].release.set()
    await hosts.ready()
    text = "How many airlines are there?"
    ts = fake_slack.add_message(GENERAL_ID, f"<@{fake_slack.bot_user_id}> {text}")
    payload = events.event_callback(events.app_mention(text, ts=ts), event_id="Ev0REDELIVERED")
    first, again = events.events_request(payload), events.events_request(payload, retry_num=1)
    statuses = await asyncio.gather(_deliver(hosts.pinned(0), first), _deliver(hosts.pinned(1), again))

    assert statuses == [200, 200]
    await wait_for(lambda: _finished(fake_slack, ts) >= 1, 120)
    for _ in range(600):  # until the other host has dropped its delivery
        if await _duplicates(hosts) >= 1:
            break
        await asyncio.sleep(0.1)
    assert await _duplicates(hosts) == 1, "one host dropped the redelivery as already handled"
    assert _answers(fake_slack, ts) == [f"Answer to {text} [Q1]."], "answered once"
    asked = [body for body in model[0].requests if body.get("tools")]
    assert len(asked) == 2, "the model was asked once for the query and once for the answer, by one host"


async def test_a_threads_messages_reaching_different_hosts_are_answered_in_order(
    hosts: Hosts, fake_slack: FakeSlack, model: tuple[FakeAnthropic, ThreadModel]
) -> None:
    fake, script = model
    await hosts.ready()
    bot = f"<@{fake_slack.bot_user_id}>"
    root = fake_slack.add_message(GENERAL_ID, f"{bot} first held question")
    await _deliver(
        hosts.pinned(0),
        events.events_request(events.event_callback(events.app_mention("first held question", ts=root))),
    )
    await asyncio.to_thread(script.held.wait, 120)  # host 0 is answering the first question
    later = []
    for number, host in (("second", 1), ("third", 0)):
        text = f"{number} question"
        ts = fake_slack.add_message(GENERAL_ID, f"{bot} {text}", thread_ts=root)
        mention = events.app_mention(text, ts=ts, thread_ts=root)
        assert await _deliver(hosts.pinned(host), events.events_request(events.event_callback(mention))) == 200
        later.append(text)
    await asyncio.sleep(1)  # the later questions have reached their hosts and wait for their turn
    assert not [b for b in fake.requests if b.get("tools") and "second" in _question(b)], "the second waits its turn"
    script.release.set()
    await wait_for(lambda: _finished(fake_slack, root) >= 3, 180)

    assert _answers(fake_slack, root) == [
        "Answer to first held question [Q1].",
        "Answer to second question [Q1].",
        "Answer to third question [Q1].",
    ]
    third = next(b for b in fake.requests if b.get("tools") and _question(b) == "third question")
    history = str(third["messages"])
    assert "Answer to first held question" in history and "Answer to second question" in history, (
        "the third question was asked with the two answers before it, whichever host gave them"
    )
