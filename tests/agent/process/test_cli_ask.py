"""`agent ask` in-process against the fake Messages API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.process.cli import main
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, fake_anthropic: FakeAnthropic, cli_data_dir: Path) -> FakeAnthropic:
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    return fake_anthropic


def _script_answer(fake: FakeAnthropic) -> None:
    fake.script(
        Reply(
            tool_calls=[
                ("think", {"content": "Count the airlines."}),
                (
                    "execute_sql",
                    {"queries": [{"question": "Airlines", "sql": "SELECT count() AS n FROM nycflights13.airlines"}]},
                ),
            ]
        ),
        Reply(text="There are 16 airlines [Q1]."),
        Reply(text='["Which airline flew the most?", "Which airline was most delayed?"]'),
    )


def test_ask_streams_steps_to_the_terminal(cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]) -> None:
    _script_answer(cli_env)
    assert main(["ask", "How many airlines are there?"]) == 0
    out = capsys.readouterr().out
    assert out.index("🧠 Count the airlines.") < out.index("⚡ Q1 Airlines") < out.index("✓ Q1: 1 rows")
    assert "There are 16 airlines [Q1]." in out and "  • Which airline flew the most?" in out


def test_ask_json_has_the_documented_keys(cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]) -> None:
    _script_answer(cli_env)
    assert main(["ask", "--json", "How many airlines are there?"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {
        "question",
        "answer",
        "classification",
        "queries",
        "followups",
        "charts",
        "model",
        "metrics",
    }
    assert payload["charts"] == [] and payload["model"] == "anthropic:claude-sonnet-5-5"
    assert payload["classification"] == "data_analysis" and payload["answer"] == "There are 16 airlines [Q1]."
    (query,) = payload["queries"]
    assert set(query) == {"id", "question", "sql", "columns", "rows", "row_count", "has_more", "error"}
    assert query["rows"] == [[16]] and query["id"] == "Q1"
    assert payload["followups"] == ["Which airline flew the most?", "Which airline was most delayed?"]


def test_missing_api_key_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "anything"]) == 2
    err = capsys.readouterr().err
    assert err == "error: ANTHROPIC_API_KEY is not set; the agent needs it to ask the model.\n"


def test_model_errors_exit_1_without_a_traceback(cli_env: FakeAnthropic, capsys) -> None:
    cli_env.script(Failure(401, "authentication_error"))
    assert main(["ask", "q"]) == 1
    captured = capsys.readouterr()
    assert "error: The model API refused the key (401)" in captured.err and "Traceback" not in captured.err


def test_ask_shows_a_fallback_and_names_the_model_that_answered(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MODEL", "claude-sonnet-5-5,claude-opus-5-5")
    cli_env.for_model("claude-sonnet-5-5", Failure(529, "overloaded_error", "Overloaded"))
    _script_answer(cli_env)
    assert main(["ask", "How many airlines are there?"]) == 0
    out = capsys.readouterr().out
    note = "↪ anthropic:claude-sonnet-5-5 is overloaded; going on with anthropic:claude-opus-5-5."
    assert out.index(note) < out.index("⚡ Q1 Airlines") and "s, anthropic:claude-opus-5-5)" in out
    sonnet = [r for r in cli_env.requests if r["model"] == "claude-sonnet-5-5"]
    assert len(sonnet) == 2  # AGENT_FALLBACK_RETRIES=1: one retry, then Opus; later rounds go straight to Opus
