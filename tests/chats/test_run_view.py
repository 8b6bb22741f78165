"""RunView: the one fold of a run's events, which Slack, the terminal and the store read, in the web's names."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from agent.charts import Chart
from agent.db.result import QueryResult
from agent.runner import (
    AnswerEvent,
    ChartEvent,
    ErrorEvent,
    ExecutedQuery,
    ExecutingEvent,
    FollowupsEvent,
    ResultEvent,
    RunResult,
    StartedEvent,
    WireEvent,
)
from chats.run_view import QueryView, RunView
from chats.runs import RunEvent, done_event

APP_JS = Path(__file__).resolve().parents[2] / "web" / "static" / "app.js"


def _query(query_id: str, sql: str, rows: list[list[str | None]], error: str | None = None) -> ExecutedQuery:
    result = QueryResult(query_id=query_id.lower(), sql=sql, columns=["n"], types=["UInt64"], rows=rows, error=error)
    return ExecutedQuery(id=query_id, question=f"question {query_id}", sql=sql, result=result)


Q1 = _query("Q1", "SELECT 16", [["16"]])
Q2 = _query("Q2", "SELECT bad", [], error="Code: 47. Unknown identifier bad")
RESULT = RunResult(question="how many?", answer="Sixteen [Q1].", queries=[Q1, Q2], followups=["And by month?"])


def _events() -> list[WireEvent]:
    chart = Chart(id="C1", query_id="Q1", kind="bar", title="n", spec={"mark": "bar"}, rows=1, capped=False)
    return [
        StartedEvent(question="how many?"),
        ExecutingEvent(query_id="Q1", question=Q1.question, sql=Q1.sql),
        ExecutingEvent(query_id="Q2", question=Q2.question, sql=Q2.sql),
        AnswerEvent(text="narration"),
        AnswerEvent(text="", restart=True),
        ResultEvent.of(Q2, max_bytes=10_000),
        ResultEvent.of(Q1, max_bytes=10_000),
        ChartEvent(chart=chart),
        AnswerEvent(text="Sixteen "),
        AnswerEvent(text="[Q1]."),
        FollowupsEvent(questions=["And by month?"]),
        done_event(RESULT),
    ]


def test_each_event_is_applied_once_into_queries_charts_answer_and_result() -> None:
    view = RunView()
    states = []
    for event in _events():
        view.apply(event)
        states.append({q.query_id: q.state for q in view.queries.values()})
    assert states[2] == {"Q1": "executing", "Q2": "executing"} and states[5] == {"Q1": "executing", "Q2": "error"}
    q1, q2 = view.queries["Q1"], view.queries["Q2"]
    assert (q1.state, q1.rows, q1.row_count, q1.columns, q1.error) == ("result", [[16]], 1, ["n"], None)
    assert q2.state == "error" and q2.error == "Code: 47. Unknown identifier bad" and view.failed == [q2]
    assert view.question == "how many?" and view.answer == "Sixteen [Q1]." and view.followups == ["And by month?"]
    assert [c.id for c in view.charts] == ["C1"] and view.done and view.result is not None
    assert view.result.answer == RESULT.answer and view.error is None


def test_a_replayed_log_gives_the_view_the_live_run_gave() -> None:
    events = [RunEvent(n, "r" * 32, "c", event) for n, event in enumerate(_events(), 1)]
    live = RunView().apply_all(event.body for event in events)
    replayed = [RunEvent.from_dict(event.as_dict()) for event in events]  # as the store and other workers read it
    assert RunView().apply_all(event.body for event in replayed if event is not None) == live


def test_a_failed_run_keeps_its_error_and_no_result() -> None:
    view = RunView().apply_all([StartedEvent(question="q"), ErrorEvent(message="The model is away."), done_event(None)])
    assert view.done and view.result is None and view.error == "The model is away." and view.queries == {}


def test_a_result_for_a_query_never_started_is_not_made_up() -> None:
    view = RunView().apply_all([ResultEvent.of(Q1, max_bytes=10_000)])
    assert view.queries == {}


def test_a_result_known_only_whole_gives_the_view_its_events_would() -> None:
    """The stored query row: the run's result replayed as its events, each preview within the byte budget."""
    from_result = RunView.of_result(RESULT, max_bytes=10_000)
    live = RunView().apply_all(_events())
    assert list(from_result.queries.values()) == list(live.queries.values())
    tight = RunView.of_result(
        RunResult(question="q", queries=[_query("Q1", "SELECT", [["x" * 400]] * 20)]), max_bytes=2_000
    )
    assert 0 < len(tight.queries["Q1"].rows) < 20 and tight.queries["Q1"].row_count == 20


def test_a_query_has_the_names_the_web_reads() -> None:
    """Every field the browser reads of a query (web/static/app.js: its card and its result) is a QueryView
    field of that name: one shape, from the event to the page."""
    script = APP_JS.read_text()
    read = set()
    for function in ("queryCard", "fillResult"):
        body = script[script.index(f"function {function}(") :]
        body = body[: body.index("\n}\n")]
        read |= set(re.findall(r"\bdata\.(\w+)", body))
    fields = {f.name for f in dataclasses.fields(QueryView)}
    assert {"query_id", "row_count", "has_more", "elapsed_ms", "reused_from"} <= read
    assert read <= fields, read - fields


def test_a_reports_steps_are_folded_each_as_it_last_stood_and_survive_the_wire() -> None:
    from agent.reports import ReportBudget, ReportUsage
    from agent.runner import WIRE_EVENT, StepEvent

    budget = ReportBudget()
    running = StepEvent(number=1, title="Compare months", state="running", used=ReportUsage(), budget=budget)
    done = running.model_copy(update={"state": "done", "queries": ["Q1"], "used": ReportUsage(queries=1)})
    second = StepEvent(number=2, title="By airport", state="running", used=ReportUsage(queries=1), budget=budget)
    wired = [WIRE_EVENT.validate_python({**e.wire(), "type": e.type}) for e in (running, done, second)]
    view = RunView().apply_all(wired)
    assert [(s.number, s.state, s.queries) for s in view.steps.values()] == [(1, "done", ["Q1"]), (2, "running", [])]
    assert view.steps[1].used.queries == 1 and view.steps[2].title == "By airport"
