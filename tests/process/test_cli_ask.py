"""`agent ask` in-process against the fake Messages API."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from chats.runs import done_event
from process.cli import main
from process.terminal import TerminalPrinter
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
    captured = capsys.readouterr()
    # Not a terminal: the answer alone on stdout (`> answer.md` holds it), the steps on stderr.
    assert captured.out == "There are 16 airlines [Q1].\n"
    err = captured.err
    assert err.index("🧠 Count the airlines.") < err.index("⚡ Q1 Airlines") < err.index("✓ Q1: 1 row in")
    assert "  1. Which airline flew the most?" in err
    # Plain text, the preview rows tab-separated, the receipt.
    assert "\x1b[" not in err and "\nQ1 Airlines\nn\n16\n" in err
    assert "claude-sonnet-5-5, claude-haiku-5-5 · 2 rounds ·" in err and "1 query: " in err


def test_steps_go_where_the_flag_says(cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]) -> None:
    _script_answer(cli_env)
    assert main(["ask", "--steps", "stdout", "How many airlines are there?"]) == 0
    out = capsys.readouterr().out
    assert out.index("⚡ Q1 Airlines") < out.index("There are 16 airlines [Q1].") < out.index("2 rounds")


def test_ask_json_has_the_documented_keys(cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]) -> None:
    _script_answer(cli_env)
    assert main(["ask", "--json", "How many airlines are there?"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {
        "question", "answer", "classification", "queries", "followups", "charts", "model", "figures", "receipt",
        "metrics", "conversation_id",
    }  # fmt: skip
    assert payload["model"] == "anthropic:claude-sonnet-5-5"
    assert payload["figures"]["verified"] == 1 and payload["figures"]["figures"][0]["how"] == "cell"
    assert payload["receipt"]["queries"] == 1 and payload["receipt"]["cost_usd"] > 0
    assert payload["charts"] == []
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
    out = capsys.readouterr().err
    note = "↪ anthropic:claude-sonnet-5-5 is overloaded; going on with anthropic:claude-opus-5-5."
    (receipt,) = [line for line in out.splitlines() if " rounds · " in line]  # names the model that answered
    assert out.index(note) < out.index("⚡ Q1 Airlines") and receipt.startswith("claude-opus-5-5, claude-haiku-5-5 · ")
    assert "sonnet" not in receipt
    sonnet = [r for r in cli_env.requests if r["model"] == "claude-sonnet-5-5"]
    assert len(sonnet) == 2  # AGENT_FALLBACK_RETRIES=1: one retry, then Opus; later rounds go straight to Opus


async def test_at_a_terminal_rich_renders_markdown_tables_and_the_receipt(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Per origin", "sql": ORIGINS}]})]),
        Reply(text="**EWR** had 130,000 departures [Q1]."),
        Reply(text="**EWR** had 130,000 departures [Q1]."),
    )
    out = io.StringIO()
    printer = TerminalPrinter(out, io.StringIO(), rich=True, steps=out)  # a terminal: steps and answer together
    result = await make_app().runner.run("busiest?", on_event=printer, followups=False)
    await printer(done_event(result))  # the run's end, as the run registry tells it
    text = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "\x1b[" in text and "**EWR**" not in plain and "EWR had 130,000 departures [Q1]." in plain
    assert "Q1 Per origin" in plain and "┃ origin ┃      n ┃" in plain and "│ EWR    │ 120835 │" in plain
    assert "⚠ 1 figure(s) match nothing in the results they cite:" in plain and "• 130,000: no cell of Q1" in plain
    assert "1 query: 336.8k rows" in plain


ORIGINS = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC"
