"""The catalogue and the lookup behind `lookup_schema`: compact, deterministic, and never outside the scope."""

from __future__ import annotations

import re

from agent.db import Database, Scope
from agent.schema import Catalog, build_view, introspect


async def scoped_catalog(db: Database, excluded: list[str]) -> Catalog:
    scoped = Database(db.backend, scope=Scope.of(["nycflights13"], excluded), functions=db.functions)
    return Catalog(await introspect(scoped), "nycflights13")


async def test_details_give_columns_types_samples_and_keys(db: Database) -> None:
    catalog = Catalog(await introspect(db), "nycflights13")
    text = catalog.details(["nycflights13.flights", "airlines"])
    assert "## nycflights13.flights" in text and "sorted by origin, time_hour" in text
    assert "| arr_delay | Nullable(Int16) | Arrival delay, minutes (negative = early) |" in text
    assert "Values: EWR, JFK, LGA |" in text
    assert "## nycflights13.airlines" in text  # an unqualified name in the default database


async def test_search_finds_tables_by_comment_column_and_sampled_value(db: Database) -> None:
    catalog = Catalog(await introspect(db), "nycflights13")
    assert catalog.search("wind speed and visibility")[0] == "nycflights13.weather"
    assert catalog.search("aircraft manufacturer and number of seats")[0] == "nycflights13.planes"
    assert catalog.search("delays at LGA")[0] == "nycflights13.flights"  # a column word and a sampled value
    text = catalog.search_text("wind speed")
    assert text.startswith("- nycflights13.weather (~26K rows): Hourly weather") and "wind_speed" in text


async def test_the_lookup_never_names_an_excluded_or_out_of_scope_table(db: Database) -> None:
    catalog = await scoped_catalog(db, ["nycflights13.weather", "*.planes", "*.aircraft_registrations"])
    asked = [
        "nycflights13.weather",
        "weather",
        "`nycflights13`.`planes`",
        "planes",
        "system.tables",
        "system.columns",
        "information_schema.tables",
        "default.secrets",
    ]
    details = catalog.details(asked)
    searches = [catalog.search_text(words) for words in ("weather wind humidity", "planes seats manufacturer tables")]
    for text in [details, *searches]:
        named = set(re.findall(r"\b[a-z_]+\.[a-z_]+\b", text))
        assert named <= {"nycflights13.flights", "nycflights13.airports", "nycflights13.airlines"} | set(asked), text
        assert "| wind_speed |" not in text and "| seats |" not in text and "Hourly weather" not in text
    assert details.count("No table of that name is available.") == len(asked)
    for words in ("weather", "wind", "planes", "seats", "tables", "columns"):
        assert set(catalog.search(words)) <= {"nycflights13.flights", "nycflights13.airports", "nycflights13.airlines"}


async def test_the_catalogue_within_its_budget_ranks_commented_big_tables_first(db: Database) -> None:
    tables = await introspect(db)
    view = build_view(tables, max_chars=1_000, catalogue_chars=200, current_database="nycflights13")
    assert view.catalog is not None and not view.complete
    assert len(view.text) <= 200 and "- flights (~337K rows)" in view.text
    again = build_view(await introspect(db), max_chars=1_000, catalogue_chars=200, current_database="nycflights13")
    assert again.text == view.text  # byte-identical between builds: it is the cached prefix


def test_the_catalogue_counts_its_database_headings_within_the_budget() -> None:
    from agent.schema import Table

    tables = [Table(f"db{n}", f"t{n}", "MergeTree", "A table", "", 10, "") for n in range(200)]
    text = Catalog(tables).render(1_000).text
    assert len(text) <= 1_000 and text.count("## db") == text.count("- t")
