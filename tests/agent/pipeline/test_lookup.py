"""`lookup_schema` in the loop: offered only when the schema is over its budget, and scoped."""

from __future__ import annotations

import json
from typing import Any

from agent.db import Database, Scope
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in request["tools"]]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [b["content"] for b in request["messages"][-1]["content"] if b["type"] == "tool_result"]


async def test_under_the_budget_nothing_changes(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="ok"))
    await make_app().runner.run("How many flights?", followups=False)
    request = fake_anthropic.requests[0]
    assert tool_names(request) == ["think", "execute_sql", "ask_clarification", "chart"]
    assert "| arr_delay | Nullable(Int16) |" in request["system"][1]["text"]
    assert [b["text"] for b in request["messages"][0]["content"]] == ["How many flights?"]


async def test_over_the_budget_the_model_reads_columns_on_demand(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("lookup_schema", {"tables": ["nycflights13.weather"], "search": "wind gusts"})]),
        Reply(text="Ready."),
    )
    events = Recorder()
    await make_app(schema_max_chars=1_000).runner.run("How windy was it?", on_event=events, followups=False)
    first, second = fake_anthropic.requests
    assert tool_names(first) == ["think", "execute_sql", "lookup_schema", "ask_clarification", "chart"]
    schema = first["system"][1]["text"]
    assert "This warehouse has 6 tables" in schema and "- weather (~26K rows): Hourly weather" in schema
    assert "| column |" not in schema
    [result] = tool_results(second)
    assert "## nycflights13.weather" in result and "| wind_gust | Nullable(Float64) |" in result
    assert "Tables matching 'wind gusts', best first:\n- nycflights13.weather" in result
    assert events.of("thinking")[0].text == (
        "Looking up the schema: reading nycflights13.weather; searching for 'wind gusts'."
    )
    for kind in ("details", "search"):
        assert metrics.registry.get_sample_value("agent_schema_lookups_total", {"type": kind}) == 1
    # The prefix (tools, then the system blocks up to the breakpoint) is the same in every round.
    assert json.dumps([first["tools"], first["system"][:2]]) == json.dumps([second["tools"], second["system"][:2]])


async def test_the_lookup_never_reveals_an_excluded_table(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    scoped = Database(db.backend, scope=Scope.of(["nycflights13"], ["nycflights13.weather"]), functions=db.functions)
    fake_anthropic.script(
        Reply(tool_calls=[("lookup_schema", {"tables": ["nycflights13.weather", "system.tables"], "search": "wind"})]),
        Reply(text="No weather data."),
    )
    await make_app(database=scoped, schema_max_chars=1_000).runner.run("How windy?", followups=False)
    first, second = fake_anthropic.requests
    [result] = tool_results(second)
    assert result.count("No table of that name is available.") == 2
    assert "wind_speed" not in result and "Hourly weather" not in result
    assert "weather (" not in first["system"][1]["text"]


async def test_malformed_lookup_input_is_answered_with_what_was_wrong(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[("lookup_schema", {"tables": 7})]), Reply(text="ok"))
    await make_app(schema_max_chars=1_000).runner.run("q", followups=False)
    block = fake_anthropic.requests[1]["messages"][-1]["content"][0]
    assert block["is_error"] is True and "must be an array of table names" in block["content"]


async def test_the_model_can_ask_for_only_the_columns_matching_some_words(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("lookup_schema", {"tables": ["nycflights13.flights"], "columns": "delay"})]),
        Reply(tool_calls=[("lookup_schema", {"tables": ["nycflights13.flights"], "page": 0})]),
        Reply(text="ok"),
    )
    await make_app(schema_max_chars=1_000).runner.run("Which delays?", followups=False)
    [result] = tool_results(fake_anthropic.requests[1])
    assert "| dep_delay |" in result and "| arr_delay |" in result and "| tailnum |" not in result
    assert "(2 of 19 columns match 'delay'; the other 17 are left out.)" in result
    block = fake_anthropic.requests[2]["messages"][-1]["content"][0]
    assert block["is_error"] is True and '"page" must be a whole number from 1' in block["content"]
