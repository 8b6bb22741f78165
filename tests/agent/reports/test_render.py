"""A report rendered: Markdown with its sections in order, unverified figures marked with a footnote, charts
as image links and the queries at the end; the PDF with the same, read back by poppler's pdftotext."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from agent.charts import Chart
from agent.figures import FigureReport
from agent.figures.report import FigureCheck
from agent.reports import FigureMark, Finding, Report, ReportOutcome, ReportQuery
from agent.reports import pdf as pdf_module
from agent.reports.markdown import report_markdown
from agent.reports.pdf import report_pdf

CHART = Chart(
    id="C1",
    query_id="Q2",
    kind="bar",
    title="July delay by airport",
    spec={"encoding": {"x": {"title": "origin"}, "y": {"title": "avg_delay"}}},
    rows=3,
    capped=False,
)


def sample() -> Report:
    lga = "LGA averaged 25 minutes of delay in July [Q2]."
    return Report(
        id="r1",
        question="Why did departure delays rise in July?",
        outcome=ReportOutcome.COMPLETE,
        summary="Delays rose from 20.8 to 21.7 minutes ≈ 4% [Q1].",
        findings=[
            Finding(text="JFK was worst at 23.8 minutes [Q2].", citations=["Q2"], chart="C1"),
            Finding(
                text=lga,
                citations=["Q2"],
                marks=[FigureMark(text="25 minutes", start=13, end=23, reason="no cell of Q2 gives it")],
            ),
        ],
        method="Q1 compared the months; Q2 split July by airport.",
        caveats="Weather was not checked.",
        unanswered="Nothing.",
        queries=[
            ReportQuery(
                id="Q1",
                question="Delay by month",
                sql="SELECT month, avg(dep_delay) FROM flights GROUP BY month",
                row_count=2,
            ),
            ReportQuery(
                id="Q2",
                question="July by airport",
                sql="SELECT origin, avg(dep_delay) FROM flights GROUP BY origin",
                row_count=3,
            ),
        ],
        charts=[CHART],
        figures=FigureReport(
            figures=[
                FigureCheck(text="20.8", start=0, end=4, verified=True),
                FigureCheck(text="25 minutes", start=0, end=10, verified=False, reason="no cell of Q2 gives it"),
            ]
        ),
    )


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (400, 200), (70, 130, 180)).save(out, format="PNG")
    return out.getvalue()


def test_markdown_has_the_sections_in_order_marks_with_footnotes_charts_and_queries() -> None:
    text = report_markdown(sample(), chart_files={"C1": "charts/C1.png"})
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Summary",
        "## Findings",
        "## How this was found",
        "## Caveats and what remains uncertain",
        "## What could not be answered",
        "## Figures not verified",
        "## Queries",
    ]
    assert "_Complete · 2 findings · 2 queries · 1 of 2 figures verified_" in text
    assert "2. LGA averaged 25 minutes[^f1] of delay in July [Q2]." in text
    assert '[^f1]: "25 minutes": no cell of Q2 gives it' in text
    assert "   ![C1: July delay by airport](charts/C1.png)" in text
    assert "### Q2: July by airport\n\n```sql\nSELECT origin" in text
    assert "_Chart C1: July delay by airport_" in report_markdown(sample())  # no file: named


def text_of(pdf: bytes, tmp_path: Path) -> str:
    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils is not installed (.ci/run installs it)")
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf)
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout


def test_the_pdf_has_the_sections_the_mark_and_the_chart_image(tmp_path: Path) -> None:
    pdf = report_pdf(sample(), chart_images={"C1": png()})
    assert pdf.startswith(b"%PDF-") and pdf.count(b"/Subtype /Image") == 1
    text = " ".join(text_of(pdf, tmp_path).split())
    for expected in ("Summary", "Findings", "How this was found", "Figures not verified", "Queries"):
        assert expected in text
    assert "25 minutes [1]" in text and '[1] "25 minutes": no cell of Q2 gives it' in text
    assert "≈ 4%" in text or "~ 4%" in text
    assert "Chart C1: July delay by airport" in text


def test_without_a_unicode_font_the_pdf_still_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf_module, "FONT_DIRS", ())
    text = " ".join(text_of(report_pdf(sample()), tmp_path).split())
    assert "21.7 minutes ~ 4% [Q1]" in text and "Chart C1" in text
