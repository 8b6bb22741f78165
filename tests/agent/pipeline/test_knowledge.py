"""The team's knowledge in the request: inside the cached prefix within its budget, retrieved past it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic, Reply

GLOSSARY = """glossary:
  - term: red-eye flight
    synonyms: [overnight flight]
    definition: A flight scheduled to leave between midnight and 6 am.
    table: nycflights13.flights
    sql: hour < 6
"""


def prefix(request: dict[str, Any]) -> str:
    return json.dumps([request["tools"], request["system"][:2]], sort_keys=True)


def question_blocks(request: dict[str, Any]) -> list[str]:
    return [block["text"] for block in request["messages"][-1]["content"]]


async def test_a_glossary_term_is_in_the_cached_prefix(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    (tmp_path / "glossary.yaml").write_text(GLOSSARY)
    fake_anthropic.script(Reply(text="ok"))
    await make_app(agent_knowledge_dir=str(tmp_path)).runner.run("How many red-eyes left JFK?", followups=False)
    [request] = fake_anthropic.requests
    cached = request["system"][1]
    assert cached["cache_control"] == {"type": "ephemeral"}
    assert "# What this team knows" in cached["text"]
    assert (
        "- **red-eye flight** (also: overnight flight) [glossary: red-eye flight]: A flight scheduled to leave "
        "between midnight and 6 am. On nycflights13.flights. SQL: `hour < 6`"
    ) in cached["text"]


async def test_the_prefix_with_knowledge_is_byte_identical_across_questions(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    app = make_app()  # the demo's knowledge, by default for the demo data
    for question in ("Which airline is most often on time?", "How many flights were cancelled in May?"):
        fake_anthropic.script(Reply(text="ok"))
        await app.runner.run(question, followups=False)
    first, second = fake_anthropic.requests
    assert "[metric: on-time rate]" in first["system"][1]["text"]
    assert prefix(first) == prefix(second)
    assert [question_blocks(r) for r in (first, second)] == [
        ["Which airline is most often on time?"],
        ["How many flights were cancelled in May?"],
    ]  # everything fits the budget: nothing is retrieved


async def test_past_the_budget_a_verified_query_is_retrieved_for_a_paraphrase(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Reply(text="ok"))
    app = make_app(agent_knowledge_max_chars=0)
    await app.runner.run("Month by month, how many scheduled flights never took off?", followups=False)
    [request] = fake_anthropic.requests
    assert "cancellations-by-month" not in request["system"][1]["text"]
    question, retrieved = question_blocks(request)
    assert question == "Month by month, how many scheduled flights never took off?"
    assert retrieved.startswith("What this team knows that matches this question")
    assert "[verified: cancellations-by-month]" in retrieved and "countIf(dep_time IS NULL) AS cancelled" in retrieved


async def test_no_knowledge_leaves_the_prompt_as_it_was(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="ok"))
    await make_app(agent_knowledge_dir="none").runner.run("q", followups=False)
    assert "What this team knows" not in fake_anthropic.requests[0]["system"][1]["text"]


async def test_the_teams_words_lead_the_schema_search_to_the_right_table(db, tmp_path: Path) -> None:
    """In a warehouse too large for the catalogue, a glossary term the question uses brings its table."""
    from agent.config import Settings
    from agent.knowledge import KnowledgeBase
    from agent.pipeline.request import RequestPrefix
    from agent.prompts import prompt_library
    from agent.schema import SchemaCache, SchemaView, build_view, introspect

    view = build_view(await introspect(db), max_chars=1_000, catalogue_chars=100, current_database="nycflights13")
    assert not view.complete and "planes" not in view.text

    class Fixed(SchemaCache):
        def __init__(self) -> None:
            pass

        async def view(self) -> SchemaView:
            return view

    (tmp_path / "glossary.yaml").write_text(
        "glossary:\n  - term: fleet\n    synonyms: [our aircraft]\n    definition: The planes we fly.\n"
        "    table: nycflights13.planes\n    sql: tailnum != ''\n"
    )
    prompts = prompt_library(Settings.model_fields["agent_prompts_dir"].default)
    without = RequestPrefix(prompts, Fixed(), max_rows=50, chart_max_rows=100)
    knowledge = KnowledgeBase.load(tmp_path, 8_000)
    with_knowledge = RequestPrefix(prompts, Fixed(), max_rows=50, chart_max_rows=100, knowledge=knowledge)
    assert "nycflights13.planes" not in await without.retrieved("How old is the fleet?")
    retrieved = await with_knowledge.retrieved("How old is the fleet?")
    assert retrieved.splitlines()[2].startswith("- nycflights13.planes (~3.3K rows): Aircraft metadata")
    assert knowledge.expansion("How old is the fleet?") == "fleet our aircraft nycflights13.planes"
