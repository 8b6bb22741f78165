"""The preflight: a query ClickHouse estimates past MAX_ESTIMATED_ROWS is not run, and the model is told
which key and partition filters narrow it; a narrow one runs; each is counted."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from types import MappingProxyType
from typing import Any

import pytest

from agent.access.policy import Policy
from agent.config import ConfigError, load_settings
from agent.db import Backend, Database
from agent.db.access import RowFilters
from agent.db.backend import ReadStats
from agent.db.estimate import estimate_reads, table_keys
from tests.conftest import make_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply

WIDE = "SELECT avg(arr_delay) FROM nycflights13.flights"
NARROW = (
    "SELECT count() FROM nycflights13.flights WHERE origin = 'EWR' "
    "AND time_hour < toDateTime('2013-01-08 00:00:00', 'America/New_York')"
)


class RecordingBackend(Backend):
    """The session's engine, with every statement sent to it recorded."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.sent: list[str] = []

    async def query(
        self,
        sql: str,
        fmt: str,
        tag: str,
        *,
        max_bytes: int | None = None,
        stats: ReadStats | None = None,
        access: RowFilters | None = None,
    ) -> bytes:
        self.sent.append(sql)
        return await self.inner.query(sql, fmt, tag, max_bytes=max_bytes, stats=stats, access=access)

    def stream(self, sql: str, fmt: str, tag: str, *, access: RowFilters | None = None) -> AsyncGenerator[bytes, None]:
        self.sent.append(sql)
        return self.inner.stream(sql, fmt, tag, access=access)

    async def running(self) -> list[str]:
        return await self.inner.running()

    async def close(self) -> None:
        """The session's engine is not this test's to close."""

    def ran(self, table: str) -> list[str]:
        """Statements that read `table` for a result (not a parse, not an estimate)."""
        return [s for s in self.sent if table in s and not s.startswith(("EXPLAIN", "WITH formatQuery", "DESCRIBE"))]


def recording(db: Database) -> tuple[Database, RecordingBackend]:
    backend = RecordingBackend(db.backend)
    return Database(backend, scope=db.scope, functions=db.functions, limits=db.limits), backend


def sample(metrics: Any, outcome: str) -> float:
    return metrics.registry.get_sample_value("agent_sql_preflights_total", {"outcome": outcome}) or 0.0


async def test_a_wide_query_gets_the_narrowing_message_without_being_run(
    make_app, fake_anthropic: FakeAnthropic, db: Database, metrics
) -> None:
    database, backend = recording(db)
    before = {outcome: sample(metrics, outcome) for outcome in ("passed", "stopped", "unavailable")}
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "delay", "sql": WIDE}]})]),
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "EWR first week", "sql": NARROW}]})]),
        Reply(text="Done [Q2]."),
    )
    result = await make_app(database, max_estimated_rows=100_000).runner.run("Average delay?", followups=False)
    stopped, narrow = result.queries
    assert stopped.result.error is not None and stopped.result.columns == []
    message = stopped.result.error
    assert message.startswith("Not run: ClickHouse estimates this query would read about 336,776 rows")
    assert "at most 100,000" in message and "nycflights13.flights: about 336,776 rows" in message
    assert "Sorted by `origin, time_hour`" in message and "Narrow it" in message
    assert [s for s in backend.ran("nycflights13.flights") if "arr_delay" in s] == []  # never run
    assert any(s.startswith("EXPLAIN ESTIMATE") and "arr_delay" in s for s in backend.sent)
    tool_result = fake_anthropic.requests[1]["messages"][-1]["content"][0]["content"]
    assert "Not run: ClickHouse estimates" in tool_result and "Sorted by `origin, time_hour`" in tool_result
    assert narrow.result.ok and narrow.result.rows and len(backend.ran("'EWR'")) == 1  # the narrow one ran
    assert sample(metrics, "stopped") == before["stopped"] + 1
    assert sample(metrics, "passed") == before["passed"] + 1


