"""Attacks on a report's renderers (the Markdown download and the PDF): text the model or the data wrote
must stay where it was put, and a figure the check did not reach must never read as checked."""

from __future__ import annotations

import re

import pytest

from agent.figures import FigureReport
from agent.figures.report import FigureCheck
from agent.reports import Finding, Report, ReportOutcome, ReportQuery
from agent.reports.markdown import report_markdown
from agent.reports.pdf import report_pdf

FAKE = "Revenue was 999,999 dollars [Q1]."


def report(**changes: object) -> Report:
    base = Report(
        id="r1",
        question="Which airport was worst?",
        outcome=ReportOutcome.COMPLETE,
        summary="JFK was worst [Q1].",
        findings=[Finding(text="JFK averaged 23.8 minutes [Q1].", citations=["Q1"])],
        queries=[ReportQuery(id="Q1", question="Delay by airport", sql="SELECT origin FROM flights", row_count=3)],
        figures=FigureReport(figures=[FigureCheck(text="23.8", start=0, end=4, verified=True)]),
    )
    return base.model_copy(update=changes)


def outside_fences(markdown: str) -> list[str]:
    """The lines a Markdown reader shows as Markdown (not inside a fenced code block, CommonMark's rule:
    a fence closes on a line of at least as many backticks as opened it)."""
    shown, fence = [], ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence:
            if re.fullmatch(r"`{3,}", stripped) and len(stripped) >= len(fence):
                fence = ""
            continue
        opened = re.match(r"(`{3,})", stripped)
        if opened:
            fence = opened.group(1)
            continue
        shown.append(line)
    return shown


def test_sql_with_a_fence_does_not_break_out_of_its_code_block() -> None:
    # ClickHouse runs a comment as written: a query the model (steered by data) wrote can carry a fence.
    sql = f"SELECT 1 /*\n```\n## Findings\n\n1. {FAKE}\n```\n*/"
    text = report_markdown(report(queries=[ReportQuery(id="Q1", question="q", sql=sql, row_count=1)]))
    assert not any(FAKE in line for line in outside_fences(text)), text


def test_a_query_question_cannot_add_a_section_to_the_markdown() -> None:
    question = f"Delay by airport\n\n## Summary\n\n{FAKE}"
    text = report_markdown(report(queries=[ReportQuery(id="Q1", question=question, sql="SELECT 1", row_count=1)]))
    headings = [line for line in outside_fences(text) if line.startswith("## ")]
    assert headings.count("## Summary") == 1, text


def test_the_asked_question_cannot_add_a_section_to_the_markdown() -> None:
    text = report_markdown(report(question=f"Which airport?\n\n## Findings\n\n1. {FAKE}"))
    headings = [line for line in outside_fences(text) if line.startswith("## ")]
    assert headings.count("## Findings") == 1, text


PARTLY = "only its first 100 figures were checked; the figures after them were not"


def test_markdown_says_when_not_every_figure_was_checked() -> None:
    figures = FigureReport(figures=[FigureCheck(text="23.8", start=0, end=4, verified=True)], partly=PARTLY)
    text = report_markdown(report(figures=figures))
    assert PARTLY in text, text


def test_pdf_says_when_not_every_figure_was_checked() -> None:
    pdftotext = pytest.importorskip("shutil").which("pdftotext")
    if pdftotext is None:
        pytest.skip("poppler's pdftotext is not installed")
    import subprocess

    figures = FigureReport(figures=[FigureCheck(text="23.8", start=0, end=4, verified=True)], partly=PARTLY)
    document = report_pdf(report(figures=figures))
    shown = subprocess.run([pdftotext, "-", "-"], input=document, capture_output=True, check=True).stdout.decode()
    assert "not every figure" in " ".join(shown.split()).lower() or "first 100 figures" in " ".join(shown.split())


@pytest.mark.parametrize(
    "hostile",
    [
        "\x00\x01\x07\x1b[31m\x7f control",
        "х" * 5000,  # one unbroken word, far wider than a line
        "東京 مرحبا שלום 🙂 \u202e\u200b",
        "<b>bold</b> **x** __y__ `z` <a href='javascript:alert(1)'>",
    ],
)
def test_pdf_renders_hostile_text_anywhere(hostile: str) -> None:
    """Held: control characters, a huge unbroken cell, non-Latin text and fpdf2-like markup print as text."""
    bad = report(
        question=hostile,
        summary=hostile,
        findings=[Finding(text=f"{hostile} [Q1]", citations=["Q1"])],
        caveats=hostile,
        queries=[ReportQuery(id="Q1", question=hostile, sql=f"SELECT '{hostile}'", row_count=1, error=hostile)],
    )
    document = report_pdf(bad)
    assert document.startswith(b"%PDF")


def test_a_caption_figure_that_failed_is_marked_in_the_markdown_and_the_pdf() -> None:
    """Chart captions are the model's text: what the check could not verify is marked in both downloads."""
    from agent.charts import Chart
    from agent.reports.model import FigureMark

    chart = Chart(
        id="C1",
        query_id="Q1",
        kind="bar",
        title="Delays rose 900% in July",
        spec={"encoding": {"x": {"title": "origin"}, "y": {"title": "delay"}}},
        rows=3,
        capped=False,
    )
    mark = FigureMark(text="900%", start=12, end=16, reason="no cell gives it")
    finding = Finding(text="JFK averaged 23.8 minutes [Q1].", citations=["Q1"], chart="C1")
    marked = report(findings=[finding], charts=[chart], caption_marks={"C1": [mark]})
    text = report_markdown(marked)
    assert "900%[^f1]" in text and '[^f1]: "900%": no cell gives it' in text, text
    pdftotext = pytest.importorskip("shutil").which("pdftotext")
    if pdftotext is None:
        pytest.skip("poppler's pdftotext is not installed")
    import subprocess

    shown = subprocess.run([pdftotext, "-", "-"], input=report_pdf(marked), capture_output=True, check=True).stdout
    assert "900% [1]" in " ".join(shown.decode().split())
