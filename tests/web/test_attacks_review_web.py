"""An outside review's attacks on row isolation through the web (tests/agent/access/test_attacks_review.py
has the rest). Each test asserts the SAFE behaviour, so it fails while the leak it shows is there."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from agent.access.policy import Policy
from agent.app import AgentApp
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web.people_helpers import EMAIL_HEADER, PROXY_MODE
from tests.web_helpers import WebApps, chat

ANA = "person:email:ana@example.com"

POLICY_FILE = Path(__file__).resolve().parents[2] / "deploy" / "access" / "nycflights13.yaml"
PER_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
JFK_ONLY = Policy(
    "jfk",
    MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}),
)


def sql(question: str, text: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": text}]})


@pytest.fixture
async def apps(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[WebApps]:
    apps = WebApps(make_app, tmp_path)
    yield apps
    await apps.close()


async def test_a_web_question_under_a_policy_file_reads_no_other_policys_rows(
    apps: WebApps, fake_anthropic: FakeAnthropic
) -> None:
    """With AGENT_ACCESS_FILE set (the demo's: jfk reads JFK's flights, newark EWR's, nobody else anything),
    the web chat starts every run without a policy (web/views/chat.py passes none): whoever can reach the
    web reads every row of every table. Safe: an asker no policy names gets the default, "no data"."""
    url, _ = await apps.start(agent_access_file=str(POLICY_FILE))
    fake_anthropic.script(
        Reply(tool_calls=[sql("Departures per origin", PER_ORIGIN)]),
        Reply(text="Done [Q1]."),
        Reply(text="[]"),
    )
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        events = await chat(client, "Departures per origin?")
    shown = str([event.data for event in events])
    assert "LGA" not in shown and "120835" not in shown, shown[:2000]


async def test_a_stored_querys_csv_runs_under_the_policy_it_was_asked_under(
    apps: WebApps, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic
) -> None:
    """A query asked under jfk (a Slack channel's, say: Slack links each query to its web page) is stored
    without its policy, and GET /api/queries/{id}.csv re-runs it with none (web/views/queries.py): the CSV
    holds every origin's rows. Safe: the download runs under the policy the query was asked under."""
    url, store = await apps.start(agent_access_file=str(POLICY_FILE), **PROXY_MODE)
    fake_anthropic.script(Reply(tool_calls=[sql("Departures per origin", PER_ORIGIN)]), Reply(text="JFK [Q1]."))
    result = await make_app().runner.run("Departures?", on_event=Recorder(), followups=False, policy=JFK_ONLY)
    assert result.queries[0].result.rows == [["JFK", "111279"]]  # what the asker was shown
    # Ana's DM (her policy is jfk); she opens its link signed in through the proxy. (With a policy file and
    # nobody signing in, the link opens for nobody: tests/bots/slack/test_attacks_review.py.)
    conversation = await store.create_conversation("Departures?", interface="slack", owner=ANA)
    run_id = "review-run"
    await store.save_turn(conversation, run_id, result, [])
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={EMAIL_HEADER: "ana@example.com"}) as client:
        response = await client.get(f"/api/queries/{run_id}-Q1.csv")
    assert response.status_code == 200, response.text
    origins = [row[0] for row in list(csv.reader(io.StringIO(response.text)))[1:]]
    assert origins == ["JFK"], origins


async def test_the_web_example_questions_are_not_written_from_other_policies_tables(
    apps: WebApps, fake_anthropic: FakeAnthropic
) -> None:
    """GET /api/examples asks `examples.get()` with no policy (web/views/examples.py): under a policy file
    the model writes them from the WHOLE schema (every table, flights' origins EWR, JFK and LGA, ~337K rows)
    and every web person gets them. Safe: from the asker's policy's schema, or none for the default."""
    url, _ = await apps.start(agent_access_file=str(POLICY_FILE), agent_example_questions=[])
    fake_anthropic.script(Reply(text='["How many planes?", "Flights from LGA?", "Busiest airline?"]'))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.get("/api/examples", params={"wait": "5"})
        for _ in range(50):
            if fake_anthropic.requests:
                break
            await asyncio.sleep(0.1)
    assert response.status_code == 200
    written_from = json.dumps([request.get("messages", "") for request in fake_anthropic.requests])
    assert "~337K rows" not in written_from and "LGA" not in written_from, written_from[:1500]


async def test_a_stored_querys_csv_under_a_policy_no_longer_in_the_file_reads_nothing(
    apps: WebApps, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic
) -> None:
    """(Added with the fix.) The policy a query was asked under has since been removed or renamed in the
    file: its CSV runs under the default, which reads nothing, never under the whole scope."""
    url, store = await apps.start(agent_access_file=str(POLICY_FILE), **PROXY_MODE)
    fake_anthropic.script(Reply(tool_calls=[sql("Departures per origin", PER_ORIGIN)]), Reply(text="JFK [Q1]."))
    result = await make_app().runner.run("Departures?", on_event=Recorder(), followups=False, policy=JFK_ONLY)
    assert result.policy == "jfk"
    result.policy = "renamed-since"
    conversation = await store.create_conversation("Departures?", interface="slack", owner=ANA)
    await store.save_turn(conversation, "gone-run", result, [])
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={EMAIL_HEADER: "ana@example.com"}) as client:
        response = await client.get("/api/queries/gone-run-Q1.csv")
    assert response.status_code == 422 and "JFK" not in response.text, response.text
