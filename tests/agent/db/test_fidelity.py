"""Values as ClickHouse prints them: every cell the agent shows equals ClickHouse's own text output
for the same expression, under a UTC and a non-UTC time zone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from agent.db import Database, new_query_id, open_database
from agent.db.rendering import json_value
from tests.conftest import make_settings
from tests.demo_data import copy_demo

EXPRESSIONS = [
    "toUInt8(255)",
    "toInt8(-128)",
    "toInt64(-9223372036854775808)",
    "toUInt64(18446744073709551615)",
    "toInt128('-170141183460469231731687303715884105728')",
    "toUInt256('115792089237316195423570985008687907853269984665640564039457584007913129639935')",
    "toFloat32(0.1)",
    "toFloat64(0.1)",
    "toFloat64(1) / 3",
    "1e308 * 10",
    "-1e308 * 10",
    "nan",
    "-0.",
    "toFloat32(16777217)",
    "toBFloat16(1.5)",
    "toDecimal32(1.5, 2)",
    "toDecimal64(-0.001, 3)",
    "toDecimal128('12345678901234567890.123456789', 9)",
    "toDate('2013-01-01')",
    "toDate32('1900-01-01')",
    "toDateTime('2013-01-01 05:00:00')",
    "toDateTime('2013-01-01 05:00:00', 'America/New_York')",
    "toDateTime64('2013-01-01 05:00:00.123456789', 9, 'Asia/Kolkata')",
    "toDateTime64('2013-07-01 05:00:00.5', 1)",
    "CAST(toDateTime('2013-06-01 12:00:00', 'UTC') AS Nullable(DateTime('America/New_York')))",
    "CAST(toDateTime('2013-06-01 12:00:00', 'Asia/Tokyo') AS Variant(DateTime('Asia/Tokyo'), String))",
    "[toDateTime('2013-01-01 00:00:00', 'Europe/Berlin')]",
    "unhex('6F6B80')",
    "toFixedString('ab', 4)",
    "'tab\\there'",
    "'line\\nbreak'",
    "'quote''s and back\\\\slash'",
    "'héllo 🙂'",
    "toIPv4('1.2.3.4')",
    "toIPv6('::ffff:1.2.3.4')",
    "toIPv6('2001:db8::1')",
    "toUUID('123e4567-e89b-12d3-a456-426614174000')",
    "[1, NULL, 3]",
    "[['a'], []]",
    "map('k', [1, 2])",
    "tuple(1, 'a', NULL)",
    "CAST((1, 'x') AS Tuple(a UInt8, b String))",
    "CAST('b' AS Enum8('a' = 1, 'b' = 2))",
    "true",
    "NULL",
    "CAST(NULL AS Nullable(String))",
    "toIntervalDay(3)",
    "CAST((1.5, 2) AS Point)",
    "toLowCardinality('low')",
    'CAST(\'{"a": 1, "b": [1, 2]}\' AS JSON)',
    "uniqState(1)",
    "toTime('12:34:56')",
]


@pytest.fixture(scope="module", params=["UTC", "Asia/Kolkata"])
async def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    """An engine started under this time zone, with the demo data."""
    path = tmp_path_factory.mktemp(f"tz-{request.param.replace('/', '-')}")
    copy_demo(tmp_path_factory, path / "clickhouse")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", request.param)
        database = open_database(make_settings(agent_data_dir=path))
        assert (await database.execute("SELECT 1")).ok  # started under TZ
    yield database
    await database.close()


async def clickhouse_text(database: Database, expression: str) -> str | None:
    """ClickHouse's own text output of one value (TSVRaw: unescaped, one row, one column)."""
    raw = await database.backend.query(f"SELECT {expression}", "TSVRaw", new_query_id())
    text = raw.decode("utf-8", errors="replace").removesuffix("\n")
    return None if text == "\\N" else text


def test_the_table_is_large_enough() -> None:
    assert len(EXPRESSIONS) >= 30


@pytest.mark.parametrize("expression", EXPRESSIONS)
async def test_a_value_is_shown_as_clickhouse_prints_it(engine: Database, expression: str) -> None:
    result = await engine.execute(f"SELECT {expression} AS v")
    assert result.ok, result.error
    expected = await clickhouse_text(engine, expression)
    assert result.rows == [[expected]]
    shown = json_value(result.rows[0][0], result.types[0])
    assert expected is not None or shown is None
    if isinstance(shown, bool):
        assert json.dumps(shown) == expected
    elif isinstance(shown, int):  # exact integers only; others stay text
        assert str(shown) == expected and abs(shown) < 2**53
    elif isinstance(shown, float):  # the same number, whatever the digits' spelling (-0, 16777216)
        assert json.loads(json.dumps(shown)) == float(str(expected))


async def test_the_server_time_zone_is_the_engines_not_the_apps(engine: Database) -> None:
    zone = (await engine.execute("SELECT timezone()")).rows[0][0]
    plain = (await engine.execute("SELECT toDateTime('2013-01-01 05:00:00', 'UTC') AS t")).rows[0][0]
    assert plain == "2013-01-01 05:00:00"
    assert zone in ("UTC", "Asia/Kolkata")


async def test_demo_times_are_new_york_times_in_any_zone(engine: Database) -> None:
    result = await engine.execute("SELECT maxOrNull(time_hour), min(time_hour) FROM nycflights13.flights")
    assert result.rows == [["2013-12-31 23:00:00", "2013-01-01 05:00:00"]]
    assert result.rows[0][0] == await clickhouse_text(engine, "maxOrNull(time_hour) FROM nycflights13.flights")


async def test_long_values_are_cut_with_their_length(engine: Database) -> None:
    result = await engine.execute("SELECT repeat('é', 1000) AS v")
    assert result.rows == [["é" * 200 + "…[+800 chars]"]]
