"""CPU per model call: the SDK's `messages.stream()` helper against the raw event stream `LLMClient`
reads, the SDK's default httpx2 transport against its aiohttp one, one call at a time and 200 at once,
and a plain (non-streamed) call; against the fake Messages API in a process of its own.

Each call sends what the pipeline sends (a 20 KB cached system prompt, the execute_sql tool) and gets
back a short text and a tool call. CPU is this process's (time.process_time): the fake's is not in it.

    python -m benchmarks.bench_llm [CALLS]
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from anthropic import AsyncAnthropic

from agent.config import DEFAULT_MODEL
from agent.llm import AnthropicProvider, LLMClient
from benchmarks.bench_web import _process
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clients import make_llm

CALLS = 400
CONCURRENT = 200  # chats at once in benchmarks/bench_workers.py
SYSTEM = [{"type": "text", "text": "Schema: " + "x" * 20_000, "cache_control": {"type": "ephemeral"}}]
TOOL = {
    "name": "execute_sql",
    "description": "Run read-only ClickHouse SQL. " * 20,
    "input_schema": {
        "type": "object",
        "properties": {"queries": {"type": "array", "items": {"type": "object"}}},
        "required": ["queries"],
    },
}
REQUEST: dict[str, Any] = {
    "model": DEFAULT_MODEL,
    "max_tokens": 1024,
    "system": SYSTEM,
    "tools": [TOOL],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "How many airlines are there?"}]}],
}


def reply(body: dict[str, Any]) -> Reply:
    sql = {"queries": [{"question": "Airlines", "sql": "SELECT count() FROM nycflights13.airlines"}]}
    return Reply(text="Counting the airlines.", tool_calls=[("execute_sql", sql)])


def serve_fake() -> None:
    fake = FakeAnthropic().start()
    fake.always(reply)
    print(fake.base_url, flush=True)
    threading.Event().wait()  # until the benchmark ends it


async def _ignore(*_: Any) -> None:
    return None


async def cpu_per_call(call: Callable[[], Awaitable[Any]], calls: int, concurrent: int) -> float:
    await asyncio.gather(*(call() for _ in range(concurrent)))  # warm: connections open, validators built
    started = time.process_time()
    for _ in range(calls // concurrent):
        await asyncio.gather(*(call() for _ in range(concurrent)))
    return (time.process_time() - started) / (calls // concurrent * concurrent)


def _clients(base_url: str) -> dict[str, LLMClient]:
    """The client the app builds (aiohttp transport), and one over the SDK's default httpx2 transport."""
    default = AsyncAnthropic(api_key="test-key", base_url=base_url, max_retries=0, timeout=20)
    return {
        "aiohttp": make_llm(SimpleNamespace(base_url=base_url)),  # type: ignore[arg-type]
        "httpx2": LLMClient({"anthropic": AnthropicProvider(default)}),
    }


async def measure(base_url: str, calls: int) -> dict[str, float]:
    clients = _clients(base_url)

    def helper(llm: LLMClient) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            sdk = llm._providers["anthropic"]._client  # type: ignore[attr-defined]
            async with sdk.messages.stream(**REQUEST) as stream:
                async for _ in stream:
                    pass
                await stream.get_final_message()

        return call

    def raw(llm: LLMClient) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **REQUEST)

        return call

    def plain(llm: LLMClient) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            await llm.complete(model=DEFAULT_MODEL, system="Suggest follow-ups.", prompt="Airlines?", max_tokens=200)

        return call

    cases = {
        ("helper", "httpx2", 1): helper(clients["httpx2"]),
        ("raw", "httpx2", 1): raw(clients["httpx2"]),
        ("raw", "aiohttp", 1): raw(clients["aiohttp"]),
        ("raw", "httpx2", CONCURRENT): raw(clients["httpx2"]),
        ("raw", "aiohttp", CONCURRENT): raw(clients["aiohttp"]),
        ("plain", "aiohttp", CONCURRENT): plain(clients["aiohttp"]),
    }
    figures: dict[str, list[float]] = {}
    try:
        for _ in range(2):  # interleaved, so drift touches all alike
            for (kind, transport, concurrent), call in cases.items():
                key = f"{kind} {transport} {concurrent}"
                figures.setdefault(key, []).append(await cpu_per_call(call, calls, concurrent))
        return {key: sum(values) / len(values) for key, values in figures.items()}
    finally:
        for llm in clients.values():
            await llm.close()


def run(calls: int = CALLS) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.bench_llm", "fake"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    with _process(command, env) as fake:
        return asyncio.run(measure(fake.stdout.readline().strip(), calls))  # type: ignore[union-attr]


def report(figures: dict[str, float]) -> None:
    print()
    print("CPU per model call, this process only (the fake Messages API runs apart):")
    labels = {
        "helper": "streamed, the SDK's messages.stream() helper",
        "raw": "streamed, raw events (LLMClient.stream_turn)",
        "plain": "plain call (follow-ups)",
    }
    for key, seconds in figures.items():
        kind, transport, concurrent = key.split()
        print(f"  {labels[kind]:46} {transport:8} {concurrent:>3} at once  {seconds * 1000:6.2f} ms")
    print(f"  raw over helper (httpx2, one at a time):    {figures['raw httpx2 1'] / figures['helper httpx2 1']:.2f}x")
    aio, httpx2 = figures[f"raw aiohttp {CONCURRENT}"], figures[f"raw httpx2 {CONCURRENT}"]
    print(f"  aiohttp over httpx2 ({CONCURRENT} at once):           {aio / httpx2:.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["fake"]:
        serve_fake()
    else:
        report(run(int(sys.argv[1]) if len(sys.argv) > 1 else CALLS))
