"""Reports in the web: POST /api/reports starts one from the chat (its Report choice beside Ask) or resumes
a partial one, streaming its run's events as a question's; GET /api/reports/{id} reads it back for its page
(/reports/<id>, web/views/page.py), with the page of each query it cites; GET /api/reports/{id}.md and .pdf
download it.

A report belongs to whoever asked it (chats/reports.py), and the web serves only the web's: another
person's, or one asked in Slack, answers byte for byte as an id never seen. Rows read under a policy its
owner no longer holds whole are left out (web/withholding.py), the sections and the SQL stay.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent.chart_images import render_pngs
from agent.reports import markdown
from agent.reports.model import Report, ReportBudget, ReportRequest
from chats.report_runs import (
    MAX_RESUMES,
    POLICY_CHANGED,
    REPORT_RATE_WEIGHT,
    policy_changed,
    running_of,
    too_many_running,
)
from chats.reports import StoredReport
from web.boundary import HttpError, check_rate, read_json_body
from web.context import WEB, web_context
from web.downloads import attachment
from web.identity import Identity, asker_key, policy_of, require_identity
from web.ownership import check_owned
from web.views.chat import refused, start_run
from web.withholding import WITHHELD, covered, reader_policy

MARKDOWN = "text/markdown; charset=utf-8"
PDF = "application/pdf"
EXAMPLE = '{"message": "...", "conversation_id": null} or {"resume": "<report id>"}'


class ReportBody(BaseModel):
    message: str = ""
    conversation_id: str | None = Field(None, max_length=64)
    resume: str | None = Field(None, max_length=64)


async def start_report(request: Request) -> Response:
    """A new report on `message` (in the conversation named, else a new one), or the rest of the partial
    report `resume` names (its queries that succeeded are not run again)."""
    web = web_context(request)
    identity = await require_identity(request)
    body = await read_json_body(request, ReportBody, EXAMPLE)
    budget = ReportBudget.of(web.settings)
    await _check_pace(request, identity)
    if body.resume is not None:
        stored = await _owned(request, body.resume)
        if stored.running:
            raise HttpError(409, "This report is being written; its page shows it when it is done.")
        if stored.report is None or not stored.report.resumable:
            raise HttpError(409, "This report is not partial: there is nothing to resume.")
        if policy_changed(stored.policy, policy_of(request, identity)):  # before anything is held or run
            raise HttpError(409, POLICY_CHANGED)
        if stored.report.runs and len(stored.report.runs) > MAX_RESUMES:
            raise HttpError(409, f"This report was resumed {MAX_RESUMES} times already; ask it again as a new report.")
        return await start_run(request, identity, stored.question, stored.conversation_id, resume=stored.id)
    message = body.message.strip()
    limit = web.settings.agent_web_max_message_chars
    if not message:
        raise HttpError(400, "message: must not be empty")
    if len(body.message) > limit:
        await refused(request, identity, "too_long")
        raise HttpError(413, f"message: longer than {limit} characters ({len(body.message)}).")
    return await start_run(request, identity, message, body.conversation_id, ReportRequest(budget=budget, grants=1))


async def _check_pace(request: Request, identity: Identity) -> None:
    """A report may spend many questions' worth: it counts as REPORT_RATE_WEIGHT questions against the
    per-minute rate (the route took one), and one person has at most AGENT_REPORT_MAX_RUNNING at once."""
    web = web_context(request)
    for _ in range(REPORT_RATE_WEIGHT - 1):
        await check_rate(web.questions, asker_key(request, identity), "questions")
    limit = web.settings.agent_report_max_running
    if await running_of(web.runs.reports, identity.person.owner) >= limit:
        raise HttpError(429, too_many_running(limit), {"Retry-After": "30"})


async def report(request: Request) -> Response:
    stored, identity = await _readable(request)
    shown = stored.report
    if shown is not None and not covered(request, stored.policy, reader_policy(request, identity, stored.owner)):
        shown = _withheld(shown)
    return JSONResponse(
        {
            "id": stored.id,
            "question": stored.question,
            "state": stored.state,
            "run_id": stored.run_id,
            "conversation_id": stored.conversation_id,
            "report": shown.model_dump(mode="json") if shown is not None else None,
            "query_pages": await _query_pages(request, shown) if shown is not None else {},
            "rows_hidden": WITHHELD if shown is not stored.report else None,
        }
    )


async def report_markdown(request: Request) -> Response:
    report = await _written(request)
    text = markdown.report_markdown(report)
    headers = {"Content-Disposition": attachment(report.question, fallback=f"report-{report.id}", suffix=".md")}
    return Response(text, media_type=MARKDOWN, headers=headers)


async def report_pdf(request: Request) -> Response:
    report = await _written(request)
    from agent.reports.pdf import report_pdf  # fpdf2, loaded by the first download only

    # Its charts drawn as Slack's are (a process of their own, with a time limit); one that is not is named.
    timeout_s = web_context(request).settings.chart_render_timeout_s
    images = await render_pngs(report.charts, timeout_s=timeout_s)
    document = await asyncio.to_thread(report_pdf, report, chart_images=images)
    headers = {"Content-Disposition": attachment(report.question, fallback=f"report-{report.id}", suffix=".pdf")}
    return Response(document, media_type=PDF, headers=headers)


async def _written(request: Request) -> Report:
    """The report to download, as its reader may read it; 404 while nothing is written yet."""
    stored, identity = await _readable(request)
    if stored.report is None:
        raise _missing(stored.id)
    if not covered(request, stored.policy, reader_policy(request, identity, stored.owner)):
        return _withheld(stored.report)
    return stored.report


async def _readable(request: Request) -> tuple[StoredReport, Identity]:
    report_id = request.path_params["report_id"]
    stored = await web_context(request).runs.reports.get(report_id, interface=WEB)
    identity = await check_owned(request, stored.owner if stored else None, _missing(report_id))
    assert stored is not None
    return stored, identity


async def _owned(request: Request, report_id: str) -> StoredReport:
    stored = await web_context(request).runs.reports.get(report_id, interface=WEB)
    await check_owned(request, stored.owner if stored else None, _missing(report_id))
    assert stored is not None
    return stored


def _missing(report_id: str) -> HttpError:
    """The one answer for a report not there, not the web's, or not the caller's."""
    return HttpError(404, f"No report {report_id}.")


def _withheld(report: Report) -> Report:
    """The report without its queries' rows and its charts (drawn from those rows)."""
    queries = [q.model_copy(update={"rows": [], "row_count": 0}) for q in report.queries]
    return report.model_copy(update={"queries": queries, "charts": []})


async def _query_pages(request: Request, report: Report) -> dict[str, Any]:
    """Each query's page key (`<run>-Qn`): the latest of the report's runs that stored it (a Resume keeps
    the earlier runs' queries under their own run)."""
    store = web_context(request).store
    pages: dict[str, str] = {}
    for query in report.queries:
        for run_id in reversed(report.runs or [report.id]):
            key = f"{run_id}-{query.id}"
            if await store.query_owner(key) is not None:
                pages[query.id] = key
                break
    return pages
