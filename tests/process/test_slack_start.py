"""`agent slack` when Slack cannot be reached says so in one line (exit 2), and Bolt's warning about the
environment's SLACK_BOT_TOKEN (meant: the token comes from the settings) is not printed at every start."""

from __future__ import annotations

from pathlib import Path

import pytest

from process.cli import main


def test_slack_unreachable_is_one_line_and_bolt_does_not_warn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cli_data_dir: Path
) -> None:
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")  # Bolt reads it from the environment by itself
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "secret")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9/api/")  # the discard port: nothing listens
    assert main(["slack", "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: Slack is unreachable at http://127.0.0.1:9/api/ (")
    assert captured.err.endswith("); check the network, or SLACK_API_URL.\n")
    assert captured.err.count("\n") == 1, captured.err  # no Bolt warning, no traceback
