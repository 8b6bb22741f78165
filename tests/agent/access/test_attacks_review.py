"""An outside review's attacks on row isolation (policy A must learn nothing of policy B's rows or tables).

Each test asserts the SAFE behaviour, so each fails while the leak it demonstrates is there. Policy A
(JFK) reads flights where origin = 'JFK' and airports whole; B's rows are the other flights, B's tables
(planes, weather, ...) are not A's."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from agent.access.policy import Policy
from agent.db import Database
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Reply

JFK_ONLY = Policy(
    "jfk",
    MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}),
)
JFK_ROWS = 111_279  # A's rows of flights; every flight (A's and B's) is 336,776
ALL_FLIGHTS = 336_776
# A filter off the primary key (origin, time_hour): the engine scans every granule, B's rows included.
UA_ONLY = Policy(
    "united",
    MappingProxyType({"nycflights13.flights": "carrier = 'UA'", "nycflights13.airports": None}),
)
UA_ROWS = 58_665


def sql(*queries: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": q, "sql": s} for q, s in queries]})


def _figures(text: str) -> set[int]:
    return {int(found.replace(",", "")) for found in re.findall(r"\d[\d,]*", text)}


async def test_the_rows_read_budget_note_does_not_count_the_rows_the_filter_hides(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Past AGENT_QUESTION_MAX_ROWS_READ the answer says how many rows the question read: ClickHouse's
    count of what it scanned, B's hidden rows included. The receipt hides that figure under a policy
    (test_policy.py); the budget note must too."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All", "SELECT count() FROM nycflights13.flights"))]),
        Reply(text="United had 58,665 departures [Q1]."),
    )
    app = make_app(agent_question_max_rows_read=1_000)
    result = await app.runner.run("Departures?", on_event=Recorder(), followups=False, policy=UA_ONLY)
    assert result.queries[0].result.rows == [[str(UA_ROWS)]]
    read = result.queries[0].result.rows_read
    assert read == ALL_FLIGHTS  # the engine scanned B's rows to find A's: the table's whole size
    assert "stopped early" in result.answer  # the note is there...
    assert f"{read:,}" not in result.answer, result.answer  # ...and must not count B's rows


async def test_the_preflight_decision_does_not_depend_on_rows_off_the_key_filter(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Under a filter off the primary key (carrier = 'UA', 58,665 rows), EXPLAIN ESTIMATE counts every
    granule, B's included: with MAX_ESTIMATED_ROWS at 100,000 a count of A's own rows is "Not run"
    because B has rows, and narrowing by the sorting key (origin, time_hour) until it runs measures B's
    rows per key range. Safe: decided as on data holding only A's rows (58,665 < 100,000: it runs)."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All", "SELECT count() FROM nycflights13.flights"))]),
        Reply(text="United [Q1]."),
    )
    app = make_app(max_estimated_rows=100_000)
    result = await app.runner.run("United?", on_event=Recorder(), followups=False, policy=UA_ONLY)
    answer = result.queries[0].result
    assert answer.error is None and answer.rows == [[str(UA_ROWS)]], answer.error
