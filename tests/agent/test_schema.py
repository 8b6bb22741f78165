from __future__ import annotations

from agent.db import Database, Scope
from agent.schema import SchemaCache, introspect, render_schema


async def test_schema_has_every_table_column_comment_and_samples(db: Database) -> None:
    tables = await introspect(db)
    assert sorted(t.name for t in tables) == ["airlines", "airports", "flights", "planes", "weather"]
    text = render_schema(tables, 100_000)
    assert "## nycflights13.flights" in text and "Every flight that departed NYC" in text
    assert "| arr_delay | Nullable(Int16) | Arrival delay, minutes (negative = early) |" in text
    assert "Values: EWR, JFK, LGA |" in text  # exhaustive samples have no ellipsis
    assert "~337K rows, sorted by origin, time_hour" in text


async def test_rendering_is_byte_identical_between_builds(db: Database) -> None:
    first = render_schema(await introspect(db), 24_000)
    second = render_schema(await introspect(db), 24_000)
    assert first == second


async def test_over_budget_tables_are_listed_by_name(db: Database) -> None:
    text = render_schema(await introspect(db), 3_000)
    assert "## nycflights13.flights" in text
    assert "More tables exist (columns not shown to save space): nycflights13.airports, nycflights13.planes." in text
    assert "SELECT * FROM database.table LIMIT 0" in text


async def test_include_and_exclude_patterns(db: Database) -> None:
    scoped = Database(
        db.backend, scope=Scope.of(["nyc*"], ["nycflights13.weather", "*.planes"]), functions=db.functions
    )
    tables = await introspect(scoped)
    assert sorted(t.name for t in tables) == ["airlines", "airports", "flights"]
    nothing = Database(db.backend, scope=Scope.of(["nothing_here"]), functions=db.functions)
    assert await introspect(nothing) == []


async def test_cache_reuses_the_rendering_within_its_ttl(db: Database) -> None:
    cache = SchemaCache(db, 24_000, ttl_s=600)
    first = await cache.get()
    assert await cache.get() is first
