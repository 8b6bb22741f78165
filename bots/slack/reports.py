"""Reports asked for in Slack: a `report:` message or a Dig deeper button starts one, a Resume button goes on
with a partial one, and the finished report lands in the thread (bots/slack/report.py shapes it).

The run itself is the answerer's (answer.py: the same turn, rate limits, budget and live plan); this module
decides what the run is asked (its budget from Settings, the report a Resume continues) and, once `done` is
published, reads the report from the kit's store and posts it: its parts, its charts, its files.

A Resume names a report by the id its button carries. It goes on only from the thread the report was
written in (the button's thread is the report's conversation), so a value sent from anywhere else is
answered as a report never seen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.access.policy import Policy
from agent.config import Settings
from agent.metrics import Metrics
from agent.reports.markdown import report_markdown
from agent.reports.model import Report, ReportBudget, ReportOutcome, ReportRequest
from agent.runner import RunResult
from bots.slack import blocks, refusals
from bots.slack.api_tiers import CallBudget
from bots.slack.charts import upload_charts
from bots.slack.failures import classify, explain
from bots.slack.progress import Progress
from bots.slack.receive import Question
from bots.slack.reply import AnswerWriter
from bots.slack.report import ReportFiles, attach_files, cannot_attach, post_parts, report_parts
from bots.slack.thread import answer_metadata
from chats.audit import Origin
from chats.conversations import ConversationStore
from chats.report_runs import NotResumable, PolicyChanged, ReportRuns, running_of, too_many_running
from chats.reports import FAILED, RUNNING
from chats.run_view import RunView
from chats.runs import RunHandle, RunRegistry

log = logging.getLogger(__name__)
NOT_RESUMABLE = "There is no partial report of this thread to resume (it may have been resumed already)."
RUNNING_ELSEWHERE = "This report is already being written; it will be posted here when it is done."


class SlackReports:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: ConversationStore,
        runs: RunRegistry,
        settings: Settings,
        metrics: Metrics,
        budget: CallBudget,
    ) -> None:
        self._client, self._store, self._reports = client, store, runs.reports
        self._report_runs = ReportRuns(runs)
        self._settings, self._metrics, self._budget = settings, metrics, budget

    async def request(self, question: Question, *, owner: str) -> tuple[Question, ReportRequest | None] | str:
        """What the run is asked: a new report on the question (its request), or, for a Resume, the rest of a
        partial report of this thread (None: `resume` starts it), asked as the report's own question. A Resume
        that cannot go on: what to tell the person."""
        if question.resume is None:
            return await self._too_many(owner) or (question, ReportRequest(budget=ReportBudget.of(self._settings)))
        stored = await self._reports.get(question.resume, interface="slack")
        conversation_id = await self._store.find(question.conversation_key)
        if stored is None or conversation_id is None or stored.conversation_id != conversation_id:
            return NOT_RESUMABLE  # another thread's report, or none: as a report never seen
        if stored.running:
            return RUNNING_ELSEWHERE
        if stored.report is None or not stored.report.resumable:
            return NOT_RESUMABLE
        return await self._too_many(owner) or (dataclasses.replace(question, text=stored.question), None)

    async def _too_many(self, owner: str) -> str | None:
        """What to tell a person who has AGENT_REPORT_MAX_RUNNING reports being written already."""
        limit = self._settings.agent_report_max_running
        return too_many_running(limit) if await running_of(self._reports, owner) >= limit else None

    async def resume(
        self,
        report_id: str,
        *,
        policy: Policy | None,
        origin: Origin,
        on_done: Callable[[RunResult], Awaitable[None]],
        delivery: dict[str, Any],
    ) -> RunHandle | str:
        """The report's next run, from its latest checkpoint (its queries that succeeded are not run again),
        with one more budget, and `delivery` (this thread: a host that takes the run over, or this one
        restarted, posts it here); what to tell the person when it cannot go on."""
        try:
            return await self._report_runs.resume(
                report_id, policy=policy, origin=origin, on_done=on_done, delivery=delivery
            )
        except PolicyChanged as changed:
            return str(changed)
        except NotResumable:
            return NOT_RESUMABLE

    async def deliver(
        self, question: Question, handle: RunHandle, view: RunView, progress: Progress, writer: AnswerWriter
    ) -> None:
        """The finished report in the thread: its first part where the plan was shown, the rest below it, the
        charts, the files. A run that failed, or ended with no report, says so."""
        result = view.result
        report = await self._written(handle)
        if writer.stopped_by_user:
            await writer.abandon()
            await progress.finish("Stopped")
            return
        if result is None or report is None:  # a run that failed with a report ends partial: Resume goes on
            await writer.abandon()
            await progress.finish("Stopped")
            kind = classify(view.error or (result.error if result else None), list(view.queries.values()))
            await self._say(question, explain(kind, seconds=self._settings.max_execution_time))
            return
        parts = report_parts(report, self._settings.agent_web_url)
        queries = [{"id": q.id, "question": q.question, "sql": q.sql} for q in report.queries]
        metadata = partial(
            answer_metadata, handle.run_id, question=question.text, asked_ts=question.ts, queries=queries
        )
        first, rest = parts[0], parts[1:]
        # The first part goes into the message that showed the plan (given as if streamed, so nothing shown is
        # taken back); the closing lines ride with it when it is the only part.
        writer.add(first.markdown)
        await writer.finish(first.markdown, first.extra, metadata)
        await post_parts(
            self._client, self._budget, team=question.team, channel=question.channel, thread_ts=question.thread_ts,
            parts=rest,
        )  # fmt: skip
        await self._charts_and_files(question, report)
        seconds = time.perf_counter() - question.received_at
        await progress.finish(f"Report written in {seconds:.1f} s")
        self._metrics.slack_answers.labels("report").inc()

    async def _written(self, handle: RunHandle) -> Report | None:
        """The report as this run left it (None: it wrote none; a failed Resume leaves the earlier one, not
        this run's)."""
        stored = await self._reports.get(handle.report_id) if handle.report_id else None
        if stored is None or stored.run_id != handle.run_id or stored.state in (RUNNING, FAILED):
            return None
        return stored.report

    async def _charts_and_files(self, question: Question, report: Report) -> None:
        images: dict[str, bytes] = {}  # each chart's PNG, drawn once: posted, then in the PDF
        try:
            if report.charts:
                await upload_charts(
                    self._client, self._metrics, channel=question.channel, thread_ts=question.thread_ts,
                    charts=report.charts, timeout_s=self._settings.chart_render_timeout_s, rendered=images,
                )  # fmt: skip
            if report.outcome is not ReportOutcome.CANNOT_ANSWER:
                files = await render_files(report, images)
                await attach_files(
                    self._client, channel=question.channel, thread_ts=question.thread_ts, report=report, files=files
                )
        except SlackApiError as exc:  # the report stands above; the person is told what is missing
            if not refusals.routine(exc):
                raise
            refusals.log_refusal(log, f"attach a report's files in {question.channel}", exc)
            await self._say(question, cannot_attach(exc), escaped=True)

    async def _say(self, question: Question, text: str, *, escaped: bool = False) -> None:
        try:
            await self._client.chat_postMessage(
                channel=question.channel,
                thread_ts=question.thread_ts,
                text=text if escaped else blocks.escape(text),
                **blocks.NO_PREVIEWS,
            )
        except SlackApiError as exc:
            refusals.log_refusal(log, f"tell {question.channel} about a report", exc)


async def render_files(report: Report, images: dict[str, bytes]) -> ReportFiles:
    """The report as Markdown and PDF (agent/reports' renderers, the PDF with the charts' `images`), off the
    event loop: a PDF takes a while. A PDF that cannot be rendered is logged, and the Markdown goes alone."""
    from agent.reports.pdf import report_pdf  # fpdf2, loaded by the first report only

    markdown = report_markdown(report)
    try:
        pdf: bytes | None = await asyncio.to_thread(report_pdf, report, chart_images=images)
    except Exception:
        log.warning("the PDF of report %s could not be rendered", report.id, exc_info=True)
        pdf = None
    return ReportFiles(markdown=markdown, pdf=pdf)
