"""kill -9 of a host mid-run (tests/hosts.py: two `agent serve` processes on one PostgreSQL and one ClickHouse
server, behind a proxy): the other host takes the run over once its lease lapses and finishes it without
running again the query that completed. The web reader who reattaches gets the rest of the same event log,
and a Slack thread gets the answer once, posted by the surviving host's bot; the receipt says it was
resumed. A run past its resumes ends with a message in its thread, never silence."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import BOT_USER_ID, HUMAN_ID
from tests.fakes.sse_client import sse_events
from tests.hosts import Hosts, host_environment, running_hosts
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(300)

AIRLINES = "SELECT count() AS airlines FROM nycflights13.airlines"
AIRPORTS = "SELECT count() AS airports FROM nycflights13.airports"
ANSWER = "There are 16 airlines [Q1] and 1,458 airports [Q2]."
QUESTION = "How many airlines and airports are there?"
LEASE_S = "1.5"
CHANNEL = "C0DURABLE01"


class HeldModel:
    """Round 1 runs Q1. Round 2's first call is held (`holding` set) until `release`: the host dies during it.
    Called again (the run resumed on the other host), round 2 runs Q2, round 3 answers; follow-ups apart."""

    def __init__(self) -> None:
        self.holding, self.release = threading.Event(), threading.Event()
        self.second_rounds: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text='["Which carrier flew the most?"]')
        results = sum(
            1
            for message in body["messages"]
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        )
        if results == 0:
            return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": AIRLINES}]})])
        if results == 1:
            with self._lock:
                self.second_rounds.append(body)
                first = len(self.second_rounds) == 1
            if first:
                self.holding.set()
                self.release.wait(120)  # its host is killed meanwhile: nobody reads this
                return Reply(text="(too late)")
            return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airports", "sql": AIRPORTS}]})])
        return Reply(text=ANSWER)


@pytest.fixture
def model() -> Iterator[tuple[FakeAnthropic, HeldModel]]:
    fake, held = FakeAnthropic().start(), HeldModel()
    fake.always(held)
    yield fake, held
    held.release.set()
    fake.stop()


def _environment(postgres: PostgresServer, clickhouse: FakeClickHouse, model: FakeAnthropic, **more: Any) -> dict:
    return host_environment(
        postgres.new_database(),
        clickhouse.url("agent", "nycflights13"),
        model_url=model.base_url,
        agent_run_lease_s=LEASE_S,
        **more,
    )


async def _metric(url: str, name: str) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        text = (await client.get("/metrics")).text
    return sum(float(value) for value in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


async def _ask_and_hold(url: str, held: HeldModel) -> tuple[list[Any], asyncio.Task[None]]:
    """Ask at `url` until round 2's model call is held (Q1 has run): the events read so far (more may come
    until the host dies) and the reading, which ends when it does."""
    seen: list[Any] = []

    async def read() -> None:
        async with (
            httpx.AsyncClient(base_url=url, timeout=120) as client,
            client.stream("POST", "/api/chat", json={"message": QUESTION}) as response,
        ):
            assert response.status_code == 200, await response.aread()
            async for event in sse_events(response):
                seen.append(event)

    reading = asyncio.create_task(read())
    assert await asyncio.to_thread(held.holding.wait, 120), "round 2 was never asked"
    while "result" not in [event.event for event in seen]:
        await asyncio.sleep(0.05)
    return seen, reading


async def _follow(url: str, run_id: str, after: int) -> list[Any]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": str(after)}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        return [event async for event in sse_events(response)]


async def test_a_host_killed_mid_run_the_other_finishes_it_for_the_web_reader_who_reattaches(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, HeldModel],
    tmp_path: Path,
) -> None:
    fake, held = model
    env = _environment(postgres_server, clickhouse_fake, fake, agent_daily_user_tokens="10000000")
    with running_hosts(tmp_path, env) as hosts:
        await hosts.ready()
        seen, reading = await _ask_and_hold(hosts.pinned(0), held)
        run_id = seen[0].data["run_id"]
        hosts[0].kill()
        assert await asyncio.to_thread(hosts[0].wait, 30) == -9
        await asyncio.gather(reading, return_exceptions=True)  # its stream ends with its host
        rest = await _follow(hosts.pinned(1), run_id, int(seen[-1].id))  # the page reconnects, reaching host 1
        ran_on_survivor = await _metric(hosts[1].url, "agent_sql_queries_total")
        said = hosts.said(1)

    log = seen + rest
    assert [int(event.id) for event in log] == list(range(1, len(log) + 1)), "one log, nothing lost or repeated"
    names = [event.event for event in log]
    assert names[0] == "started" and names[-1] == "done", names
    assert [e.data["query_id"] for e in log if e.event == "executing"] == ["Q1", "Q2"]
    result = log[-1].data["result"]
    assert result["outcome"] == "answered" and result["answer"] == ANSWER
    assert result["resumed"] == 1 and result["receipt"]["resumed"] == 1
    assert "resumed after a host stopped" in result["receipt"]["text"]
    assert result["receipt"]["queries"] == 2  # Q1's read, counted from the checkpoint
    assert ran_on_survivor == 1, "the survivor ran Q2 alone: Q1, completed before the kill, was not run again"
    resumed_call = held.second_rounds[1]["messages"]  # the model got Q1's result back from the checkpoint
    assert "| 16 |" in str(resumed_call[-1]["content"])
    assert f'"run_id": "{run_id}"' in said and "taking over run" in said
    with psycopg.connect(env["AGENT_STATE_URL"]) as conn:
        kept = conn.execute("SELECT count(*) FROM durable_runs").fetchone()[0]
        held_back = conn.execute("SELECT count(*) FROM budget_reserved").fetchone()[0]
        spent = conn.execute("SELECT coalesce(sum(tokens), 0) FROM budget_spend").fetchone()[0]
    assert kept == 0, "a finished run is no longer kept for a takeover"
    receipt = result["receipt"]
    counted = sum(receipt[f"{kind}_tokens"] for kind in ("input", "output", "cache_read", "cache_creation"))
    assert held_back == 0 and spent == counted > 0, "the asker's hold settled to the resumed run's receipt"


async def test_a_host_stopped_by_sigterm_hands_a_run_outlasting_its_grace_to_the_other_at_once(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, HeldModel],
    tmp_path: Path,
) -> None:
    """A rolling restart with a run longer than the grace: not cancelled, but resumed on the other host, whose
    lease to wait out was released (a lease of a minute would otherwise hold it that long)."""
    fake, held = model
    env = _environment(postgres_server, clickhouse_fake, fake) | {
        "AGENT_SHUTDOWN_GRACE_S": "1",
        "AGENT_RUN_LEASE_S": "60",
    }
    with running_hosts(tmp_path, env) as hosts:
        await hosts.ready()
        seen, reading = await _ask_and_hold(hosts.pinned(0), held)
        run_id = seen[0].data["run_id"]
        hosts[0].terminate()
        await asyncio.gather(reading, return_exceptions=True)
        rest = await _follow(hosts.pinned(1), run_id, int(seen[-1].id))
        assert await asyncio.to_thread(hosts[0].wait, 60) == 0
        said = hosts.said(0)
    log = seen + rest
    assert [int(event.id) for event in log] == list(range(1, len(log) + 1)), "one log, nothing lost or repeated"
    result = log[-1].data["result"]
    assert result["outcome"] == "answered" and result["answer"] == ANSWER and result["resumed"] == 1
    assert "1 handed over, 0 cancelled" in said


def _ask_in_slack(hosts: Hosts, fake: FakeSlack) -> tuple[str, str]:
    fake.add_channel(CHANNEL, "durable", members={HUMAN_ID, BOT_USER_ID})
    ts = fake.add_message(CHANNEL, f"<@{BOT_USER_ID}> {QUESTION}")
    return ts, CHANNEL


async def _deliver(url: str, channel: str, ts: str) -> None:
    request = events.events_request(events.event_callback(events.app_mention(QUESTION, channel=channel, ts=ts)))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.post("/slack/events", content=request.body, headers=request.headers)
        assert response.status_code == 200


async def _until(condition: Any, what: str, within_s: float = 120) -> None:
    for _ in range(round(within_s / 0.1)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


def _answers(fake: FakeSlack, channel: str, ts: str, text: str) -> list[dict[str, Any]]:
    """The thread's messages whose text (as Slack shows it, streamed or posted) holds `text`."""
    return [m for m in fake.replies(channel, ts) if text in (m.get("text") or "") + str(m.get("blocks") or "")]


