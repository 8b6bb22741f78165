"""A report in the Slack thread: its sections posted in readable parts within Slack's limits, its charts as
images, the receipt, and the whole report attached as a PDF and a Markdown file.

A message holds at most 50 blocks ("blocks are limited to 50 per message", docs.slack.dev/reference/
block-kit/blocks) and at most 12,000 characters of markdown blocks in all ("The cumulative limit for all
markdown blocks in a single payload is 12,000 characters", docs.slack.dev/reference/block-kit/blocks/
markdown-block): the sections are packed into as few messages as fit both, a section longer than one
message going on in the next, cut where a paragraph ends (blocks.cut_point). Past MAX_MESSAGES the thread
says the rest is in the files. The first part goes where the
live plan was shown (the answer writer's message); the rest follow, the last one with the figures that did
not check out, the receipt and, for a partial report, the Resume button. The files go up together through
Slack's external upload (files_upload_v2: files.getUploadURLExternal, the upload, files.completeUploadExternal).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.reports.model import Report, ReportOutcome
from bots.slack import blocks, refusals
from bots.slack.api_tiers import CallBudget
from bots.slack.blocks import MAX_MARKDOWN, escape, markdown_block, no_pings, preview, query_page_url, split_markdown
from bots.slack.receipt import figure_blocks

log = logging.getLogger(__name__)
MAX_BLOCKS = 50  # per message (docs.slack.dev/reference/block-kit/blocks)
# A thread is read, not scrolled past: a report longer than this many messages says the rest is in its files.
MAX_MESSAGES = 8
GOES_ON = "_The report goes on in the PDF and Markdown files attached below ({more} more message(s) of it)._"
FILES_COMMENT = "The full report, as PDF and Markdown."
SEPARATOR = "\n\n"
OUTCOME_LINE = {
    ReportOutcome.COMPLETE: "Report",
    ReportOutcome.PARTIAL: "Partial report",
    ReportOutcome.CANNOT_ANSWER: "I cannot answer this from the data",
}
STOPPED_BY = {
    "steps": "its step limit",
    "tool_calls": "its tool-call limit",
    "queries": "its query limit",
    "minutes": "its time limit",
    "tokens": "its token limit",
    "cost": "its cost limit",
    "error": "an error",
    "cancelled": "a stop",
}


@dataclass
class Part:
    """One message of the report: its sections (as written, and as Slack shows them, in markdown blocks),
    then, on the last, the context lines and buttons (`extra`)."""

    written: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)

    def fits(self, text: str) -> bool:
        used = sum(len(t) + len(SEPARATOR) for t in self.shown)
        return len(self.shown) < MAX_BLOCKS and used + len(text) <= MAX_MARKDOWN

    def add(self, written: str, shown: str) -> None:
        self.written.append(written)
        self.shown.append(shown)

    @property
    def blocks(self) -> list[dict[str, Any]]:
        return [markdown_block(text) for text in self.shown] + self.extra

    @property
    def markdown(self) -> str:
        """Its sections as one text, as written (for the answer writer, which renders it for Slack itself)."""
        return SEPARATOR.join(self.written)

    @property
    def text(self) -> str:
        """The plain stand-in of its blocks (what notifications and screen readers show)."""
        return preview(SEPARATOR.join(self.shown)) or "Report"


def sections(report: Report, web_url: str | None) -> list[str]:
    """The report's sections as Slack Markdown, in the order a reader meets them: what it is and how it
    ended, the answer, the findings, how it was found, caveats, what could not be answered, what remains."""
    out = [_heading(report)]
    if report.summary.strip():
        out.append(report.summary.strip())
    if report.findings:
        items = []
        for number, finding in enumerate(report.findings, 1):
            chart = report.chart(finding.chart)
            shown = f" _(chart {chart.id} below)_" if chart is not None else ""
            items.append(f"{number}. {finding.text.strip()}{shown}")
        out.append("**Findings**\n\n" + "\n".join(items))
    method = _method(report, web_url)
    if method:
        out.append("**How this was found**\n\n" + method)
    for title, text in (
        ("Caveats and what remains uncertain", report.caveats),
        ("What could not be answered", report.unanswered),
        ("What remains to do", report.remaining if report.outcome is ReportOutcome.PARTIAL else ""),
    ):
        if text.strip():
            out.append(f"**{title}**\n\n{text.strip()}")
    return out


def _heading(report: Report) -> str:
    line = f"**{OUTCOME_LINE[report.outcome]}:** {report.question.strip()}"
    if report.outcome is ReportOutcome.PARTIAL:
        limit = STOPPED_BY.get(report.stopped_by or "", "a limit")
        line += f"\n\n_It stopped at {limit}: what is done is below. Resume goes on without running its queries again._"
    return line


def _method(report: Report, web_url: str | None) -> str:
    """How this was found: the model's own words, then each query it rests on (its page, with a web UI)."""
    lines = [report.method.strip()] if report.method.strip() else []
    run_id = report.runs[-1] if report.runs else report.id
    for query in report.queries:
        outcome = "failed" if query.error else f"{query.row_count:,} row{'s' if query.row_count != 1 else ''}"
        label = f"[{query.id}]({query_page_url(web_url, run_id, query.id)})" if web_url else f"[{query.id}]"
        lines.append(f"- {label} {' '.join(query.question.split())} ({outcome})")
    return "\n".join(lines)


