"""What `agent ask` prints comes from the model and from data anyone may have written: nothing in it may
drive the terminal (escape sequences, rich markup, links, bidirectional overrides), at a terminal or in a pipe."""

from __future__ import annotations

import asyncio
import io

import pytest

from agent.db.result import QueryResult
from agent.runner import AnswerEvent, ExecutedQuery, ExecutingEvent, ResultEvent, RunResult, ThinkingEvent
from chats.runs import done_event
from process.terminal import TerminalPrinter

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
MARKUP = "[link=https://evil.example]click[/link] [/oops]"


def _run(*, rich: bool) -> str:
    result = QueryResult(
        query_id="q",
        sql="SELECT 1",
        columns=[f"n{MARKUP}", "s"],
        types=["UInt8", "String"],
        rows=[["1", f"cell{ESCAPES}\u202eevil"]],
    )
    query = ExecutedQuery(id="Q1", question=f"Which {MARKUP}?", sql=f"SELECT 1 -- {ESCAPES}", result=result)
    out, err = io.StringIO(), io.StringIO()
    printer = TerminalPrinter(out, err, rich=rich)

    async def play() -> None:
        await printer(ThinkingEvent(text=f"thinking {ESCAPES}"))
        await printer(AnswerEvent(text=f"The answer {ESCAPES} [site](https://evil.example) [Q1]."))
        await printer(ExecutingEvent(query_id="Q1", question=query.question, sql=query.sql))
        await printer(ResultEvent.of(query, max_bytes=100_000))
        await printer(done_event(RunResult(question="q", answer="The answer", queries=[query])))

    asyncio.run(play())
    return out.getvalue() + err.getvalue()


@pytest.mark.parametrize("rich", [True, False], ids=["terminal", "pipe"])
def test_nothing_from_the_model_or_the_data_drives_the_terminal(rich: bool) -> None:
    text = _run(rich=rich)
    assert "\x1b]" not in text and "\x07" not in text and "\x9b" not in text and "\u202e" not in text
    assert "\x1b[2J" not in text and "\x1b]8;" not in text  # no clear screen, no OSC 8 link
    assert "\\x1b]0;pwned\\x07" in text and "\\u202e" in text  # shown, visibly
    if rich:
        # rich's own styling is the only escape left; the markup in a column name or question is literal
        assert "[link=https://evil.example]click[/link]" in text
        assert "https://evil.example" in text  # a Markdown link shows its target instead of hiding it


def test_figures_past_the_checks_bounds_are_said_to_be_unchecked() -> None:
    from agent.figures import FigureReport

    partly = "only its first 100 figures were checked; the figures after them were not"
    out, err = io.StringIO(), io.StringIO()
    printer = TerminalPrinter(out, err, rich=False)
    result = RunResult(question="q", answer="Many figures.", figures=FigureReport(partly=partly))
    asyncio.run(printer(done_event(result)))
    assert f"⚠ Not every figure was checked: {partly}" in out.getvalue() + err.getvalue()
