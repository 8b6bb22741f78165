"""A report run (`Runner.run(report=...)`) through the real SDK against the scripted model fake and the
real engine: the same loop with its own prompt and budget, its steps as events, the report read back from
its sections with every figure checked over the whole of it (one correction round, what still fails
marked), and its outcomes: complete, partial at a limit, cannot answer. Resume and a restart go on from the
checkpoint without running a query that succeeded again."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.db import Database
from agent.reports import ReportBudget, ReportOutcome, ReportRequest
from agent.runner import Outcome
from tests.agent.pipeline.test_checkpoints import Checkpoints, CountingDatabase
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

MONTHS = (
    "Average departure delay and flights in June and July",
    "SELECT month, round(avg(dep_delay), 1) AS avg_delay, count() AS flights FROM nycflights13.flights "
    "WHERE month IN (6, 7) GROUP BY month ORDER BY month",
)
ORIGINS = (
    "July's average departure delay by origin airport",
    "SELECT origin, round(avg(dep_delay), 1) AS avg_delay FROM nycflights13.flights WHERE month = 7 "
    "GROUP BY origin ORDER BY origin",
)
RAIN = (
    "Average hourly precipitation in June and July",
    "SELECT month, round(avg(precip), 3) AS precip FROM nycflights13.weather WHERE month IN (6, 7) "
    "GROUP BY month ORDER BY month",
)
QUESTION = "Why did departure delays rise in July?"

REPORT = """## Summary
Average departure delays rose from 20.8 minutes in June to 21.7 minutes in July [Q1].

## Findings
- July had 29,425 departures, up from 28,243 in June [Q1].
- JFK had the worst July delays, 23.8 minutes on average [Q2].
- LGA averaged 25 minutes of delay in July [Q2].

## How this was found
Q1 compared June with July; Q2 split July by origin airport.

## Caveats
Weather was not looked at, so the cause remains uncertain.

## What could not be answered
Nothing."""


def sql(*queries: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": q, "sql": s} for q, s in queries]})


def think(text: str) -> tuple[str, dict[str, Any]]:
    return ("think", {"content": text})


async def report_of(app: Any, question: str = QUESTION, **kwargs: Any) -> tuple[Any, Recorder]:
    events = Recorder()
    kwargs.setdefault("report", ReportRequest())
    result = await app.runner.run(question, on_event=events, **kwargs)
    return result, events


async def test_a_multi_step_report_is_written_from_its_queries_with_every_figure_checked_and_one_marked(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[think("Compare June with July first."), sql(MONTHS)]),
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text=REPORT),
        Reply(text=REPORT),  # the correction round: LGA's 25 is still wrong (Q2 says 19)
    )
    result, events = await report_of(make_app())
    report = result.report
    assert report is not None and report.outcome is ReportOutcome.COMPLETE and report.stopped_by is None
    # The request carried the report's prompt and budget after the question; tools as for an answer.
    first = fake_anthropic.requests[0]
    asked = first["messages"][-1]["content"]
    assert asked[0]["text"] == QUESTION and "## How this was found" in str(asked)
    assert "at most 16 steps, 24 tool calls and 15 queries" in str(asked)
    # Every figure of the whole report checked; one correction round; the one still wrong marked where it is.
    assert "match nothing in the results" in str(fake_anthropic.requests[3]["messages"][-1]["content"])
    figures = report.figures
    assert figures is not None and figures.corrected and figures.checked == 6 and figures.verified == 5
    assert [f.citations for f in report.findings] == [["Q1"], ["Q2"], ["Q2"]]
    marked = report.findings[2]
    assert len(marked.marks) == 1 and marked.marks[0].text.startswith("25")
    mark = marked.marks[0]
    assert marked.text[mark.start : mark.end] == mark.text and mark.reason
    assert report.findings[0].marks == [] and report.marks == {}
    assert report.summary.startswith("Average departure delays rose") and report.method.startswith("Q1 compared")
    assert "uncertain" in report.caveats and report.unanswered == "Nothing."
    assert [q.id for q in report.queries] == ["Q1", "Q2"] and report.queries[0].rows[1][0] == 7
    assert report.used.queries == 2 and report.used.steps == 4 and report.used.tool_calls == 3
    assert report.runs == [report.id] and result.followups == []
    # Its live plan: each step as it starts its tools and when they are done, with what it ran.
    steps = [(e.number, e.state, e.queries) for e in events.of("step")]
    assert steps == [(1, "running", []), (1, "done", ["Q1"]), (2, "running", []), (2, "done", ["Q2"])]
    assert events.of("step")[0].title == "Compare June with July first."
    assert events.of("step")[2].title == ORIGINS[0] and events.of("step")[3].used.queries == 2


async def test_an_answer_is_never_a_report_unless_asked(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), Reply(text="July averaged 21.7 minutes [Q1]."))
    result, events = await report_of(make_app(), "Write me a report on delays in July", report=None, followups=False)
    assert result.report is None and events.of("step") == []
    assert "## How this was found" not in str(fake_anthropic.requests[0]["messages"])


async def test_a_report_past_its_query_budget_ends_partial_and_says_what_remains(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(MONTHS, ORIGINS, RAIN)]),  # three asked, two allowed: the third is refused
        Reply(text=PARTIAL),  # the one call with no tools
    )
    budget = ReportBudget(queries=2)
    result, _ = await report_of(make_app(), report=ReportRequest(budget=budget))
    report = result.report
    assert report is not None and report.outcome is ReportOutcome.PARTIAL and report.stopped_by == "queries"
    assert [q.id for q in result.queries] == ["Q1", "Q2"] and result.outcome is Outcome.CAPPED
    synthesis = fake_anthropic.requests[1]
    assert synthesis["tool_choice"] == {"type": "none"} and len(fake_anthropic.requests) == 2
    assert "budget of queries is spent (2 of 2)" in str(synthesis["messages"][-1]["content"])
    assert report.remaining.startswith("Weather in July") and [f.citations for f in report.findings] == [["Q2"], ["Q1"]]
    assert report.resumable and report.status().outcome is ReportOutcome.PARTIAL


PARTIAL = """## Summary
Delays rose from 20.8 to 21.7 minutes between June and July [Q1].

