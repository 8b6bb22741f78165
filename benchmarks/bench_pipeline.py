"""The v3 loop: orchestration overhead per round, and how much input the prompt cache serves.

1. Overhead: a zero-latency model (an LLMClient subclass that returns scripted turns at once, no
   HTTP) drives 10-round runs whose tools are `think` only, so every millisecond measured is the
   loop's own work: building requests, trimming context, events, metrics, state.
2. Cache share: the real SDK against the fake Messages API, whose caching simulation follows the
   API's rules (prefix match at cache_control breakpoints, 1,024-token minimum). Share of input
   tokens served from cache = cache_read / (input + cache_read + cache_creation), over a 5-round
   run and over 3 consecutive questions in one conversation.

    python -m benchmarks.bench_pipeline
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.config import Settings
from agent.llm import LLMClient, ModelTurn, Usage
from agent.metrics import Metrics
from agent.runner import RunResult
from benchmarks.demo_data import load_demo_elsewhere

RUNS = 30
ROUNDS = 10


class InstantModel(LLMClient):
    """A model that answers immediately: `think` for every round but the last, then text."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream_turn(self, *, on_text: Any, on_restart: Any, **request: Any) -> ModelTurn:
        self.calls += 1
        if len(request["messages"]) >= 2 * ROUNDS - 1:
            await on_text("Done.")
            return ModelTurn([{"type": "text", "text": "Done."}], "end_turn", Usage(10, 5))
        call = {"type": "tool_use", "id": f"toolu_{self.calls}", "name": "think", "input": {"content": "step"}}
        return ModelTurn([call], "tool_use", Usage(10, 5))

    async def close(self) -> None:
        return None


async def _overhead(settings: Settings) -> dict[str, float]:
    app = AgentApp.start(settings, llm=InstantModel(), metrics=Metrics(CollectorRegistry()))
    try:
        await app.runner.run("warm up", followups=False)
        per_round = []
        for _ in range(RUNS):
            started = time.perf_counter()
            result = await app.runner.run("q", followups=False)
            assert result.metrics.rounds == ROUNDS, result.metrics
            per_round.append((time.perf_counter() - started) * 1000 / ROUNDS)
    finally:
        await app.close()
    return {"median_ms_per_round": statistics.median(per_round), "p95_ms_per_round": _p95(per_round)}


def _p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


async def _cache_share(settings: Settings) -> dict[str, float]:
    from tests.fakes.anthropic_api import FakeAnthropic, Reply
    from tests.fakes.clients import make_llm

    fake = FakeAnthropic().start()
    app = AgentApp.start(settings, llm=make_llm(fake), metrics=Metrics(CollectorRegistry()))

    def sql(question: str, text: str) -> tuple[str, dict[str, Any]]:
        return ("execute_sql", {"queries": [{"question": question, "sql": text}]})

    five_round_script = [
        Reply(tool_calls=[("think", {"content": "Plan: delays by carrier, then by month."})]),
        Reply(
            tool_calls=[
                sql(
                    "Delay by carrier",
                    "SELECT carrier, round(avg(arr_delay), 1) AS d FROM "
                    "nycflights13.flights GROUP BY carrier ORDER BY d DESC",
                )
            ]
        ),
        Reply(
            tool_calls=[
                sql(
                    "Delay by month",
                    "SELECT month, round(avg(arr_delay), 1) AS d FROM "
                    "nycflights13.flights GROUP BY month ORDER BY month",
                )
            ]
        ),
        Reply(
            tool_calls=[
                sql(
                    "Flights per carrier",
                    "SELECT carrier, count() FROM nycflights13.flights GROUP BY carrier ORDER BY carrier",
                )
            ]
        ),
        Reply(text="F9 had the longest average arrival delay [Q1]; July was the worst month [Q2]."),
    ]
    try:
        fake.script(*five_round_script)
        cold = await app.runner.run("Which carriers are most delayed?", followups=False)
        # Steady state: the system prefix is already cached by other questions (5-minute TTL).
        fake.script(*five_round_script)
        warm = await app.runner.run("Which carriers are the most delayed overall?", followups=False)
        turns: list[RunResult] = []
        for index in range(3):
            fake.script(
                Reply(tool_calls=[sql(f"Check {index}", f"SELECT count() + {index} FROM nycflights13.flights")]),
                Reply(text=f"Answer {index} [Q1]."),
            )
            turns.append(
                await app.runner.run(f"Question {index}?", history=[t.to_turn() for t in turns], followups=False)
            )
    finally:
        await app.close()
        fake.stop()

    def share(results: list[RunResult]) -> float:
        read = sum(r.metrics.cache_read_tokens for r in results)
        total = sum(
            r.metrics.input_tokens + r.metrics.cache_read_tokens + r.metrics.cache_creation_tokens for r in results
        )
        return read / total

    return {
        "5-round run, cold cache": share([cold]),
        "5-round run, system prefix already cached": share([warm]),
        "3 consecutive questions (after it)": share(turns),
        "3 consecutive questions, later two": share(turns[1:]),
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)
        load_demo_elsewhere(data)
        settings = Settings(agent_data_dir=data, anthropic_api_key="unused", agent_max_rounds=ROUNDS + 1)  # type: ignore[arg-type]
        return asyncio.run(_both(settings))


async def _both(settings: Settings) -> dict[str, Any]:
    return {"overhead": await _overhead(settings), "cache": await _cache_share(settings)}


def report(figures: dict[str, Any]) -> None:
    overhead = figures["overhead"]
    print(f"\nOrchestration overhead, zero-latency model, {RUNS} runs x {ROUNDS} rounds:")
    print(
        f"  median {overhead['median_ms_per_round']:.2f} ms/round, p95 {overhead['p95_ms_per_round']:.2f} ms/round"
        f" (goal < 5 ms: {overhead['median_ms_per_round'] / 5:.2f}x of budget)"
    )
    print("Share of input tokens served from the prompt cache:")
    for label, value in figures["cache"].items():
        print(f"  {label:40} {value:6.1%}")


if __name__ == "__main__":
    report(run())
