"""Prints Runner events to a terminal as they happen (for `agent ask`).

At a terminal, rich renders: the steps, the answer's Markdown as it streams, each query's preview rows
as a table, the figures that did not check out, and the receipt. When stdout is not a terminal (a pipe,
a file) the same content is plain text: the answer's Markdown as written, rows tab-separated, no escape
codes. Cells are ClickHouse's own text (from the run's result, not the JSON preview).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from agent.db.rendering import is_numeric
from agent.runner import PREVIEW_ROWS, ExecutedQuery, RunResult
from process.untrusted import safe

_REFRESH_S = 0.1  # the streamed answer is re-rendered at most this often


class TerminalPrinter:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, *, rich: bool | None = None) -> None:
        self._out, self._err = out or sys.stdout, err or sys.stderr
        self._rich = self._out.isatty() if rich is None else rich
        self._console = Console(file=self._out, force_terminal=self._rich, highlight=False, emoji=False)
        self._text = ""
        self._in_answer = False
        self._live: Live | None = None
        self._painted = 0.0

    async def __call__(self, event: Any) -> None:
        handler = getattr(self, f"_{event.type}", None)
        if handler is not None:
            handler(event)
            self._out.flush()

    # --- the steps ---

    def _line(self, text: str, style: str = "") -> None:
        self._end_answer()
        if self._rich:
            self._console.print(Text(safe(text), style=style))
        else:
            self._out.write(safe(text) + "\n")

    def _thinking(self, event: Any) -> None:
        self._line(f"🧠 {event.text}", "dim")

    def _executing(self, event: Any) -> None:
        self._line(f"⚡ {event.query_id} {event.question}", "bold")
        sql = safe(event.sql.strip())
        if self._rich:
            self._console.print(Syntax(sql, "sql", theme="ansi_dark", background_color="default"), style="dim")
        else:
            self._out.write("\n".join(f"     {line}" for line in sql.splitlines()) + "\n")

    def _result(self, event: Any) -> None:
        if event.error:
            hint = f"\n     hint: {event.hint}" if event.hint else ""
            self._line(f"   ✗ {event.query_id} failed: {event.error.splitlines()[0][:200]}{hint}", "red")
            return
        more = "+" if event.has_more else ""
        reused = f", same as {event.reused_from}" if event.reused_from else ""
        self._line(f"   ✓ {event.query_id}: {event.row_count}{more} rows in {event.elapsed_ms} ms{reused}")

    def _chart(self, event: Any) -> None:
        self._line(f"📈 {event.chart.id}: {event.chart.describe()} (the spec is in --json; the web chat draws it)")

    def _followups(self, event: Any) -> None:
        self._line("\nFollow-up questions:\n" + "\n".join(f"  • {q}" for q in event.questions))

    def _fallback(self, event: Any) -> None:
        self._line(f"↪ {event.note}", "dim")

    def _error(self, event: Any) -> None:
        self._end_answer()
        self._err.write(f"error: {safe(event.message)}\n")

    # --- the answer, as it streams ---

    def _answer(self, event: Any) -> None:
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
            if not self._in_answer:
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

    def _done(self, event: Any) -> None:
        self._end_answer()
        result: RunResult = event.result
        for query in result.queries:
            if query.result.ok and query.result.columns and not query.reused_from:
                self._preview(query)
        if result.figures is not None and result.figures.unchecked:
            self._line(f"\n⚠ Figures not checked: {result.figures.unchecked}", "yellow")
        elif result.figures is not None and result.figures.unverified:
            self._line(f"\n⚠ {result.figures.unverified} figure(s) match nothing in the results they cite:", "yellow")
            for figure in result.figures.failures():
                self._line(f"  • {figure.text}: {figure.reason}", "yellow")
        if result.receipt is not None:
            self._line("\n" + result.receipt.line(), "dim")

    def _preview(self, query: ExecutedQuery) -> None:
        result = query.result
        shown = result.rows[:PREVIEW_ROWS]
        more = f" (first {len(shown)} of {result.row_count}{'+' if result.has_more else ''})"
        title = f"{query.id} {query.question}{more if len(shown) < result.row_count or result.has_more else ''}"
        if not self._rich:
            lines = ["\t".join(map(_plain, result.columns)), *("\t".join(map(_plain, row)) for row in shown)]
            self._out.write(safe(f"\n{title}\n" + "\n".join(lines) + "\n"))
            return
        table = Table()
        for name, ch_type in zip(result.columns, result.types, strict=False):
            # A Text header: a plain string would be read as rich markup ([link=...] from a column alias).
            table.add_column(Text(safe(name)), overflow="fold", justify="right" if is_numeric(ch_type) else "left")
        for row in shown:
            table.add_row(*(Text("NULL", style="dim") if c is None else Text(safe(c)) for c in row))
        self._console.print()
        self._console.print(Text(safe(title), style="bold"))
        self._console.print(table)


def _plain(cell: str | None) -> str:
    """A cell on one line of tab-separated text, escaped as ClickHouse's TSV escapes it."""
    if cell is None:
        return "\\N"
    return cell.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
