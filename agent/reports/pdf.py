"""A report as a PDF (the attachment Slack posts, the web page's download, `agent report --pdf`), drawn
with fpdf2 (pure Python, no browser): the same sections as the Markdown, each unverified figure in red
with a numbered note saying why, charts as the PNG images the caller rendered (the Slack adapter's
renderer, in a process of its own: this module renders no chart), and the queries at the end.

Text is set in DejaVu Sans when the system has it (Debian's fonts-dejavu-core), so any character the
model writes prints; without it in Helvetica, whose Latin-1 takes the common typographic characters
replaced and the rest as '?'.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

from fpdf import FPDF

from agent.reports.markdown import SECTION_TITLES, outcome_line, partly_line, section_texts
from agent.reports.model import FigureMark, Report

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/dejavu"))
_LATIN = str.maketrans({"—": "-", "–": "-", "“": '"', "”": '"', "‘": "'", "’": "'", "…": "...", "≈": "~", "·": "-"})
RED, INK, GREY = (176, 0, 32), (20, 20, 20), (110, 110, 110)
LINE_MM = 5.5


class _Document(FPDF):
    def __init__(self, title: str) -> None:
        super().__init__(format="A4")
        self.set_margins(18, 18, 18)
        self.set_auto_page_break(auto=True, margin=18)
        self.set_title(title[:200])
        self.set_creator("clickhouse-analyst")
        self.unicode = _add_fonts(self)
        self.family = "DejaVu" if self.unicode else "Helvetica"

    def text_of(self, text: str) -> str:
        if self.unicode:
            return text
        return text.translate(_LATIN).encode("latin-1", "replace").decode("latin-1")

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font(self.family, "", 8)
        self.set_text_color(*GREY)
        self.cell(0, 6, f"{self.page_no()}", align="C")


def report_pdf(report: Report, *, chart_images: Mapping[str, bytes] | None = None) -> bytes:
    """The report's PDF. `chart_images`: each chart's PNG by its id (a chart without one is named)."""
    pdf = _Document(report.question)
    pdf.add_page()
    _heading(pdf, report.question, size=17)
    _paragraph(pdf, outcome_line(report), size=9, colour=GREY)
    if partly := partly_line(report):
        _paragraph(pdf, partly, size=9, colour=RED)
    notes: list[FigureMark] = []
    sections = section_texts(report)
    for name in ("summary", "findings", "method", "caveats", "unanswered", "remaining"):
        if name == "findings" and report.findings:
            _heading(pdf, SECTION_TITLES[name])
            for number, finding in enumerate(report.findings, 1):
                _marked(pdf, f"{number}. ", finding.text, finding.marks, notes)
                image = (chart_images or {}).get(finding.chart or "")
                chart = report.chart(finding.chart)
                if chart is not None:
                    title = _caption(chart.title, report.caption_marks.get(chart.id, []), notes)
                    _chart(pdf, image, f"{chart.id}: {title or chart.describe()}")
        elif name in sections:
            _heading(pdf, SECTION_TITLES[name])
            _marked(pdf, "", sections[name], report.marks.get(name, []), notes)
    if notes:
        _heading(pdf, "Figures not verified")
        for number, mark in enumerate(notes, 1):
            _paragraph(pdf, f'[{number}] "{mark.text}": {mark.reason or "no cited cell gives it"}', size=9)
    _queries(pdf, report)
    return bytes(pdf.output())


def _add_fonts(pdf: FPDF) -> bool:
    for folder in FONT_DIRS:
        regular, bold, mono = folder / "DejaVuSans.ttf", folder / "DejaVuSans-Bold.ttf", folder / "DejaVuSansMono.ttf"
        if regular.is_file() and bold.is_file():
            pdf.add_font("DejaVu", "", str(regular))
            pdf.add_font("DejaVu", "B", str(bold))
            if mono.is_file():
                pdf.add_font("DejaVuMono", "", str(mono))
            return True
    return False


def _heading(pdf: _Document, text: str, *, size: float = 13) -> None:
    pdf.ln(2)
    pdf.set_font(pdf.family, "B", size)
    pdf.set_text_color(*INK)
    pdf.multi_cell(0, size * 0.5, pdf.text_of(text), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(1.5)


def _paragraph(pdf: _Document, text: str, *, size: float = 10.5, colour: tuple[int, int, int] = INK) -> None:
    pdf.set_font(pdf.family, "", size)
    pdf.set_text_color(*colour)
    pdf.multi_cell(0, LINE_MM, pdf.text_of(text), new_x="LMARGIN", new_y="NEXT", align="L")
    pdf.ln(1)


def _marked(pdf: _Document, lead: str, text: str, marks: list[FigureMark], notes: list[FigureMark]) -> None:
    """`text` flowed as a paragraph, each marked figure in red followed by its note's number."""
    pdf.set_font(pdf.family, "", 10.5)
    pdf.set_text_color(*INK)
    position = 0
    pdf.write(LINE_MM, pdf.text_of(lead))
    for mark in sorted(marks, key=lambda m: m.start):
        if mark.start < position or text[mark.start : mark.end] != mark.text:
            continue
        notes.append(mark)
        pdf.write(LINE_MM, pdf.text_of(_plain(text[position : mark.start])))
        pdf.set_text_color(*RED)
        pdf.write(LINE_MM, pdf.text_of(f"{mark.text} [{len(notes)}]"))
        pdf.set_text_color(*INK)
        position = mark.end
    pdf.write(LINE_MM, pdf.text_of(_plain(text[position:])))
    pdf.ln(LINE_MM + 1.5)


def _chart(pdf: _Document, image: bytes | None, caption: str) -> None:
    if image is not None:
        width = pdf.epw * 0.85
        pdf.image(io.BytesIO(image), x=pdf.l_margin + (pdf.epw - width) / 2, w=width)
    _paragraph(pdf, f"Chart {caption}", size=8.5, colour=GREY)


def _queries(pdf: _Document, report: Report) -> None:
    if not report.queries:
        return
    _heading(pdf, "Queries")
    for query in report.queries:
        pdf.set_font(pdf.family, "B", 9.5)
        pdf.set_text_color(*INK)
        pdf.multi_cell(0, 5, pdf.text_of(f"{query.id}: {query.question}"), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font(_mono(pdf), "", 8)
        pdf.set_text_color(*GREY)
        pdf.multi_cell(0, 4, pdf.text_of(query.sql.strip()), new_x="LMARGIN", new_y="NEXT")
        outcome = f"Failed: {query.error}" if query.error else f"{query.row_count:,} rows"
        _paragraph(pdf, f"The same as {query.reused_from}." if query.reused_from else outcome, size=8.5, colour=GREY)


def _caption(title: str, marks: list[FigureMark], notes: list[FigureMark]) -> str:
    """A chart's title with each unverified figure followed by its note's number."""
    for mark in sorted(marks, key=lambda m: m.start, reverse=True):
        if title[mark.start : mark.end] == mark.text:
            notes.append(mark)
            title = f"{title[: mark.end]} [{len(notes)}]{title[mark.end :]}"
    return title


def _mono(pdf: _Document) -> str:
    if "dejavumono" in pdf.fonts:
        return "DejaVuMono"
    return pdf.family if pdf.unicode else "Courier"


def _plain(text: str) -> str:
    """Markdown's emphasis marks, which a PDF paragraph would print as they are."""
    return text.replace("**", "").replace("__", "").replace("`", "")
