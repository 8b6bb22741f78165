"""The model client: per role an ordered list of models, each on its provider (the Messages API on
Anthropic, Bedrock or Vertex; Chat Completions on any OpenAI-compatible server), with fallback.

- `client`: `LLMClient`, the one client every role uses, and its fallback.
- `capabilities`: neutral capabilities (caching, thinking, output tokens, temperature) per provider.
- `anthropic`, `openai_chat`: one provider each, both building the same `ModelTurn` (`turns`).
- `providers`: the provider clients the settings ask for.
- `reach`: a connection that cannot be made is retried once, not at every layer.

Importing this package loads no model SDK: each name below is imported from its module when first
used (PEP 562), so the Runner contract and the receipts, which need only `Usage`, stay light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.llm.anthropic import AnthropicProvider, anthropic_client
    from agent.llm.client import MISSING_KEY, LLMClient
    from agent.llm.openai_chat import OpenAIProvider, openai_client
    from agent.llm.providers import ModelProvider, UnconfiguredProvider
    from agent.llm.turns import (
        FALLBACK_REASONS,
        BadUsage,
        ContextOverflow,
        Fallback,
        FallbackReason,
        FallbackSink,
        LLMConfigError,
        LLMError,
        LLMUnavailable,
        ModelTurn,
        ModelUnreachable,
        TextSink,
        Usage,
    )

__all__ = [
    "FALLBACK_REASONS",
    "MISSING_KEY",
    "AnthropicProvider",
    "BadUsage",
    "ContextOverflow",
    "Fallback",
    "FallbackReason",
    "FallbackSink",
    "LLMClient",
    "LLMConfigError",
    "LLMError",
    "LLMUnavailable",
    "ModelProvider",
    "ModelTurn",
    "ModelUnreachable",
    "OpenAIProvider",
    "TextSink",
    "UnconfiguredProvider",
    "Usage",
    "anthropic_client",
    "openai_client",
]

_MODULES = {
    "AnthropicProvider": "anthropic",
    "anthropic_client": "anthropic",
    "MISSING_KEY": "client",
    "LLMClient": "client",
    "OpenAIProvider": "openai_chat",
    "openai_client": "openai_chat",
    "ModelProvider": "providers",
    "UnconfiguredProvider": "providers",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULES.get(name, 'turns')}"), name)
    globals()[name] = value
    return value
