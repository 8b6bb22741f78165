"""The figure check in the loop: one correction round, the report in the result, the `done` event and
the metrics (real SDK, fake Messages API over HTTP, real embedded ClickHouse)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.config import Settings
from agent.db import QueryResult
from agent.figures import Deadline, Evidence, FigureReport, check_answer
from agent.pipeline.figures import CHECK_WORKERS, FigureReview
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import Event, ExecutedQuery, FinalAnswer, Outcome
from tests.agent.pipeline.test_pipeline import ask, last_user_text, sql
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply

ORIGINS = (
    "Departures per origin",
    "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC",
)


def _value(metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name, {}) or 0.0


async def test_a_wrong_figure_gets_one_correction_round(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had the most departures in 2013: 120,853 [Q1], 35.9% of the total [Q1]."),
        Reply(text="EWR had the most departures in 2013: 120,835 [Q1], 35.9% of the total [Q1]."),
    )
    result, events = await ask(make_app(), "Which NYC airport had the most departures?")
    correction = last_user_text(fake_anthropic.requests[2])
    assert '"120,853" (cited to Q1)' in correction and "nearest cell is 120835 (Q1, row 1, n)" in correction
    assert "35.9%" not in correction  # it verified
    assert (
        events.answer_text()
        == result.answer
        == "EWR had the most departures in 2013: 120,835 [Q1], 35.9% of the total [Q1]."
    )
    report = result.figures
    assert report is not None and report.corrected and report.unverified_before_correction == 1
    assert [(f.text, f.verified, f.how) for f in report.figures] == [
        ("120,835", True, "cell"),
        ("35.9%", True, "share of total"),
    ]
    assert report.not_claims == 1  # the year
    assert result.metrics.rounds == 3 and result.outcome is Outcome.ANSWERED
    assert _value(metrics, "agent_figure_corrections_total") == 1
    assert _value(metrics, "agent_figures_checked_total") == 2
    assert _value(metrics, "agent_figures_verified_total") == 2
    assert _value(metrics, "agent_figures_unverified_total") == 0
    assert FinalAnswer.of(result).figures == report
    assert FinalAnswer.of(result).model_dump(mode="json")["figures"]["verified"] == 2


async def test_what_still_fails_is_reported_unverified(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had 130,000 departures [Q1]; JFK had 111,279 [Q1]."),
        Reply(text="EWR had 130,000 departures [Q1]; JFK had 111,279 [Q1]."),
    )
    result, _ = await ask(make_app(), "departures?")
    report = result.figures
    assert report is not None and report.corrected
    (wrong,) = report.failures()
    assert wrong.text == "130,000" and wrong.citations == ["Q1"] and "no cell of Q1" in (wrong.reason or "")
    assert result.answer.startswith("EWR had 130,000")  # shown, marked unverified, never silently dropped
    assert _value(metrics, "agent_figures_unverified_total") == 1
    assert _value(metrics, "agent_figures_verified_total") == 1
    summary = result.summary()
    assert summary["figures"]["unverified"] == 1 and summary["figures"]["figures"][0]["verified"] is False


async def test_verified_answers_take_no_extra_round(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="The top 3 airports [Q1]:\n\n1. EWR: 120,835\n2. JFK: 111,279\n3. LGA: 104,662"),
    )
    result, events = await ask(make_app(), "busiest airports?")
    assert len(fake_anthropic.requests) == 2 and not [e for e in events.of("answer") if e.restart]
    report = result.figures
    assert report is not None and not report.corrected and (report.checked, report.verified) == (3, 3)
    assert _value(metrics, "agent_figure_corrections_total") == 0
    assert 0 <= result.metrics.figure_check_ms <= result.metrics.total_ms, "the check is part of the run's time"


async def test_a_failed_correction_round_keeps_the_answer(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text="EWR had 130,000 departures [Q1]."),
        Failure(400, "invalid_request_error", "the correction request was refused"),
    )
    result, events = await ask(make_app(), "departures?")
    assert result.outcome is Outcome.ANSWERED and result.error is None and not events.of("error")
    assert result.answer == "EWR had 130,000 departures [Q1]."
    assert result.figures is not None and result.figures.unverified == 1 and result.figures.corrected


async def test_a_check_past_its_time_limit_leaves_the_figures_unchecked(metrics, caplog) -> None:
    check_may_end = threading.Event()
    checks_ended: list[str] = []

    def slow_check(answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline) -> FigureReport:
        check_may_end.wait(30)
        checks_ended.append(answer)
        return check_answer(answer, question=question, evidence=evidence)

    async def sink(event: Event) -> None:
        pass

    state = RunState(question="departures?", interface="cli", emit=sink, metrics=metrics)
    state.answer = "EWR had 130,000 departures [Q1]."
    state.queries.append(ExecutedQuery(id="Q1", question="", sql="SELECT 1", result=QueryResult(query_id="", sql="")))
    prompts = PromptLibrary(Settings.model_fields["agent_prompts_dir"].default)
    review = FigureReview(prompts, check=slow_check, time_limit_s=0.05)
    try:
        assert await review.correction(state) is None  # no correction round for figures never checked
        assert checks_ended == [], "it did not wait for the check, which is still running"
        await review.settle(state)
        assert checks_ended == []
    finally:
        check_may_end.set()  # the checks left running in their threads end
    assert state.figures is not None and state.figures.checked == 0
    assert state.figures.unchecked == "the figure check took longer than 0.05 s"
    assert "the figure check took over 0.05 s" in caplog.text


# --- the check never fails open (issue 26) ---


def _state(metrics, answer: str = "EWR had 130,000 departures [Q1].") -> RunState:
    async def sink(event: Event) -> None:
        pass

    state = RunState(question="departures?", interface="cli", emit=sink, metrics=metrics)
    state.answer = answer
    state.queries.append(ExecutedQuery(id="Q1", question="", sql="SELECT 1", result=QueryResult(query_id="", sql="")))
    return state


def _prompts() -> PromptLibrary:
    return PromptLibrary(Settings.model_fields["agent_prompts_dir"].default)


async def test_a_number_of_thousands_of_digits_still_gets_its_correction_round(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    """In an image's alt text it made int() raise inside the check: the answer was stored as answered
    with no figure report, its false percentage shown with no mark and no correction round."""
    huge = "9" * 5000
    wrong = f"![{huge}](chart.png)\n\nEWR handled 42% of the departures [Q1]."
    fake_anthropic.script(
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text=wrong),
        Reply(text="EWR handled 35.9% of the departures [Q1]."),
    )
    result, _ = await ask(make_app(), "Which share of departures left from EWR?")
    correction = last_user_text(fake_anthropic.requests[2])
    assert '"42%" (cited to Q1)' in correction
    report = result.figures
    assert report is not None and report.corrected and report.unchecked is None
    assert [(f.text, f.verified) for f in report.figures] == [("35.9%", True)]
    assert result.outcome is Outcome.ANSWERED and result.error is None


async def test_a_check_that_fails_reports_the_figures_unchecked_with_why(metrics, caplog) -> None:
    def broken_check(answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline) -> FigureReport:
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    state = _state(metrics)
    review = FigureReview(_prompts(), check=broken_check)
    with caplog.at_level(logging.ERROR):
        assert await review.correction(state) is None  # as past the time limit: no round for figures never checked
        await review.settle(state)
    assert state.figures is not None and state.figures.checked == 0 and state.figures.verified == 0
    assert state.figures.unchecked == "the figure check failed (ValueError)"
    assert "the figure check failed" in caplog.text and "Traceback" in caplog.text  # the details go to the log


async def test_the_check_runs_on_workers_of_its_own(metrics) -> None:
    """Checks filled the default executor, which the conversation store shares: another client's list of
    conversations waited for them. Blocked checks, more than the default executor has threads, must not
    delay a job on it; and no more than CHECK_WORKERS run at once."""
    released = threading.Event()
    running, most = [0], [0]
    lock = threading.Lock()

    def blocked_check(answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline) -> FigureReport:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return FigureReport(unchecked=None if released.wait(timeout=10) else "never released")
        finally:
            with lock:
                running[0] -= 1

    review = FigureReview(_prompts(), check=blocked_check, time_limit_s=60)
    checks = [
        asyncio.create_task(review._within_time_limit("1 [Q1]", "q", []))
        for _ in range(min(32, (os.cpu_count() or 1) + 5))
    ]
    try:
        while running[0] < CHECK_WORKERS:
            await asyncio.sleep(0.005)
        await asyncio.get_running_loop().run_in_executor(None, released.set)  # the store's kind of job
    finally:
        released.set()
    reports = await asyncio.gather(*checks)
    assert [r.unchecked for r in reports] == [None] * len(checks)  # the default executor's job released them
    assert most[0] == CHECK_WORKERS


async def test_the_time_limit_ends_the_work_not_only_the_wait(metrics) -> None:
    """The real check, run over and over until its deadline: once the review gives up, the worker is free
    within one more step of the check (it was left running to its end, holding the worker)."""
    answer = ", ".join(f"2013-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(2000)) + " [Q1]"
    runs: list[int] = []

    def endless_check(answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline) -> FigureReport:
        while True:
            runs.append(deadline.steps)
            check_answer(answer, question=question, evidence=evidence, deadline=deadline)

    worker = ThreadPoolExecutor(max_workers=1)
    try:
        review = FigureReview(_prompts(), check=endless_check, time_limit_s=0.2, executor=worker)
        report = await review._within_time_limit(answer, "busiest days?", [])
        assert report.unchecked == "the figure check took longer than 0.2 s"
        given_up = len(runs)
        assert given_up >= 2  # the check ran whole at least once before the limit
        await asyncio.get_running_loop().run_in_executor(worker, lambda: None)  # waits for the worker
        assert len(runs) - given_up <= 1
    finally:
        worker.shutdown(wait=False, cancel_futures=True)


async def test_a_cancelled_run_ends_its_check(metrics) -> None:
    """A run cancelled while its figures are checked (the person pressed stop) frees the check's worker."""
    answer = ", ".join(f"2013-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(2000)) + " [Q1]"
    runs: list[int] = []

    def endless_check(answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline) -> FigureReport:
        while True:
            runs.append(deadline.steps)
            check_answer(answer, question=question, evidence=evidence, deadline=deadline)

    worker = ThreadPoolExecutor(max_workers=1)
    try:
        review = FigureReview(_prompts(), check=endless_check, time_limit_s=60, executor=worker)
        checking = asyncio.create_task(review._within_time_limit(answer, "busiest days?", []))
        while len(runs) < 2:
            await asyncio.sleep(0.005)
        checking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await checking
        cancelled = len(runs)
        await asyncio.get_running_loop().run_in_executor(worker, lambda: None)  # waits for the worker
        assert len(runs) - cancelled <= 1
    finally:
        worker.shutdown(wait=False, cancel_futures=True)
