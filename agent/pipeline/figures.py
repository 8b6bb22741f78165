"""The figure check in the loop: an answer whose figures match nothing in the cells they cite goes back
to the model once (prompts/loop/figure_correction.md); what still fails is reported as unverified.

The check runs off the event loop on workers of its own (`CHECK_WORKERS` threads): on the default
executor, a few slow checks would queue every other blocking call of the process behind them (the
conversation store's among them). It is handed its deadline (agent/figures/deadline.py) and stops
there itself (or as soon as its run is cancelled), so the time limit ends the work, not only the
wait for it: a thread cannot be stopped from outside, and a process per check would cost more than
a check (its result and evidence pickled both ways, a worker killed and restarted at each time-out).
Past the limit, or when the check fails, the answer stands with its figures reported unchecked and
why (and no correction round): a figure report is never missing for an answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

from agent.figures import CheckTimedOut, Deadline, Evidence, FigureReport, check_answer
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import AnswerEvent, Outcome

log = logging.getLogger(__name__)

CHECK_TIME_LIMIT_S = 10.0
CHECK_WORKERS = 2  # checks at once, process-wide; more wait their turn (their deadline running)
Checker = Callable[..., FigureReport]  # check_answer(answer, *, question, evidence, deadline)
CHECKS = ThreadPoolExecutor(max_workers=CHECK_WORKERS, thread_name_prefix="figure-check")  # threads start on use


class FigureReview:
    def __init__(
        self,
        prompts: PromptLibrary,
        *,
        check: Checker = check_answer,
        time_limit_s: float = CHECK_TIME_LIMIT_S,
        executor: Executor = CHECKS,
    ) -> None:
        self._prompts = prompts
        self._check_answer = check
        self._time_limit_s = time_limit_s
        self._executor = executor

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
        if not state.answer or state.outcome not in (Outcome.ANSWERED, Outcome.CAPPED, Outcome.CANCELLED):
            return
        report = await self._check(state)
        report.corrected = state.figures_corrected
        report.unverified_before_correction = state.unverified_before_correction
        state.figures = report
        state.metrics.figures_checked.inc(report.checked)
        state.metrics.figures_verified.inc(report.verified)
        state.metrics.figures_unverified.inc(report.unverified)

    async def settle_cancelled(self, state: RunState) -> None:
        """A cancelled run keeps the text streamed so far (or an answer cancelled while being checked):
        its figures are checked like any answer's. Cancelled again meanwhile, they are reported
        unchecked, saying why: the text is still shown, never without a mark."""
        if state.figures is not None or not state.answer:
            return
        try:
            await self.settle(state)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            state.figures = FigureReport(unchecked="the question was cancelled while its figures were being checked")

    async def check_text(self, text: str, question: str, evidence: Sequence[Evidence]) -> FigureReport:
        """Text a run shows beside its answer (a report's chart captions), checked as an answer is."""
        return await self._within_time_limit(text, question, evidence)

    async def _check(self, state: RunState) -> FigureReport:
        """Off the event loop: an answer of many figures over wide results takes a while to check."""
        started = time.perf_counter()
        evidence = [Evidence(id=q.id, sql=q.sql, result=q.result) for q in state.queries]
        text = state.answer[: len(state.answer) - len(state.note)] if state.note else state.answer
        report = await self._within_time_limit(text, state.question, evidence)
        state.run_metrics.figure_check_ms += (time.perf_counter() - started) * 1000
        return report

    async def _within_time_limit(self, text: str, question: str, evidence: Sequence[Evidence]) -> FigureReport:
        """The report, or one saying why there is none: past the limit (the work stops there too) or
        when the check fails, the figures are reported unchecked, never left without a mark."""
        limit = self._time_limit_s
        deadline = Deadline.after(limit)

        def check() -> FigureReport:
            return self._check_answer(text, question=question, evidence=evidence, deadline=deadline)

        try:
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._executor, check), limit)
        except asyncio.CancelledError:  # the run was cancelled: its check stops too, freeing its worker
            deadline.expire()
            raise
        except (TimeoutError, CheckTimedOut):
            log.warning("the figure check took over %g s; the answer's figures are reported unchecked", limit)
            return FigureReport(unchecked=f"the figure check took longer than {limit:g} s")
        except Exception as exc:  # a bug, or an answer it cannot read: never an answer shown unmarked
            log.exception("the figure check failed; the answer's figures are reported unchecked")
            return FigureReport(unchecked=f"the figure check failed ({type(exc).__name__})")
