"""A report as one Markdown file (the download beside the PDF, `agent report`'s output): its sections in
order, each figure the check could not verify marked where it stands with a footnote saying why, its charts
as images (when the caller has their files) or named, and the queries it rests on at the end.

The sections are the model's Markdown as it wrote them; what this adds (headings, the outcome line, marks,
footnotes, the queries) is the program's."""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.reports.model import FigureMark, Report, ReportOutcome

SECTION_TITLES = {
    "summary": "Summary",
    "findings": "Findings",
    "method": "How this was found",
    "caveats": "Caveats and what remains uncertain",
    "unanswered": "What could not be answered",
    "remaining": "What remains",
}
OUTCOME_WORDS = {
    ReportOutcome.COMPLETE: "Complete",
    ReportOutcome.PARTIAL: "Partial",
    ReportOutcome.CANNOT_ANSWER: "Cannot answer",
}


def outcome_line(report: Report) -> str:
    """One line: how the report ended, what it rests on and how its figures fared."""
    parts = [OUTCOME_WORDS[report.outcome]]
    if report.outcome is ReportOutcome.PARTIAL:
        parts[0] += f": stopped at its {(report.stopped_by or 'steps').replace('_', ' ')} limit"
    ran = sum(1 for q in report.queries if not q.reused_from)
    parts.append(f"{len(report.findings)} finding{'s' if len(report.findings) != 1 else ''}")
    parts.append(f"{ran} quer{'ies' if ran != 1 else 'y'}")
    if report.figures is not None and report.figures.checked:
        parts.append(f"{report.figures.verified} of {report.figures.checked} figures verified")
    elif report.figures is not None and report.figures.unchecked:
        parts.append(f"figures not checked: {report.figures.unchecked}")
    return " · ".join(parts)


def partly_line(report: Report) -> str | None:
    """What the figure check did not reach, when it checked only some figures (`FigureReport.partly`)."""
    if report.figures is None or not report.figures.partly:
        return None
    return f"Not every figure was checked: {report.figures.partly}."


def one_line(text: str) -> str:
    """Text the model or the asker wrote, set in a heading: its newlines would start sections of its own."""
    return " ".join(text.split())


def fence(code: str) -> str:
    """A backtick fence longer than any run of backticks in `code`, so nothing in it can close it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def section_texts(report: Report) -> dict[str, str]:
    """The sections that have text, by name, in reading order (findings apart: they are a list)."""
    texts = {
        "summary": report.summary,
        "method": report.method,
        "caveats": report.caveats,
        "unanswered": report.unanswered,
        "remaining": report.remaining,
    }
    return {name: text for name, text in texts.items() if text.strip()}


def marked(text: str, marks: list[FigureMark], notes: list[FigureMark]) -> str:
    """`text` with each mark's figure followed by its footnote's reference (the mark joins `notes`)."""
    for mark in sorted(marks, key=lambda m: m.start, reverse=True):
        if text[mark.start : mark.end] != mark.text:
            continue
        notes.append(mark)
        text = f"{text[: mark.end]}[^f{len(notes)}]{text[mark.end :]}"
    return text


def report_markdown(report: Report, *, chart_files: Mapping[str, str] | None = None) -> str:
    """The whole report. `chart_files`: a chart's id to the path its image is saved under, for an image
    link; without it a chart is named by its title."""
    notes: list[FigureMark] = []
    lines = [f"# {one_line(report.question)}", "", f"_{outcome_line(report)}_", ""]
    if partly := partly_line(report):
        lines += [f"_{partly}_", ""]
    sections = section_texts(report)
    order = ["summary", "findings", "method", "caveats", "unanswered", "remaining"]
    for name in order:
        if name == "findings":
            lines += _findings(report, notes, chart_files or {})
        elif name in sections:
            lines += [f"## {SECTION_TITLES[name]}", "", marked(sections[name], report.marks.get(name, []), notes), ""]
    if notes:
        lines += ["## Figures not verified", ""]
        lines += [
            f'[^f{n}]: "{mark.text}": {mark.reason or "no cited cell gives it"}' for n, mark in enumerate(notes, 1)
        ]
        lines.append("")
    lines += _queries(report)
    return "\n".join(lines).rstrip() + "\n"


def _findings(report: Report, notes: list[FigureMark], chart_files: Mapping[str, str]) -> list[str]:
    if not report.findings:
        return []
    lines = [f"## {SECTION_TITLES['findings']}", ""]
    for number, finding in enumerate(report.findings, 1):
        body = marked(finding.text, finding.marks, notes).replace("\n", "\n   ")
        lines.append(f"{number}. {body}")
        chart = report.chart(finding.chart)
        if chart is not None:
            title = marked(chart.title, report.caption_marks.get(chart.id, []), notes) or chart.describe()
            image = chart_files.get(chart.id)
            lines.append(f"   ![{chart.id}: {title}]({image})" if image else f"   _Chart {chart.id}: {title}_")
    return [*lines, ""]


def _queries(report: Report) -> list[str]:
    if not report.queries:
        return []
    lines = ["## Queries", ""]
    for query in report.queries:
        sql = query.sql.strip()
        lines += [f"### {query.id}: {one_line(query.question)}", "", f"{fence(sql)}sql", sql, fence(sql), ""]
        if query.reused_from:
            lines += [f"The same as {query.reused_from}.", ""]
        elif query.error:
            lines += [f"Failed: {query.error}", ""]
        else:
            lines += [f"{query.row_count:,} row{'s' if query.row_count != 1 else ''}.", ""]
    return lines
