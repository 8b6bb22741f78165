"""The figure check in the loop: an answer whose figures match nothing in the cells they cite goes back
to the model once (prompts/loop/figure_correction.md); what still fails is reported as unverified.

The check runs in a thread, off the event loop, within a time limit: past it the answer stands with
its figures reported unchecked (and no correction round). The thread cannot be stopped and runs to its
end; the check's own caps (agent/figures/verify.py) keep that short."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from agent.figures import Evidence, FigureReport, check_answer
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import AnswerEvent, Outcome

log = logging.getLogger(__name__)

CHECK_TIME_LIMIT_S = 10.0
Checker = Callable[..., FigureReport]  # check_answer(answer, *, question, evidence)


class FigureReview:
    def __init__(
        self, prompts: PromptLibrary, *, check: Checker = check_answer, time_limit_s: float = CHECK_TIME_LIMIT_S
    ) -> None:
        self._prompts = prompts
        self._check_answer = check
        self._time_limit_s = time_limit_s

    async def correction(self, state: RunState) -> str | None:
        """The correction to send back when the answer just accepted has unverified figures (once a run);
        None to keep it. Adapters are told to discard the answer shown so far."""
        if state.outcome is not Outcome.ANSWERED or not state.answer or state.figures_corrected:
            return None
        report = await self._check(state)
        checkable = any(q.result.ok for q in state.queries)
        failures = [f for f in report.failures() if f.citations or checkable]
        if not failures:  # nothing ran that could hold them (a conversational reply): no round to spend
            return None
        state.figures_corrected = True
        state.unverified_before_correction = len(failures)
        state.metrics.figure_corrections.inc()
        await state.emit(AnswerEvent(text="", restart=True))
        return self._prompts.render("loop/figure_correction.md", figures=failures)

    async def keep_answer(self, state: RunState, error: Exception) -> bool:
        """When the correction round fails (the model or the database is unavailable), the answer it was
        correcting stands, its figures reported as they were; True when that is the case."""
        if not state.figures_corrected or not state.answer or state.outcome is not Outcome.ANSWERED:
            return False
        log.warning("the figure correction round failed (%s); the answer before it stands", error)
        await self.settle(state)
        return True

    async def settle(self, state: RunState) -> None:
        """The final answer's figures, recorded in the run's result and metrics."""
        if not state.answer or state.outcome not in (Outcome.ANSWERED, Outcome.CAPPED):
            return
        report = await self._check(state)
        report.corrected = state.figures_corrected
        report.unverified_before_correction = state.unverified_before_correction
        state.figures = report
        state.metrics.figures_checked.inc(report.checked)
        state.metrics.figures_verified.inc(report.verified)
        state.metrics.figures_unverified.inc(report.unverified)

    async def _check(self, state: RunState) -> FigureReport:
        """Off the event loop: an answer of many figures over wide results takes a while to check."""
        started = time.perf_counter()
        evidence = [Evidence(id=q.id, sql=q.sql, result=q.result) for q in state.queries]
        text = state.answer[: len(state.answer) - len(state.note)] if state.note else state.answer
        report = await self._within_time_limit(text, state.question, evidence)
        state.run_metrics.figure_check_ms += (time.perf_counter() - started) * 1000
        return report

    async def _within_time_limit(self, text: str, question: str, evidence: Sequence[Evidence]) -> FigureReport:
        checking = asyncio.to_thread(self._check_answer, text, question=question, evidence=evidence)
        try:
            return await asyncio.wait_for(checking, self._time_limit_s)
        except TimeoutError:
            log.warning(
                "the figure check took over %g s; the answer's figures are reported unchecked", self._time_limit_s
            )
            return FigureReport(unchecked=f"the figure check took longer than {self._time_limit_s:g} s")
