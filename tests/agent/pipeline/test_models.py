"""A whole run on a model list: answered by the next model when the first is overloaded (what was
gathered stays), on an OpenAI-compatible server, with follow-ups on another provider than the loop.
Real SDKs against the fakes over HTTP, real embedded ClickHouse."""

from __future__ import annotations

from typing import Any

from agent.runner import Outcome
from tests.conftest import Recorder
from tests.fakes import openai_api
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply
from tests.fakes.openai_api import FakeOpenAI

SONNET, OPUS = "claude-sonnet-5-5", "claude-opus-5-5"
OVERLOADED = Failure(529, "overloaded_error", "Overloaded")
DEPARTURES = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC"
DAILY = "SELECT toDate(time_hour) AS day, count() AS flights FROM nycflights13.flights GROUP BY day ORDER BY day"


def sql(question: str, statement: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": statement}]})


def _value(metrics: Any, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_run_is_answered_by_the_second_model_after_the_first_returns_529(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    fake_anthropic.for_model(SONNET, OVERLOADED)
    fake_anthropic.script(
        Reply(tool_calls=[sql("Departures per origin", DEPARTURES)]), Reply(text="EWR had the most: 120,835 [Q1].")
    )
    events = Recorder()
    app = make_app(agent_model=f"{SONNET},{OPUS}")
    result = await app.runner.run("Which airport had the most departures?", on_event=events, followups=False)

    assert result.outcome is Outcome.ANSWERED and result.answer == "EWR had the most: 120,835 [Q1]."
    assert result.model == f"anthropic:{OPUS}" and result.metrics.fallbacks == 1
    assert result.summary()["model"] == f"anthropic:{OPUS}"  # what `agent ask --json` prints
    (note,) = events.of("fallback")
    assert (note.from_model, note.to_model, note.reason) == (f"anthropic:{SONNET}", f"anthropic:{OPUS}", "overloaded")
    assert note.note == f"anthropic:{SONNET} is overloaded; going on with anthropic:{OPUS}."
    assert events.kinds.index("fallback") < events.kinds.index("executing")
    # The second round goes straight to Opus: Sonnet rests for the cooldown instead of costing its retries again.
    assert [r["model"] for r in fake_anthropic.requests][-2:] == [OPUS, OPUS]
    assert _value(metrics, "agent_llm_fallbacks_total", {"role": "main", "reason": "overloaded"}) == 1
    # One fallback, yet both calls were answered by a later model: the alert's ratio counts these.
    assert _value(metrics, "agent_llm_later_model_calls_total", {"role": "main"}) == 2


async def test_a_fallback_in_the_middle_of_a_run_keeps_what_was_gathered(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    """Sonnet answers the first round, then is overloaded: Opus gets the same messages, the query and its
    result included, and writes the answer from them."""
    sonnet_calls = 0

    def sonnet(body: dict[str, Any]) -> Any:
        nonlocal sonnet_calls
        sonnet_calls += 1
        return Reply(tool_calls=[sql("Departures per origin", DEPARTURES)]) if sonnet_calls == 1 else OVERLOADED

    fake_anthropic.for_model(SONNET, sonnet)
    fake_anthropic.script(Reply(text="EWR had the most [Q1]."))
    result = await make_app(agent_model=f"{SONNET},{OPUS}").runner.run("Busiest airport?", followups=False)

    assert result.answer == "EWR had the most [Q1]." and result.model == f"anthropic:{OPUS}"
    assert [q.id for q in result.queries] == ["Q1"] and result.metrics.fallbacks == 1
    # The prompt cache is per model: Opus reads none of what Sonnet cached and writes its own.
    assert result.metrics.cache_read_tokens == 0 and result.metrics.cache_creation_tokens > 0
    opus = next(r for r in fake_anthropic.requests if r["model"] == OPUS)
    failed = [r for r in fake_anthropic.requests if r["model"] == SONNET][-1]
    assert opus["messages"] == failed["messages"]  # continued from the current messages
    assert any(
        b["type"] == "tool_result" and "| EWR | 120835 |" in b["content"] for b in opus["messages"][-1]["content"]
    )


async def test_a_request_at_fault_fails_the_run_without_a_fallback(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    fake_anthropic.for_model(SONNET, Failure(400, "invalid_request_error", "messages: something is wrong"))
    events = Recorder()
    result = await make_app(agent_model=f"{SONNET},{OPUS}").runner.run("q", on_event=events, followups=False)
    assert result.outcome is Outcome.ERROR and "fallback" not in events.kinds
    assert {r["model"] for r in fake_anthropic.requests} == {SONNET}
    assert _value(metrics, "agent_llm_fallbacks_total", {"role": "main", "reason": "overloaded"}) == 0


async def test_a_two_round_question_with_a_chart_on_an_openai_compatible_server(
    make_app, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    chart = ("chart", {"query_id": "Q1", "kind": "line", "x": "day", "y": "flights", "title": "Daily"})
    fake_openai.script(
        openai_api.Reply(text="Counting flights per day.", tool_calls=[sql("Flights per day", DAILY)]),
        openai_api.Reply(tool_calls=[chart]),
        openai_api.Reply(text="Daily departures peaked in summer [Q1]."),
    )
    events = Recorder()
    app = make_app(agent_model="openai:llama3.1:8b")
    result = await app.runner.run("How did daily flights change?", on_event=events, followups=False)

    assert result.outcome is Outcome.ANSWERED and result.answer == "Daily departures peaked in summer [Q1]."
    assert result.model == "openai:llama3.1:8b" and fake_anthropic.requests == []
    assert len(result.charts) == 1 and result.charts[0].rows == 365 and events.of("chart")
    assert events.of("thinking")[0].text == "Counting flights per day."  # narration before a call is thinking
    assert result.metrics.llm_calls == 3 and result.metrics.input_tokens > 0 and result.metrics.output_tokens == 60
    last = fake_openai.requests[-1]
    assert last["model"] == "llama3.1:8b" and [m["role"] for m in last["messages"]][:2] == ["system", "user"]
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("Q1: Flights per day") and "C1 drawn" in tool_messages[1]["content"]


async def test_follow_ups_on_another_provider_than_the_main_loop(
    make_app, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI, metrics
) -> None:
    fake_anthropic.script(Reply(text="Hello! Ask me about flights."))
    fake_openai.script(openai_api.Reply(text='["Which airline flew the most?", "Which month was busiest?"]'))
    app = make_app(agent_followup_model="openai:qwen2.5:7b")
    result = await app.runner.run("hello", followups=True)
    assert result.model == f"anthropic:{SONNET}"
    assert result.followups == ["Which airline flew the most?", "Which month was busiest?"]
    (asked,) = fake_openai.requests
    assert asked["model"] == "qwen2.5:7b" and "stream" not in asked and asked["max_tokens"] == 400
    assert _value(metrics, "agent_llm_calls_total", {"role": "followup", "status": "ok"}) == 1


async def test_follow_ups_fall_back_and_are_counted(
    make_app, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI, metrics
) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    fake_openai.for_model("small", openai_api.rate_limited())
    fake_openai.script(openai_api.Reply(text='["Which airline flew the most?"]'))
    result = await make_app(agent_followup_model="openai:small,openai:bigger").runner.run("hello", followups=True)
    assert result.followups == ["Which airline flew the most?"] and result.model == f"anthropic:{SONNET}"
    assert _value(metrics, "agent_llm_fallbacks_total", {"role": "followup", "reason": "rate_limited"}) == 1


async def test_a_thinking_budget_thinks_and_passes_its_thinking_back(make_app, fake_anthropic: FakeAnthropic) -> None:
    """AGENT_THINKING_BUDGET on the Messages API: `thinking` is sent, on top of max_tokens; the thinking block
    goes back, signed, ahead of the tool call it led to (the fake refuses the request otherwise)."""
    fake_anthropic.script(
        Reply(thinking="Group by origin.", tool_calls=[sql("Departures per origin", DEPARTURES)]),
        Reply(thinking="EWR leads.", text="EWR had the most [Q1]."),
    )
    result = await make_app(agent_thinking_budget=2048).runner.run("Busiest airport?", followups=False)
    assert result.outcome is Outcome.ANSWERED and result.answer == "EWR had the most [Q1]."
    first, second = fake_anthropic.requests
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048} and first["max_tokens"] == 4096 + 2048
    kept = second["messages"][-2]["content"]
    assert kept[0]["type"] == "thinking" and kept[0]["thinking"] == "Group by origin." and kept[0]["signature"]
    assert "Group by origin" not in result.answer


async def test_a_turn_without_thinking_is_answered_without_it(
    make_app, fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI
) -> None:
    """Our own server answered the first round (no thinking block), then is down: Claude takes over without a
    thinking budget for that call, rather than a request the API would refuse."""
    calls = 0

    def own(body: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return openai_api.Reply(tool_calls=[sql("Departures", DEPARTURES)]) if calls == 1 else openai_api.server_error()

    fake_openai.for_model("qwen", own)
    fake_anthropic.script(Reply(thinking="Read Q1.", text="EWR [Q1]."))
    app = make_app(agent_model=f"openai:qwen,{SONNET}", agent_thinking_budget=2048)
    result = await app.runner.run("Busiest airport?", followups=False)
    assert result.answer == "EWR [Q1]." and result.model == f"anthropic:{SONNET}"
    assert "thinking" not in fake_anthropic.requests[0]
