"""`agent knowledge check`: every SQL through the model's own path; problems name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import DEMO_KNOWLEDGE_DIR
from agent.db import Database, Scope
from agent.knowledge import check_entries, load_directory
from process.cli import main

BAD = """verified_queries:
  - question: ok
    sql: SELECT count() FROM nycflights13.flights
    verified_by: a
    verified_at: 2026-01-01
metrics:
  - name: typo
    description: a column that does not exist
    sql: avg(arr_dleay)
    tables: [nycflights13.flights]
  - name: two tables
    description: no join given
    sql: count()
    tables: [nycflights13.flights, nycflights13.planes]
notes:
  - table: nycflights13.flights
    column: no_such_column
    note: n
glossary:
  - term: secrets
    definition: reads the catalogue
    sql: SELECT name FROM system.tables
  - term: files
    definition: a refused function
    sql: SELECT file('/etc/passwd')
  - term: weather
    definition: out of scope below
    table: nycflights13.weather
    sql: temp > 80
"""


async def test_the_demo_knowledge_passes(db: Database) -> None:
    """CI runs this: the knowledge the repository ships checks clean against the demo data."""
    assert await check_entries(db, load_directory(DEMO_KNOWLEDGE_DIR)) == []


async def test_every_kind_of_bad_sql_is_a_problem_naming_file_and_line(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(BAD)
    scoped = Database(db.backend, scope=Scope.of(["nycflights13"], ["nycflights13.weather"]), functions=db.functions)
    problems = {p.where: p for p in await check_entries(scoped, load_directory(tmp_path))}
    assert set(problems) == {f"{path}:{line}" for line in (9, 14, 17, 22, 25, 29)}
    assert "arr_dleay" in problems[f"{path}:9"].message and problems[f"{path}:9"].entry == "[metric: typo]"
    assert "give `from`" in problems[f"{path}:14"].message
    assert "no_such_column" in problems[f"{path}:17"].message
    assert "system.tables is not available" in problems[f"{path}:22"].message
    assert "file() is not allowed" in problems[f"{path}:25"].message
    weather = problems[f"{path}:29"].message
    assert "not available" in weather and "temp" not in weather.split("not available")[0]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cli_data_dir: Path):
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))

    def invoke(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_the_command_exits_1_with_file_and_line(run, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD.split("glossary:")[0])
    code, out, err = run("knowledge", "check", str(tmp_path))
    assert code == 1 and "3 entries, 3 problems" not in out and "4 entries, 3 problems" in out
    assert f"{tmp_path / 'bad.yaml'}:9: [metric: typo] " in err
    code, out, _ = run("knowledge", "check")  # the demo's, by default for the demo data
    assert code == 0 and out.strip().endswith("entries, 0 problems")
