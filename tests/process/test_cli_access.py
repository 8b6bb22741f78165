"""`agent access check [FILE]`: every problem of the policy file one line with file and line, exit 1;
a good file exit 0; never a stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from process.cli import main
from process.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

DEMO = Path(__file__).resolve().parents[2] / "deploy" / "access" / "nycflights13.yaml"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cli_data_dir: Path):
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_the_demo_policy_file_checks_clean(run) -> None:
    code, out, err = run("access", "check", str(DEMO))
    assert code == EXIT_OK, err
    assert out.strip() == f"{DEMO}: 0 problems" and err == ""


def test_tables_and_filters_the_warehouse_refuses_are_one_line_each(run, tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text(
        "policies:\n"  # 1
        "  - name: a\n"  # 2
        "    tables:\n"  # 3
        "      nycflights13.flights: origin = \n"  # 4: does not parse
        "      nycflights13.flightz:\n"  # 5: no such table
        "      nycflights13.weather: origin IN (SELECT 'JFK')\n"  # 6: a subquery
        "      nycflights13.planes: year > 2000\n"  # 7: fine
    )
    code, out, err = run("access", "check", str(path))
    assert code == EXIT_FAILED
    lines = err.strip().splitlines()
    assert [line.split(":")[1] for line in lines] == ["4", "5", "6"], err
    assert "Syntax error" in lines[0] and "unknown table nycflights13.flightz" in lines[1] and "subquery" in lines[2]
    assert "did you mean nycflights13.flights" in lines[1]
    assert "Traceback" not in err and out.strip() == f"{path}: 3 problems"


def test_a_file_that_does_not_read_is_its_problems_without_the_warehouse(run, tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text("policies:\n  - name: a\n    members:\n      - phone: 555\n  - name: a\nchannels:\n  C1: b\n")
    code, _, err = run("access", "check", str(path))
    assert code == EXIT_FAILED and "Traceback" not in err
    assert [line.split(":")[1] for line in err.strip().splitlines()] == ["4", "5", "7"], err


def test_without_a_file_it_says_how_to_name_one(run) -> None:
    code, _, err = run("access", "check")
    assert code == EXIT_USAGE and "AGENT_ACCESS_FILE" in err
