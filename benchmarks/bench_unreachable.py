"""What a dead model API costs a question before the person is told: connections tried and seconds, with
the app's defaults (AGENT_LLM_MAX_RETRIES=4) against a loopback port where nothing listens, for each
provider, through the real SDKs. Connections are counted at the event loop's `sock_connect`, where both
SDKs' aiohttp transports ask the OS.

    python -m benchmarks.bench_unreachable
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from agent.llm import AnthropicProvider, LLMError, OpenAIProvider, anthropic_client, openai_client

RETRIES = 4  # AGENT_LLM_MAX_RETRIES's default
REQUEST = {"max_tokens": 100, "messages": [{"role": "user", "content": "How many flights?"}]}


async def _ignore(*_: Any) -> None:
    return None


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


async def _measure() -> list[tuple[str, int, float, str]]:
    loop = asyncio.get_running_loop()
    connects = [0]
    connect = loop.sock_connect

    async def counted(*args: Any, **kwargs: Any) -> Any:
        connects[0] += 1
        return await connect(*args, **kwargs)

    loop.sock_connect = counted  # type: ignore[method-assign]
    url = _closed_port()
    providers = {
        "Messages API": AnthropicProvider(
            anthropic_client(api_key="k", base_url=url, max_retries=RETRIES, timeout_s=10), stream_retries=RETRIES
        ),
        "Chat Completions": OpenAIProvider(
            openai_client(api_key="k", base_url=f"{url}/v1", max_retries=RETRIES, timeout_s=10),
            stream_retries=RETRIES,
        ),
    }
    rows = []
    for name, provider in providers.items():
        connects[0], started, said = 0, time.perf_counter(), ""
        try:
            await provider.stream("m", REQUEST, _ignore, _ignore)
        except LLMError as exc:
            said = str(exc)
        finally:
            await provider.close()
        rows.append((name, connects[0], time.perf_counter() - started, said))
    return rows


def run() -> list[tuple[str, int, float, str]]:
    return asyncio.run(_measure())


def report(rows: list[tuple[str, int, float, str]]) -> None:
    print("\nA dead model API (connection refused), streamed call, AGENT_LLM_MAX_RETRIES=4:")
    for name, connects, seconds, said in rows:
        print(f"  {name:<17} {connects:>3} connections  {seconds:5.1f} s  {said}")


if __name__ == "__main__":
    report(run())
