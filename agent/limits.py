"""What one question may cost the app, whatever its SQL returns: the one place each bound is decided.

The figures are settings (agent/config.py); this module turns them into one value passed down, and
holds the small functions that apply them. Bounds apply where values enter the app: the engine cuts
cells, this code cuts column names and types, caps the queries a question runs, the previews an event
carries, the size of a chart, and what a stored turn keeps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.config import Settings

CUT_MARK = "…"
BYTES_PER_CHAR = 4  # the most one character takes in UTF-8


@dataclass(frozen=True)
class Limits:
    max_result_columns: int = 200
    max_column_name_chars: int = 200
    max_column_type_chars: int = 500
    max_queries_per_call: int = 5
    max_queries_per_run: int = 25
    max_parallel_queries_per_run: int = 2
    max_concurrent_queries: int = 4
    max_event_bytes: int = 1_000_000
    max_turn_bytes: int = 4_000_000
    chart_max_rows: int = 5_000
    chart_max_label_chars: int = 100
    chart_max_per_run: int = 4
    chart_max_spec_bytes: int = 500_000
    chart_render_timeout_s: float = 20.0
    export_max_bytes: int = 200_000_000
    export_max_cell_chars: int = 10_000
    export_send_timeout_s: float = 30.0
    export_deadline_s: float = 600.0

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            max_result_columns=settings.max_result_columns,
            max_column_name_chars=settings.max_column_name_chars,
            max_column_type_chars=settings.max_column_type_chars,
            max_queries_per_call=settings.max_queries_per_call,
            max_queries_per_run=settings.max_queries_per_run,
            max_parallel_queries_per_run=settings.max_parallel_queries_per_run,
            max_concurrent_queries=settings.clickhouse_max_concurrent_queries,
            max_event_bytes=settings.max_event_bytes,
            max_turn_bytes=settings.max_turn_bytes,
            chart_max_rows=settings.chart_max_rows,
            chart_max_label_chars=settings.chart_max_label_chars,
            chart_max_per_run=settings.chart_max_per_run,
            chart_max_spec_bytes=settings.chart_max_spec_bytes,
            chart_render_timeout_s=settings.chart_render_timeout_s,
            export_max_bytes=settings.export_max_bytes,
            export_max_cell_chars=settings.export_max_cell_chars,
            export_send_timeout_s=settings.export_send_timeout_s,
            export_deadline_s=settings.export_deadline_s,
        )

    @property
    def preview_bytes(self) -> int:
        """What one query's preview rows may take in an event or a stored turn."""
        return max(4096, self.max_event_bytes // 16)

    @property
    def describe_bytes(self) -> int:
        """How much of DESCRIBE's output is read: room for every column at its caps, escaped as JSON
        (up to 6 bytes a byte), plus framing. A query past it is refused, not cut: its names or types
        are far beyond any cap."""
        per_column = (self.max_column_name_chars + self.max_column_type_chars) * BYTES_PER_CHAR * 6 + 64
        return self.max_result_columns * per_column + 4096


def cut_text(text: str, max_chars: int) -> str:
    """`text` within `max_chars` characters (so within 4 x `max_chars` bytes), marked where it was cut."""
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + CUT_MARK


def json_size(value: Any) -> int:
    """Bytes of `value` as JSON (as the app sends and stores it)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
