"""What a fallback adds to a call, not counting the second model's own time.

1. The decision: the first model's provider raises `LLMUnavailable` at once and the second answers at
   once (in-process providers, no HTTP): the time of `[first, second]` minus `[second]` alone is what
   the client spends deciding (classify, translate the request again, cooldown, log, the note).
2. Over HTTP, through the real SDK against the fake Messages API: the first model answers 529 and the
   SDK does not retry (AGENT_FALLBACK_RETRIES=0), so the added time is one refused round trip plus the
   decision.
3. The same with the app's defaults (AGENT_FALLBACK_RETRIES=1, a 529 without retry-after): the SDK's
   one backoff (0.5 s, less up to a quarter of jitter) comes first, and that wait, not the decision,
   is what a person notices. It is paid once per cooldown: later rounds start at the model that
   answered. (With every retry of AGENT_LLM_MAX_RETRIES=4 it would be 0.5+1+2+4 s, less jitter.)

    python -m benchmarks.bench_fallback [ROUNDS]
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import time
from typing import Any

from agent.llm import LLMClient, LLMUnavailable, ModelTurn, Usage
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply
from tests.fakes.clients import anthropic_provider

ROUNDS = 2_000
HTTP_ROUNDS = 100
REQUEST: dict[str, Any] = {
    "max_tokens": 256,
    "system": [{"type": "text", "text": "Schema: " + "x" * 20_000, "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "How many airlines are there?"}]}],
}


class Overloaded:
    async def stream(self, model: str, request: dict[str, Any], *_: Any, last: bool = True, **__: Any) -> ModelTurn:
        raise LLMUnavailable("overloaded", "overloaded")

    async def complete(self, model: str, request: dict[str, Any], *, last: bool = True) -> ModelTurn:
        raise LLMUnavailable("overloaded", "overloaded")

    async def close(self) -> None:
        return None


class Instant(Overloaded):
    async def stream(self, model: str, request: dict[str, Any], *_: Any, last: bool = True, **__: Any) -> ModelTurn:
        return ModelTurn([{"type": "text", "text": "16"}], "end_turn", Usage(10, 1))


async def _ignore(*_: Any) -> None:
    return None


async def _timed(llm: LLMClient, models: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await llm.stream_turn(model=models, on_text=_ignore, on_restart=_ignore, on_fallback=_ignore, **REQUEST)
        times.append(time.perf_counter() - started)
    return times


async def decision(rounds: int) -> dict[str, float]:
    llm = LLMClient({"anthropic": Overloaded(), "openai": Instant()}, cooldown_s=0)  # type: ignore[dict-item]
    direct, fallback = [], []
    for _ in range(2):  # interleaved, so drift touches both alike
        direct += await _timed(llm, "openai:local", rounds // 2)
        fallback += await _timed(llm, "claude-sonnet-5-5,openai:local", rounds // 2)
    return {"direct": statistics.median(direct), "fallback": statistics.median(fallback)}


async def over_http(rounds: int, fallback_retries: int = 0) -> dict[str, float]:
    fake = FakeAnthropic().start()
    fake.for_model("claude-sonnet-5-5", Failure(529, "overloaded_error", "Overloaded", retry_after_ms=None))
    fake.always(Reply(text="There are 16 airlines."))
    provider = anthropic_provider(fake, max_retries=4, fallback_retries=fallback_retries)
    llm = LLMClient({"anthropic": provider}, cooldown_s=0)
    try:
        await _timed(llm, "claude-sonnet-5-5,claude-opus-5-5", 2)  # warm: connections, parsers
        direct, fallback = [], []
        for _ in range(2):
            direct += await _timed(llm, "claude-opus-5-5", rounds // 2)
            fallback += await _timed(llm, "claude-sonnet-5-5,claude-opus-5-5", rounds // 2)
        return {"direct": statistics.median(direct), "fallback": statistics.median(fallback)}
    finally:
        await llm.close()
        fake.stop()


def run(rounds: int = ROUNDS) -> dict[str, dict[str, float]]:
    logging.getLogger("agent.llm.client").setLevel(logging.ERROR)  # one warning per fallback is the app's, not ours
    return {
        "decision": asyncio.run(decision(rounds)),
        "http": asyncio.run(over_http(max(10, rounds // 20))),
        "defaults": asyncio.run(over_http(10, fallback_retries=1)),
    }


def report(figures: dict[str, dict[str, float]]) -> None:
    print()
    print("What a fallback adds to a call (medians; the second model's own time is in both):")
    for key, label in (
        ("decision", "the decision, in process (no HTTP)"),
        ("http", "over HTTP, first model 529, no retry on it"),
        ("defaults", "over HTTP, first model 529, one retry (default)"),
    ):
        direct, fallback = figures[key]["direct"], figures[key]["fallback"]
        print(
            f"  {label:48} direct {direct * 1000:8.3f} ms, with fallback {fallback * 1000:8.3f} ms, "
            f"added {(fallback - direct) * 1000:8.3f} ms"
        )


if __name__ == "__main__":
    report(run(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS))
