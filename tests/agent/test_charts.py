"""Charts built from executed queries' real results: valid Vega-Lite for every kind, refusals the
model can act on, the full result up to a cap, a server-side PNG, and the tool in the loop."""

from __future__ import annotations

import json
import re
import struct

import pytest

from agent.charts import KINDS, ChartError, ChartRequest, build_chart, is_date_part, plain_title, render_png, validate
from agent.db import Database
from agent.limits import Limits
from agent.pipeline.charting import ChartMaker
from agent.runner import Outcome
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply

MONTHLY = (
    "SELECT toStartOfMonth(time_hour) AS month, origin, count() AS flights, avg(dep_delay) AS avg_delay "
    "FROM nycflights13.flights GROUP BY month, origin ORDER BY month, origin"
)
CASES = {
    "line": ChartRequest(query_id="Q1", kind="line", x="month", y="avg_delay", color="origin"),
    "bar": ChartRequest(query_id="Q1", kind="bar", x="origin", y="flights"),
    "stacked_bar": ChartRequest(query_id="Q1", kind="stacked_bar", x="month", y="flights", color="origin"),
    "scatter": ChartRequest(query_id="Q1", kind="scatter", x="flights", y="avg_delay", color="origin"),
    "histogram": ChartRequest(query_id="Q1", kind="histogram", x="avg_delay"),
    "area": ChartRequest(query_id="Q1", kind="area", x="month", y="flights", color="origin"),
}


async def _export(db: Database, sql: str) -> tuple[list[str], list[str], list[list[str | None]]]:
    export = await db.export(sql, max_rows=10_000)
    return [c.name for c in export.columns], [c.type for c in export.columns], [row async for row in export.rows]


@pytest.mark.parametrize("kind", KINDS)
async def test_every_kind_from_a_real_query_is_valid_vega_lite(db: Database, kind: str) -> None:
    columns, types, rows = await _export(db, MONTHLY)
    chart = build_chart("C1", CASES[kind], columns, types, rows, capped=False)
    validate(chart.spec)  # the schema Altair ships (also checked inside build_chart)
    request = CASES[kind]
    assert chart.rows == len(rows) == 36
    names = [c for c in dict.fromkeys((request.x, request.y, request.color)) if c]
    assert set(chart.spec["data"]["values"][0]) == {f"f{i}" for i in range(len(names))}
    assert chart.spec["encoding"]["x"]["title"] == plain_title(request.x)
    assert json.loads(json.dumps(chart.spec)) == chart.spec


def test_a_spec_that_is_not_vega_lite_is_refused() -> None:
    with pytest.raises(ChartError, match="not valid Vega-Lite"):
        validate({"mark": "pie-ish", "data": {"values": []}})


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ChartRequest(query_id="Q1", kind="line", x="months", y="flights"), "has no column 'months' (for x)"),
        (ChartRequest(query_id="Q1", kind="bar", x="origin", y="delay"), "Its columns are: month, origin, flights"),
        (ChartRequest(query_id="Q1", kind="line", x="month"), "needs a y column"),
        (ChartRequest(query_id="Q1", kind="line", x="month", y="origin"), "is not numeric"),
        (ChartRequest(query_id="Q1", kind="histogram", x="origin"), "needs a numeric x column"),
    ],
)
async def test_a_chart_the_data_cannot_support_is_refused_with_a_fix(
    db: Database, request_: ChartRequest, message: str
) -> None:
    columns, types, rows = await _export(db, MONTHLY)
    with pytest.raises(ChartError, match=re.escape(message)):
        build_chart("C1", request_, columns, types, rows, capped=False)


def test_the_png_is_rendered_without_a_browser() -> None:
    spec = build_chart(
        "C1",
        ChartRequest(query_id="Q1", kind="bar", x="origin", y="n", title="Departures"),
        ["origin", "n"],
        ["String", "UInt64"],
        [["EWR", "120835"], ["JFK", "111279"], ["LGA", "104662"]],
        capped=False,
    ).spec
    png = render_png(spec)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(png) < 2_000_000
    width, height = struct.unpack(">II", png[16:24])
    assert 600 <= width <= 2_000 and 200 <= height <= 1_200


def sql(question: str, statement: str) -> tuple[str, dict]:
    return "execute_sql", {"queries": [{"question": question, "sql": statement}]}


async def test_the_model_draws_a_chart_from_the_full_result(make_app, fake_anthropic: FakeAnthropic, metrics) -> None:
    daily = "SELECT toDate(time_hour) AS day, count() AS flights FROM nycflights13.flights GROUP BY day ORDER BY day"
    fake_anthropic.script(
        Reply(tool_calls=[sql("Flights per day", daily)]),
        Reply(tool_calls=[("chart", {"query_id": "Q1", "kind": "line", "x": "days", "y": "flights"})]),
        Reply(tool_calls=[("chart", {"query_id": "Q1", "kind": "line", "x": "day", "y": "flights", "title": "Daily"})]),
        Reply(text="Daily departures peaked in summer [Q1]."),
    )
    events = Recorder()
    result = await make_app().runner.run("flights per day?", on_event=events, followups=False)
    assert result.outcome is Outcome.ANSWERED and len(result.charts) == 1
    chart = result.charts[0]
    assert chart.id == "C1" and chart.rows == 365 and not chart.capped  # all of it, not the 50 rows the model saw
    assert [e.chart.id for e in events.of("chart")] == ["C1"]
    refused = next(b for b in fake_anthropic.requests[2]["messages"][-1]["content"] if b["type"] == "tool_result")
    assert (
        refused.get("is_error")
        and "has no column 'days'" in refused["content"]
        and "day, flights" in refused["content"]
    )
    accepted = fake_anthropic.requests[3]["messages"][-1]["content"][0]["content"]
    assert accepted.startswith("C1 drawn under the answer")
    assert result.summary()["charts"][0]["spec"]["mark"]["type"] == "line"
    assert metrics.registry.get_sample_value("agent_charts_total", {"kind": "line"}) == 1
    assert metrics.registry.get_sample_value("agent_chart_errors_total", {"reason": "bad_column"}) == 1


