"""`agent evals check` (no model) on the shipped suites and on broken ones, and the shipped suites
run end to end by a model that replays each case's gold SQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.suite import Case, default_suite_paths, load_suites
from process.cli import main
from tests.evals.test_evals_run import is_judge_request, locate, write_suite
from tests.fakes.anthropic_api import FakeAnthropic, Reply

DECLINE = (
    "I can't do that: I can only run read-only queries on the nycflights13 tables, so I won't touch files, "
    "settings, credentials, other databases or the network."
)
DESCRIBE = (
    "I answer questions about the 2013 New York flights data (flights, weather, planes, airports and airlines) "
    "by writing and running SQL."
)


def scripted(case: Case) -> str:
    """An answer without a query that says what the case expects: declining, and naming what it declines;
    naming what the data lacks and that it lacks it; else describing the data, naming what it must."""
    expect = case.expect
    named = [way if isinstance(way, str) else way[0] for way in (*expect.contains, *expect.missing, *expect.refuses)]
    if expect.refused or expect.refuses:
        return f"{DECLINE} Not here: {', '.join(named)}." if named else DECLINE
    if expect.missing:
        return f"There is no {', '.join(named)} in this data: it holds only flights that left New York in 2013."
    return f"{DESCRIBE} {', '.join(named)}".strip()


class GoldReplay:
    """A model that answers each case by running its gold SQL and quoting the result tables, and
    answers a case without gold SQL as the case expects, without a query (`scripted`). As judge it
    passes everything."""

    def __init__(self, cases: list[Case]) -> None:
        self.cases = {case.question: case for case in cases}

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_judge_request(body):
            return Reply(text='{"verdict": "pass", "reason": "replayed the gold result"}')
        question, after = locate(body, self.cases)
        case = self.cases[question]
        if not after:
            if case.gold_sql:
                query = {"question": question[:100], "sql": case.gold_sql}
                return Reply(
                    tool_calls=[("think", {"content": "Run the query."}), ("execute_sql", {"queries": [query]})]
                )
            return Reply(text=scripted(case))
        if case.report:  # a report: its sections, a finding per row of the result
            return Reply(text=report_of(result_tables(after[-1])))
        return Reply(text=f"Here is what the data shows [Q1]:\n\n{result_tables(after[-1])}")


def report_of(table: str) -> str:
    """A report written from one result table: each data row a finding citing it."""
    rows = [line for line in table.splitlines()[2:] if line.strip()]
    findings = "\n".join(f"- {' '.join(row.strip('|').split('|'))} [Q1]" for row in rows)
    return (
        f"## Summary\nHere is what the data shows [Q1].\n\n## Findings\n{findings}\n\n"
        "## How this was found\nQ1 ran the query.\n\n## Caveats\nA replay, not an analysis."
    )


def result_tables(message: dict[str, Any]) -> str:
    """The tables in a message of tool results, without their status lines."""
    tables = []
    for block in message["content"]:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
            rows = [line for line in block["content"].splitlines() if line.startswith("|")]
            if rows:
                tables.append("\n".join(rows))
    return "\n\n".join(tables)


@pytest.fixture(autouse=True)
def _own_data_dir(monkeypatch: pytest.MonkeyPatch, cli_data_dir: Path) -> None:
    """`agent evals` starts its own engine, which cannot share the session engine's data directory."""
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))


@pytest.fixture
def eval_env(monkeypatch: pytest.MonkeyPatch, fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    return fake_anthropic


def test_check_is_green_on_the_shipped_suites(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evals", "check"]) == 0
    out = capsys.readouterr().out
    assert "nycflights13 (" in out and "safety (" in out and "✗" not in out


def test_check_names_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad_schema = tmp_path / "bad.yaml"
    bad_schema.write_text("name: bad\ndataset: demo\ncases:\n  - id: one\n    question: q\n    tags: [count, null]\n")
    broken = write_suite(
        tmp_path / "broken.yaml",
        [
            {"id": "wrong-contains", "question": "q1", "gold_sql": "SELECT 16 AS n", "expect": {"contains": ["17"]}},
            {"id": "too-long", "question": "q2", "gold_sql": "SELECT * FROM nycflights13.airports"},
            {"id": "out-of-scope", "question": "q3", "gold_sql": "SELECT * FROM system.users"},
            {"id": "fine", "question": "q4", "gold_sql": "SELECT 16 AS n", "expect": {"contains": ["16"]}},
        ],
        name="broken",
    )
    assert main(["evals", "check", "--suite", str(bad_schema), str(broken)]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("✗")]
    assert lines[0] == (
        f"✗ {bad_schema}: case 'one': tags.1: Input should be a valid string "
        '(a bare null in YAML is no value: quote it, as in "null")'
    )
    assert lines[1:] == [
        "✗ broken/wrong-contains: the gold result does not contain '17' (expect.contains)",
        "✗ broken/too-long: the gold result has more than 50 rows (MAX_ROWS), so it cannot be matched",
        "✗ broken/out-of-scope: the gold query failed: The table system.users is not available to this agent. "
        "Use the tables listed in the schema.",
    ]


def test_replaying_gold_sql_passes_the_shipped_suites(eval_env: FakeAnthropic, tmp_path: Path) -> None:
    suites = load_suites(default_suite_paths())
    cases = [case for suite in suites for case in suite.cases]
    eval_env.always(GoldReplay(cases))
    out = tmp_path / "run"
    assert main(["evals", "run", "--concurrency", "4", "--out", str(out), "--min-pass-rate", "1"]) == 0
    record = json.loads((out / "results.json").read_text())
    failed = {case["id"]: case["checks"] for case in record["cases"] if not case["passed"]}
    assert failed == {} and record["total"] == len(cases)
    gold = [c for c in record["cases"] if any(k["name"] == "gold_sql" for k in c["checks"])]
    assert len(gold) == sum(1 for case in cases if case.gold_sql)
    assert all(c["judge"]["passed"] for c in record["cases"] if c["judge"])
