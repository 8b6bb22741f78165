"""Neutral capabilities, translated per provider in this one place.

Settings and callers say *what* they want: prompt caching (cache hints on the request prefix), a
thinking budget, a maximum of output tokens, a temperature. `translate` turns a neutral request into
the parameters of one provider's API; a capability the provider lacks is left out of the request (a
safe no-op), and `log_gaps` says so once at start-up.

A neutral request is Messages-API-shaped (the pipeline's own shape): `system` (text blocks, optional
`cache_control` hints), `tools` (`input_schema`), `messages`, `tool_choice`, plus the neutral keys
`max_tokens`, `temperature` (None: none sent) and `thinking_budget` (None: no thinking).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from agent.config import ModelRef, Provider

log = logging.getLogger(__name__)

Capability = Literal["streaming", "tools", "prompt_caching", "thinking", "temperature", "max_output_tokens"]
_MESSAGES_API: frozenset[Capability] = frozenset(
    {"streaming", "tools", "prompt_caching", "thinking", "temperature", "max_output_tokens"}
)
SUPPORT: dict[Provider, frozenset[Capability]] = {
    "anthropic": _MESSAGES_API,
    "bedrock": _MESSAGES_API,
    "vertex": _MESSAGES_API,
    # Chat Completions has no cache breakpoints (OpenAI caches long prefixes by itself; vLLM and Ollama do
    # prefix caching on their own terms) and no thinking budget (`reasoning_effort` is a level, not a budget).
    "openai": frozenset({"streaming", "tools", "temperature", "max_output_tokens"}),
}
GAPS: dict[Capability, str] = {
    "prompt_caching": "no cache breakpoints are sent; the server caches prompt prefixes by itself, if at all",
    "thinking": "AGENT_THINKING_BUDGET is not sent; the model answers without a thinking budget",
}


@dataclass(frozen=True)
class Capabilities:
    """The neutral settings that hold for every call (AGENT_PROMPT_CACHING); the rest travel per request."""

    prompt_caching: bool = True


def supports(provider: Provider, capability: Capability) -> bool:
    return capability in SUPPORT[provider]


def gaps(refs: Iterable[ModelRef], *, caps: Capabilities, thinking_budget: int | None) -> list[str]:
    """One line per configured capability a listed model's provider lacks."""
    configured: tuple[tuple[Capability, bool], ...] = (
        ("prompt_caching", caps.prompt_caching),
        ("thinking", bool(thinking_budget)),
    )
    wanted = [capability for capability, on in configured if on]
    lines = []
    for ref in dict.fromkeys(refs):
        for capability in wanted:
            if not supports(ref.provider, capability):
                lines.append(f"{ref}: no {capability.replace('_', ' ')} on {ref.provider}; {GAPS[capability]}")
    return lines


def log_gaps(refs: Iterable[ModelRef], *, caps: Capabilities, thinking_budget: int | None) -> list[str]:
    lines = gaps(refs, caps=caps, thinking_budget=thinking_budget)
    for line in lines:
        log.info("model capability: %s", line)
    return lines


def translate(provider: Provider, request: dict[str, Any], caps: Capabilities) -> dict[str, Any]:
    """The neutral request in `provider`'s terms (its messages still Messages-API-shaped: the OpenAI provider
    converts those itself, in agent/llm/openai_chat.py)."""
    out = dict(request)
    temperature = out.pop("temperature", None)
    budget = out.pop("thinking_budget", None)
    if provider == "openai":
        if temperature is not None:
            out["temperature"] = temperature
        return _without_cache_hints(out)
    if budget and _thinking_fits(out.get("messages", [])):
        # Thinking tokens count toward max_tokens, so the budget comes on top of the answer's own tokens;
        # the API takes no temperature alongside thinking.
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
        out["max_tokens"] = out["max_tokens"] + budget
    elif temperature is not None:
        # API version 2026-10-21 dropped sampling parameters from the SDK's signature: sent in the body for a
        # gateway or API version that takes one (agent/config.py, AGENT_TEMPERATURE).
        out["extra_body"] = {"temperature": temperature}
    return out if caps.prompt_caching else _without_cache_hints(out)


def _thinking_fits(messages: list[dict[str, Any]]) -> bool:
    """With thinking on, the API wants the assistant turn whose tool calls are being answered to start with its
    thinking block. A turn written without one (by another provider's model, or before thinking was set)
    cannot be given one: that call goes without thinking, and so do the rest of the run's rounds (each answers
    a tool call made without thinking); the next question thinks again."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    if last is None or isinstance(last["content"], str):
        return True
    kinds = [block["type"] for block in last["content"]]
    return "tool_use" not in kinds or kinds[0] in ("thinking", "redacted_thinking")


def _without_cache_hints(request: dict[str, Any]) -> dict[str, Any]:
    out = dict(request)
    for key in ("system", "tools", "messages"):
        if isinstance(out.get(key), list):
            out[key] = _strip(out[key])
    return out


def _strip(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip(item) for item in value]
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    return copy.copy(value)
