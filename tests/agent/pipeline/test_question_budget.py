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


ROUND_USAGE = {
    "input_tokens": 600,
    "output_tokens": 300,
    "cache_read_input_tokens": 50,
    "cache_creation_input_tokens": 50,
}


async def test_a_question_that_spends_exactly_its_tokens_is_stopped(make_app, fake_anthropic: FakeAnthropic) -> None:
    """The boundary: a round that brings the question to exactly its budget (1,000 tokens of the four kinds,
    cache writes included) ends it; one token under does not."""
    for cap, outcome in ((1000, Outcome.CAPPED), (1001, Outcome.ANSWERED)):
        fake_anthropic.reset()
        fake_anthropic.script(
            Reply(tool_calls=[think("Plan.")], usage=ROUND_USAGE), Reply(text="Nothing to count here.")
        )
        result, _ = await ask(make_app(agent_question_max_tokens=cap), "anything?")
        assert result.outcome is outcome, cap
        stopped = fake_anthropic.requests[1].get("tool_choice") == {"type": "none"}
        assert stopped is (outcome is Outcome.CAPPED), cap


async def test_a_reused_query_reads_nothing_against_the_budget(make_app, fake_anthropic: FakeAnthropic) -> None:
    """The same statement asked again reuses its result and reads nothing more: 336,776 rows once, under
    a cap of 500,000 (counted twice it would be over)."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had 120,835 departures [Q1]."),
    )
    result, _ = await ask(make_app(agent_question_max_rows_read=500_000), "busiest airport?")
    assert [q.reused_from for q in result.queries] == [None, "Q1"]
    assert result.outcome is Outcome.ANSWERED and "stopped early" not in result.answer
    assert all("tool_choice" not in request for request in fake_anthropic.requests)
    assert result.receipt is not None and result.receipt.rows_read == 336_776
