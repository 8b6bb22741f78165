"""Neutral capabilities in each provider's terms, in one place; a capability a provider lacks is left
out of the request and said once at start-up."""

from __future__ import annotations

import logging

import pytest

from agent.config import parse_models
from agent.llm import LLMClient
from agent.llm.capabilities import Capabilities, gaps, translate
from tests.conftest import make_settings

EPHEMERAL = {"type": "ephemeral"}
NEUTRAL = {
    "max_tokens": 1000,
    "system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": EPHEMERAL}]}],
    "temperature": 0.0,
    "thinking_budget": None,
}


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "vertex"])
def test_the_messages_api_gets_caching_temperature_and_thinking(provider) -> None:
    plain = translate(provider, NEUTRAL, Capabilities())
    assert plain["system"][0]["cache_control"] == EPHEMERAL and plain["extra_body"] == {"temperature": 0.0}
    assert "temperature" not in plain and "thinking_budget" not in plain
    thinking = translate(provider, {**NEUTRAL, "thinking_budget": 2048}, Capabilities())
    assert thinking["thinking"] == {"type": "enabled", "budget_tokens": 2048} and thinking["max_tokens"] == 3048
    assert "extra_body" not in thinking  # the API takes no temperature alongside thinking
    uncached = translate(provider, NEUTRAL, Capabilities(prompt_caching=False))
    assert "cache_control" not in str(uncached) and "cache_control" in str(NEUTRAL)  # the caller's request untouched


def test_an_openai_compatible_server_gets_what_it_has() -> None:
    out = translate("openai", {**NEUTRAL, "thinking_budget": 2048}, Capabilities())
    assert out["temperature"] == 0.0 and out["max_tokens"] == 1000
    assert "thinking" not in out and "thinking_budget" not in out and "cache_control" not in str(out)


def test_the_gaps_are_said_once_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(
        anthropic_api_key="k",
        agent_model="claude-sonnet-5-5,openai:llama3.1:8b",
        agent_followup_model="openai:llama3.1:8b",
        openai_base_url="http://127.0.0.1:9/v1",
        agent_thinking_budget=2048,
    )
    with caplog.at_level(logging.INFO, logger="agent.llm.capabilities"):
        LLMClient.from_settings(settings)
    lines = [r.getMessage() for r in caplog.records if r.name == "agent.llm.capabilities"]
    assert lines == [
        "model capability: openai:llama3.1:8b: no prompt caching on openai; no cache breakpoints are sent; the server "
        "caches prompt prefixes by itself, if at all",
        "model capability: openai:llama3.1:8b: no thinking on openai; AGENT_THINKING_BUDGET is not sent; the model "
        "answers without a thinking budget",
    ]


def test_nothing_is_said_when_every_provider_has_it() -> None:
    assert (
        gaps(parse_models("claude-sonnet-5-5,vertex:claude-opus-5-5"), caps=Capabilities(), thinking_budget=2048) == []
    )
