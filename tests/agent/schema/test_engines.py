"""Engine notes: each engine whose naive reading is wrong carries a note naming its own columns; a plain
MergeTree carries none; Replicated, Shared and Distributed tables read as the engine underneath."""

from __future__ import annotations

import pytest

from agent.db import Database
from agent.schema import Catalog, introspect, render_table
from agent.schema.engines import distributed_target, engine_call, engine_hint, engine_note
from agent.schema.tables import Table, _table

CASES = [
    # engine, engine_full, what the note must say
    ("ReplacingMergeTree", "ReplacingMergeTree(updated_at) ORDER BY id", ["FINAL", "argMax(column, updated_at)"]),
    ("ReplacingMergeTree", "ReplacingMergeTree ORDER BY id", ["FINAL", "last inserted wins"]),
    (
        "ReplacingMergeTree",
        "ReplacingMergeTree(ver, is_deleted) ORDER BY id",
        ["argMax(column, ver)", "is_deleted = 1"],
    ),
    ("CollapsingMergeTree", "CollapsingMergeTree(sign) ORDER BY id", ["sum(sign)", "sum(x * sign)", "HAVING"]),
    (
        "VersionedCollapsingMergeTree",
        "VersionedCollapsingMergeTree(s, v) ORDER BY id",
        ["sum(s)", "sum(x * s)", "the latest v winning"],
    ),
    ("SummingMergeTree", "SummingMergeTree((a, b)) ORDER BY id", ["sum() the measures GROUP BY the key"]),
    ("AggregatingMergeTree", "AggregatingMergeTree ORDER BY id", ["-Merge combinator", "uniqMerge(col)"]),
    (
        "ReplicatedReplacingMergeTree",
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/t', '{replica}', version) ORDER BY id",
        ["argMax(column, version)"],
    ),
    ("ReplicatedReplacingMergeTree", "ReplicatedReplacingMergeTree(version) ORDER BY id", ["argMax(column, version)"]),
    ("SharedCollapsingMergeTree", "SharedCollapsingMergeTree('/p', '{r}', sign) ORDER BY id", ["sum(sign)"]),
    ("ReplicatedAggregatingMergeTree", "ReplicatedAggregatingMergeTree ORDER BY id", ["-Merge combinator"]),
]


@pytest.mark.parametrize(("engine", "engine_full", "says"), CASES)
def test_each_engine_whose_naive_reading_is_wrong_has_a_note(engine: str, engine_full: str, says: list[str]) -> None:
    note = engine_note(engine, engine_full, "id")
    assert note and all(part in note for part in says), note
    assert "id" in note  # the key rows are merged by


@pytest.mark.parametrize(
    ("engine", "engine_full"),
    [
        ("MergeTree", "MergeTree PARTITION BY toYYYYMM(d) ORDER BY id"),
        ("ReplicatedMergeTree", "ReplicatedMergeTree('/p', '{r}') ORDER BY id"),
        ("View", ""),
        ("Memory", "Memory"),
        ("Log", "Log"),
    ],
)
def test_engines_read_plainly_have_no_note(engine: str, engine_full: str) -> None:
    assert engine_note(engine, engine_full, "id") == ""


def test_arguments_are_read_with_quotes_and_nesting() -> None:
    call = engine_call("ReplicatedReplacingMergeTree", "ReplicatedReplacingMergeTree('/a,(b)\\'', 'r', v) ORDER BY x")
    assert call == engine_call("ReplacingMergeTree", "ReplacingMergeTree(v)")
    assert engine_call("SummingMergeTree", "SummingMergeTree((a, b), c)").arguments == ("(a, b)", "c")
    assert engine_call("ReplacingMergeTree", "ReplacingMergeTree(v").arguments == ()  # not closed: nothing read
    assert distributed_target("Distributed('c', 'db', 'local', rand())") == ("db", "local")
    assert distributed_target("Distributed(c, db, local)") == ("db", "local")
    assert distributed_target("Distributed('c')") is None


def _row(database: str, name: str, engine: str, engine_full: str, sorting: str = "", partition: str = "") -> dict:
    return {
        "database": database,
        "name": name,
        "engine": engine,
        "engine_full": engine_full,
        "comment": "",
        "sorting_key": sorting,
        "partition_key": partition,
        "primary_key": sorting,
        "total_rows": 10,
        "as_select": "",
    }


def test_a_distributed_table_reads_as_its_shards_table() -> None:
    local = _row(
        "db", "events_local", "ReplicatedCollapsingMergeTree", "ReplicatedCollapsingMergeTree(sign)", "id", "d"
    )
    dist = _row("db", "events", "Distributed", "Distributed('cluster', 'db', 'events_local', rand())")
    every = {("db", "events_local"): local, ("db", "events"): dist}
    table = _table(dist, every)
    assert table.engine == "Distributed over ReplicatedCollapsingMergeTree"
    assert "sum(sign)" in table.engine_note and table.sorting_key == "id" and table.partition_key == "d"
    unknown = _table(_row("db", "x", "Distributed", "Distributed('c', 'other', 'gone')"), every)
    assert unknown.engine == "Distributed" and unknown.engine_note == ""


def test_the_rendering_carries_the_keys_and_the_note_compactly() -> None:
    table = Table(
        "db",
        "t",
        "ReplacingMergeTree",
        "",
        "id",
        1000,
        "",
        partition_key="toYYYYMM(d)",
        primary_key="",
        engine_note=engine_note("ReplacingMergeTree", "ReplacingMergeTree(v)", "id"),
    )
    text = render_table(table)
    assert "(ReplacingMergeTree, ~1.0K rows, sorted by id, partitioned by toYYYYMM(d))" in text
    assert "\nEngine note: rows with the same id are versions of one row" in text
    plain = render_table(Table("db", "p", "MergeTree", "", "id", 10, ""))
    assert "Engine note" not in plain and "partitioned" not in plain and "primary key" not in plain
    assert "primary key a" in render_table(Table("db", "k", "MergeTree", "", "a, b", 1, "", primary_key="a"))


async def test_the_demo_registrations_carry_their_note_in_the_schema(db: Database) -> None:
    tables = {t.name: t for t in await introspect(db)}
    registrations = render_table(tables["aircraft_registrations"])
    assert "(ReplacingMergeTree, ~3.8K rows, sorted by tailnum)" in registrations
    assert "FINAL" in registrations and "argMax(column, updated_at)" in registrations
    assert tables["flights"].engine_note == "" and "Engine note" not in render_table(tables["flights"])


def test_a_catalogue_line_carries_a_hint_where_the_note_would() -> None:
    assert engine_hint("ReplicatedReplacingMergeTree") == "read with FINAL"
    assert engine_hint("Distributed over SharedCollapsingMergeTree") == "weigh rows by their sign"
    assert engine_hint("AggregatingMergeTree") == "read with -Merge combinators"
    assert engine_hint("MergeTree") == engine_hint("Distributed") == engine_hint("") == ""
    tables = [
        Table("db", "events", "ReplacingMergeTree", "Events", "id", 10, ""),
        Table("db", "plain", "MergeTree", "Plain", "id", 10, ""),
    ]
    text = Catalog(tables, "db").render(10_000).text
    assert "- events (~10 rows) [ReplacingMergeTree: read with FINAL]: Events" in text
    assert "- plain (~10 rows): Plain" in text
