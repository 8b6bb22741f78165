"""Builds the provider clients the configured model lists need, from settings. A provider that cannot
be asked (no key, an SDK extra not installed, no region) becomes an `UnconfiguredProvider` whose calls
raise why, so a server still starts and /readyz says what is missing."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any, Protocol

import anthropic

from agent.config import MISSING_ANTHROPIC_KEY, Provider, Settings
from agent.llm.anthropic import AnthropicProvider, anthropic_client
from agent.llm.turns import LLMConfigError, ModelTurn, RestartSink, TextSink, UsageSink, ignore_usage


class ModelProvider(Protocol):
    """One provider's API. `last`: no model follows in the list, so retries are the full count; otherwise the
    few of AGENT_FALLBACK_RETRIES, and the next model is asked sooner."""

    async def stream(
        self,
        model: str,
        request: dict[str, Any],
        on_text: TextSink,
        on_restart: RestartSink,
        *,
        last: bool = True,
        on_usage: UsageSink = ignore_usage,
    ) -> ModelTurn: ...

    async def complete(self, model: str, request: dict[str, Any], *, last: bool = True) -> ModelTurn: ...

    async def close(self) -> None: ...


class UnconfiguredProvider:
    """Stands in for a provider that cannot be asked (no key, no SDK extra), so a server can start and
    say why; every call raises that reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def stream(
        self,
        model: str,
        request: dict[str, Any],
        on_text: TextSink,
        on_restart: RestartSink,
        *,
        last: bool = True,
        on_usage: UsageSink = ignore_usage,
    ) -> ModelTurn:
        raise LLMConfigError(self.reason)

    async def complete(self, model: str, request: dict[str, Any], *, last: bool = True) -> ModelTurn:
        raise LLMConfigError(self.reason)

    async def close(self) -> None:
        return None


# A local server behind OPENAI_BASE_URL (vLLM, Ollama) takes any key, but the SDK refuses to start without one.
NO_KEY = "unused"


def providers_for(settings: Settings, used: Iterable[Provider]) -> dict[Provider, ModelProvider]:
    return {provider: _build(settings, provider) for provider in sorted(set(used))}


def _build(settings: Settings, provider: Provider) -> ModelProvider:
    retries, timeout = settings.agent_llm_max_retries, settings.agent_llm_timeout_s
    quick = min(settings.agent_fallback_retries, retries)
    common: dict[str, Any] = {"max_retries": retries, "timeout": timeout}
    if provider == "anthropic":
        if settings.anthropic_api_key is None:
            return UnconfiguredProvider(MISSING_ANTHROPIC_KEY)
        client = anthropic_client(
            api_key=settings.anthropic_api_key.get_secret_value(),
            base_url=settings.anthropic_base_url,
            max_retries=retries,
            timeout_s=timeout,
        )
        return AnthropicProvider(client, stream_retries=retries, fallback_retries=quick)
    if provider == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        if key is None and not settings.openai_base_url:
            return UnconfiguredProvider("OPENAI_API_KEY is not set; `openai:` models need it (or OPENAI_BASE_URL).")
        from agent.llm.openai_chat import OpenAIProvider, openai_client  # the openai SDK only where it is used

        chat = openai_client(
            api_key=key or NO_KEY, base_url=settings.openai_base_url, max_retries=retries, timeout_s=timeout
        )
        return OpenAIProvider(chat, stream_retries=retries, fallback_retries=quick)
    if provider == "bedrock":
        if importlib.util.find_spec("botocore") is None:
            return UnconfiguredProvider(
                "`bedrock:` models need the AWS SDK: pip install 'clickhouse-analyst[bedrock]' (botocore)."
            )
        bedrock = anthropic.AsyncAnthropicBedrock(aws_region=settings.aws_region, **common)
        return AnthropicProvider(
            bedrock, key_setting="the AWS credentials", stream_retries=retries, fallback_retries=quick
        )
    if not (settings.cloud_ml_region and settings.anthropic_vertex_project_id):
        return UnconfiguredProvider("`vertex:` models need CLOUD_ML_REGION and ANTHROPIC_VERTEX_PROJECT_ID.")
    if importlib.util.find_spec("google.auth") is None:
        return UnconfiguredProvider(
            "`vertex:` models need Google's auth library: pip install 'clickhouse-analyst[vertex]' (google-auth)."
        )
    vertex = anthropic.AsyncAnthropicVertex(
        region=settings.cloud_ml_region, project_id=settings.anthropic_vertex_project_id, **common
    )
    return AnthropicProvider(
        vertex, key_setting="the Google Cloud credentials", stream_retries=retries, fallback_retries=quick
    )
