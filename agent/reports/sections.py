"""The report as the model wrote it (Markdown under the headings prompts/report/request.md asks for), read
back into its sections, each with where it starts in the text: the figure check's offsets are offsets in
that text, so a figure still unverified is marked in the section that holds it.

Headings are matched by their words, not their exact spelling (`## Caveats and uncertainty`,
`### How this was found`); text before the first heading is the summary. Findings are the top-level list
items of their section (or its paragraphs, when it has no list), each with its `[Qn]` citations and the
chart it names (`(chart C2)`), which is taken out of its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent import linear_re

SECTIONS = ("summary", "findings", "method", "caveats", "unanswered", "remaining")
# The words that name each section in a heading, first match wins (so "what remains uncertain" is a caveat).
_HEADING_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unanswered", ("could not", "cannot", "can't", "unanswered", "missing", "not answered")),
    ("caveats", ("caveat", "uncertain", "limitation")),
    ("remaining", ("remain", "next step", "still to do", "left to do")),
    ("method", ("how this was found", "how it was found", "method", "approach", "how we found")),
    ("findings", ("finding",)),
    ("summary", ("summary", "answer", "in short", "overview")),
)
_HEADING = linear_re.compile(r"^#{1,4}[ \t]+([^\n]*)$", multiline=True)
_ITEM = linear_re.compile(r"^(?:[-*+]|\d{1,3}[.)])[ \t]+", multiline=True)
_CITATION = linear_re.compile(r"\[Q(\d{1,6})\]")
_CHART = linear_re.compile(r"[ \t]*\((?:see )?chart (C\d{1,3})\)|[ \t]*\[(C\d{1,3})\]", ignore_case=True)


@dataclass(frozen=True)
class Span:
    """A piece of the report's text: `text` is what a reader sees of it, `start` where it begins."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class WrittenFinding:
    span: Span
    citations: list[str]
    chart: str | None


@dataclass
class WrittenReport:
    sections: dict[str, Span] = field(default_factory=dict)
    findings: list[WrittenFinding] = field(default_factory=list)

    def text_of(self, name: str) -> str:
        span = self.sections.get(name)
        return span.text if span is not None else ""


def section_of(heading: str) -> str | None:
    words = " ".join(heading.lower().strip(" #*:").split())
    for name, cues in _HEADING_WORDS:
        if any(cue in words for cue in cues):
            return name
    return None


def read_report(text: str) -> WrittenReport:
    """The sections of `text` (a heading this does not know joins the section before it)."""
    written = WrittenReport()
    bounds: list[tuple[str, int, int]] = []  # (section, body start, body end)
    current, body_start = "summary", 0
    for match in _HEADING.finditer(text):
        name = section_of(match.group(1))
        if name is None:
            continue
        bounds.append((current, body_start, match.start()))
        current, body_start = name, match.end()
    bounds.append((current, body_start, len(text)))
    for name, start, end in bounds:
        span = _trimmed(text, start, end)
        if span.text and name not in written.sections:
            written.sections[name] = span
    if (findings := written.sections.get("findings")) is not None:
        written.findings = _findings(text, findings)
    return written


def citations_of(text: str) -> list[str]:
    """The Q ids `text` cites, in order of first mention."""
    seen: dict[str, None] = {}
    for number in _CITATION.findall(text):
        seen.setdefault(f"Q{int(number)}", None)
    return list(seen)


def _findings(text: str, section: Span) -> list[WrittenFinding]:
    body = section.text
    starts = [m.start() for m in _ITEM.finditer(body)]
    if not starts:  # no list: each paragraph is a finding
        starts, position = [], 0
        for paragraph in body.split("\n\n"):
            if paragraph.strip():
                starts.append(body.index(paragraph, position))
            position += len(paragraph) + 2
    found = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(body)
        span = _trimmed(text, section.start + start, section.start + end)
        item = _ITEM.match(span.text)
        offset = item.end() if item else 0
        raw = span.text[offset:]
        chart_match = _CHART.search(raw)
        chart = (chart_match.group(1) or chart_match.group(2)).upper() if chart_match else None
        shown = _CHART.sub("", raw).strip()
        found.append(WrittenFinding(Span(shown, span.start + offset, span.end), citations_of(shown), chart))
    return [f for f in found if f.span.text]


def _trimmed(text: str, start: int, end: int) -> Span:
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    stripped = piece.strip()
    return Span(stripped, start + lead, start + lead + len(stripped))
