"""The per-question budget: past its tokens or rows read, the loop stops and one synthesis call answers
from what it has, saying why (real SDK, fake API, real engine)."""

from __future__ import annotations

from agent.runner import Outcome
from tests.agent.pipeline.test_pipeline import ask, sql, think
from tests.fakes.anthropic_api import FakeAnthropic, Reply

ORIGINS = (
    "Departures per origin",
    "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC",
)


async def test_rows_read_past_the_cap_end_the_question(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had 120,835 departures [Q1]."),  # the synthesis call: no tools offered
    )
    result, _ = await ask(make_app(agent_question_max_rows_read=100_000), "busiest airport?")
    synthesis = fake_anthropic.requests[1]
    assert synthesis["tool_choice"] == {"type": "none"} and len(fake_anthropic.requests) == 2
    assert result.outcome is Outcome.CAPPED
    assert result.answer.startswith("EWR had 120,835 departures [Q1].")
    assert "stopped early: the question used 336,776 rows read in ClickHouse, and one question may use 100,000" in (
        result.answer
    )
    assert metrics.registry.get_sample_value("agent_budget_stops_total", {"kind": "rows_read"}) == 1
    assert result.figures is not None and result.figures.verified == 1  # the note's numbers are not claims


async def test_tokens_past_the_cap_end_the_question(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(Reply(tool_calls=[think("Plan.")]), Reply(text="I could not get further."))
    result, _ = await ask(make_app(agent_question_max_tokens=10), "anything?")
    assert result.outcome is Outcome.CAPPED and "model tokens" in result.answer
    assert metrics.registry.get_sample_value("agent_budget_stops_total", {"kind": "tokens"}) == 1


async def test_no_budget_by_default(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text="EWR had 120,835 departures [Q1]."))
    result, _ = await ask(make_app(), "busiest airport?")
    assert result.outcome is Outcome.ANSWERED and "stopped early" not in result.answer
