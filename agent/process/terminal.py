"""Prints Runner events to a terminal as they happen (for `agent ask`)."""

from __future__ import annotations

import sys
from typing import Any, TextIO


class TerminalPrinter:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out, self._err = out or sys.stdout, err or sys.stderr
        color = self._out.isatty()
        self._dim = "\033[2m" if color else ""
        self._bold = "\033[1m" if color else ""
        self._red = "\033[31m" if color else ""
        self._reset = "\033[0m" if color else ""
        self._in_answer = False

    async def __call__(self, event: Any) -> None:
        handler = getattr(self, f"_{event.type}", None)
        if handler is not None:
            handler(event)
            self._out.flush()

    def _line(self, text: str) -> None:
        if self._in_answer:
            self._out.write("\n")
            self._in_answer = False
        self._out.write(text + "\n")

    def _thinking(self, event: Any) -> None:
        self._line(f"{self._dim}🧠 {event.text}{self._reset}")

    def _executing(self, event: Any) -> None:
        sql = "\n".join(f"     {line}" for line in event.sql.strip().splitlines())
        self._line(f"⚡ {self._bold}{event.query_id}{self._reset} {event.question}\n{self._dim}{sql}{self._reset}")

    def _result(self, event: Any) -> None:
        if event.error:
            hint = f"\n     hint: {event.hint}" if event.hint else ""
            self._line(
                f"   {self._red}✗ {event.query_id} failed:{self._reset} {event.error.splitlines()[0][:200]}{hint}"
            )
            return
        more = "+" if event.has_more else ""
        reused = f", same as {event.reused_from}" if event.reused_from else ""
        self._line(f"   ✓ {event.query_id}: {event.row_count}{more} rows in {event.elapsed_ms} ms{reused}")

    def _answer(self, event: Any) -> None:
        if event.restart:
            if self._in_answer:
                self._out.write(f"\n{self._dim}(restarting the answer){self._reset}\n")
            self._in_answer = False
            return
        if not self._in_answer:
            self._out.write("\n")
            self._in_answer = True
        self._out.write(event.text)

    def _chart(self, event: Any) -> None:
        self._line(f"📈 {event.chart.id}: {event.chart.describe()} (the spec is in --json; the web chat draws it)")

    def _followups(self, event: Any) -> None:
        self._line("\nFollow-up questions:\n" + "\n".join(f"  • {q}" for q in event.questions))

    def _fallback(self, event: Any) -> None:
        self._line(f"{self._dim}↪ {event.note}{self._reset}")

    def _error(self, event: Any) -> None:
        if self._in_answer:
            self._out.write("\n")
            self._in_answer = False
        self._err.write(f"error: {event.message}\n")

    def _done(self, event: Any) -> None:
        if self._in_answer:
            self._out.write("\n")
            self._in_answer = False
        m = event.result.metrics
        model = f", {event.result.model}" if event.result.model else ""
        self._out.write(
            f"{self._dim}({m.rounds} rounds, {m.sql_queries} queries, {m.total_ms / 1000:.1f} s{model}){self._reset}\n"
        )
