"""`agent sql` and `agent schema`, in-process, on a data directory of their own (each command starts an engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from process.cli import main


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cli_data_dir: Path):
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_sql_json_shape(run) -> None:
    code, out, _ = run("sql", "--json", "SELECT carrier, name FROM nycflights13.airlines ORDER BY carrier LIMIT 2")
    assert code == 0
    payload = json.loads(out)
    assert set(payload) == {
        "columns",
        "types",
        "rows",
        "totals",
        "row_count",
        "has_more",
        "error",
        "hint",
        "elapsed_ms",
    }
    assert payload["rows"] == [["9E", "Endeavor Air Inc."], ["AA", "American Airlines Inc."]]
    assert payload["row_count"] == 2 and payload["has_more"] is False and payload["error"] is None


def test_sql_prints_what_the_model_sees(run) -> None:
    code, out, _ = run("sql", "SELECT * FROM nycflights13.flights")
    assert code == 0 and out.startswith("Result: 50 rows (more available)") and "[More rows available" in out


def test_sql_error_exits_1_with_hint(run) -> None:
    code, out, _ = run("sql", "--json", "SELECT nope FROM nycflights13.airlines")
    assert code == 1
    payload = json.loads(out)
    assert payload["error"].startswith("Code: 47") and payload["hint"]


def test_refused_statement_exits_1(run) -> None:
    code, out, _ = run("sql", "DROP TABLE nycflights13.flights")
    assert code == 1 and "Only SELECT queries run here" in out


def test_configuration_error_exits_2_in_one_line(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_ROWS", "zero")
    code, _, err = run("sql", "SELECT 1")
    assert (
        code == 2
        and err.strip() == "error: MAX_ROWS: Input should be a valid integer, unable to parse string as an integer"
    )


def test_usage_error_exits_2(run) -> None:
    with pytest.raises(SystemExit) as caught:
        run("sql")
    assert caught.value.code == 2


def test_schema_prints_the_prompt_section(run) -> None:
    code, out, _ = run("schema")
    assert code == 0 and "## nycflights13.flights" in out


def test_schema_over_its_budget_prints_the_catalogue(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEMA_MAX_CHARS", "1000")
    code, out, _ = run("schema")
    assert code == 0 and out.startswith(
        "## nycflights13\n- aircraft_registrations (~3.8K rows) [ReplacingMergeTree: read"
    )
    assert "| column |" not in out


def test_cells_reach_the_terminal_as_text_not_escape_codes(run) -> None:
    """A cell anyone may have written (here built by the query) is shown, never obeyed by the terminal."""
    code, out, _ = run("sql", "SELECT concat('a', char(27), '[2J') AS s")
    assert code == 0 and "\x1b" not in out and "a\\x1b[2J" in out
