"""A run under a policy: the model is sent that policy's prefix, the lookup answers another policy's
table as a missing one, and a policy that reads nothing is answered politely with no model call or SQL."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from agent.access.policy import Policy
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply

JFK = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airlines": None}))
NO_DATA = Policy("no-data", contact="#data-help on Slack")


def tool_results(request: dict[str, Any]) -> list[str]:
    return [b["content"] for b in request["messages"][-1]["content"] if b["type"] == "tool_result"]


async def test_a_policy_that_reads_nothing_gets_a_polite_answer_naming_who_to_ask(
    make_app, fake_anthropic: FakeAnthropic, db
) -> None:
    events = Recorder()
    result = await make_app().runner.run("How many flights left JFK?", policy=NO_DATA, on_event=events)
    assert fake_anthropic.requests == []  # no model call, not even for follow-ups
    assert result.queries == [] and result.metrics.llm_calls == 0
    assert "#data-help on Slack" in result.answer and result.answer == events.answer_text()
    assert result.policy == "no-data" and result.error is None


async def test_the_lookup_answers_another_policys_table_like_a_missing_one(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    lookup = {"tables": ["nycflights13.weather", "nycflights13.nosuchtable", "nycflights13.flights"]}
    fake_anthropic.script(Reply(tool_calls=[("lookup_schema", lookup)]), Reply(text="ok"))
    await make_app(schema_max_chars=1_000).runner.run("How windy was it?", policy=JFK, followups=False)
    first, second = fake_anthropic.requests
    [result] = tool_results(second)
    for name in ("weather", "nosuchtable"):  # refused in the same words
        assert f"## nycflights13.{name}\nNo table of that name is available." in result
    assert "wind_speed" not in result and "Hourly weather" not in result
    assert "| origin | LowCardinality(String) | Origin airport FAA code. Values: JFK |" in result  # its rows only
    assert "weather" not in first["system"][1]["text"]


async def test_each_policys_prefix_is_byte_identical_across_its_questions(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    app = make_app()
    other = Policy("airlines", MappingProxyType({"nycflights13.airlines": None}))
    for policy in (JFK, other, JFK):
        fake_anthropic.script(Reply(text="ok"))
        await app.runner.run("How many?", policy=policy, followups=False)
    jfk, airlines, jfk_again = (json.dumps([r["tools"], r["system"][:2]]) for r in fake_anthropic.requests)
    assert jfk == jfk_again and jfk != airlines
    assert "nycflights13.flights" not in airlines
