"""`agent report` in-process against the fake Messages API and the demo data: steps as they run, the
report as Markdown (or JSON), saved as PDF and Markdown, and `--resume` of a partial one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from process.cli import main
from tests.agent.pipeline.test_reports import MONTHS, ORIGINS, PARTIAL, REPORT, sql, think
from tests.fakes.anthropic_api import FakeAnthropic, Reply

WRITTEN = REPORT.replace("25 minutes", "19 minutes")


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, fake_anthropic: FakeAnthropic, cli_data_dir: Path) -> FakeAnthropic:
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    return fake_anthropic


def test_a_report_prints_its_steps_then_the_report_and_saves_pdf_and_markdown(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cli_env.script(
        Reply(tool_calls=[think("Compare June with July."), sql(MONTHS)]),
        Reply(tool_calls=[sql(ORIGINS)]),
        Reply(text=WRITTEN),
    )
    pdf, markdown = tmp_path / "r.pdf", tmp_path / "r.md"
    assert main(["report", "Why did delays rise in July?", "--pdf", str(pdf), "--markdown", str(markdown)]) == 0
    out, err = capsys.readouterr()
    assert err.index("▶ step 1: Compare June with July. (0/15 queries)") < err.index("⚡ Q1") < err.index("▶ step 2")
    assert out.startswith("# Why did delays rise in July?\n\n_Complete · 3 findings · 2 queries · 6 of 6 figures")
    assert "## How this was found" in out and "### Q2: July's average departure delay" in out
    assert markdown.read_text() == out and pdf.read_bytes().startswith(b"%PDF-")
    assert re.search(r"\(Complete · .*; report [0-9a-f]{32}\)", err)


def test_a_partial_report_says_how_to_resume_and_resume_completes_it_as_json(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_REPORT_MAX_QUERIES", "1")
    cli_env.script(Reply(tool_calls=[sql(MONTHS, ORIGINS)]), Reply(text=PARTIAL))
    assert main(["report", "Why did delays rise in July?"]) == 0
    out, err = capsys.readouterr()
    report_id = re.search(r"agent report --resume ([0-9a-f]{32}) continues it", err).group(1)  # type: ignore[union-attr]
    assert "_Partial: stopped at its queries limit · " in out and "## What remains" in out

    cli_env.reset()
    cli_env.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text=WRITTEN))
    assert main(["report", "--resume", report_id, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    report = payload["report"]
    assert report["id"] == report_id and report["outcome"] == "complete" and len(report["runs"]) == 2
    assert [q["id"] for q in report["queries"]] == ["Q1", "Q2"] and report["used"]["queries"] == 2
    assert payload["markdown"].startswith("# Why did delays rise in July?")


def test_a_report_needs_a_question_or_a_report_to_resume(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report"]) == 2
    assert main(["report", "--resume", "f" * 32]) == 2
    assert "No report ffff" in capsys.readouterr().err
