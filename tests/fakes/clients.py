"""The app's own clients pointed at the fakes, for the tests and the benchmarks."""

from __future__ import annotations

from anthropic import AsyncAnthropic

from agent.llm import LLMClient
from tests.fakes.anthropic_api import FakeAnthropic


def make_llm(fake: FakeAnthropic, max_retries: int = 3) -> LLMClient:
    client = AsyncAnthropic(api_key="test-key", base_url=fake.base_url, max_retries=max_retries, timeout=20)
    return LLMClient(client, stream_retries=max_retries, retry_base_delay_s=0.01)
