"""The app's own clients pointed at the fakes, for the tests and the benchmarks."""

from __future__ import annotations

from agent.llm import AnthropicProvider, LLMClient, OpenAIProvider, anthropic_client, openai_client
from agent.llm.providers import ModelProvider
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.openai_api import FakeOpenAI


def anthropic_provider(
    fake: FakeAnthropic, max_retries: int = 3, fallback_retries: int | None = None
) -> AnthropicProvider:
    client = anthropic_client(api_key="test-key", base_url=fake.base_url, max_retries=max_retries, timeout_s=20)
    return AnthropicProvider(
        client, stream_retries=max_retries, retry_base_delay_s=0.01, fallback_retries=fallback_retries
    )


def openai_provider(fake: FakeOpenAI, max_retries: int = 3) -> OpenAIProvider:
    client = openai_client(api_key=fake.api_key, base_url=fake.base_url, max_retries=max_retries, timeout_s=20)
    return OpenAIProvider(client, stream_retries=max_retries, retry_base_delay_s=0.01)


def make_llm(
    fake: FakeAnthropic, max_retries: int = 3, *, openai: FakeOpenAI | None = None, cooldown_s: float = 30.0
) -> LLMClient:
    """A client whose `anthropic` models are served by `fake` and, given one, `openai` models by `openai`."""
    providers: dict[str, ModelProvider] = {"anthropic": anthropic_provider(fake, max_retries)}
    if openai is not None:
        providers["openai"] = openai_provider(openai, max_retries)
    return LLMClient(providers, cooldown_s=cooldown_s)  # type: ignore[arg-type]