def _slack_environment(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    fake: FakeAnthropic,
    fake_slack: FakeSlack,
    **extra: str,
) -> dict:
    """Both hosts' environment with the Slack bot on, against the strict fake."""
    return _environment(
        postgres_server,
        clickhouse_fake,
        fake,
        slack_api_url=fake_slack.base_url,
        slack_bot_token=fake_slack.bot_token,
        slack_signing_secret=events.SIGNING_SECRET,
        **extra,
    )


async def test_a_host_killed_mid_run_the_other_posts_the_answer_in_the_slack_thread_once(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, HeldModel],
    fake_slack: FakeSlack,
    tmp_path: Path,
) -> None:
    fake, held = model
    env = _slack_environment(postgres_server, clickhouse_fake, fake, fake_slack)
    with running_hosts(tmp_path, env) as hosts:
        await hosts.ready()
        ts, channel = _ask_in_slack(hosts, fake_slack)
        await _deliver(hosts.pinned(0), channel, ts)
        assert await asyncio.to_thread(held.holding.wait, 120), "round 2 was never asked"
        await asyncio.sleep(0.5)
        hosts[0].kill()
        await asyncio.to_thread(hosts[0].wait, 30)
        await _until(lambda: _answers(fake_slack, channel, ts, "1,458 airports"), "no answer in the thread")
        await asyncio.sleep(1.0)  # nothing else arrives
        ran_on_survivor = await _metric(hosts[1].url, "agent_sql_queries_total")

    answered = _answers(fake_slack, channel, ts, "1,458 airports")
    assert len(answered) == 1, answered
    # The first host's progress message and its unfinished stream (Q1's plan) were taken back: the thread
    # shows one plan, the answer's, and no progress left saying it is still thinking.
    thread = fake_slack.replies(channel, ts)
    plans = [m for m in thread if any(block.get("type") == "plan" for block in m.get("blocks") or [])]
    assert len(plans) == 1 and plans[0] is not None and "1,458" in plans[0]["text"], thread
    assert not [m for m in thread if "Thinking" in (m.get("text") or "")], thread
    assert ran_on_survivor == 1, "Q1, completed before the kill, was not run again"
    receipts = _answers(fake_slack, channel, ts, "resumed after a host stopped")
    assert len(receipts) == 1, "the receipt says it was resumed"


async def test_a_run_past_its_resumes_ends_with_a_message_in_its_slack_thread(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, HeldModel],
    fake_slack: FakeSlack,
    tmp_path: Path,
) -> None:
    fake, held = model
    env = _slack_environment(
        postgres_server,
        clickhouse_fake,
        fake,
        fake_slack,
        agent_run_max_resumes="0",  # the lost step is a model call; none may be made again
    )
    with running_hosts(tmp_path, env) as hosts:
        await hosts.ready()
        ts, channel = _ask_in_slack(hosts, fake_slack)
        await _deliver(hosts.pinned(0), channel, ts)
        assert await asyncio.to_thread(held.holding.wait, 120)
        hosts[0].kill()
        await asyncio.to_thread(hosts[0].wait, 30)
        said = "couldn't pick your question up again"
        await _until(lambda: _answers(fake_slack, channel, ts, said), "no message in the thread")
    assert len(_answers(fake_slack, channel, ts, said)) == 1
    assert len(held.second_rounds) == 1, "no model call was made again"
    assert not _answers(fake_slack, channel, ts, "1,458 airports")
