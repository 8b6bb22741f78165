"""Thumbs in the web chat: stored with the turn, proposed, reviewed, written into the knowledge files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from agent.db import Database
from agent.knowledge import check_entries, load_directory
from evals.suite import load_suite
from process.review import Reviewer, review
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps, chat

SQL = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC"


@pytest.fixture
async def apps(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[WebApps]:
    apps = WebApps(make_app, tmp_path)
    yield apps
    await apps.close()


@pytest.fixture
def web(apps: WebApps) -> Callable[..., Any]:
    return apps.start


def scripted(replies: list[str], said: list[str]) -> Reviewer:
    answers = iter(replies)
    return Reviewer("reviewer", ask=lambda prompt: (said.append(prompt), next(answers))[1], say=said.append)


async def answered(client: httpx.AsyncClient, fake_anthropic: FakeAnthropic, question: str) -> str:
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Departures per origin", "sql": SQL}]})]),
        Reply(text="EWR had the most departures: 120,835 [Q1]."),
    )
    events = await chat(client, question)
    return str(events[0].data["run_id"])


async def test_thumbs_up_becomes_a_verified_query_after_review(
    web, apps: WebApps, fake_anthropic: FakeAnthropic, db: Database, tmp_path: Path
) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        run_id = await answered(client, fake_anthropic, "Which airport had the most departures?")
        response = await client.post(f"/api/runs/{run_id}/feedback", json={"value": "up"})
        assert response.status_code == 200 and response.json() == {"run_id": run_id, "feedback": "up"}
    proposals = apps.states[-1].proposals
    [proposal] = await proposals.pending()
    assert proposal.question == "Which airport had the most departures?" and proposal.queries[0].sql == SQL
    said: list[str] = []
    knowledge = tmp_path / "knowledge"
    done = await review(
        proposals, db, scripted(["y"], said), knowledge_dir=knowledge, suite=tmp_path / "s.yaml", dataset="demo"
    )
    assert done.verified == 1 and await proposals.pending() == []
    assert any("| EWR | 120835 |" in line for line in said)  # the reviewer saw the rows the person saw
    [entry] = load_directory(knowledge)
    assert entry.tag == "[verified: which-airport-had-the-most-departures]"
    assert entry.fields["sql"] == (await db.check(SQL)).sql and entry.fields["verified_by"] == "reviewer"  # canonical
    assert entry.fields["source"] == f"run {run_id} Q1"
    assert await check_entries(db, [entry]) == []


async def test_thumbs_down_with_a_reason_becomes_an_eval_case(
    web, apps: WebApps, fake_anthropic: FakeAnthropic, db: Database, tmp_path: Path
) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        run_id = await answered(client, fake_anthropic, "Which airport was busiest?")
        reason = {"value": "down", "reason": "It counted arrivals, not departures."}
        assert (await client.post(f"/api/runs/{run_id}/feedback", json=reason)).status_code == 200
    proposals = apps.states[-1].proposals
    suite = tmp_path / "feedback.yaml"
    done = await review(proposals, db, scripted(["y"], []), knowledge_dir=tmp_path / "k", suite=suite, dataset="demo")
    assert done.eval_cases == 1
    [case] = load_suite(suite).cases
    assert case.question == "Which airport was busiest?" and case.tags == ["feedback"]
    assert case.judge is not None and "It counted arrivals, not departures." in case.judge


async def test_feedback_needs_a_known_run_and_a_valid_thumb(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        assert (await client.post("/api/runs/nope/feedback", json={"value": "up"})).status_code == 404
        bad = await client.post("/api/runs/nope/feedback", json={"value": "sideways"})
        assert bad.status_code == 400 and bad.json()["error"].startswith("value:")
