"""Attacks on reports in the web: Resume under a policy other than the one the report was asked under, and
the downloads' headers for a hostile question."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.app import AgentApp
from agent.db import Database
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.report_helpers import partial_then_resumed_script
from tests.web.people_helpers import PROXY_MODE, Served
from tests.web.test_web_reports import ask_report

ANA = "ana@example.com"
ASKED_UNDER = """
policies:
  - name: everything
    members:
      - email: ana@example.com
    tables:
      nycflights13.flights:
      nycflights13.weather:
"""
NOW_UNDER = """
policies:
  - name: jfk
    members:
      - email: ana@example.com
    tables:
      nycflights13.flights: origin = 'JFK'
      nycflights13.weather: origin = 'JFK'
"""


async def test_resume_under_another_policy_is_refused_before_anything_runs_or_is_charged(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Ana's report was asked under `everything` (its checkpoint holds every airport's rows); her policy is now
    `jfk`. Resume must not go on under `jfk` with rows `jfk` may not read, nor start a run that can only fail:
    a clear 409 before any model call, and the report stays partial (resumable once the policy is hers again)."""
    access = tmp_path / "access.yaml"
    access.write_text(ASKED_UNDER, encoding="utf-8")
    first, resumed = partial_then_resumed_script()
    fake_anthropic.script(*first)
    async with Served(make_app, tmp_path, agent_access_file=str(access), agent_report_max_queries=2, **PROXY_MODE) as s:
        report = (await ask_report(s.client(email=ANA), "why did delays rise in July?"))[-1].data["result"]["report"]
        assert report["outcome"] == "partial"
    access.write_text(NOW_UNDER, encoding="utf-8")
    fake_anthropic.reset()
    fake_anthropic.script(*resumed)
    async with Served(make_app, tmp_path, agent_access_file=str(access), agent_report_max_queries=2, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        assert (await ana.get("/api/me")).json()["policy"] == "jfk"
        response = await ana.post("/api/reports", json={"resume": report["id"]})
        body = response.text
        stored = (await ana.get(f"/api/reports/{report['id']}")).json()
    assert fake_anthropic.requests == [], "no model call under a policy the checkpoint was not taken under"
    assert stored["state"] == "partial", stored["state"]
    assert response.status_code == 409, body
    assert "Traceback" not in body and "checkpoint was taken under policy" not in body


async def test_downloads_of_a_hostile_question_are_attachments_with_a_safe_name(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Held: the file name is a slug of the question (no quote, slash, CR/LF), and the Markdown is an attachment
    the browser does not sniff into HTML."""
    from tests.report_helpers import report_script

    fake_anthropic.script(*report_script())
    question = 'x"; filename="evil.html\r\nSet-Cookie: a=b <script>alert(1)</script> ../../etc/passwd'
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        report_id = (await ask_report(ana, question))[-1].data["result"]["report"]["id"]
        for kind in ("md", "pdf"):
            got = await ana.get(f"/api/reports/{report_id}.{kind}")
            disposition = got.headers["content-disposition"]
            assert got.status_code == 200 and disposition.startswith("attachment;")
            name = disposition.split('filename="', 1)[1].split('"', 1)[0]
            assert name.endswith(f".{kind}") and not set(name) & set('"/\\\r\n;<>'), name
            assert "set-cookie" not in {k.lower() for k in got.headers}
            assert got.headers.get("x-content-type-options") == "nosniff"


async def test_a_report_keeps_the_per_question_rows_read_budget(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    """AGENT_QUESTION_MAX_ROWS_READ (and AGENT_QUESTION_MAX_TOKENS, which the daily budget's reservation holds
    as one question's worth) bound what one question may spend; the loop swaps them for the report's own
    budget (`budget = state.report or self._budget`), so asking "report:" instead of a question lifts them.
    Baseline in the same test: the same two queries asked as a question stop after the first."""
    from tests.report_helpers import JULY_BY_ORIGIN, MONTHLY, report_script
    from tests.slack_helpers import sql_call
    from tests.web_helpers import chat

    counting = CountingDatabase(db)
    async with Served(make_app, tmp_path, database=counting, agent_question_max_rows_read=1, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        fake_anthropic.script(
            Reply(tool_calls=[sql_call("Average departure delay per month", MONTHLY)]),
            Reply(tool_calls=[sql_call("July's delays per origin airport", JULY_BY_ORIGIN)]),
            Reply(text="Done [Q1]."),
            Reply(text="[]"),
        )
        await chat(ana, "why did delays rise in July?")
        asked_as_question = len(counting.executed)
        fake_anthropic.reset()
        counting.executed.clear()
        fake_anthropic.script(*report_script())
        await ask_report(ana, "why did delays rise in July?")
        asked_as_report = len(counting.executed)
    assert asked_as_question == 1, "baseline: a question stops at its rows-read budget after one query"
    assert asked_as_report <= asked_as_question, f"a report ran {asked_as_report} queries past the rows-read budget"


WRONG = """## Summary
Departure delays peaked in July at 21.7 minutes on average [Q1].

## Findings
- July had the highest average departure delay, 21.7 minutes [Q1] (chart C1)
- Every origin airport was late in July, EWR most of all [Q2]

## How this was found
Q1 averaged the departure delay of 77,777 flights per month [Q1].

## Caveats
About 66,666 flights had no departure time [Q1].

## What could not be answered
Nothing."""


def wrong_everywhere_script(chart_title: str) -> list[Any]:
    from tests.report_helpers import CHART, JULY_BY_ORIGIN, MONTHLY
    from tests.slack_helpers import sql_call

    return [
        Reply(tool_calls=[sql_call("Average departure delay per month", MONTHLY)]),
        Reply(tool_calls=[sql_call("July's delays per origin airport", JULY_BY_ORIGIN)]),
        Reply(tool_calls=[("chart", {**CHART, "title": chart_title})]),
        Reply(text=WRONG),
        Reply(text=WRONG),
        Reply(text="[]"),
    ]


async def test_figures_in_the_method_and_caveats_are_marked(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Held: the figure check covers "how this was found" and the caveats, and marks their figures where shown."""
    fake_anthropic.script(*wrong_everywhere_script("Delay by month"))
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        report_id = (await ask_report(ana, "why did delays rise in July?"))[-1].data["result"]["report"]["id"]
        stored = (await ana.get(f"/api/reports/{report_id}")).json()["report"]
    marked = {name: [m["text"] for m in marks] for name, marks in stored["marks"].items()}
    assert any("77,777" in t for t in marked.get("method", [])), marked
    assert any("66,666" in t for t in marked.get("caveats", [])), marked


async def test_a_chart_caption_cannot_carry_a_figure_the_queries_do_not_hold_unmarked(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """A chart's title is the model's text, shown as the finding's caption on the page, in the PDF and the
    Markdown; a figure in it that no cell gives must be checked and marked (or said) like the sections'."""
    fake_anthropic.script(*wrong_everywhere_script("Delays rose 900% in July"))
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        report_id = (await ask_report(ana, "why did delays rise in July?"))[-1].data["result"]["report"]["id"]
        stored = (await ana.get(f"/api/reports/{report_id}")).json()["report"]
        markdown = (await ana.get(f"/api/reports/{report_id}.md")).text
    assert any(c["title"] == "Delays rose 900% in July" for c in stored["charts"]), "the caption is shown as written"
    failures = [f["text"] for f in (stored["figures"] or {}).get("figures", []) if not f["verified"]]
    assert any("900" in text for text in failures) or "900%[^" in markdown, (failures, markdown)


async def test_a_report_resting_only_on_empty_results_is_not_complete(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """ "Never a confident report from nothing": a finding whose only citation is a query that returned no row
    rests on nothing, yet `answered` counts every query that did not fail, so the report is `complete`."""
    from tests.slack_helpers import sql_call

    empty = "SELECT origin, count() AS n FROM nycflights13.flights WHERE origin = 'ZZZ' GROUP BY origin"
    text = "## Summary\nDelays at ZZZ fell sharply [Q1].\n\n## Findings\n- ZZZ is the most punctual airport [Q1]\n"
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("Flights from ZZZ", empty)]), Reply(text=text), Reply(text=text), Reply(text="[]")
    )
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        report_id = (await ask_report(ana, "is ZZZ punctual?"))[-1].data["result"]["report"]["id"]
        stored = (await ana.get(f"/api/reports/{report_id}")).json()
    assert stored["report"]["queries"][0]["row_count"] == 0
    assert stored["report"]["outcome"] != "complete", stored["report"]["findings"]


async def test_one_person_cannot_run_reports_side_by_side_without_bound(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """A report may spend up to its whole budget (AGENT_REPORT_MAX_*, default $2 and 500k tokens) yet counts as one
    question against the per-minute rate, and nothing caps how many one person runs at once: with daily budgets
    off (the default) 30 a minute, each up to the report budget. While one of Ana's reports is being written, a
    second must be refused (409 or 429) rather than started."""
    import asyncio
    import threading

    held = threading.Event()
    fake_anthropic.script(
        Reply(text="## Summary\nStill looking at the data", pauses={1: held}),
        Reply(text="## Summary\nNothing."),
        *[Reply(text="[]") for _ in range(4)],
    )
    async with Served(make_app, tmp_path, **PROXY_MODE) as s:
        ana = s.client(email=ANA)
        first = asyncio.create_task(ask_report(ana, "first report"))
        try:
            for _ in range(200):
                if fake_anthropic.requests:
                    break
                await asyncio.sleep(0.05)
            assert fake_anthropic.requests, "the first report is being written"
            second = await ana.post("/api/reports", json={"message": "second report"})
        finally:
            held.set()
            await first
    assert second.status_code in (409, 429), second.text[:300]
