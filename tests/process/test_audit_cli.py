"""`agent audit`: the audit entries printed for a person or exported as JSON lines, filtered by person,
policy, interface and time; a bad filter or a data folder with nothing asked is one line, exit 2."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from chats.audit import AuditEntry, AuditQuery
from chats.state import ChatState, state_path
from process.audit_cli import moment, owner_of
from process.cli import main

ANN = "person:email:ann@example.com"
SQL = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder of this test's own (the session's demo folder is shared)."""
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def entries(folder: Path) -> list[AuditEntry]:
    now = time.time()
    made = [
        AuditEntry("r1", now - 10 * 86400, ANN, "web", "", "jfk", "c1", "old question?", "answered"),
        AuditEntry(
            "r2",
            now - 3600,
            "person:slack:T1:U1",
            "slack",
            "C42",
            "lga",
            "c2",
            "busiest airport?",
            "answered",
            (AuditQuery("Q1", SQL, 336776, 2_694_208), AuditQuery("Q2", SQL, None, None, reused_from="Q1")),
        ),
        AuditEntry("r3", now - 60, ANN, "web", "", "lga", "c3", "a \x1b[2J trick?", "cancelled"),
    ]
    state = ChatState(state_path(folder))
    try:
        for entry in made:
            asyncio.run(state.audit.record(entry))
    finally:
        state.close()
    return made


def test_entries_are_printed_for_a_person(entries: list[AuditEntry], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("  run ")[-1] for line in out.splitlines() if "  run " in line] == ["r1", "r2", "r3"]
    assert "person:slack:T1:U1  slack C42  policy lga  answered  336,776 rows, 2.7 MB read" in out
    assert f"  Q1  336,776 rows, 2.7 MB read  {SQL}" in out and "  Q2  reused Q1  " in out
    assert "\x1b" not in out and "\\x1b[2J" in out, "what a person typed cannot drive the terminal"
    assert err.strip() == "3 audit entries."


@pytest.mark.parametrize(
    ("argv", "run_ids"),
    [
        (["--person", "ann@example.com"], ["r1", "r3"]),
        (["--person", "slack:T1:U1"], ["r2"]),
        (["--policy", "lga"], ["r2", "r3"]),
        (["--interface", "slack"], ["r2"]),
        (["--since", "7d"], ["r2", "r3"]),
        (["--since", "2h", "--until", "30m"], ["r2"]),
        (["--until", "2000-01-01"], []),
    ],
)
def test_json_lines_export_what_the_filters_match(
    entries: list[AuditEntry], capsys: pytest.CaptureFixture[str], argv: list[str], run_ids: list[str]
) -> None:
    assert main(["audit", "--json", *argv]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["run_id"] for line in lines] == run_ids
    for line in lines:
        assert line == next(e for e in entries if e.run_id == line["run_id"]).as_json()


def test_a_bad_time_is_one_line_and_exit_2(entries: list[AuditEntry], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--since", "last tuesday"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: 'last tuesday' is neither a date") and "Traceback" not in err


def test_a_folder_where_nothing_was_asked_says_so(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"].startswith("No state file at") and err.count("\n") == 1
    assert not state_path(folder).exists(), "reading the audit creates nothing"


def test_people_and_times_are_read_as_people_type_them() -> None:
    assert owner_of("Ann@Example.com") == ANN and owner_of(ANN) == ANN
    assert owner_of("slack-channel:T1:C1") == "slack-channel:T1:C1" and owner_of("local") == "person:local"
    assert moment("1d12h", 1_000_000.0) == 1_000_000.0 - 36 * 3600
    assert moment("2026-05-01", 0) == moment("2026-05-01T00:00:00+00:00", 0)


def test_the_audit_is_read_from_the_state_url(
    postgres_server, folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_server.new_database()
    state = ChatState(url)
    try:
        entry = AuditEntry("p1", time.time(), ANN, "web", "", "", "c1", "on postgres?", "answered")
        asyncio.run(state.audit.record(entry))
    finally:
        state.close()
    monkeypatch.setenv("AGENT_STATE_URL", url)
    assert main(["audit", "--json"]) == 0
    assert [json.loads(line)["run_id"] for line in capsys.readouterr().out.splitlines()] == ["p1"]
    assert not state_path(folder).exists(), "no SQLite file beside it"
