"""The v3 loop end to end: real SDK, fake Messages API over HTTP, real embedded ClickHouse."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent.db import Database
from agent.runner import Classification, Outcome, Turn
from tests.conftest import HEAVY, Recorder, until_running
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Hang, MidStreamFailure, Reply


def sql(*queries: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": q, "sql": s} for q, s in queries]})


def think(text: str) -> tuple[str, dict[str, Any]]:
    return ("think", {"content": text})


def last_user_text(request: dict[str, Any]) -> str:
    content = request["messages"][-1]["content"]
    return " ".join(
        b.get("text", "") or (b.get("content") if isinstance(b.get("content"), str) else "") for b in content
    )


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in request["messages"][-1]["content"] if b["type"] == "tool_result"]


def _value(metrics, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def ask(app, question: str, **kwargs: Any):
    recorder = Recorder()
    kwargs.setdefault("followups", False)
    result = await app.runner.run(question, on_event=recorder, **kwargs)
    return result, recorder


async def test_a_two_round_answer_streams_events_in_order(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(
            tool_calls=[
                think("Count departures per NYC airport."),
                sql(
                    (
                        "Departures per origin",
                        "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC",
                    )
                ),
            ]
        ),
        Reply(text="EWR had the most departures in 2013: 120,835 [Q1]."),
    )
    result, events = await ask(make_app(), "Which NYC airport had the most departures?")
    assert events.kinds[:3] == ["thinking", "executing", "result"]
    assert "done" not in events.kinds and "answer" in events.kinds  # how it ended is the returned result
    assert events.answer_text() == result.answer == "EWR had the most departures in 2013: 120,835 [Q1]."
    executing = events.of("executing")[0]
    assert executing.query_id == "Q1" and executing.question == "Departures per origin"
    assert events.of("result")[0].rows[0] == ["EWR", 120835]
    assert result.classification is Classification.DATA_ANALYSIS and result.outcome is Outcome.ANSWERED
    assert result.queries[0].result.rows[0] == ["EWR", "120835"]
    content = tool_results(fake_anthropic.requests[1])[1]["content"]
    assert content.startswith("Q1: Departures per origin\nResult: 3 rows") and "| EWR | 120835 |" in content


async def test_queries_in_one_call_run_in_parallel_within_the_runs_share(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    """Queries of one call run side by side, but never more at once than the run's share of the engine
    (MAX_PARALLEL_QUERIES_PER_RUN), so one question cannot take every connection."""
    assert db.share.per_owner == 2
    heavy = "SELECT count() FROM numbers(30000000) WHERE sipHash64(number) % 7 = {}"
    fake_anthropic.script(
        Reply(tool_calls=[sql(*[(f"count {i}", heavy.format(i)) for i in range(3)])]),
        Reply(text="Done [Q1][Q2][Q3]."),
    )
    slots: list[int] = []
    running: list[int] = []

    async def watch() -> None:
        while True:
            slots.append(db.share.in_use)
            running.append(len(set(await db.running_queries())))
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        result, events = await ask(make_app(), "parallel?")
    finally:
        watcher.cancel()
    assert max(slots) == 2 and max(running) >= 2  # two at the same moment in the engine, the third after them
    assert all(q.result.ok for q in result.queries), [q.result.error for q in result.queries]
    assert [q.id for q in result.queries] == ["Q1", "Q2", "Q3"]
    assert [e.query_id for e in events.of("executing")] == ["Q1", "Q2", "Q3"]
    (block,) = tool_results(fake_anthropic.requests[1])
    assert all(f"Q{i + 1}: count {i}" in block["content"] for i in range(3))


async def test_an_error_comes_back_with_a_hint_and_the_fix_runs(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Average delay", "SELECT avg(arr_delayy) FROM nycflights13.flights"))]),
        Reply(tool_calls=[sql(("Average delay", "SELECT round(avg(arr_delay), 2) FROM nycflights13.flights"))]),
        Reply(text="The average arrival delay was 6.9 minutes [Q2]."),
    )
    result, events = await ask(make_app(), "average arrival delay?")
    failed = tool_results(fake_anthropic.requests[1])[0]["content"]
    assert "Query failed:" in failed and "Code: 47" in failed and "Did you mean: arr_delay" in failed
    assert [e.error is None for e in events.of("result")] == [False, True]
    assert result.queries[1].result.rows == [["6.9"]]
    assert result.metrics.sql_errors == 1 and result.metrics.sql_queries == 2


async def test_truncated_results_carry_the_marker(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All flights", "SELECT * FROM nycflights13.flights"))]),
        Reply(text="There are many flights [Q1]."),
    )
    result, events = await ask(make_app(), "show flights")
    content = tool_results(fake_anthropic.requests[1])[0]["content"]
    assert "Result: 50 rows (more available)" in content and "[More rows available" in content
    assert events.of("result")[0].has_more and result.queries[0].result.row_count == 50


async def test_penultimate_guidance_arrives_on_the_penultimate_round(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(*[Reply(tool_calls=[think(f"step {i}")]) for i in range(1, 4)], Reply(text="Answer."))
    result, _ = await ask(make_app(agent_max_rounds=4), "q")
    texts = [last_user_text(r) for r in fake_anthropic.requests]
    assert ["one more round" in t for t in texts] == [False, False, True, False]
    assert result.outcome is Outcome.ANSWERED and result.metrics.rounds == 4


async def test_the_cap_ends_with_a_synthesis_call_on_the_same_prefix(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("n", "SELECT count() FROM nycflights13.airlines"))]),
        Reply(tool_calls=[sql(("m", "SELECT count() FROM nycflights13.planes"))]),
        Reply(tool_calls=[sql(("k", "SELECT count() FROM nycflights13.airports"))]),
        Reply(text="16 airlines [Q1] and 3,322 planes [Q2]; airports were not summarised."),
    )
    result, _ = await ask(make_app(agent_max_rounds=3), "sizes?")
    first, synthesis = fake_anthropic.requests[0], fake_anthropic.requests[3]
    assert synthesis["tool_choice"] == {"type": "none"} and "tool_choice" not in first
    assert synthesis["tools"] == first["tools"] and synthesis["system"] == first["system"]
    assert "analysis limit has been reached" in last_user_text(synthesis)
    assert result.outcome is Outcome.CAPPED and result.metrics.hit_cap and result.metrics.rounds == 4
    assert result.answer.startswith("16 airlines")
    assert _value(metrics, "agent_runs_capped_total", {}) == 1
    assert _value(metrics, "agent_llm_calls_total", {"role": "synthesis", "status": "ok"}) == 1


async def test_citations_without_a_query_get_one_retry(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(text="There were 336,776 flights [Q1]."),
        Reply(tool_calls=[sql(("Flights", "SELECT count() FROM nycflights13.flights"))]),
        Reply(text="There were 336,776 flights [Q1]."),
    )
    result, _ = await ask(make_app(), "how many flights?")
    assert "citations point at nothing" in last_user_text(fake_anthropic.requests[1])
    assert result.outcome is Outcome.ANSWERED and result.queries[0].result.rows == [["336776"]]
    assert result.metrics.guard_interventions == {"citation_without_query": 1}


async def test_citations_without_a_query_twice_give_an_honest_answer(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="About 300k flights [Q1]."), Reply(text="Still about 300k [Q1][Q2]."))
    result, _ = await ask(make_app(), "how many flights?")
    assert result.outcome is Outcome.NO_DATA and "could not retrieve the data" in result.answer
    assert "300k" not in result.answer


async def test_a_citation_of_a_query_that_never_ran_gets_one_retry(make_app, fake_anthropic: FakeAnthropic) -> None:
    """The guard is not only for answers without queries: [Q7] when only Q1 ran points at nothing, and so
    does a citation of a query that failed."""
    fake_anthropic.script(
        Reply(
            tool_calls=[
                sql(("Flights", "SELECT count() FROM nycflights13.flights"), ("Broken", "SELECT nope FROM nowhere"))
            ]
        ),
        Reply(text="336,776 flights [Q1], 12% delayed [Q7], by [Q2]."),
        Reply(text="There were 336,776 flights [Q1]."),
    )
    result, _ = await ask(make_app(), "how many flights?")
    retry = last_user_text(fake_anthropic.requests[2])
    assert "cites [Q2], [Q7], but only Q1 ran and returned a result" in retry
    assert result.outcome is Outcome.ANSWERED and result.answer == "There were 336,776 flights [Q1]."
    assert result.metrics.guard_interventions == {"citation_without_query": 1}


async def test_think_only_rounds_get_a_nudge(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[think("hmm")]), Reply(tool_calls=[think("hmm more")]), Reply(text="No data needed.")
    )
    result, _ = await ask(make_app(), "hello")
    assert "without running a query" not in last_user_text(fake_anthropic.requests[1])
    assert "2 rounds thinking without running a query" in last_user_text(fake_anthropic.requests[2])
    assert result.metrics.guard_interventions == {"think_only_rounds": 1}
    assert result.classification is Classification.CONVERSATIONAL


async def test_identical_sql_reuses_the_first_result(make_app, fake_anthropic: FakeAnthropic, db: Database) -> None:
    query = "SELECT count() FROM nycflights13.weather"
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Weather rows", query))]),
        Reply(tool_calls=[sql(("Weather rows again", query + " ;"))]),
        Reply(text="26,115 observations [Q1]."),
    )
    result, events = await ask(make_app(), "weather rows?")
    second = tool_results(fake_anthropic.requests[2])[0]["content"]
    assert "Identical to Q1" in second and "| 26115 |" in second
    assert result.queries[1].reused_from == "Q1" and events.of("result")[1].reused_from == "Q1"
    assert result.metrics.sql_queries == 1 and result.metrics.guard_interventions == {"duplicate_sql": 1}


async def test_malformed_tool_input_is_repaired_when_unambiguous(make_app, fake_anthropic: FakeAnthropic) -> None:
    as_string = json.dumps([{"question": "Airlines", "sql": "```sql\nSELECT count() FROM nycflights13.airlines\n```"}])
    fake_anthropic.script(Reply(tool_calls=[("execute_sql", {"queries": as_string})]), Reply(text="16 [Q1]."))
    result, _ = await ask(make_app(), "airlines?")
    assert result.queries[0].sql == "SELECT count() FROM nycflights13.airlines"
    assert result.queries[0].result.rows == [["16"]]
    assert "is_error" not in tool_results(fake_anthropic.requests[1])[0]
    assert result.metrics.guard_interventions == {"repaired_tool_input": 1}


async def test_unrepairable_tool_input_gets_an_error_result(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": 5}), ("lookup", {"x": 1})]), Reply(text="Sorry.")
    )
    result, _ = await ask(make_app(), "?")
    bad_input, unknown_tool = tool_results(fake_anthropic.requests[1])
    assert bad_input["is_error"] and '{"queries": [{"question"' in bad_input["content"]
    assert unknown_tool["is_error"] and "no tool named 'lookup'" in unknown_tool["content"]
    assert result.metrics.guard_interventions == {"malformed_tool_input": 2}


async def test_an_empty_text_block_is_never_sent_back(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text=" \n", tool_calls=[think("planning")]), Reply(text="Done."))
    result, _ = await ask(make_app(), "q")  # the fake rejects empty text blocks with a 400
    assert result.outcome is Outcome.ANSWERED and result.answer == "Done."
    assert fake_anthropic.requests[1]["messages"][1]["content"][0]["type"] == "tool_use"


async def test_narration_before_a_tool_call_moves_to_thinking(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="Let me check.", tool_calls=[sql(("n", "SELECT 1"))]), Reply(text="It is 1 [Q1]."))
    _result, events = await ask(make_app(), "q")
    assert events.answer_text() == "It is 1 [Q1]."
    assert any(e.type == "thinking" and e.text == "Let me check." for e in events.events)


async def test_cancelling_during_the_model_call_returns_a_partial_result(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(("n", "SELECT count() FROM nycflights13.airlines"))]), hang)
    app = make_app()
    recorder = Recorder()
    task = asyncio.create_task(app.runner.run("q", on_event=recorder, followups=False))
    while len(fake_anthropic.requests) < 2:
        await asyncio.sleep(0.02)
    task.cancel()
    result = await task
    hang.release.set()
    assert result.cancelled and result.outcome is Outcome.CANCELLED
    assert result.answer.startswith("[Analysis cancelled]") and "Q1: n (1 row)" in result.answer
    assert "done" not in recorder.kinds
    assert (
        _value(
            metrics, "agent_runs_total", {"interface": "cli", "classification": "data_analysis", "outcome": "cancelled"}
        )
        == 1
    )


async def test_cancelling_during_follow_ups_keeps_the_complete_answer(make_app, fake_anthropic: FakeAnthropic) -> None:
    hang = Hang()
    fake_anthropic.script(Reply(text="The answer."), hang)
    task = asyncio.create_task(make_app().runner.run("q", followups=True))
    while len(fake_anthropic.requests) < 2:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert not task.done(), "the follow-up call should still be in flight"
    task.cancel()
    result = await task
    hang.release.set()
    assert result.answer == "The answer." and result.outcome is Outcome.ANSWERED and result.followups == []


async def test_cancelling_during_sql_kills_the_query(make_app, fake_anthropic: FakeAnthropic, db: Database) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(("heavy", HEAVY))]))
    recorder = Recorder()
    task = asyncio.create_task(make_app().runner.run("q", on_event=recorder, followups=False))
    while not recorder.of("executing") and not task.done():  # before it, the schema's own queries run
        await asyncio.sleep(0.05)
    await until_running(db, task)
    task.cancel()
    result = await task
    assert result.cancelled
    assert await db.running_queries() == []


async def test_follow_ups_are_suggested(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(text="Hi! Ask me about NYC flights in 2013."),
        Reply(text='Sure:\n["Which carrier flew the most flights?", "How did delays vary by month?"]'),
    )
    result, events = await ask(make_app(), "hello", followups=True)
    assert result.followups == ["Which carrier flew the most flights?", "How did delays vary by month?"]
    assert events.kinds[-1] == "followups"
    followup_request = fake_anthropic.requests[1]
    assert followup_request["model"] == "claude-haiku-5-5" and "stream" not in followup_request


async def test_follow_up_failure_never_breaks_the_answer(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(Reply(text="Hello."), Failure(400, "invalid_request_error", "nope"))
    result, events = await ask(make_app(), "hello", followups=True)
    assert result.answer == "Hello." and result.followups == [] and result.outcome is Outcome.ANSWERED
    assert "error" not in events.kinds
    assert _value(metrics, "agent_llm_calls_total", {"role": "followup", "status": "error"}) == 1


async def test_overload_is_retried(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Failure(529, "overloaded_error", "Overloaded"), Failure(429, "rate_limit_error"), Reply(text="Fine.")
    )
    result, _ = await ask(make_app(), "q")
    assert result.answer == "Fine." and len(fake_anthropic.requests) == 3


async def test_overload_in_the_middle_of_a_stream_is_retried(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(MidStreamFailure(), Reply(text="Complete answer."))
    result, events = await ask(make_app(), "q")
    assert result.answer == "Complete answer."
    assert events.of("answer")[0].text == "Partial " and any(e.restart for e in events.of("answer"))
    assert events.answer_text() == "Complete answer."


async def test_persistent_overload_is_one_clear_error(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.always(Failure(529, "overloaded_error", "Overloaded"))
    result, events = await ask(make_app(), "q")
    assert result.outcome is Outcome.ERROR and "overloaded" in (result.error or "")
    assert events.kinds == ["error"]
    assert _value(metrics, "agent_llm_calls_total", {"role": "main", "status": "error"}) == 1


async def test_context_overflow_compacts_once_and_retries(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All flights", "SELECT * FROM nycflights13.flights"))]),
        Reply(tool_calls=[sql(("All weather", "SELECT * FROM nycflights13.weather"))]),
        Failure(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        Reply(text="Summarised [Q1][Q2]."),
    )
    result, _ = await ask(make_app(), "q")
    retried = fake_anthropic.requests[3]
    old, newest = retried["messages"][2]["content"][0], retried["messages"][4]["content"][0]
    assert old["content"].startswith("[Result removed to save context")
    assert newest["content"].startswith("Q2: All weather")
    assert result.answer == "Summarised [Q1][Q2]." and result.metrics.guard_interventions == {"context_compaction": 1}


async def test_history_carries_earlier_turns(make_app, fake_anthropic: FakeAnthropic) -> None:
    app = make_app()
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Carriers", "SELECT count() FROM nycflights13.airlines"))]),
        Reply(text="There are 16 carriers [Q1]."),
    )
    first, _ = await ask(app, "How many carriers?")
    fake_anthropic.script(Reply(text="Those 16 carriers are in the airlines table."))
    await ask(app, "Where are they listed?", history=[first.to_turn()])
    messages = fake_anthropic.requests[2]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"][0]["text"] == "How many carriers?"
    assert messages[3]["content"][0]["text"] == "There are 16 carriers [Q1]."


async def test_old_turns_are_compacted_and_capped(make_app, fake_anthropic: FakeAnthropic) -> None:
    app = make_app(agent_history_turns=3, agent_history_full_turns=1)
    turns = [Turn(question=f"question {i}", answer=f"answer {i}") for i in range(6)]
    fake_anthropic.script(Reply(text="ok"))
    await ask(app, "now", history=turns)
    texts = [m["content"][0]["text"] for m in fake_anthropic.requests[0]["messages"]]
    assert texts == ["question 3", "answer 3", "question 4", "answer 4", "question 5", "answer 5", "now"]


async def test_the_cached_prefix_is_byte_identical_across_rounds_and_questions(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    app = make_app()
    fake_anthropic.script(Reply(tool_calls=[think("a"), sql(("n", "SELECT 1"))]), Reply(text="One [Q1]."))
    first, _ = await ask(app, "first?")
    fake_anthropic.script(Reply(tool_calls=[sql(("m", "SELECT 2"))]), Reply(text="Two [Q1]."))
    await ask(app, "second?", history=[first.to_turn()])

    def prefix(request: dict[str, Any]) -> bytes:
        marked = [i for i, b in enumerate(request["system"]) if b.get("cache_control")]
        return json.dumps([request["tools"], request["system"][: marked[-1] + 1]], sort_keys=True).encode()

    prefixes = {prefix(r) for r in fake_anthropic.requests}
    assert len(fake_anthropic.requests) == 4 and len(prefixes) == 1
    breakpoints = [
        sum(1 for m in r["messages"] for b in m["content"] if b.get("cache_control")) for r in fake_anthropic.requests
    ]
    assert breakpoints == [1, 1, 1, 1]
    usage = [fake_anthropic.usage(r) for r in fake_anthropic.requests]  # replayed: everything is cached now
    assert all(u["cache_creation_input_tokens"] == 0 for u in usage)


async def test_metrics_are_recorded_for_every_run(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[think("plan"), sql(("ok", "SELECT 1"), ("bad", "SELECT nope"))]),
        Reply(text="One [Q1]."),
    )
    result, _ = await ask(make_app(), "q", interface="web")
    assert (
        _value(
            metrics, "agent_runs_total", {"interface": "web", "classification": "data_analysis", "outcome": "answered"}
        )
        == 1
    )
    assert _value(metrics, "agent_llm_calls_total", {"role": "main", "status": "ok"}) == 2
    assert _value(metrics, "agent_sql_queries_total", {"status": "ok"}) == 1
    assert _value(metrics, "agent_sql_queries_total", {"status": "error"}) == 1
    assert _value(metrics, "agent_llm_tokens_total", {"type": "output"}) == result.metrics.output_tokens > 0
    # With the rolling breakpoint on the last block, everything before it is cache read or written.
    assert _value(metrics, "agent_llm_tokens_total", {"type": "input"}) == result.metrics.input_tokens
    cache_written = _value(metrics, "agent_llm_tokens_total", {"type": "cache_creation"})
    assert cache_written == result.metrics.cache_creation_tokens > 0
    assert _value(metrics, "agent_llm_tokens_total", {"type": "cache_read"}) == result.metrics.cache_read_tokens > 0
    assert _value(metrics, "agent_run_rounds_count", {}) == 1 and _value(metrics, "agent_run_rounds_sum", {}) == 2
    assert _value(metrics, "agent_run_duration_seconds_count", {}) == 1
    assert _value(metrics, "agent_sql_duration_seconds_count", {}) == 2
    assert _value(metrics, "agent_llm_duration_seconds_count", {"role": "main"}) == 2
    assert result.metrics.think_calls == 1 and result.metrics.sql_errors == 1


def test_metric_labels_are_bounded(metrics) -> None:
    labels = {name for family in metrics.registry.collect() for s in family.samples for name in s.labels}
    bounded = {"interface", "classification", "outcome", "role", "status", "type", "guard", "reason", "le"}
    bounded |= {"code", "kind", "value", "delivery"}  # SQL error codes, budget kinds, thumbs, Slack deliveries
    bounded |= {"timing", "stage", "destination"}  # schedules: on time or late, where a fire failed, inbox or Slack
    assert labels <= bounded


@pytest.mark.parametrize("platform", ["slack", "web", "cli"])
async def test_platform_format_comes_after_the_cached_prefix(make_app, fake_anthropic: FakeAnthropic, platform) -> None:
    fake_anthropic.script(Reply(text="ok"))
    await ask(make_app(), "q", platform=platform)
    system = fake_anthropic.requests[0]["system"]
    assert "cache_control" in system[1] and "cache_control" not in system[2]
    assert {"slack": "Slack thread", "web": "web chat", "cli": "terminal"}[platform] in system[2]["text"]
    assert "Today is" in system[2]["text"] and "Today is" not in system[0]["text"] + system[1]["text"]


async def test_a_run_failing_in_an_unexpected_place_still_ends_with_done(make_app, db: Database, metrics) -> None:
    from agent.app import build_runner
    from agent.schema import SchemaCache, SchemaView

    class BrokenSchema(SchemaCache):
        async def view(self) -> SchemaView:
            raise RuntimeError("the schema exploded")

    app = make_app()
    runner = build_runner(app.settings, db=db, llm=app.llm, metrics=metrics, schema=BrokenSchema(db, 1_000, 0))
    events = Recorder()
    result = await runner.run("how many flights?", on_event=events)
    assert events.kinds[-1] == "error"
    assert result.outcome is Outcome.ERROR and result.error and "RuntimeError" in result.error
    assert "exploded" not in result.error  # details go to the log, not to the person


def test_an_old_result_just_over_the_soft_threshold_is_cut_to_head_and_tail() -> None:
    from agent.pipeline.context import HEAD_CHARS, TAIL_CHARS, TRIM_AT, trim_tool_results

    def result(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": text}]}

    just_over, at_most = "a" * (HEAD_CHARS + TAIL_CHARS + 101), "b" * (HEAD_CHARS + TAIL_CHARS + 100)
    newest = "c" * 20_000
    messages = [result(just_over), result(at_most), result(newest)]
    used = sum(len(json.dumps(m["content"])) for m in messages) // 4
    budget = int(used / TRIM_AT) - 1  # just past the soft threshold, far from the hard one
    assert trim_tool_results(messages, budget, 0) == 1
    cut = messages[0]["content"][0]["content"]
    assert cut.startswith("a" * HEAD_CHARS + "\n…[") and cut.endswith("]…\n" + "a" * TAIL_CHARS)
    assert messages[1]["content"][0]["content"] == at_most  # at the threshold: left whole
    assert messages[2]["content"][0]["content"] == newest  # the newest result is never touched
    assert trim_tool_results(messages, budget * 10, 0) == 0  # under the threshold: nothing
