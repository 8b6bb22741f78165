"""Each policy's schema: only its tables, and what is said of their rows read through its filters."""

from __future__ import annotations

from types import MappingProxyType

from agent.access.policy import Policy
from agent.db import Database
from agent.schema import SchemaCache

JFK = Policy(
    "jfk",
    MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airlines": None}),
)
WEATHER = Policy("weather", MappingProxyType({"nycflights13.weather": None, "nycflights13.planes": None}))
ONLY_WEATHER_SIDE = ("nycflights13.weather", "nycflights13.planes", "## nycflights13.airports")


def schema(db: Database, *, max_chars: int = 24_000, catalogue_chars: int = 16_000) -> SchemaCache:
    return SchemaCache(db, max_chars, 600, catalogue_chars)


async def test_a_policy_sees_its_tables_only(db: Database) -> None:
    text = await schema(db).for_policy(JFK).get()
    assert "## nycflights13.flights" in text and "## nycflights13.airlines" in text
    assert not [name for name in ONLY_WEATHER_SIDE if name in text]
    assert "## nycflights13.weather" in await schema(db).for_policy(WEATHER).get()


async def test_row_counts_and_sampled_values_are_read_through_the_filter(db: Database) -> None:
    everything = await schema(db).get()
    jfk = await schema(db).for_policy(JFK).get()
    assert "Values: EWR, JFK, LGA" in everything and "~337K rows" in everything
    origin = next(line for line in jfk.splitlines() if line.startswith("| origin |"))
    assert "Values: JFK" in origin and "EWR" not in origin and "LGA" not in origin
    assert "~111K rows" in jfk and "337K" not in jfk  # 111,279 flights left JFK


async def test_the_same_policy_renders_byte_identical_schemas_across_builds(db: Database) -> None:
    first, second = schema(db), schema(db)  # two processes, two caches
    assert await first.for_policy(JFK).get() == await second.for_policy(JFK).get()
    assert first.for_policy(JFK) is first.for_policy(Policy("jfk", JFK.tables))  # one view per policy


async def test_the_catalogue_and_lookup_refuse_another_policys_table_like_a_missing_one(db: Database) -> None:
    view = await schema(db, max_chars=1_000, catalogue_chars=1_000).for_policy(JFK).view()
    assert view.catalog is not None and view.tables == 2
    assert "weather" not in view.text and "planes" not in view.text
    missing = view.catalog.details(["nycflights13.nosuchtable"])
    refused = view.catalog.details(["nycflights13.weather"])
    assert refused == missing.replace("nosuchtable", "weather")
    assert "No table of that name is available" in refused
    assert view.catalog.search_text("weather temperature wind humidity").startswith("No table matches")


async def test_a_policy_that_reads_nothing_has_an_empty_schema(db: Database) -> None:
    view = await schema(db).for_policy(Policy("no-data")).view()
    assert view.text == "" and view.tables == 0
