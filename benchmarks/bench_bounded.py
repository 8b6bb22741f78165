"""What the worst questions of the attack review cost the app process, against a plain question.

Each case runs in a fresh process of its own (so its peak memory is its own): the agent over the demo
data in the embedded engine, a scripted model that asks for exactly the case's SQL and chart at once,
and a ticker that measures how late the event loop wakes (every 10 ms). Reported per case: the app
process's peak resident memory and the worst event-loop lag, and both as ratios to the plain question.
The engine's own process is not counted: it is bounded by the engine's limits.

    python -m benchmarks.bench_bounded
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
from contextlib import aclosing, suppress
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.chart_images import ChartRenderError, render_png
from agent.config import Settings
from agent.db import csv_chunks
from agent.llm import LLMClient, ModelTurn, Usage
from agent.loop_lag import worst_lag_during
from agent.metrics import Metrics
from benchmarks.demo_data import load_demo_elsewhere

# Types must be literal strings, so a statement's names are bounded by its own 60,000 characters.
HUGE_NAMES = "SELECT t.* FROM (SELECT CAST(tuple(1, 2), 'Tuple({} UInt8, {} UInt8)') AS t)".format(
    "a" * 25_000, "b" * 25_000
)
HUGE_TYPE = "SELECT CAST(1, 'Enum8(''{}'' = 1)') AS e".format("a" * 50_000)
MODERATE = "SELECT count() FROM numbers(60000000) WHERE sipHash64(number) % 7 = {}"

# Each case: the model's tool calls, round by round (the last round answers), or a function of the app.
SQL_CASES: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    "plain question": [[("execute_sql", {"queries": [{"question": "q", "sql": "SELECT count() FROM flights"}]})]],
    "whitespace error": [
        [("execute_sql", {"queries": [{"question": "q", "sql": "SELECT throwIf(1, repeat(' ', 16000))"}]})]
    ],
    "huge names and types": [
        [("execute_sql", {"queries": [{"question": "a", "sql": HUGE_NAMES}, {"question": "b", "sql": HUGE_TYPE}]})]
    ],
    "chart of long labels": [
        [
            (
                "execute_sql",
                {
                    "queries": [
                        {
                            "question": "q",
                            "sql": "SELECT toString(number) || repeat('x', 100000) AS label, number AS n "
                            "FROM numbers(1000)",
                        }
                    ]
                },
            )
        ],
        [("chart", {"query_id": "Q1", "kind": "bar", "x": "label", "y": "n"})],
    ],
    "eight heavy queries": [
        [("execute_sql", {"queries": [{"question": f"q{i}", "sql": MODERATE.format(i)} for i in range(8)]})]
    ],
}
OTHER_CASES = ("Slack chart image", "large download")
CASES = (*SQL_CASES, *OTHER_CASES)


class ScriptedModel(LLMClient):
    """Answers each round with the script's next tool calls at once; then with text."""

    def __init__(self, rounds: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self._rounds = list(rounds)
        self.calls = 0

    async def stream_turn(self, *, on_text: Any, on_restart: Any, **request: Any) -> ModelTurn:
        self.calls += 1
        if self._rounds:
            calls = [
                {"type": "tool_use", "id": f"toolu_{self.calls}_{i}", "name": name, "input": tool_input}
                for i, (name, tool_input) in enumerate(self._rounds.pop(0))
            ]
            return ModelTurn(calls, "tool_use", Usage(10, 5))
        await on_text("Done [Q1].")
        return ModelTurn([{"type": "text", "text": "Done [Q1]."}], "end_turn", Usage(10, 5))

    async def close(self) -> None:
        return None


async def _case(name: str, settings: Settings) -> dict[str, float]:
    model = ScriptedModel(SQL_CASES.get(name, []))
    app = AgentApp.start(settings, llm=model, metrics=Metrics(CollectorRegistry()))
    try:
        await app.runner.run("warm up", followups=False)  # the engine and the schema, before measuring
        model.__init__(SQL_CASES.get(name, []))
        baseline_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        _, lag = await worst_lag_during(_work(name, app))
    finally:
        await app.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mb": peak_kb / 1024, "growth_mb": (peak_kb - baseline_kb) / 1024, "lag_ms": lag * 1000}


async def _work(name: str, app: AgentApp) -> None:
    if name in SQL_CASES:
        result = await app.runner.run(name, followups=False)
        # the whitespace error's query fails, so its answer is `no_data` (it cites a query without rows)
        assert result.outcome.value in ("answered", "no_data") and not result.error, result
    elif name == "Slack chart image":
        values = [{"f0": f"{i}" + "z" * 30_000, "f1": i} for i in range(3)]
        spec = {"data": {"values": values}, "mark": "bar", "encoding": {"x": {"field": "f0"}, "y": {"field": "f1"}}}
        # The review's case: vl-convert may not finish it within the limit; then its process is killed,
        # which is the bound. Either way the loop's lag is what is measured.
        with suppress(ChartRenderError):
            await render_png(spec, timeout_s=app.settings.chart_render_timeout_s)
    elif name == "large download":
        export = await app.db.export(
            "SELECT number, repeat('d', 2000) AS pad FROM numbers(100000)", max_rows=app.settings.export_max_rows
        )
        async with aclosing(csv_chunks(export, max_bytes=app.settings.export_max_bytes)) as chunks:
            async for _ in chunks:
                pass


def _child(name: str, data_dir: str) -> None:
    settings = Settings(_env_file=None, agent_data_dir=Path(data_dir), anthropic_api_key="bench")  # type: ignore[call-arg]
    print(json.dumps(asyncio.run(_case(name, settings))))


def run() -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        load_demo_elsewhere(Path(tmp))
        for name in CASES:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_bounded", "--case", name, "--data", tmp],
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise SystemExit(f"bench_bounded: the case {name!r} failed:\n{done.stderr[-3000:]}")
            figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def report(figures: dict[str, dict[str, float]]) -> None:
    plain = figures["plain question"]
    print("\nbench_bounded: the app process, per case (a fresh process each; the engine's process not counted)")
    print(f"{'case':<24} {'peak RSS':>10} {'x plain':>8} {'lag':>9} {'x plain':>8}")
    for name, f in figures.items():
        memory_ratio = f["peak_mb"] / plain["peak_mb"]
        lag_ratio = f["lag_ms"] / max(plain["lag_ms"], 1.0)  # below 1 ms a ratio is noise
        print(f"{name:<24} {f['peak_mb']:>7.0f} MB {memory_ratio:>7.2f}x {f['lag_ms']:>6.0f} ms {lag_ratio:>7.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.case:
        _child(args.case, args.data)
    else:
        report(run())
