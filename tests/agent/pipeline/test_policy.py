"""A run under a policy: every query it makes (execute_sql, a chart's rows) reads only the policy's
rows and tables, and the result names the policy, so a later re-run (a CSV) runs under it again."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from agent.access.policy import Policy
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply

JFK_ONLY = Policy(
    "jfk",
    MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}),
)
PER_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"


def sql(*queries: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": q, "sql": s} for q, s in queries]})


async def test_a_run_under_a_policy_reads_only_its_rows_and_tables(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Per origin", PER_ORIGIN), ("Planes", "SELECT count() FROM nycflights13.planes"))]),
        Reply(text="JFK had 111,279 departures [Q1]."),
    )
    result = await make_app().runner.run("Departures?", on_event=Recorder(), followups=False, policy=JFK_ONLY)
    per_origin, planes = (q.result for q in result.queries)
    assert per_origin.rows == [["JFK", "111279"]]  # EWR and LGA are not the policy's rows
    assert planes.error is not None and "not available" in planes.error and "planes" not in (planes.hint or "")
    assert result.policy == "jfk"


async def test_a_run_without_a_policy_reads_everything_in_scope(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(("Per origin", PER_ORIGIN))]), Reply(text="Three airports [Q1]."))
    result = await make_app().runner.run("Departures?", on_event=Recorder(), followups=False)
    assert [row[0] for row in result.queries[0].result.rows] == ["EWR", "JFK", "LGA"]
    assert result.policy is None


async def test_a_chart_under_a_policy_draws_only_its_rows(make_app, fake_anthropic: FakeAnthropic) -> None:
    chart = {"query_id": "Q1", "kind": "bar", "x": "origin", "y": "n", "title": "Departures"}
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Per origin", PER_ORIGIN))]),
        Reply(tool_calls=[("chart", chart)]),
        Reply(text="JFK had 111,279 departures [Q1]."),
    )
    result = await make_app().runner.run("Departures?", on_event=Recorder(), followups=False, policy=JFK_ONLY)
    assert len(result.charts) == 1, result
    assert "EWR" not in str(result.charts[0].spec) and "JFK" in str(result.charts[0].spec)
