from __future__ import annotations

from agent.db import Database, Scope
from agent.schema import SchemaCache, build_view, introspect, render_schema


async def test_schema_has_every_table_column_comment_and_samples(db: Database) -> None:
    tables = await introspect(db)
    assert sorted(t.name for t in tables) == [
        "aircraft_registrations",
        "airlines",
        "airports",
        "flights",
        "planes",
        "weather",
    ]
    text = render_schema(tables)
    assert "## nycflights13.flights" in text and "Every flight that departed NYC" in text
    assert "| arr_delay | Nullable(Int16) | Arrival delay, minutes (negative = early) |" in text
    assert "Values: EWR, JFK, LGA |" in text  # exhaustive samples have no ellipsis
    assert "~337K rows, sorted by origin, time_hour" in text


async def test_rendering_is_byte_identical_between_builds(db: Database) -> None:
    first = render_schema(await introspect(db))
    second = render_schema(await introspect(db))
    assert first == second


async def test_under_the_budget_every_table_is_whole_and_there_is_no_lookup(db: Database) -> None:
    tables = await introspect(db)
    view = build_view(tables, max_chars=24_000, catalogue_chars=16_000, current_database="nycflights13")
    assert view.catalog is None and view.complete and view.tables == 6
    assert view.text == render_schema(tables)


async def test_over_the_budget_the_prompt_carries_a_catalogue(db: Database) -> None:
    view = build_view(await introspect(db), max_chars=3_000, catalogue_chars=16_000, current_database="nycflights13")
    assert view.catalog is not None and view.complete
    assert view.text.startswith(
        "## nycflights13\n- aircraft_registrations (~3.8K rows) [ReplacingMergeTree: read with FINAL]: Aircraft"
    )
    assert "\n- airlines (~16 rows): Airline names" in view.text
    assert "- flights (~337K rows): Every flight that departed NYC" in view.text
    assert "| column |" not in view.text  # columns come from the lookup tool


async def test_include_and_exclude_patterns(db: Database) -> None:
    scoped = Database(
        db.backend, scope=Scope.of(["nyc*"], ["nycflights13.weather", "*.planes"]), functions=db.functions
    )
    tables = await introspect(scoped)
    assert sorted(t.name for t in tables) == ["aircraft_registrations", "airlines", "airports", "flights"]
    nothing = Database(db.backend, scope=Scope.of(["nothing_here"]), functions=db.functions)
    assert await introspect(nothing) == []


async def test_cache_reuses_the_rendering_within_its_ttl(db: Database) -> None:
    cache = SchemaCache(db, 24_000, ttl_s=600)
    first = await cache.get()
    assert await cache.get() is first
