"""`agent report "question"`: a report (agent/reports) written in this process, its steps printed as they
run, then the report as Markdown on stdout (or `--json`), optionally saved as PDF and Markdown files;
`agent report --resume ID` continues a partial one without running again the queries that succeeded.
Registered in process/cli.py by `add_report_command`; exit codes as there (0 a report, complete, partial
or cannot answer; 1 the run failed; 2 usage; 130 Ctrl-C, the report kept as partial to resume).

It runs through the same run registry and store as the web chat (a report the CLI made is the local
person's); while a server holds the embedded data, reports are asked of it from the web chat instead.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from process.errors import EXIT_FAILED, EXIT_OK, UsageError
from process.untrusted import safe

if TYPE_CHECKING:
    from agent.config import Settings
    from agent.reports import Report
    from agent.runner import WireEvent
    from chats.runs import RunHandle, RunRegistry
    from chats.state import ChatState

CHART_RENDER_TIMEOUT_S = 20.0


def add_report_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = commands.add_parser(
        "report", help="a report: a deeper analysis in steps, every figure checked, written from its queries"
    )
    report.add_argument("question", nargs="?", help="what the report should find out")
    report.add_argument("--resume", metavar="ID", help="continue a partial report (its id), with one more budget")
    report.add_argument("--json", action="store_true", help="print the whole report as JSON at the end")
    report.add_argument("--pdf", metavar="FILE", type=Path, help="also save the report as a PDF")
    report.add_argument("--markdown", metavar="FILE", type=Path, help="also save the report as Markdown")
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace, settings: Settings) -> int:
    question = (args.question or "").strip()
    if bool(question) == bool(args.resume):
        raise UsageError('Name a question or a report to resume: agent report "Why did delays rise in July?"')
    return asyncio.run(_report_once(args, settings, question))


async def _report_once(args: argparse.Namespace, settings: Settings, question: str) -> int:
    from agent.app import AgentApp
    from agent.llm import LLMConfigError
    from chats.runs import RunRegistry
    from chats.state import ChatState
    from process.running_server import find

    if find(settings) is not None:
        raise UsageError("A server holds the embedded data: ask for the report in its web chat, or stop it first.")
    if problem := settings.missing_model_key():
        raise LLMConfigError(problem)
    app, state = AgentApp.start(settings), ChatState.of(settings)
    runs = RunRegistry(app.runner, state.conversations, max_event_bytes=settings.max_event_bytes)
    try:
        await app.db.ping()
        handle = await (_resumed(runs, args.resume) if args.resume else _started(runs, state, settings, question))
        await _follow(runs, handle, quiet=args.json)
        stored = await state.reports.get(handle.report_id)
    finally:
        await runs.shutdown()
        await app.close()
        state.close()
    if stored is None or stored.report is None:
        print(safe(f"error: the report ended without being written (report {handle.report_id})"), file=sys.stderr)
        return EXIT_FAILED
    await _deliver(args, stored.report, settings)
    return EXIT_OK


async def _started(runs: RunRegistry, state: ChatState, settings: Settings, question: str) -> RunHandle:
    from agent.reports import ReportBudget, ReportRequest
    from chats.audit import Origin
    from chats.people import LOCAL, person_owner

    owner = person_owner(LOCAL)
    conversation = await state.conversations.create_conversation(question, interface="cli", owner=owner)
    request = ReportRequest(budget=ReportBudget.of(settings))
    return runs.start(
        conversation, question, [], platform="cli", interface="cli", report=request, origin=Origin(owner, "cli")
    )


async def _resumed(runs: RunRegistry, report_id: str) -> RunHandle:
    from chats.audiences import Audiences
    from chats.people import LOCAL, Person
    from chats.report_runs import NotResumable, ReportRuns

    if await runs.reports.readable(report_id, Person(id=LOCAL), Audiences()) is None:
        raise UsageError(f"No report {report_id} here.")
    try:
        return await ReportRuns(runs).resume(report_id)
    except NotResumable as exc:
        raise UsageError(f"Report {report_id} cannot be resumed: {exc}.") from None


async def _follow(runs: RunRegistry, handle: RunHandle, *, quiet: bool) -> None:
    """Print each step as it runs (stderr); the report's text is printed whole at the end. Ctrl-C stops the
    run: its report is kept as partial, to resume."""
    from process.terminal import TerminalPrinter

    printer = TerminalPrinter(out=io.StringIO(), steps=sys.stderr, rich=False)  # the streamed text: not shown
    try:
        async for event in runs.follow(handle):
            if not quiet:
                _step_line(event.body)
                await printer(event.body)
    except asyncio.CancelledError:
        if handle.task is not None:
            handle.task.cancel()
            await asyncio.gather(handle.task, return_exceptions=True)
        raise


def _step_line(event: WireEvent) -> None:
    from agent.runner import StepEvent

    if isinstance(event, StepEvent) and event.state == "running":
        used, budget = event.used, event.budget
        print(
            safe(f"▶ step {event.number}: {event.title} ({used.queries}/{budget.queries} queries)"),
            file=sys.stderr,
        )


async def _deliver(args: argparse.Namespace, report: Report, settings: Settings) -> None:
    from agent.reports.markdown import outcome_line, report_markdown

    text = report_markdown(report)
    if args.markdown:
        args.markdown.write_text(text)
    if args.pdf:
        args.pdf.write_bytes(await pdf_of(report, settings))
    if args.json:
        print(json.dumps({"report": report.model_dump(mode="json"), "markdown": text}, ensure_ascii=False, indent=2))
    else:
        print(safe(text), end="")
    print(safe(f"({outcome_line(report)}; report {report.id})"), file=sys.stderr)
    if report.resumable:
        print(f"(agent report --resume {report.id} continues it)", file=sys.stderr)


async def pdf_of(report: Report, settings: Settings) -> bytes:
    """The report's PDF, its charts rendered as Slack's are (a process of their own, with a time limit); a
    chart that cannot be rendered is named instead."""
    from agent.chart_images import render_pngs
    from agent.reports.pdf import report_pdf

    images = await render_pngs(report.charts, timeout_s=settings.chart_render_timeout_s)
    return report_pdf(report, chart_images=images)
