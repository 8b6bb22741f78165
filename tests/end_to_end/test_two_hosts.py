"""Two `agent serve` hosts on one PostgreSQL and one ClickHouse server, behind a round-robin proxy
(tests/hosts.py): a web reader that reaches the other host follows a run live and replays a finished one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.sse_client import sse_events
from tests.hosts import Hosts, host_environment, running_hosts
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(300)

AIRLINES = "SELECT count() FROM nycflights13.airlines"


class GatedModel:
    """Round 1 runs a query, round 2 answers, a request without tools gets follow-ups. While `gate` is clear
    the answer waits: what a reader sees after it is set, it saw live."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text='["Which carrier flew the most?"]')
        if body["messages"][-1]["content"][0]["type"] == "tool_result":
            self.gate.wait(120)
            return Reply(text="There are 16 airlines [Q1].")
        return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": AIRLINES}]})])


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[FakeAnthropic, GatedModel]]:
    fake, gated = FakeAnthropic().start(), GatedModel()
    fake.always(gated)
    yield fake, gated
    fake.stop()


@pytest.fixture
def start_hosts(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, GatedModel],
    tmp_path: Path,
) -> Iterator[Callable[..., Hosts]]:
    """Starts two hosts with these settings (AGENT_...=...) on a database of their own; stopped at the end."""
    stack = ExitStack()

    def start(**settings: str) -> Hosts:
        env = host_environment(
            postgres_server.new_database(),
            clickhouse_fake.url("agent", "nycflights13"),
            model_url=model[0].base_url,
            **settings,
        )
        return stack.enter_context(running_hosts(tmp_path, env))

    with stack:
        yield start


@pytest.fixture
def hosts(start_hosts: Callable[..., Hosts]) -> Hosts:
    return start_hosts()


async def _started(url: str, question: str) -> Any:
    """Ask at `url`, and drop the stream once the run has `started` (its first event)."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        return await anext(aiter(sse_events(response)))


async def _follow(url: str, run_id: str, after: int | None = None, *, first: asyncio.Event | None = None) -> list[Any]:
    """The run's events from `url` to its end (after `after`, as a reconnecting page asks); `first` is set
    once the stream has opened."""
    headers = {"Last-Event-ID": str(after)} if after is not None else {}
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        if first is not None:
            first.set()
        return [event async for event in sse_events(response)]


async def test_a_reader_on_the_other_host_follows_a_live_run_and_replays_a_finished_one(
    hosts: Hosts, model: tuple[FakeAnthropic, GatedModel]
) -> None:
    _, gated = model
    await hosts.ready()
    gated.gate.clear()  # the answer waits until the other host's reader is attached
    try:
        started = await _started(hosts.pinned(0), "How many airlines are there?")
        run_id = started.data["run_id"]
        attached = asyncio.Event()
        following = asyncio.create_task(_follow(hosts.pinned(1), run_id, 1, first=attached))
        await asyncio.wait_for(attached.wait(), 60)
    finally:
        gated.gate.set()
    live = [started, *await following]
    replayed = await _follow(hosts.pinned(1), run_id)

    names = [event.event for event in live]
    assert names[0] == "started" and names[-1] == "done", names
    assert "answer" in names, "the answer, written after the reader attached, reached it on the other host"
    assert live[-1].data["result"]["outcome"] == "answered"
    assert [int(event.id) for event in live] == list(range(1, len(live) + 1)), "nothing lost or repeated"
    assert [(e.id, e.event) for e in replayed] == [(e.id, e.event) for e in live], "the replay is the run whole"
    assert hosts.proxy.served == {0: 1, 1: 2}


async def _asked(url: str, question: str, statuses: list[int], decided: asyncio.Event) -> list[Any]:
    """Ask at `url`, adding the status to `statuses` at once; an accepted question's stream is held open until
    `decided` (so its hold on the budget lasts meanwhile), then read to its end."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        statuses.append(response.status_code)
        if response.status_code != 200:
            await response.aread()
            return []
        await decided.wait()
        return [event async for event in sse_events(response)]


async def _ask_together(urls: list[str], *, then: Callable[[], None] = lambda: None) -> tuple[list[int], list[Any]]:
    """A question asked at each of `urls` at once: every status; once all are known, `then()`, and every answer."""
    statuses: list[int] = []
    decided = asyncio.Event()
    asking = [asyncio.create_task(_asked(url, f"Airlines? ({i})", statuses, decided)) for i, url in enumerate(urls)]
    try:
        while len(statuses) < len(urls) and not any(task.done() and task.exception() for task in asking):
            await asyncio.sleep(0.05)
    finally:
        then()
        decided.set()
    return statuses, await asyncio.gather(*asking)


async def test_a_clients_rate_limit_holds_across_hosts(start_hosts: Callable[..., Hosts]) -> None:
    hosts = start_hosts(agent_web_rate_per_minute="4")
    await hosts.ready()
    statuses, answers = await _ask_together([hosts.url] * 8)
    assert sorted(statuses) == [200] * 4 + [429] * 4, statuses
    assert all(a[-1].data["result"]["outcome"] == "answered" for a in answers if a)
    assert set(hosts.proxy.served) == {0, 1}, "both hosts took questions"


# A question holds its budget (100,000 tokens) plus one model call past it (a 50,000-token context and 256
# out); the day's budget fits two such holds: of the questions asked at once, two run, whichever hosts they reach.
HOLD = 100_000 + 50_000 + 256
BUDGET = {
    "agent_question_max_tokens": "100000",
    "agent_context_tokens": "50000",
    "agent_max_tokens": "256",
    "agent_daily_user_tokens": str(2 * HOLD),
}


async def test_a_daily_budgets_reservations_hold_across_hosts(
    start_hosts: Callable[..., Hosts], model: tuple[FakeAnthropic, GatedModel]
) -> None:
    hosts = start_hosts(**BUDGET)
    await hosts.ready()
    model[1].gate.clear()  # every accepted question stays running, holding its share, until all are decided
    try:
        statuses, answers = await _ask_together([hosts.pinned(i % 2) for i in range(6)], then=model[1].gate.set)
    finally:
        model[1].gate.set()
    assert sorted(statuses) == [200] * 2 + [429] * 4, statuses
    assert [a[-1].data["result"]["outcome"] for a in answers if a] == ["answered"] * 2
