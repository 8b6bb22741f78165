"""The app's own clients pointed at the fakes, for the tests and the benchmarks."""

from __future__ import annotations

from agent.llm import LLMClient, anthropic_client
from tests.fakes.anthropic_api import FakeAnthropic


def make_llm(fake: FakeAnthropic, max_retries: int = 3) -> LLMClient:
    client = anthropic_client(api_key="test-key", base_url=fake.base_url, max_retries=max_retries, timeout_s=20)
    return LLMClient(client, stream_retries=max_retries, retry_base_delay_s=0.01)
