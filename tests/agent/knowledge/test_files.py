"""Knowledge files: read with their lines; a malformed file is one error naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import DEMO_KNOWLEDGE_DIR
from agent.knowledge import KnowledgeBase, KnowledgeError, load_directory
from agent.knowledge.files import statement


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
    assert statement(entry) == "SELECT countIf(arr_delay < 15) FROM nycflights13.flights"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("glossary:\n  - term: t\n    definiton: typo\n", "bad.yaml:2: glossary entry lacks definition"),
        ("glossary:\n  - term: t\n    definition: d\n    sqll: x\n", "bad.yaml:4: unknown field 'sqll'"),
        ("glossary:\n  - term: t\n    definition: d\n    sql: x > 1\n", "bad.yaml:4: a glossary expression needs"),
        ("metric:\n  - name: m\n", "bad.yaml:1: unknown section 'metric'"),
        ("notes:\n  - table: [unclosed\n", "bad.yaml:3: not valid YAML"),
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
