"""The `chart` tool: draws a query that already ran in this turn from its full result."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agent.charts import CHART_MAX_ROWS, ChartError, ChartRequest, build_chart
from agent.db import Database, EngineError, QueryRefused
from agent.pipeline.runner import ChartEvent
from agent.pipeline.v3.state import RunState
from agent.pipeline.v3.tools import ToolOutcome


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ChartMaker:
    def __init__(self, db: Database, max_rows: int = CHART_MAX_ROWS) -> None:
        self._db = db
        self._max_rows = max_rows

    async def run(self, raw: Any, state: RunState) -> ToolOutcome:
        """The chart, or an error result that says what the model can change."""
        try:
            return await self._draw(raw, state)
        except _Refused as exc:
            state.record_chart_error(exc.reason)
            return ToolOutcome(str(exc), is_error=True)

    async def _draw(self, raw: Any, state: RunState) -> ToolOutcome:
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
        try:
            export = await self._db.export(query.sql, max_rows=self._max_rows + 1)
            rows = [row async for row in export.rows]
            chart = build_chart(
                f"C{len(state.charts) + 1}",
                request.model_copy(update={"query_id": query.id}),
                [c.name for c in export.columns],
                [c.type for c in export.columns],
                rows[: self._max_rows],
                capped=len(rows) > self._max_rows,
            )
        except ChartError as exc:
            raise _Refused("bad_column" if "column" in str(exc) else "invalid", str(exc)) from None
        except (QueryRefused, EngineError) as exc:
            raise _Refused("failed_query", f"{query.id} could not be fetched for the chart: {exc}") from None
        state.record_chart(chart)
        await state.emit(ChartEvent(chart=chart))
        return ToolOutcome(f"{chart.id} drawn under the answer: {chart.describe()}.")
