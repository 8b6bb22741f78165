"""A report's size in Slack, against Slack's limits: how many messages a report takes, the most blocks and
markdown characters in one of them (Slack: 50 blocks, 12,000 characters of markdown blocks per message),
and the time to cut it into parts (bots/slack/report.py).

Reports of three sizes: a typical one (the default budget's 15 queries, 8 findings of a few sentences), one
at the edge (24 findings of 1,200 characters, each with a table), and one far past what a report should be
(80 findings of 3,000 characters). Each is posted to the strict fake Slack (tests/fakes), which refuses any
message past a limit, so "posted" below means Slack's rules held for every part.

    python -m benchmarks.bench_report_slack
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent.reports.model import Finding, Report, ReportOutcome, ReportQuery
from bots.slack.api_tiers import CallBudget
from bots.slack.report import MAX_BLOCKS, post_parts, report_parts
from tests.fakes.slack_api import GENERAL_ID, FakeSlack

REPEATS = 20
TABLE = "\n\n| origin | avg_dep_delay |\n|---|---|\n| EWR | 25.5 |\n| JFK | 23.5 |\n| LGA | 16.3 |\n"
SIZES = {  # findings, characters of prose each, with a table
    "typical (8 findings)": (8, 300, False),
    "at the edge (24 findings with tables)": (24, 1_200, True),
    "far past it (80 findings of 3,000 chars)": (80, 3_000, False),
}


def sized_report(findings: int, chars: int, table: bool) -> Report:
    prose = "Departure delays in July rose with the evening thunderstorms at EWR [Q2]. "
    text = (prose * (chars // len(prose) + 1))[:chars] + (TABLE if table else "")
    queries = [
        ReportQuery(id=f"Q{n}", question=f"Delays by month and origin, cut {n}", sql="SELECT 1", row_count=12)
        for n in range(1, 16)
    ]
    return Report(
        id="b" * 32,
        question="Why did delays rise in July?",
        outcome=ReportOutcome.PARTIAL,
        summary="Delays rose in July, mostly in the evening at EWR [Q1] [Q2]. " * 3,
        findings=[Finding(text=f"Finding {n}: {text}", citations=["Q2"]) for n in range(findings)],
        method="Q1 averaged the delays per month; the later queries cut July by origin, hour and carrier. " * 4,
        caveats="Weather is hourly and by origin only; 2013 alone. " * 5,
        unanswered="Nothing.",
        remaining="The carriers' share of the evening delays.",
        stopped_by="queries",
        queries=queries,
        runs=["b" * 32],
    )


async def _post(slack: FakeSlack, report: Report) -> tuple[int, int]:
    """Posts the report's parts to the fake; the calls made and the messages it stored."""
    parts = report_parts(report, "https://analyst.example")
    thread = slack.add_message(GENERAL_ID, "report: why did delays rise in July?")
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
    await post_parts(client, CallBudget(), team="T", channel=GENERAL_ID, thread_ts=thread, parts=parts)
    return len(slack.calls("chat.postMessage")), len(slack.replies(GENERAL_ID, thread))


def run() -> dict[str, Any]:
    slack = FakeSlack().start()
    figures: dict[str, Any] = {}
    try:
        for label, (findings, chars, table) in SIZES.items():
            report = sized_report(findings, chars, table)
            started = time.perf_counter()
            for _ in range(REPEATS):
                parts = report_parts(report, "https://analyst.example")
            cut_ms = (time.perf_counter() - started) / REPEATS * 1000
            markdown = [sum(len(b["text"]) for b in p.blocks if b["type"] == "markdown") for p in parts]
            slack.reset()
            calls, stored = asyncio.run(_post(slack, report))
            figures[label] = {
                "report_chars": sum(markdown),
                "messages": len(parts),
                "max_blocks": max(len(p.blocks) for p in parts),
                "max_markdown_chars": max(markdown),
                "cut_ms": cut_ms,
                "posted": calls == stored == len(parts),
            }
    finally:
        slack.stop()
    return figures


def report(figures: dict[str, Any]) -> None:
    print()
    print(f"A report in Slack: its messages against Slack's limits ({MAX_BLOCKS} blocks, 12,000 markdown chars each)")
    for label, f in figures.items():
        print(f"  {label}: {f['report_chars']:,} chars in {f['messages']} message(s)")
        print(
            f"    most in one message: {f['max_blocks']} blocks, {f['max_markdown_chars']:,} markdown chars;"
            f" cut in {f['cut_ms']:.2f} ms; every part accepted by the strict fake: {f['posted']}"
        )


if __name__ == "__main__":
    report(run())
