"""CPU per model call: the SDK's `messages.stream()` helper against the raw event stream `LLMClient`
reads, and a plain (non-streamed) call, against the fake Messages API in a process of its own.

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

from agent.config import DEFAULT_MODEL
from benchmarks.bench_web import _process
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clients import make_llm

CALLS = 300
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


async def cpu_per_call(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    for _ in range(10):  # warm: connections open, validators built
        await call()
    started = time.process_time()
    for _ in range(calls):
        await call()
    return (time.process_time() - started) / calls


async def measure(base_url: str, calls: int) -> dict[str, float]:
    llm = make_llm(SimpleNamespace(base_url=base_url))  # type: ignore[arg-type]
    sdk = llm._client

    async def helper() -> None:
        async with sdk.messages.stream(**REQUEST) as stream:
            async for _ in stream:
                pass
            await stream.get_final_message()

    async def raw() -> None:
        await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **REQUEST)

    async def plain() -> None:
        await llm.complete(model=DEFAULT_MODEL, system="Suggest follow-ups.", prompt="Airlines?", max_tokens=200)

    try:
        figures = {}
        for _ in range(2):  # interleaved, so drift touches both alike
            for name, call in (("helper", helper), ("raw", raw), ("plain", plain)):
                figures.setdefault(name, []).append(await cpu_per_call(call, calls // 2))
        return {name: sum(values) / len(values) for name, values in figures.items()}
    finally:
        await llm.close()


def run(calls: int = CALLS) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.bench_llm", "fake"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    with _process(command, env) as fake:
        return asyncio.run(measure(fake.stdout.readline().strip(), calls))  # type: ignore[union-attr]


def report(figures: dict[str, float]) -> None:
    print()
    print("CPU per model call, this process only (the fake Messages API runs apart):")
    print(f"  streamed, the SDK's messages.stream() helper  {figures['helper'] * 1000:6.2f} ms")
    print(f"  streamed, raw events (LLMClient.stream_turn)  {figures['raw'] * 1000:6.2f} ms")
    print(f"  plain call (follow-ups)                       {figures['plain'] * 1000:6.2f} ms")
    print(f"  raw over helper: {figures['raw'] / figures['helper']:.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["fake"]:
        serve_fake()
    else:
        report(run(int(sys.argv[1]) if len(sys.argv) > 1 else CALLS))
