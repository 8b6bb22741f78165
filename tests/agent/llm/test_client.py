"""Fallback: a model that is overloaded, rate limited past its retries or unreachable hands the call to
the next in its list, with the same request; a request at fault is refused at once. Real SDKs against the
fakes over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from agent.llm import ContextOverflow, Fallback, LLMClient, LLMConfigError, LLMUnavailable
from tests.fakes import openai_api
from tests.fakes.anthropic_api import Failure, FakeAnthropic, MidStreamFailure, Reply
from tests.fakes.clients import anthropic_provider, openai_provider
from tests.fakes.openai_api import FakeOpenAI

SONNET, OPUS = "claude-sonnet-5-5", "claude-opus-5-5"
REQUEST: dict[str, Any] = {
    "max_tokens": 256,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(fake: FakeAnthropic, openai: FakeOpenAI | None = None, **kwargs: Any) -> LLMClient:
    providers: dict[str, Any] = {"anthropic": anthropic_provider(fake, max_retries=1)}
    if openai is not None:
        providers["openai"] = openai_provider(openai, max_retries=1)
    return LLMClient(providers, **kwargs)  # type: ignore[arg-type]


class Notes:
    def __init__(self) -> None:
        self.fallbacks: list[Fallback] = []
        self.texts: list[str] = []
        self.restarts = 0

    async def fallback(self, note: Fallback) -> None:
        self.fallbacks.append(note)

    async def text(self, delta: str) -> None:
        self.texts.append(delta)

    async def restart(self) -> None:
        self.restarts += 1


async def ask(llm: LLMClient, notes: Notes, models: str, **extra: Any) -> Any:
    return await llm.stream_turn(
        model=models, on_text=notes.text, on_restart=notes.restart, on_fallback=notes.fallback, **REQUEST, **extra
    )


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (Failure(529, "overloaded_error", "Overloaded"), "overloaded"),
        (Failure(429, "rate_limit_error", "Slow down"), "rate_limited"),
        (Failure(503, "api_error", "Service unavailable"), "unavailable"),
    ],
)
async def test_the_next_model_answers_when_the_first_cannot(
    fake_anthropic: FakeAnthropic, failure: Failure, reason: str
) -> None:
    fake_anthropic.for_model(SONNET, failure)
    fake_anthropic.script(Reply(text="From Opus."))
    llm, notes = client(fake_anthropic), Notes()
    try:
        turn = await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert turn.text == "From Opus." and turn.model == f"anthropic:{OPUS}"
    assert notes.fallbacks == [Fallback("main", f"anthropic:{SONNET}", f"anthropic:{OPUS}", reason)]  # type: ignore[arg-type]
    models = [r["model"] for r in fake_anthropic.requests]
    assert models == [SONNET, SONNET, OPUS]  # the SDK's one retry, then the next model
    assert fake_anthropic.requests[0]["messages"] == fake_anthropic.requests[2]["messages"]


async def test_a_reply_cut_off_by_overload_is_dropped_before_the_next_model_answers(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.for_model(SONNET, MidStreamFailure(partial_text="Half an "))
    fake_anthropic.script(Reply(text="Whole answer."))
    llm, notes = client(fake_anthropic), Notes()
    try:
        turn = await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert turn.text == "Whole answer." and notes.restarts >= 1 and notes.fallbacks[0].reason == "overloaded"
    assert "".join(notes.texts).endswith("Whole answer.")


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("throttlingException", "rate_limited"),
        ("serviceUnavailableException", "unavailable"),
        ("internalServerException", "unavailable"),
        ("modelStreamErrorException", "unavailable"),
    ],
)
async def test_a_bedrock_error_inside_the_stream_falls_back(
    fake_anthropic: FakeAnthropic, code: str, reason: str
) -> None:
    """Bedrock's stream carries AWS's exception code as the error event's type (the SDK's Bedrock decoder,
    anthropic/lib/bedrock/_stream_decoder.py, turns an exception frame into `{"type": "error", "error":
    {"type": <Code>}}`): the same SDK path as this error event over the Messages API."""
    fake_anthropic.for_model(SONNET, MidStreamFailure(error_type=code))
    fake_anthropic.script(Reply(text="Whole answer."))
    llm, notes = client(fake_anthropic), Notes()
    try:
        turn = await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert turn.text == "Whole answer." and turn.model == f"anthropic:{OPUS}" and turn.later_model
    assert [n.reason for n in notes.fallbacks] == [reason]


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (Failure(400, "invalid_request_error", "messages: bad"), LLMConfigError),
        (Failure(400, "validation_error", "Input is too long for requested model."), ContextOverflow),
        (Failure(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), ContextOverflow),
        (Failure(401, "authentication_error", "invalid x-api-key"), LLMConfigError),
    ],
)
async def test_a_request_at_fault_does_not_fall_back(
    fake_anthropic: FakeAnthropic, failure: Failure, error: type[Exception]
) -> None:
    fake_anthropic.for_model(SONNET, failure)
    llm, notes = client(fake_anthropic), Notes()
    try:
        with pytest.raises(error):
            await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert notes.fallbacks == [] and {r["model"] for r in fake_anthropic.requests} == {SONNET}


async def test_the_last_model_failing_is_the_error(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.always(Failure(529, "overloaded_error", "Overloaded"))
    llm, notes = client(fake_anthropic), Notes()
    try:
        with pytest.raises(LLMUnavailable) as caught:
            await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert caught.value.reason == "overloaded" and len(notes.fallbacks) == 1


async def test_a_passed_over_model_rests_for_the_cooldown(fake_anthropic: FakeAnthropic) -> None:
    """The next rounds start at the model that answered, without paying the first one's retries again;
    after the cooldown the first model is asked first again."""
    fake_anthropic.for_model(SONNET, Failure(529, "overloaded_error", "Overloaded"))
    fake_anthropic.script(Reply(text="one"), Reply(text="two"))
    clock = Clock()
    llm, notes = client(fake_anthropic, cooldown_s=30, clock=clock), Notes()
    try:
        await ask(llm, notes, f"{SONNET},{OPUS}")
        second = await ask(llm, notes, f"{SONNET},{OPUS}")
        assert second.model == f"anthropic:{OPUS}" and len(notes.fallbacks) == 1
        assert [r["model"] for r in fake_anthropic.requests] == [SONNET, SONNET, OPUS, OPUS]
        clock.now += 31
        fake_anthropic.for_model(SONNET, None)
        fake_anthropic.script(Reply(text="three"))
        third = await ask(llm, notes, f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert third.model == f"anthropic:{SONNET}"


async def test_a_fallback_may_cross_providers(fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI) -> None:
    """Claude overloaded, the team's own model (an OpenAI-compatible server) answers the same messages."""
    fake_anthropic.for_model(SONNET, Failure(529, "overloaded_error", "Overloaded"))
    fake_openai.script(openai_api.Reply(text="From our own server."))
    llm, notes = client(fake_anthropic, fake_openai), Notes()
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    try:
        turn = await ask(llm, notes, f"{SONNET},openai:llama3.1:8b", system=system, temperature=0.2)
    finally:
        await llm.close()
    assert turn.model == "openai:llama3.1:8b" and turn.text == "From our own server."
    sent = fake_openai.requests[0]
    assert sent["model"] == "llama3.1:8b" and sent["temperature"] == 0.2
    assert sent["messages"] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "q"}]
    assert notes.fallbacks[0].to_model == "openai:llama3.1:8b"


