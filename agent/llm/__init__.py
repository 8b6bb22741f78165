"""The model client: per role an ordered list of models, each on its provider (the Messages API on
Anthropic, Bedrock or Vertex; Chat Completions on any OpenAI-compatible server), with fallback.

- `client`: `LLMClient`, the one client every role uses, and its fallback.
- `capabilities`: neutral capabilities (caching, thinking, output tokens, temperature) per provider.
- `anthropic`, `openai_chat`: one provider each, both building the same `ModelTurn` (`turns`).
- `providers`: the provider clients the settings ask for.
- `reach`: a connection that cannot be made is retried once, not at every layer.
"""

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
