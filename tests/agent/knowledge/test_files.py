"""Knowledge files: read with their lines; a malformed file is one error naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import DEMO_KNOWLEDGE_DIR
from agent.knowledge import KnowledgeBase, KnowledgeError, load_directory
from agent.knowledge.base import render_entry
from agent.knowledge.files import statements


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_entries_carry_their_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "metrics.yaml",
        "# a comment\nmetrics:\n  - name: on-time rate\n    description: d\n    sql: countIf(arr_delay < 15)\n"
        "    tables: [nycflights13.flights]\n",
    )
    [entry] = load_directory(tmp_path)
    assert entry.tag == "[metric: on-time rate]"
    assert entry.where() == f"{path}:3" and entry.where("sql") == f"{path}:5"
    assert statements(entry) == [
        ("sql", "SELECT countIf(arr_delay < 15) FROM nycflights13.flights"),
        ("tables", "SELECT 1 FROM nycflights13.flights LIMIT 1"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("glossary:\n  - term: t\n    definiton: typo\n", "bad.yaml:2: glossary entry lacks definition"),
        ("glossary:\n  - term: t\n    definition: d\n    sqll: x\n", "bad.yaml:4: unknown field 'sqll'"),
        ("glossary:\n  - term: t\n    definition: d\n    sql: x > 1\n", "bad.yaml:4: a glossary expression needs"),
        ("metric:\n  - name: m\n", "bad.yaml:1: unknown section 'metric'"),
        ("notes:\n  - table: [unclosed\n", "bad.yaml:3: not valid YAML"),
        (
            "glossary:\n  - term: t\n    definition: d\n    synonyms: late flight\n",
            "bad.yaml:4: `synonyms` must be a list",
        ),
        ("1: x\nfoo: y\n", "bad.yaml:1: unknown section"),
    ],
)
def test_a_malformed_file_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "bad.yaml", text)
    with pytest.raises(KnowledgeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_directory(tmp_path)


def test_the_demo_knowledge_fits_its_budget_in_file_order_and_is_byte_stable() -> None:
    first = KnowledgeBase.load(DEMO_KNOWLEDGE_DIR, 8_000)
    second = KnowledgeBase.load(DEMO_KNOWLEDGE_DIR, 8_000)
    assert first.prefix.left_out == 0 and first.prefix.text == second.prefix.text
    text = first.prefix.text
    assert text.index("## Glossary") < text.index("## Metrics") < text.index("## Verified queries")
    assert "- **delayed flight** (also: late flight, late arrival, delay) [glossary: delayed flight]" in text


def test_past_the_budget_matching_entries_are_retrieved_for_a_paraphrase() -> None:
    knowledge = KnowledgeBase.load(DEMO_KNOWLEDGE_DIR, 1_500)
    assert knowledge.prefix.left_out > 0 and "[verified: cancellations-by-month]" not in knowledge.prefix.text
    retrieved = knowledge.retrieve("Per month, how many scheduled flights never took off (cancelled)?")
    assert "[verified: cancellations-by-month]" in retrieved
    assert "countIf(dep_time IS NULL) AS cancelled" in retrieved
    assert "[glossary: delayed flight]" not in retrieved  # in the prefix already


def test_an_alias_repeats_an_entry_without_breaking_the_file(tmp_path: Path) -> None:
    write(tmp_path, "g.yaml", "glossary:\n  - &g {term: late, definition: d}\n  - *g\n")
    assert [e.name for e in load_directory(tmp_path)] == ["late", "late"]


def test_every_sql_of_an_entry_is_checked_as_written(tmp_path: Path) -> None:
    """A note's SQL is a statement whatever it starts with; the tables an entry names are checked too."""
    write(
        tmp_path,
        "k.yaml",
        "notes:\n  - table: nycflights13.flights\n    note: n\n    sql: DROP TABLE nycflights13.flights\n"
        "glossary:\n  - term: t\n    definition: d\n    sql: SELECT 1\n    table: nycflights13.weather\n",
    )
    term, note = load_directory(tmp_path)
    assert ("sql", "DROP TABLE nycflights13.flights") in statements(note)
    assert statements(term) == [("sql", "SELECT 1"), ("table", "SELECT 1 FROM nycflights13.weather LIMIT 1")]


def test_sql_of_several_lines_keeps_its_lines_in_the_prompt(tmp_path: Path) -> None:
    """Joined into one line, a `--` comment would swallow the rest of the statement."""
    write(
        tmp_path,
        "n.yaml",
        "notes:\n  - table: nycflights13.flights\n    note: n\n    sql: |\n      SELECT origin -- the airport\n"
        "      FROM nycflights13.flights\n",
    )
    [note] = load_directory(tmp_path)
    assert "  SELECT origin -- the airport\n  FROM nycflights13.flights\n" in render_entry(note)


@pytest.mark.parametrize(
    "text",
    [
        "verified_queries:\n- id: a\n  question: q\n  sql: SELECT 1\n  verified_by: x\n  verified_at: '2026-01-01'\n",
        "verified_queries: []\n",
        "# the team's queries\nverified_queries:\n",
    ],
    ids=["no-indent", "flow-list", "empty"],
)
def test_an_approved_query_is_appended_in_the_files_own_layout(tmp_path: Path, text: str) -> None:
    from agent.knowledge.writer import append_verified_query

    write(tmp_path, "verified_queries.yaml", text)
    path, entry_id = append_verified_query(
        tmp_path, question="How many?", sql="SELECT 2", verified_by="ana", verified_at="2026-11-26", source="web"
    )
    entries = load_directory(tmp_path)
    assert entries[-1].name == entry_id == "how-many" and entries[-1].text("sql") == "SELECT 2"
    assert len(entries) == text.count("- id:") + 1
    assert "# the team's queries" in path.read_text() or "#" not in text  # the file's comments stay
