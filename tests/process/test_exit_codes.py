"""The README's exit codes are the ones the commands use, and the same failure exits the same way in every
command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from process import errors
from process.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
KNOWLEDGE = README.parent / "knowledge"  # several entries, checked side by side
SAFETY = README.parent / "evals" / "suites" / "safety.yaml"


def test_the_readme_table_is_the_exit_codes_the_code_defines() -> None:
    text = README.read_text()
    section = text[text.index("| exit code | meaning |") :].split("\n\n")[0]
    table = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.MULTILINE))
    defined = {str(value): name for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert set(table) == set(defined), (table, defined)
    assert (errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_USAGE, errors.EXIT_INTERRUPTED) == (0, 1, 2, 130)
    assert "interrupted" in table["130"] and "usage" in table["2"] and "failed" in table["1"]


@pytest.mark.parametrize(
    "command",
    [
        ["sql", "SELECT 1"],
        ["schema"],
        ["ask", "How many flights?"],
        ["knowledge", "check", str(KNOWLEDGE)],
        ["evals", "run", "--suite", str(SAFETY)],
    ],
    ids=["sql", "schema", "ask", "knowledge-check", "evals-run"],
)
def test_an_unreachable_clickhouse_exits_2_in_every_command(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))  # an evals run writes its results there
    monkeypatch.setenv("CLICKHOUSE_URL", "http://127.0.0.1:9/default")  # the discard port: nothing listens
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # never asked: the database is checked first
    assert main(command) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: ClickHouse at 127.0.0.1:9 is unreachable") and err.count("\n") == 1