## Findings
- JFK was the worst airport in July at 23.8 minutes [Q2].
- July had 29,425 departures [Q1].

## How this was found
Q1 compared the months, Q2 split July by airport.

## Caveats
Only two queries ran.

## What could not be answered
Whether weather explains it.

## What remains
Weather in July against June: precipitation by month."""


async def test_a_report_with_nothing_to_go_on_cannot_answer_and_says_what_is_missing(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[think("Ticket prices are in no table: flights, airlines, airports, planes, weather.")]),
        Reply(
            text="## Summary\nThe data cannot say how ticket prices changed.\n\n## What could not be answered\n"
            "No table holds ticket prices or fares; the warehouse has flights, airlines, airports, planes and weather."
        ),
    )
    result, _ = await report_of(make_app(), "How did ticket prices change in July?")
    report = result.report
    assert report is not None and report.outcome is ReportOutcome.CANNOT_ANSWER and report.findings == []
    assert "No table holds ticket prices" in report.unanswered and report.stopped_by is None


async def test_a_confident_report_from_nothing_is_not_one(make_app, fake_anthropic: FakeAnthropic) -> None:
    """Findings that cite queries that never ran: the citation guard asks once, then the report cannot answer."""
    invented = "## Summary\nDelays rose 12% [Q1].\n\n## Findings\n- Storms caused 40% of July delays [Q1]."
    fake_anthropic.script(Reply(text=invented), Reply(text=invented))
    result, _ = await report_of(make_app())
    report = result.report
    assert report is not None and report.outcome is ReportOutcome.CANNOT_ANSWER and report.findings == []
    assert "12%" not in report.summary and "40%" not in str(report.model_dump())


async def test_resume_grants_one_more_budget_and_runs_no_query_that_succeeded_again(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    counting = CountingDatabase(db)
    sink = Checkpoints()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS, ORIGINS, RAIN)]), Reply(text=PARTIAL))
    request = ReportRequest(budget=ReportBudget(queries=2))
    first, _ = await report_of(make_app(database=counting), report=request, checkpoint=sink)
    assert first.report is not None and first.report.outcome is ReportOutcome.PARTIAL and len(counting.executed) == 2

    fake_anthropic.reset()
    fake_anthropic.script(Reply(tool_calls=[sql(RAIN)]), Reply(text=REPORT.replace("25 minutes", "19 minutes")))
    again = request.model_copy(update={"report_id": first.report.id, "grants": 2, "runs": first.report.runs})
    resumed, events = await report_of(make_app(database=counting), report=again, resume=sink.last())
    report = resumed.report
    assert report is not None and report.outcome is ReportOutcome.COMPLETE and report.id == first.report.id
    assert len(counting.executed) == 3 and "weather" in counting.executed[2], "Q1 and Q2 did not run again"
    assert [q.id for q in report.queries] == ["Q1", "Q2", "Q3"] and report.used.queries == 3
    assert [e.query_id for e in events.of("executing")] == ["Q3"]
    assert report.runs == [first.report.id, report.runs[-1]] and len(report.runs) == 2
    assert report.figures is not None and report.figures.unverified == 0


async def test_a_report_whose_host_stops_mid_run_goes_on_from_its_checkpoint(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), hang)
    counting = CountingDatabase(db)
    sink = Checkpoints()
    task = asyncio.create_task(report_of(make_app(database=counting), checkpoint=sink))
    await sink.until_round(1)
    task.cancel()  # the host is gone
    hang.release.set()
    await asyncio.gather(task, return_exceptions=True)
    assert len(counting.executed) == 1

    fake_anthropic.reset()
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text=REPORT.replace("25 minutes", "19 minutes")))
    result, events = await report_of(make_app(database=counting), resume=sink.last())
    report = result.report
    assert report is not None and report.outcome is ReportOutcome.COMPLETE
    assert len(counting.executed) == 2 and "month = 7" in counting.executed[1], "Q1 did not run again"
    assert [e.number for e in events.of("step")] == [2, 2] and result.resumed == 1
    assert report.used.tool_calls == 2 and report.used.queries == 2


async def test_a_report_that_runs_exactly_its_queries_and_writes_itself_is_complete(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """A limit is hit when the report wanted more than it allowed (a query refused), not when it used it all."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(MONTHS, ORIGINS)]), Reply(text=REPORT.replace("25 minutes", "19 minutes"))
    )
    result, _ = await report_of(make_app(), report=ReportRequest(budget=ReportBudget(queries=2)))
    assert result.report is not None and result.report.outcome is ReportOutcome.COMPLETE
    assert "tool_choice" not in fake_anthropic.requests[1] and result.report.used.queries == 2