async def test_a_plain_call_falls_back_too(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.for_model("claude-haiku-5-5", Failure(529, "overloaded_error", "Overloaded"))
    fake_anthropic.script(Reply(text='["a follow-up question?"]'))
    llm, notes = client(fake_anthropic), Notes()
    try:
        turn = await llm.complete(
            model=f"claude-haiku-5-5,{SONNET}", system="s", prompt="p", max_tokens=100, on_fallback=notes.fallback
        )
    finally:
        await llm.close()
    assert turn.model == f"anthropic:{SONNET}" and notes.fallbacks[0].role == "followup"


async def test_an_unconfigured_provider_says_which_setting_is_missing(fake_anthropic: FakeAnthropic) -> None:
    llm, notes = client(fake_anthropic), Notes()
    try:
        with pytest.raises(LLMConfigError, match="no openai client"):
            await ask(llm, notes, "openai:gpt-x")
    finally:
        await llm.close()


async def test_a_server_that_cannot_be_reached_falls_back(fake_anthropic: FakeAnthropic) -> None:
    """Our own model server is down (connection refused): Claude answers."""
    from agent.llm import OpenAIProvider, openai_client

    down = openai_client(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=5)
    fake_anthropic.script(Reply(text="From Claude."))
    llm = LLMClient({"openai": OpenAIProvider(down, stream_retries=0), "anthropic": anthropic_provider(fake_anthropic)})
    notes = Notes()
    try:
        turn = await ask(llm, notes, f"openai:llama3.1:8b,{SONNET}")
    finally:
        await llm.close()
    assert turn.model == f"anthropic:{SONNET}" and notes.fallbacks[0].reason == "unavailable"


async def test_a_model_with_another_after_it_gets_the_fewer_fallback_retries(fake_anthropic: FakeAnthropic) -> None:
    """AGENT_FALLBACK_RETRIES: the first model is asked once more, not AGENT_LLM_MAX_RETRIES times, before the
    next is asked; the last model of the list keeps every retry."""
    fake_anthropic.always(Failure(529, "overloaded_error", "Overloaded"))
    llm = LLMClient({"anthropic": anthropic_provider(fake_anthropic, max_retries=3, fallback_retries=1)})
    try:
        with pytest.raises(LLMUnavailable):
            await ask(llm, Notes(), f"{SONNET},{OPUS}")
    finally:
        await llm.close()
    assert [r["model"] for r in fake_anthropic.requests] == [SONNET] * 2 + [OPUS] * 4
