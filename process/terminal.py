"""Prints a run's events to a terminal as they happen (for `agent ask` and `agent chat`).

The answer goes to `out` (stdout); the steps (thinking, SQL, results, previews, follow-ups, the receipt)
go to `steps`: stdout too at a terminal, stderr otherwise, so `agent ask ... > answer.md` holds the
answer alone. Each stream is rendered by rich when it is a terminal (the answer's Markdown as it
streams, preview rows as tables) and plain otherwise (the Markdown as written, rows tab-separated, no
escape codes). The events come through the run registry or a server's stream; what the printer needs of
them at the end (each query's preview rows, the follow-ups) it reads from the run's `RunView`
(chats/run_view.py), the fold every adapter reads.

A clarification's options are in its answer already: they are not listed again, only numbered choices
are remembered (`choices`) for `agent chat` to pick by number, as are follow-ups.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from agent.runner import (
    PREVIEW_ROWS,
    AnswerEvent,
    ChartEvent,
    Classification,
    ErrorEvent,
    ExecutingEvent,
    FallbackEvent,
    FinalAnswer,
    FinishedEvent,
    Outcome,
    ResultEvent,
    ThinkingEvent,
    WireEvent,
)
from chats.run_view import RunView
from process.untrusted import safe

_REFRESH_S = 0.1  # the streamed answer is re-rendered at most this often


class TerminalPrinter:
    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        *,
        rich: bool | None = None,
        steps: TextIO | None = None,
        hint: str = "",
    ) -> None:
        """`steps`: where the steps go (default: `out` at a terminal, else `err`). `rich`: force rendering on
        or off for both streams. `hint`: how to reply to a clarification, printed after it."""
        self._out, self._err = out or sys.stdout, err or sys.stderr
        self._steps = steps or (self._out if self._out.isatty() else self._err)
        self._rich = self._out.isatty() if rich is None else rich
        self._rich_steps = self._steps.isatty() if rich is None else rich
        self._console = Console(file=self._out, force_terminal=self._rich, highlight=False, emoji=False)
        self._step_console = Console(file=self._steps, force_terminal=self._rich_steps, highlight=False, emoji=False)
        self._hint = hint
        self._text = ""
        self._in_answer = False
        self._live: Live | None = None
        self._painted = 0.0
        self.view = RunView()  # the run so far: its queries' previews and follow-ups are read at the end
        self.choices: list[str] = []  # what a number picks in `agent chat`: a clarification's options, follow-ups
        self.outcome: Outcome | None = None

    async def __call__(self, event: WireEvent) -> None:
        self.view.apply(event)
        handler = getattr(self, f"_{event.type}", None)
        if handler is not None:
            handler(event)
            self._out.flush()
            self._steps.flush()

    # --- the steps ---

    def _line(self, text: str, style: str = "") -> None:
        self._end_answer()
        if self._rich_steps:
            self._step_console.print(Text(safe(text), style=style))
        else:
            self._steps.write(safe(text) + "\n")

    def _thinking(self, event: ThinkingEvent) -> None:
        self._line(f"🧠 {event.text}", "dim")

    def _executing(self, event: ExecutingEvent) -> None:
        self._line(f"⚡ {event.query_id} {event.question}", "bold")
        sql = safe(event.sql.strip())
        if self._rich_steps:
            self._step_console.print(Syntax(sql, "sql", theme="ansi_dark", background_color="default"), style="dim")
        else:
            self._steps.write("\n".join(f"     {line}" for line in sql.splitlines()) + "\n")

    def _result(self, event: ResultEvent) -> None:
        if event.error:
            hint = f"\n     hint: {event.hint}" if event.hint else ""
            self._line(f"   ✗ {event.query_id} failed: {event.error.splitlines()[0][:200]}{hint}", "red")
            return
        more = "+" if event.has_more else ""
        reused = f", same as {event.reused_from}" if event.reused_from else ""
        rows = f"{event.row_count}{more} row{'' if event.row_count == 1 and not more else 's'}"
        self._line(f"   ✓ {event.query_id}: {rows} in {event.elapsed_ms} ms{reused}")

    def _chart(self, event: ChartEvent) -> None:
        self._line(f"📈 {event.chart.id}: {event.chart.describe()} (the spec is in --json; the web chat draws it)")

    def _fallback(self, event: FallbackEvent) -> None:
        self._line(f"↪ {event.note}", "dim")

    def _error(self, event: ErrorEvent) -> None:
        self._end_answer()
        self._err.write(f"error: {safe(event.message)}\n")

    # --- the answer, as it streams ---

    def _answer(self, event: AnswerEvent) -> None:
        if event.restart:
            if self._in_answer and not self._rich:
                self._out.write("\n(restarting the answer)\n")
            self._text = ""
            if self._live is not None:
                self._live.update(Text(""), refresh=True)
            self._in_answer = self._in_answer and self._rich
            return
        self._text += event.text
        if not self._rich:
            if not self._in_answer and self._steps is self._out:
                self._out.write("\n")
            self._in_answer = True
            self._out.write(safe(event.text))
            return
        if self._live is None:
            self._console.print()
            self._live = Live(console=self._console, auto_refresh=False, transient=False)
            self._live.start()
        self._in_answer = True
        if time.monotonic() - self._painted >= _REFRESH_S:
            self._paint()

    def _paint(self) -> None:
        if self._live is not None:
            # No terminal hyperlinks: a link shows its target, as the web chat's does on hover.
            self._live.update(Markdown(safe(self._text), hyperlinks=False), refresh=True)
            self._painted = time.monotonic()

    def _end_answer(self) -> None:
        if self._live is not None:
            self._paint()
            self._live.stop()
            self._live = None
        elif self._in_answer:
            self._out.write("\n")
        self._in_answer = False

    # --- the end: the evidence and the receipt ---

    def _done(self, event: FinishedEvent) -> None:
        self._end_answer()
        result = event.result
        if result is None:  # the server failed before it had a result; its error was printed
            self.outcome = Outcome.ERROR
            return
        self.outcome = result.outcome
        if result.outcome is Outcome.CANCELLED:
            return  # nothing answered: no evidence, no receipt (the command says it was interrupted)
        self._previews()
        self._figures(result)
        self._next_steps(result.classification)
        if result.receipt is not None:
            self._line("\n" + result.receipt.line(), "dim")

    def _previews(self) -> None:
        for query in self.view.queries.values():
            if query.state == "result" and query.columns and not query.reused_from:
                rows = [[_json_cell(cell) for cell in row] for row in query.rows]
                title = f"{query.query_id} {query.question}"
                self._table(title, query.columns, rows, query.row_count, query.has_more)

    def _figures(self, result: FinalAnswer) -> None:
        if result.figures is not None and result.figures.unchecked:
            self._line(f"\n⚠ Figures not checked: {result.figures.unchecked}", "yellow")
        elif result.figures is not None and result.figures.unverified:
            self._line(f"\n⚠ {result.figures.unverified} figure(s) match nothing in the results they cite:", "yellow")
            for figure in result.figures.failures():
                self._line(f"  • {figure.text}: {figure.reason}", "yellow")
        if result.figures is not None and result.figures.partly:
            self._line(f"\n⚠ Not every figure was checked: {result.figures.partly}", "yellow")

    def _next_steps(self, classification: Classification) -> None:
        suggested = self.choices = list(self.view.followups)  # a clarification's are in its answer already
        if classification is Classification.CLARIFICATION:
            if suggested and self._hint:
                self._line(f"\n{self._hint.format(count=len(suggested))}", "dim")
            return
        if suggested:
            numbered = "\n".join(f"  {n}. {q}" for n, q in enumerate(suggested, 1))
            self._line("\nFollow-up questions:\n" + numbered)

    def _table(
        self,
        title: str,
        columns: list[str],
        rows: list[list[str | None]],
        row_count: int,
        has_more: bool,
    ) -> None:
        shown = rows[:PREVIEW_ROWS]
        if len(shown) < row_count or has_more:
            title += f" (first {len(shown)} of {row_count}{'+' if has_more else ''})"
        self._end_answer()
        if not self._rich_steps:
            lines = ["\t".join(map(_plain, columns)), *("\t".join(map(_plain, row)) for row in shown)]
            self._steps.write(safe(f"\n{title}\n" + "\n".join(lines) + "\n"))
            return
        table = Table()
        for index, name in enumerate(columns):
            numeric = _numbers(shown, index)
            # A Text header: a plain string would be read as rich markup ([link=...] from a column alias).
            table.add_column(Text(safe(name)), overflow="fold", justify="right" if numeric else "left")
        for row in shown:
            table.add_row(*(Text("NULL", style="dim") if c is None else Text(safe(c)) for c in row))
        self._step_console.print()
        self._step_console.print(Text(safe(title), style="bold"))
        self._step_console.print(table)


def _json_cell(cell: Any) -> str | None:
    """A cell of a server's JSON preview, as text (None stays NULL)."""
    if cell is None or isinstance(cell, str):
        return cell
    if isinstance(cell, bool | int | float):
        return json.dumps(cell)
    return json.dumps(cell, ensure_ascii=False)


def _numbers(rows: list[list[str | None]], index: int) -> bool:
    values = [row[index] for row in rows if index < len(row) and row[index] is not None]
    return bool(values) and all(_is_number(v) for v in values)


def _is_number(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True


def _plain(cell: str | None) -> str:
    """A cell on one line of tab-separated text, escaped as ClickHouse's TSV escapes it."""
    if cell is None:
        return "\\N"
    return cell.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
