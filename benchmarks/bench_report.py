"""A report's overhead beyond the model and the engine, and its size against Slack's limits.

1. Overhead: a zero-latency model (an LLMClient subclass returning scripted turns at once, no HTTP) drives
   the same three rounds (two queries on the demo data, then the written report) as an answer and as a
   report. Time beyond the model and the engine = total - model time - SQL time, per run; the report's own
   part is the difference from the answer (its prompt, budget checks, step events, reading its sections and
   marking its figures), the figure check over the whole report included in both.
2. Rendering: the report as Markdown and as PDF (fpdf2), time and size; the Markdown's length against the
   12,000 characters one Slack message takes (bots/slack/reply.py splits past it).

    python -m benchmarks.bench_report
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
from agent.reports import ReportRequest
from agent.reports.markdown import report_markdown
from agent.reports.pdf import report_pdf
from agent.runner import RunResult
from benchmarks.demo_data import load_demo_elsewhere

RUNS = 20
SLACK_MESSAGE_CHARS = 12_000
QUERIES = (
    "SELECT month, round(avg(dep_delay), 1) AS avg_delay, count() AS flights FROM nycflights13.flights "
    "WHERE month IN (6, 7) GROUP BY month ORDER BY month",
    "SELECT origin, round(avg(dep_delay), 1) AS avg_delay FROM nycflights13.flights WHERE month = 7 "
    "GROUP BY origin ORDER BY origin",
)
REPORT = """## Summary
Average departure delays rose from 20.8 minutes in June to 21.7 minutes in July [Q1].

## Findings
- July had 29,425 departures, up from 28,243 in June [Q1].
- JFK had the worst July delays, 23.8 minutes on average [Q2].
- LGA averaged 19 minutes of delay in July [Q2].

## How this was found
Q1 compared June with July; Q2 split July by origin airport.

## Caveats
Weather was not looked at, so the cause remains uncertain.

## What could not be answered
Nothing."""


class InstantModel(LLMClient):
    """Answers at once: a query in each of the first two rounds, then the report's text."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream_turn(self, *, on_text: Any, on_restart: Any, **request: Any) -> ModelTurn:
        self.calls += 1
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if done < len(QUERIES):
            queries = [{"question": f"Query {done + 1}", "sql": QUERIES[done]}]
            call = {
                "type": "tool_use",
                "id": f"toolu_{self.calls}",
                "name": "execute_sql",
                "input": {"queries": queries},
            }
            return ModelTurn([call], "tool_use", Usage(10, 5))
        await on_text(REPORT)
        return ModelTurn([{"type": "text", "text": REPORT}], "end_turn", Usage(10, 5))

    async def close(self) -> None:
        return None


def _beyond(result: RunResult) -> float:
    m = result.metrics
    return m.total_ms - m.llm_ms - m.sql_ms


async def _overhead(settings: Settings) -> dict[str, Any]:
    app = AgentApp.start(settings, llm=InstantModel(), metrics=Metrics(CollectorRegistry()))
    try:
        await app.runner.run("warm up", followups=False)
        await app.runner.run("warm up", followups=False, report=ReportRequest())
        answers, reports, last = [], [], None
        for _ in range(RUNS):  # interleaved, so a busy moment of the machine falls on both
            answers.append(_beyond(await app.runner.run("Why did delays rise in July?", followups=False)))
            last = await app.runner.run("Why did delays rise in July?", followups=False, report=ReportRequest())
            assert last.report is not None and last.report.outcome == "complete", last.report
            reports.append(_beyond(last))
    finally:
        await app.close()
    assert last is not None and last.report is not None
    return {"answer_ms": statistics.median(answers), "report_ms": statistics.median(reports), "report": last.report}


def _rendering(report: Any) -> dict[str, float]:
    started = time.perf_counter()
    for _ in range(RUNS):
        markdown = report_markdown(report)
    markdown_ms = (time.perf_counter() - started) * 1000 / RUNS
    started = time.perf_counter()
    for _ in range(RUNS):
        pdf = report_pdf(report)
    pdf_ms = (time.perf_counter() - started) * 1000 / RUNS
    return {"markdown_ms": markdown_ms, "markdown_chars": len(markdown), "pdf_ms": pdf_ms, "pdf_bytes": len(pdf)}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)
        load_demo_elsewhere(data)
        settings = Settings(agent_data_dir=data, anthropic_api_key="unused")  # type: ignore[call-arg]
        overhead = asyncio.run(_overhead(settings))
    return {**overhead, **_rendering(overhead.pop("report"))}


def report(figures: dict[str, Any]) -> None:
    print(f"\nA report's overhead beyond the model and the engine (zero-latency model, {RUNS} runs, medians):")
    answer, written = figures["answer_ms"], figures["report_ms"]
    print(f"  the same 3 rounds as an answer {answer:.1f} ms, as a report {written:.1f} ms: {written - answer:+.1f} ms")
    print(f"  Markdown {figures['markdown_ms']:.2f} ms, {figures['markdown_chars']:,} characters")
    share = figures["markdown_chars"] / SLACK_MESSAGE_CHARS
    print(f"  ({share:.0%} of one Slack message's {SLACK_MESSAGE_CHARS:,})")
    print(f"  PDF {figures['pdf_ms']:.1f} ms, {figures['pdf_bytes']:,} bytes (its font embedded)")


if __name__ == "__main__":
    report(run())
