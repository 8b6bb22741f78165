"""Two `agent serve` hosts on one PostgreSQL and one ClickHouse server, behind a round-robin proxy
(tests/hosts.py): a web reader that reaches the other host follows a run live and replays a finished one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
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
def hosts(
    postgres_server: PostgresServer,
    clickhouse_fake: FakeClickHouse,
    model: tuple[FakeAnthropic, GatedModel],
    tmp_path: Path,
) -> Iterator[Hosts]:
    env = host_environment(
        postgres_server.new_database(), clickhouse_fake.url("agent", "nycflights13"), model_url=model[0].base_url
    )
    with running_hosts(tmp_path, env) as started:
        yield started


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
