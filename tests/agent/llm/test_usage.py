"""Token counts are checked where they enter the app: a model server (hostile, or a buggy gateway) that
reports a negative, non-integer or absurd count has its reply refused as a provider error, logged, before
the count reaches a budget, a receipt or a metric."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agent.llm import BadUsage, Usage
from agent.llm.turns import MAX_USAGE_TOKENS, usage_count
from tests.fakes import anthropic_api, openai_api
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.clients import anthropic_provider, openai_provider
from tests.fakes.openai_api import FakeOpenAI

# What the SDKs hand over as sent (they coerce "12" and true to 12 and 1 in some paths, which the check
# below refuses too when they do not).
WIRE_COUNTS = [-100_000_000, -1, 1.5, 2e9, MAX_USAGE_TOKENS + 1, 10**30]
BAD_COUNTS = [*WIRE_COUNTS, "12", True, None.__class__]
MESSAGES = {"max_tokens": 100, "messages": [{"role": "user", "content": "How many flights?"}]}


async def _ignore(*_: Any) -> None:
    return None


@pytest.mark.parametrize("count", WIRE_COUNTS)
@pytest.mark.parametrize("field", ["output_tokens", "input_tokens", "cache_creation_input_tokens"])
@pytest.mark.parametrize("streamed", [True, False])
async def test_an_impossible_messages_api_count_is_refused_and_logged(
    fake_anthropic: FakeAnthropic, caplog: pytest.LogCaptureFixture, field: str, count: Any, streamed: bool
) -> None:
    fake_anthropic.script(anthropic_api.Reply(text="There are 16 airlines.", usage={field: count}))
    provider = anthropic_provider(fake_anthropic)
    try:
        with caplog.at_level(logging.ERROR), pytest.raises(BadUsage, match=f"impossible token count \\({field} ="):
            if streamed:
                await provider.stream("claude-x", MESSAGES, _ignore, _ignore)
            else:
                await provider.complete("claude-x", MESSAGES)
    finally:
        await provider.close()
    assert len(fake_anthropic.requests) == 1, "a bad count is not asked again"
    assert any(field in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


@pytest.mark.parametrize("count", WIRE_COUNTS)
@pytest.mark.parametrize("field", ["completion_tokens", "prompt_tokens"])
@pytest.mark.parametrize("streamed", [True, False])
async def test_an_impossible_chat_completions_count_is_refused_and_logged(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, field: str, count: Any, streamed: bool
) -> None:
    fake_openai.script(openai_api.Reply(text="There are 16 airlines.", usage={field: count}))
    provider = openai_provider(fake_openai)
    try:
        with caplog.at_level(logging.ERROR), pytest.raises(BadUsage, match=f"\\({field} ="):
            if streamed:
                await provider.stream("m", MESSAGES, _ignore, _ignore)
            else:
                await provider.complete("m", MESSAGES)
    finally:
        await provider.close()
    assert any(field in r.getMessage() for r in caplog.records)


async def test_a_negative_cached_count_is_refused(fake_openai: FakeOpenAI) -> None:
    details = {"cached_tokens": -5000, "audio_tokens": 0}
    fake_openai.script(openai_api.Reply(text="16.", usage={"prompt_tokens_details": details}))
    provider = openai_provider(fake_openai)
    try:
        with pytest.raises(BadUsage, match="cached_tokens"):
            await provider.stream("m", MESSAGES, _ignore, _ignore)
    finally:
        await provider.close()


async def test_honest_counts_pass_as_reported(fake_anthropic: FakeAnthropic, fake_openai: FakeOpenAI) -> None:
    usage = {"input_tokens": 1234, "output_tokens": 56, "cache_read_input_tokens": 0}
    fake_anthropic.script(anthropic_api.Reply(text="16.", usage=usage))
    fake_openai.script(openai_api.Reply(text="16.", usage={"prompt_tokens": 300, "completion_tokens": 7}))
    claude, other = anthropic_provider(fake_anthropic), openai_provider(fake_openai)
    try:
        turn = await claude.stream("claude-x", MESSAGES, _ignore, _ignore)
        chat = await other.stream("m", MESSAGES, _ignore, _ignore)
    finally:
        await claude.close()
        await other.close()
    assert (turn.usage.input_tokens, turn.usage.output_tokens, turn.usage.cache_read_tokens) == (1234, 56, 0)
    assert (chat.usage.output_tokens, chat.usage.input_tokens + chat.usage.cache_read_tokens) == (7, 300)


def test_the_check_itself() -> None:
    assert usage_count("output_tokens", None) == 0
    assert usage_count("output_tokens", MAX_USAGE_TOKENS) == MAX_USAGE_TOKENS
    for bad in BAD_COUNTS:
        with pytest.raises(BadUsage):
            usage_count("output_tokens", bad)
    assert Usage() == Usage(0, 0, 0, 0)
