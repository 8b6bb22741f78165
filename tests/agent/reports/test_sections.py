"""The report as the model wrote it, read back into its sections by their headings' words, each finding
with its citations and chart, at offsets in the text the figure check's offsets index."""

from __future__ import annotations

from agent.reports.sections import citations_of, read_report, section_of

TEXT = """Delays rose in July [Q1].

### Key findings
1. July averaged 21.7 minutes [Q1] (see chart C2)
2. JFK was worst [Q2], [Q1].
   Its delays grew most.

## Caveats and what remains uncertain
Weather was not checked.

## An aside the reader does not need
Still a caveat.

## What we could not answer
Causes: the data has none.
"""


def test_sections_are_found_by_their_words_and_findings_keep_their_place() -> None:
    written = read_report(TEXT)
    assert set(written.sections) == {"summary", "findings", "caveats", "unanswered"}
    assert written.text_of("summary") == "Delays rose in July [Q1]."
    assert written.text_of("caveats") == (
        "Weather was not checked.\n\n## An aside the reader does not need\nStill a caveat."
    )  # a heading it does not know stays in the section before it
    first, second = written.findings
    assert first.span.text == "July averaged 21.7 minutes [Q1]" and first.chart == "C2"
    assert TEXT[first.span.start : first.span.start + 13] == "July averaged"
    assert second.citations == ["Q2", "Q1"] and second.span.text.endswith("Its delays grew most.")


def test_paragraphs_are_findings_when_there_is_no_list_and_headings_by_their_words() -> None:
    written = read_report("## Findings\nOne [Q1].\n\nTwo [Q3] [C1].\n")
    assert [(f.span.text, f.chart) for f in written.findings] == [("One [Q1].", None), ("Two [Q3].", "C1")]
    assert section_of("How this was found") == "method" and section_of("What remains") == "remaining"
    assert section_of("What remains uncertain") == "caveats" and section_of("Appendix") is None
    assert citations_of("[Q2] then [Q10] and [Q2]") == ["Q2", "Q10"]
