"""`agent evals job` runs the scheduled eval job now, in-process with its own engine on the demo data, and
`agent evals trend` lists the runs it recorded in the state."""

from __future__ import annotations

from pathlib import Path

import pytest

from process.cli import main
from tests.evals_helpers import HALF_WRONG, answer_cases, write_suite
from tests.fakes.anthropic_api import FakeAnthropic


@pytest.fixture(autouse=True)
def _own_data_dir(monkeypatch: pytest.MonkeyPatch, cli_data_dir: Path, fake_anthropic: FakeAnthropic) -> None:
    """The command starts its own engine, which cannot share the session engine's data directory."""
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)


def test_the_job_runs_now_and_the_trend_lists_it(
    fake_anthropic: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_STATE_URL", str(tmp_path / "state.sqlite3"))
    monkeypatch.setenv("AGENT_KNOWLEDGE_DIR", "none")
    suite = write_suite(tmp_path)
    assert main(["evals", "trend"]) == 0
    assert "No eval run recorded yet" in capsys.readouterr().out
    answer_cases(fake_anthropic, HALF_WRONG)
    assert main(["evals", "job", "--suite", str(suite), "--no-judge"]) == 0
    said = capsys.readouterr().out
    assert "pass rate 50.0% (1/2)" in said and "report:" in said
    assert main(["evals", "job", "--suite", str(suite), "--no-judge", "--when-knowledge-changes"]) == 0
    assert "not run: the team's knowledge has not changed" in capsys.readouterr().out
    assert main(["evals", "trend"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert "manual" in line and "50.0% (1/2)" in line
