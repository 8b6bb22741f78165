"""Under an answer in Slack: the figures that did not check out against their queries, and the
receipt, as context lines (small grey text) above the buttons."""

from __future__ import annotations

from typing import Any

from agent.figures import FigureReport
from agent.receipts import Receipt
from agent.runner import FinalAnswer
from bots.slack.blocks import escape

MAX_CONTEXT_TEXT = 3000  # Slack's limit on one context element's text
MAX_LISTED = 5  # unverified figures named; the rest are counted


def receipt_blocks(result: FinalAnswer) -> list[dict[str, Any]]:
    return figure_blocks(result.figures, result.receipt)


def figure_blocks(figures: FigureReport | None, receipt: Receipt | None) -> list[dict[str, Any]]:
    """The context lines of an answer or a report: what did not check out, then the receipt."""
    blocks: list[dict[str, Any]] = []
    if figures is not None and figures.unchecked:
        blocks.append(_context("analyst_unverified", f":warning: Figures not checked: {escape(figures.unchecked)}"))
    elif figures is not None and figures.unverified:
        failures = figures.failures()
        named = "; ".join(f"*{escape(f.text)}* ({escape(f.reason or 'no match')})" for f in failures[:MAX_LISTED])
        more = f"; and {len(failures) - MAX_LISTED} more" if len(failures) > MAX_LISTED else ""
        text = f":warning: Not verified against the queries cited: {named}{more}"
        blocks.append(_context("analyst_unverified", text))
    if figures is not None and figures.partly:
        blocks.append(
            _context("analyst_partly_checked", f":warning: Not every figure was checked: {escape(figures.partly)}")
        )
    if receipt is not None:
        blocks.append(_context("analyst_receipt", escape(receipt.line())))
    return blocks


def _context(block_id: str, text: str) -> dict[str, Any]:
    if len(text) > MAX_CONTEXT_TEXT:
        text = text[: MAX_CONTEXT_TEXT - 1] + "…"
    return {"type": "context", "block_id": block_id, "elements": [{"type": "mrkdwn", "text": text}]}
