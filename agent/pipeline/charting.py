"""The `chart` tool: draws a query that already ran in this turn from its full result."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from pydantic import ValidationError

from agent.charts import Chart, ChartError, ChartRequest, build_chart, check_columns
from agent.db import Database, DatabaseUnavailable, EngineError, EngineRestarted, QueryRefused
from agent.db.rendering import Cell
from agent.limits import Limits, json_size
from agent.pipeline.state import RunState
from agent.pipeline.tools import ToolOutcome
from agent.runner import ChartEvent


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ChartMaker:
    def __init__(self, db: Database, limits: Limits) -> None:
        self._db = db
        self._limits = limits

    async def run(self, raw: Any, state: RunState) -> ToolOutcome:
        """The chart, or an error result that says what the model can change."""
        try:
            return await self._draw(raw, state)
        except _Refused as exc:
            state.record_chart_error(exc.reason)
            return ToolOutcome(str(exc), is_error=True)

    async def _draw(self, raw: Any, state: RunState) -> ToolOutcome:
        limits = self._limits
        try:
            request = ChartRequest.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            raise _Refused("invalid", f"chart input: {where}: {first['msg']}") from None
        query = next((q for q in state.queries if q.id == request.query_id.strip().upper()), None)
        if query is None:
            ran = ", ".join(q.id for q in state.queries) or "none yet"
            raise _Refused("unknown_query", f"There is no query {request.query_id} in this turn (queries run: {ran}).")
        if not query.result.ok:
            raise _Refused("failed_query", f"{query.id} failed, so there is nothing to draw; fix and rerun it first.")
        request = request.model_copy(update={"query_id": query.id})
        if not state.claim_chart(limits.chart_max_per_run):
            raise _Refused(
                "too_many", f"This answer already has {limits.chart_max_per_run} charts, the most one may draw."
            )
        try:
            chart = await self._build(query.sql, request, state)
        except BaseException:
            state.release_chart()
            raise
        chart = state.record_chart(chart)
        await state.emit(ChartEvent(chart=chart))
        return ToolOutcome(f"{chart.id} drawn under the answer: {chart.describe()}.")

    async def _build(self, sql: str, request: ChartRequest, state: RunState) -> Chart:
        limits = self._limits
        try:
            try:
                columns, types, rows = await self._rows(sql, request, state)
            except EngineRestarted:  # another statement's restart cut the rows off: fetch them once more
                columns, types, rows = await self._rows(sql, request, state)
            capped = len(rows) > limits.chart_max_rows
            # Off the event loop: a spec of thousands of rows takes a while to build, validate and size.
            chart, size = await asyncio.to_thread(
                _built_and_sized, request, columns, types, rows[: limits.chart_max_rows], capped
            )
        except ChartError as exc:
            raise _Refused("bad_column" if "column" in str(exc) else "invalid", str(exc)) from None
        except (QueryRefused, EngineError, DatabaseUnavailable) as exc:  # the answer stands without the chart
            raise _Refused("failed_query", f"{request.query_id} could not be fetched for the chart: {exc}") from None
        if size > limits.chart_max_spec_bytes:
            raise _Refused(
                "too_large",
                f"The chart would take {size // 1000} KB, more than the {limits.chart_max_spec_bytes // 1000} KB a "
                "chart may: aggregate to fewer rows, or shorten the labels, and rerun the query first.",
            )
        return chart

    async def _rows(
        self, sql: str, request: ChartRequest, state: RunState
    ) -> tuple[list[str], list[str], list[list[Cell]]]:
        """The drawn columns of the query's full result: up to one row past the cap (to tell it was
        cut), labels cut by the engine, every other column dropped as the rows arrive."""
        limits = self._limits
        export = await self._db.export(
            sql,
            max_rows=limits.chart_max_rows + 1,
            max_cell_chars=limits.chart_max_label_chars,
            owner=state.run_id,
            policy=state.policy,  # the chart's rows are the query's: read under the run's policy
        )
        names = [c.name for c in export.columns]
        check_columns(request, names)
        wanted = list(dict.fromkeys(n for n in (request.x, request.y, request.color) if n))
        indexes = [names.index(name) for name in wanted]
        rows: list[list[Cell]] = []
        async with aclosing(export.rows) as stream:
            async for row in stream:
                rows.append([row[i] if i < len(row) else None for i in indexes])
        return wanted, [export.columns[i].type for i in indexes], rows


def _built_and_sized(
    request: ChartRequest, columns: list[str], types: list[str], rows: list[list[Cell]], capped: bool
) -> tuple[Chart, int]:
    chart = build_chart("C?", request, columns, types, rows, capped=capped)
    return chart, json_size(chart.spec)