async def test_a_query_with_no_estimate_runs_and_says_what_is_wrong(
    make_app, fake_anthropic: FakeAnthropic, db: Database, metrics
) -> None:
    before = sample(metrics, "unavailable")
    fake_anthropic.script(
        Reply(
            tool_calls=[("execute_sql", {"queries": [{"question": "q", "sql": "SELEC 1 FROM nycflights13.flights"}]})]
        ),
        Reply(text="It failed."),
    )
    result = await make_app(max_estimated_rows=100_000).runner.run("x?", followups=False)
    assert "Syntax error" in (result.queries[0].result.error or "")
    assert sample(metrics, "unavailable") == before + 1


async def test_without_a_threshold_below_the_limit_the_demo_queries_run(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    database, backend = recording(db)
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "delay", "sql": WIDE}]})]), Reply(text="[Q1]")
    )
    result = await make_app(database).runner.run("Average delay?", followups=False)  # MAX_ROWS_TO_READ: 500M
    assert result.queries[0].result.ok and len(backend.ran("arr_delay")) == 1


async def test_no_preflight_at_zero(make_app, fake_anthropic: FakeAnthropic, db: Database) -> None:
    database, backend = recording(db)
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "delay", "sql": WIDE}]})]), Reply(text="[Q1]")
    )
    await make_app(database, max_estimated_rows=0).runner.run("Average delay?", followups=False)
    assert not any(s.startswith("EXPLAIN") for s in backend.sent)


async def test_the_estimate_follows_the_keys(db: Database) -> None:
    [wide] = await estimate_reads(db, WIDE)
    [narrow] = await estimate_reads(db, NARROW)
    assert wide.qualified == "nycflights13.flights" and wide.rows == 336_776
    assert 0 < narrow.rows < wide.rows / 10  # the sorting key's leading columns prune the granules
    keys = await table_keys(db, ["nycflights13.flights", "nycflights13.aircraft_registrations", "nope"])
    assert keys["nycflights13.flights"].sorting_key == "origin, time_hour"
    assert keys["nycflights13.aircraft_registrations"].sorting_key == "tailnum" and "nope" not in keys


def test_the_threshold_stays_within_the_engine_limit() -> None:
    assert make_settings().preflight_max_rows == make_settings().max_rows_to_read
    assert make_settings(max_estimated_rows=1_000).preflight_max_rows == 1_000
    with pytest.raises(ConfigError, match="MAX_ESTIMATED_ROWS must be at most MAX_ROWS_TO_READ"):
        load_settings(_env_file=None, max_rows_to_read=1_000, max_estimated_rows=2_000)


async def test_under_a_filtering_policy_the_preflight_decides_nothing_and_knows_only_its_tables(
    make_app, fake_anthropic: FakeAnthropic, db: Database, metrics
) -> None:
    """The estimate counts granules, the rows the policy hides among them: under a filter the preflight
    stops nothing (the engine's own limits still apply); a table the policy does not list is never
    estimated, but refused as missing when it would run."""
    database, backend = recording(db)
    jfk = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}))
    hidden = "SELECT count() FROM nycflights13.planes"
    before = {outcome: sample(metrics, outcome) for outcome in ("stopped", "filtered")}
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "delay", "sql": WIDE}]})]),
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "planes", "sql": hidden}]})]),
        Reply(text="Done."),
    )
    app = make_app(database, max_estimated_rows=10_000)
    result = await app.runner.run("Average delay?", followups=False, policy=jfk)
    ran, refused = result.queries
    assert ran.result.error is None and ran.result.rows, ran.result.error  # past 10,000 estimated rows: it ran
    assert sample(metrics, "filtered") == before["filtered"] + 1 and sample(metrics, "stopped") == before["stopped"]
    assert not any(s.startswith("EXPLAIN") and "planes" in s for s in backend.sent)
    assert refused.result.error is not None and refused.result.error_code == 60 and backend.ran("planes") == []
