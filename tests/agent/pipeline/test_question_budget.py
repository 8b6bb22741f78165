"""The per-question budget: past its rows read, the loop stops and one synthesis call answers from what
it has, saying why; past its tokens, checked before every model call, no call is made at all, so a
question spends at most its budget plus one call (real SDK, fake API, real engine)."""

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
    assert len(fake_anthropic.requests) == 1  # past its tokens, not even the synthesis call
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
    cache writes included) ends it, with no more model calls; one token under does not."""
    for cap, outcome, calls in ((1000, Outcome.CAPPED, 1), (1001, Outcome.ANSWERED, 2)):
        fake_anthropic.reset()
        fake_anthropic.script(
            Reply(tool_calls=[think("Plan.")], usage=ROUND_USAGE), Reply(text="Nothing to count here.")
        )
        result, _ = await ask(make_app(agent_question_max_tokens=cap), "anything?")
        assert result.outcome is outcome, cap
        assert len(fake_anthropic.requests) == calls, cap
        assert all("tool_choice" not in request for request in fake_anthropic.requests), cap


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


async def test_the_token_budget_is_checked_before_every_model_call(make_app, fake_anthropic: FakeAnthropic) -> None:
    """It was checked only after a round of tools: an answer sent back for a correction (a citation of a
    query never run) made another call past the budget, and so did the follow-ups. Now each call is
    checked first: one call of 1,000 tokens under a 1,000 budget is the question's last."""
    fake_anthropic.script(
        Reply(text="EWR had 120,835 departures [Q1].", usage=ROUND_USAGE),  # cites a query never run
        Reply(text="EWR had the most departures."),
    )
    result, _ = await ask(make_app(agent_question_max_tokens=1000), "busiest airport?")
    assert len(fake_anthropic.requests) == 1
    assert result.outcome is Outcome.CAPPED and "stopped at its budget" in result.answer
    assert "1,000 model tokens" in result.answer


async def test_no_follow_up_call_once_the_tokens_are_spent(make_app, fake_anthropic: FakeAnthropic) -> None:
    for cap, calls in ((1000, 1), (10_000, 2)):  # the follow-ups are a second call only under the budget
        fake_anthropic.reset()
        fake_anthropic.script(
            Reply(text="Nothing to count here.", usage=ROUND_USAGE), Reply(text='["Which carrier flew most?"]')
        )
        result, _ = await ask(make_app(agent_question_max_tokens=cap), "anything?", followups=True)
        assert result.outcome is Outcome.ANSWERED, cap
        assert len(fake_anthropic.requests) == calls, cap