def report_parts(report: Report, web_url: str | None = None) -> list[Part]:
    """The report's messages: its sections packed within Slack's limits, the last one with the unverified
    figures, the receipt and the Resume button."""
    parts = [Part()]
    for section in sections(report, web_url):
        shown = blocks.slack_markdown(section, final=True)
        # A section longer than a message is cut where a paragraph ends; each piece reads as written.
        pieces = [(shown, section)] if len(shown) <= MAX_MARKDOWN else [(p, p) for p in split_markdown(shown)]
        for piece, written in pieces:
            if not parts[-1].fits(piece):
                parts.append(Part())
            parts[-1].add(written, piece)
    if len(parts) > MAX_MESSAGES:
        more = len(parts) - MAX_MESSAGES + 1
        parts = [*parts[: MAX_MESSAGES - 1], Part()]
        parts[-1].add(GOES_ON.format(more=more), GOES_ON.format(more=more))
    closing = figure_blocks(report.figures, report.receipt) + report_buttons(report)
    if len(parts[-1].blocks) + len(closing) > MAX_BLOCKS:
        parts.append(Part())
    parts[-1].extra = closing
    return parts


def report_buttons(report: Report) -> list[dict[str, Any]]:
    """Resume, under a partial report only: it continues the report by its id."""
    if not report.resumable:
        return []
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": "Resume"},
        "action_id": blocks.RESUME_REPORT,
        "value": report.id,
        "style": "primary",
    }
    return [{"type": "actions", "block_id": blocks.RESUME_REPORT, "elements": [button]}]


@dataclass(frozen=True)
class ReportFiles:
    markdown: str
    pdf: bytes | None  # None: it could not be rendered (the Markdown still goes)


def file_name(report: Report, extension: str) -> str:
    return f"report-{report.id[:12]}.{extension}"


async def attach_files(
    client: AsyncWebClient, *, channel: str, thread_ts: str, report: Report, files: ReportFiles
) -> None:
    """The whole report as files in the thread, in one message (files_upload_v2 with `file_uploads`).
    Slack's routine refusals (no files:write, uploads turned off) are raised, for the caller to say why."""
    title = no_pings(f"Report: {' '.join(report.question.split())}")[:200]
    uploads: list[dict[str, Any]] = []
    if files.pdf is not None:
        uploads.append({"content": files.pdf, "filename": file_name(report, "pdf"), "title": f"{title} (PDF)"})
    uploads.append(
        {"content": files.markdown.encode(), "filename": file_name(report, "md"), "title": f"{title} (Markdown)"}
    )
    await client.files_upload_v2(
        file_uploads=uploads, channel=channel, thread_ts=thread_ts, initial_comment=FILES_COMMENT
    )


async def post_parts(
    client: AsyncWebClient, budget: CallBudget, *, team: str, channel: str, thread_ts: str, parts: list[Part]
) -> list[str]:
    """Post each part in the thread, in order, each waiting for room in Slack's rate limits; their ts."""
    deadline = time.monotonic() + refusals.FINAL_DEADLINE_S
    posted = []
    for part in parts:
        await budget.take(team, "chat.postMessage", channel)

        async def post(part: Part = part) -> Any:
            return await client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=part.text, blocks=part.blocks, **blocks.NO_PREVIEWS
            )

        posted.append(str((await refusals.until_landed(post, deadline=deadline))["ts"]))
    return posted


def cannot_attach(exc: SlackApiError) -> str:
    """What the thread is told when Slack refused the files (the report itself stands above)."""
    scope = refusals.needed_scope(exc)
    error = escape(str(exc.response.get("error")))
    why = f"the app lacks the `{escape(scope)}` scope" if scope else f"Slack said `{error}`"
    return f"The report's PDF and Markdown could not be attached: {why}."
