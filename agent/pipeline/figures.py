"""The figure check in the loop: an answer whose figures match nothing in the cells they cite goes back
to the model once (prompts/loop/figure_correction.md); what still fails is reported as unverified."""

from __future__ import annotations

import asyncio
import logging
import time

from agent.figures import Evidence, FigureReport, check_answer
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import AnswerEvent, Outcome

log = logging.getLogger(__name__)


class FigureReview:
    def __init__(self, prompts: PromptLibrary) -> None:
        self._prompts = prompts

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
        report = await asyncio.to_thread(check_answer, text, question=state.question, evidence=evidence)
        state.run_metrics.figure_check_ms += (time.perf_counter() - started) * 1000
        return report
