"""Each policy's request prefix: its tables, the knowledge that names no other table, and the lookup over
its tables; byte-identical between its questions, so each policy is one cached prefix."""

from __future__ import annotations

import json
import re
from types import MappingProxyType
from typing import Any

from agent.access.policy import Policy
from agent.config import Settings
from agent.db import Database
from agent.knowledge import KnowledgeBase
from agent.pipeline.request import RequestPrefix
from agent.prompts import prompt_library
from agent.schema import SchemaCache

JFK = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airlines": None}))
WEATHER = Policy("weather", MappingProxyType({"nycflights13.weather": None, "nycflights13.planes": None}))


def make_prefix(settings: Settings, db: Database, **schema: int) -> RequestPrefix:
    return RequestPrefix(
        prompt_library(settings.agent_prompts_dir),
        SchemaCache(db, schema.get("max_chars", 24_000), 600, schema.get("catalogue_chars", 16_000)),
        max_rows=50,
        chart_max_rows=1_000,
        knowledge=KnowledgeBase.of(settings),  # the demo's knowledge
    )


def cached(parts: dict[str, Any]) -> str:
    """What the prompt cache keys on: the tools and the system blocks up to the breakpoint."""
    return json.dumps([parts["tools"], parts["system"][:2]], sort_keys=True)


async def test_the_same_policy_gives_byte_identical_prefixes_across_runs(settings: Settings, db: Database) -> None:
    first = await make_prefix(settings, db).parts("web", policy=JFK)
    second = await make_prefix(settings, db).parts("web", policy=JFK)  # another process, nothing shared
    assert cached(first) == cached(second)
    assert cached(first) != cached(await make_prefix(settings, db).parts("web", policy=WEATHER))


async def test_a_policys_prompt_never_names_a_table_only_another_may_read(settings: Settings, db: Database) -> None:
    prefix = make_prefix(settings, db)
    jfk = json.dumps(await prefix.parts("web", policy=JFK))
    weather = json.dumps(await prefix.parts("web", policy=WEATHER))
    assert "nycflights13.flights" in jfk and "[metric: on-time rate]" in jfk
    assert not re.search(r"\b(weather|planes|airports)\.|nycflights13\.(weather|planes|airports)", jfk)
    assert "joins airlines.carrier" in jfk  # a comment naming a table it reads stays
    assert "nycflights13.weather" in weather
    assert not re.search(r"\b(flights|airlines|airports)\.|nycflights13\.(flights|airlines|airports)", weather)
    everyone = json.dumps(await prefix.parts("web"))
    assert "nycflights13.weather" in everyone and "nycflights13.flights" in everyone  # no policy: as before


async def test_knowledge_naming_another_policys_table_is_left_out(settings: Settings, db: Database) -> None:
    prefix = make_prefix(settings, db)
    everyone, jfk = await prefix.knowledge(None), await prefix.knowledge(JFK)
    assert everyone is not None and jfk is not None
    left_out = {entry.tag for entry in everyone.entries} - {entry.tag for entry in jfk.entries}
    assert "[note: nycflights13.weather]" in left_out and "[note: nycflights13.planes]" in left_out
    assert all("weather" not in str(entry.fields).lower() for entry in jfk.entries)
    assert await prefix.retrieved("What was the weather like when flights were delayed?", policy=JFK) == ""


async def test_with_a_catalogue_the_lookup_tool_comes_with_the_policys_tables_only(
    settings: Settings, db: Database
) -> None:
    prefix = make_prefix(settings, db, max_chars=1_000, catalogue_chars=1_000)
    parts = await prefix.parts("web", policy=JFK)
    assert any(tool["name"] == "lookup_schema" for tool in parts["tools"])
    assert "weather" not in parts["system"][1]["text"]
