"""Example questions come from one place (agent/suggestions/examples.py) for the web page's empty state and Slack's
suggested prompts: the setting, else questions written once per schema version and cached on disk,
else a generic few."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx

from agent.app import AgentApp
from agent.suggestions.examples import GENERIC
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply
from tests.web_helpers import WebApps

WRITTEN = ["Which airport had the most departures?", "Which carrier was most delayed?", "How did flights change?"]


async def test_configured_questions_are_used_as_they_are(make_app: Callable[..., AgentApp], fake_anthropic) -> None:
    app = make_app(agent_example_questions='["How many rows?", "Which day was busiest?"]')
    assert await app.examples.get(wait_s=1) == ["How many rows?", "Which day was busiest?"]
    assert make_app(
        agent_example_questions="How many rows? | Which day was busiest?"
    ).settings.agent_example_questions == [
        "How many rows?",
        "Which day was busiest?",
    ]
    assert fake_anthropic.requests == []


async def test_questions_are_written_once_per_schema_version_and_kept_across_a_restart(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    app = make_app(agent_example_questions=[], agent_data_dir=tmp_path)
    fake_anthropic.script(Reply(text=json.dumps(WRITTEN)))
    try:
        assert await app.examples.get() == list(GENERIC), "the page does not wait for the model"
        assert await app.examples.get(wait_s=10) == WRITTEN
    finally:
        await app.examples.close()
    [request] = fake_anthropic.requests
    assert request["model"] == app.settings.agent_followup_model and "stream" not in request
    assert "## nycflights13.flights" in request["messages"][0]["content"]
    [cached] = (tmp_path / "examples").glob("*.json")
    assert json.loads(cached.read_text()) == WRITTEN

    restarted = make_app(agent_example_questions=[], agent_data_dir=tmp_path)
    assert await restarted.examples.get() == WRITTEN
    assert len(fake_anthropic.requests) == 1


async def test_when_they_cannot_be_written_the_generic_ones_stand(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    app = make_app(agent_example_questions=[], agent_data_dir=tmp_path)
    fake_anthropic.script(Failure(400, "invalid_request_error", "model: not found"))
    try:
        assert await app.examples.get(wait_s=10) == list(GENERIC)
        assert await app.examples.get(wait_s=10) == list(GENERIC)
    finally:
        await app.examples.close()
    assert len(fake_anthropic.requests) == 1, "not asked again at once"
    assert not (tmp_path / "examples").exists()


async def test_the_examples_reach_the_page_as_data_not_markup(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """The page shell holds none of them (it is served without the token); its script asks the API and
    sets each as a button's text (web/static/app.js loadExamples), so markup in one stays text."""
    questions = ["Which <b>carrier</b> was late?", "How many planes?"]
    apps = WebApps(make_app, tmp_path)
    try:
        url, _ = await apps.start(agent_example_questions=questions)
        async with httpx.AsyncClient(base_url=url) as client:
            page = (await client.get("/")).text
            served = (await client.get("/api/examples")).json()
    finally:
        await apps.close()
    assert "carrier" not in page and "planes" not in page
    assert served == {"questions": questions}


async def test_each_policy_gets_questions_written_from_its_own_schema(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from types import MappingProxyType

    from agent.access.policy import Policy

    jfk = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'"}))
    weather = Policy("weather", MappingProxyType({"nycflights13.weather": None}))
    app = make_app(agent_data_dir=tmp_path)  # fixed questions configured: they stand without a policy only
    fake_anthropic.script(Reply(text=json.dumps(WRITTEN)), Reply(text=json.dumps(WRITTEN[:2])))
    try:
        assert await app.examples.get(wait_s=10, policy=jfk) == WRITTEN
        assert await app.examples.get(wait_s=10, policy=weather) == WRITTEN[:2]
        assert await app.examples.get(policy=jfk) == WRITTEN  # cached per policy's schema
        assert await app.examples.get(policy=Policy("no-data")) == []
        assert await app.examples.get() == app.settings.agent_example_questions
    finally:
        await app.examples.close()
    first, second = (request["messages"][0]["content"] for request in fake_anthropic.requests)
    assert "## nycflights13.flights" in first and "nycflights13.weather" not in first
    assert "## nycflights13.weather" in second and "nycflights13.flights" not in second
    assert len(fake_anthropic.requests) == 2