async def test_a_large_result_is_capped_and_says_so(db: Database, metrics) -> None:
    from agent.pipeline.state import RunState
    from agent.runner import ExecutedQuery

    state = RunState(question="q", interface="cli", emit=Recorder(), metrics=metrics)
    query = "SELECT number AS n, number * 2 AS double FROM numbers(1000)"
    state.queries.append(ExecutedQuery(id="Q1", question="n", sql=query, result=await db.execute(query)))
    outcome = await ChartMaker(db, Limits(chart_max_rows=100)).run(
        {"query_id": "q1", "kind": "scatter", "x": "n", "y": "double"}, state
    )
    assert not outcome.is_error, outcome.content
    (chart,) = state.charts
    assert chart.capped and chart.rows == 100 and chart.spec["title"]["subtitle"] == "First 100 rows of Q1"
    missing = await ChartMaker(db, Limits()).run({"query_id": "Q9", "kind": "bar", "x": "n", "y": "double"}, state)
    assert missing.is_error and "no query Q9" in missing.content and "Q1" in missing.content


@pytest.mark.parametrize("name", ["\\", '"]', 'a"]+alert(1)+["', "x.y", "a[0]", "<svg onload=alert(1)>", "datum.x + 1"])
def test_a_hostile_column_name_is_only_ever_a_title(name: str) -> None:
    """Column aliases are the query's (or the data's) to choose; Vega-Lite pastes field names into
    expressions unescaped, so they never become field names: only plain-text titles."""
    for kind in ("bar", "line", "scatter"):
        chart = build_chart(
            "C1",
            ChartRequest(query_id="Q1", kind=kind, x=name, y="v", color=name if kind == "bar" else None),
            [name, "v"],
            ["String" if kind != "scatter" else "Float64", "Float64"],
            [["1", "1.5"], ["2", "2.5"]],
            capped=False,
        )
        assert name not in json.dumps(chart.spec["data"]) and chart.spec["encoding"]["x"]["title"] == plain_title(name)
        assert "\\" not in plain_title(name) and '"' not in plain_title(name)
        assert render_png(chart.spec)[:4] == b"\x89PNG"


def _x_axis_labels(spec: dict) -> list[str]:
    """The x axis's tick labels as Vega draws them (the same renderer Slack's PNG comes from)."""
    import vl_convert

    scene = vl_convert.vegalite_to_scenegraph({**spec, "width": 640})
    found: list[list[str]] = []

    def walk(node: dict) -> None:
        if node.get("role") == "axis-label":
            found.append([item["text"] for item in node["items"]])
        for child in node.get("items", []):
            if isinstance(child, dict):
                walk(child)

    walk(scene["scenegraph"])
    return found[0]  # Vega-Lite lays the x axis out first


@pytest.mark.parametrize(
    ("part", "values"),
    [
        ("toMonth(time_hour) AS month", [str(m) for m in range(1, 13)]),
        ("toDayOfWeek(time_hour) AS weekday", [str(d) for d in range(1, 8)]),
        ("hour AS dep_hour", [str(h) for h in range(1, 24) if h not in (2, 3, 4)]),
        ("toYear(time_hour) AS year", ["2013"]),
    ],
)
async def test_an_integer_date_part_is_a_discrete_axis(db: Database, part: str, values: list[str]) -> None:
    """A month number on a continuous axis read `1.0, 1.5, ... 12.0` and a year `2,013`: each date part
    is one of a few values, and every kind of chart draws it as such (the web's and Slack's alike)."""
    name = part.rsplit(" AS ", 1)[1]
    sql = f"SELECT {part}, count() AS flights FROM nycflights13.flights GROUP BY {name} ORDER BY {name}"
    columns, types, rows = await _export(db, sql)
    for kind in ("line", "area", "scatter", "bar"):
        chart = build_chart(
            "C1", ChartRequest(query_id="Q1", kind=kind, x=name, y="flights"), columns, types, rows, capped=False
        )
        assert chart.spec["encoding"]["x"]["type"] == "ordinal", kind
        assert _x_axis_labels(chart.spec) == values, kind


@pytest.mark.parametrize(
    ("name", "ch_type", "part"),
    [
        ("month", "UInt8", True),
        ("day_of_week", "UInt8", True),
        ("hour_of_day", "Nullable(UInt8)", True),
        ("Year", "UInt16", True),
        ("flights_per_day", "UInt64", False),
        ("month", "Float64", False),
        ("distance", "UInt16", False),
        ("days", "UInt32", False),
    ],
)
def test_what_counts_as_a_date_part(name: str, ch_type: str, part: bool) -> None:
    assert is_date_part(name, ch_type) is part


def test_a_continuous_number_stays_continuous() -> None:
    chart = build_chart(
        "C1",
        ChartRequest(query_id="Q1", kind="line", x="distance", y="delay"),
        ["distance", "delay"],
        ["UInt16", "Float64"],
        [["100", "1.5"], ["2500", "3.5"]],
        capped=False,
    )
    assert chart.spec["encoding"]["x"]["type"] == "quantitative"


def test_one_row_is_one_row() -> None:
    request = ChartRequest(query_id="Q1", kind="bar", x="origin", y="n")
    one = build_chart("C1", request, ["origin", "n"], ["String", "UInt64"], [["EWR", "1"]], capped=False)
    assert one.describe() == "bar chart of n by origin from Q1 (1 row)"
