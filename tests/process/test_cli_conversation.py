"""`agent ask` goes on with a conversation and `agent chat` holds one, in the store the web uses; a
clarification's options print once and a number picks one. An empty question asks nothing."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from process.cli import main
from tests.fakes.anthropic_api import FakeAnthropic, Reply


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, fake_anthropic: FakeAnthropic, cli_data_dir: Path) -> FakeAnthropic:
    monkeypatch.setenv("AGENT_DATA_DIR", str(cli_data_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    return fake_anthropic


def _airlines() -> list[Reply]:
    sql = "SELECT count() AS n FROM nycflights13.airlines"
    return [
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": sql}]})]),
        Reply(text="There are 16 airlines [Q1]."),
    ]


def _clarification() -> Reply:
    options = {"question": "Which delay do you mean?", "options": ["Departure delay", "Arrival delay"]}
    return Reply(tool_calls=[("ask_clarification", options)])


def _user_texts(request: dict) -> list[str]:
    texts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [b["text"] for b in blocks if b.get("type") == "text"]
    return texts


def _turns(data_dir: Path, conversation_id: str) -> list[tuple[str, str]]:
    with sqlite3.connect(data_dir / "state.sqlite3") as conn:
        rows = conn.execute(
            "SELECT question, outcome FROM turns WHERE conversation_id = ? ORDER BY created_at", (conversation_id,)
        ).fetchall()
    return [(q, o) for q, o in rows]


def test_an_empty_question_is_a_usage_error_before_any_model_call(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ask", "   "]) == 2
    assert capsys.readouterr().err.startswith("error: The question is empty")
    assert cli_env.requests == []


def test_continue_and_conversation_go_on_with_a_conversation_kept_in_the_web_store(
    cli_env: FakeAnthropic, cli_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env.script(*_airlines())
    assert main(["ask", "--no-followups", "--json", "How many airlines are there?"]) == 0
    first = json.loads(capsys.readouterr().out)["conversation_id"]

    cli_env.script(Reply(text="It has not changed."))
    assert main(["ask", "--no-followups", "--continue", "And now?"]) == 0
    assert "How many airlines are there?" in _user_texts(cli_env.requests[-1])[0]  # the earlier turn, sent again
    assert capsys.readouterr().out == "It has not changed.\n"

    cli_env.script(Reply(text="Yes, sure."))
    assert main(["ask", "--no-followups", "--conversation", first, "Sure?"]) == 0
    assert [q for q, _ in _turns(cli_data_dir, first)] == ["How many airlines are there?", "And now?", "Sure?"]

    assert main(["ask", "--conversation", "nope", "Hello?"]) == 2
    assert "No conversation nope" in capsys.readouterr().err


def test_a_clarification_prints_its_options_once_and_chat_picks_one_by_number(
    cli_env: FakeAnthropic, cli_data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_env.script(_clarification(), Reply(text="Then arrivals it is."))
    monkeypatch.setattr("sys.stdin", io.StringIO("What was the average delay?\n2\nexit\n"))
    assert main(["chat", "--no-followups"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("Arrival delay") == 1  # in the answer, not listed again
    assert "type 1-2 to pick one of the options above" in captured.err
    assert _user_texts(cli_env.requests[-1])[-1] == "Arrival delay"  # the number picked the option
    assert "What was the average delay?" in " ".join(_user_texts(cli_env.requests[-1]))
    conversation = (cli_data_dir / "cli-conversation").read_text().strip()
    assert _turns(cli_data_dir, conversation) == [
        ("What was the average delay?", "answered"),
        ("Arrival delay", "answered"),
    ]


def test_ask_after_a_clarification_says_how_to_answer_it(
    cli_env: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env.script(_clarification())
    assert main(["ask", "What was the average delay?"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("Departure delay") == 1 and "Departure delay" not in captured.err
    assert 'agent ask --continue "<one of the 2 options, or your own>"' in captured.err


def test_chat_picks_a_follow_up_by_number_and_asks_it_in_the_same_conversation(
    cli_env: FakeAnthropic, cli_data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    followups = Reply(text='["Which airline flew the most?", "Which airline was most delayed?"]')
    cli_env.script(*_airlines(), followups, Reply(text="United flew the most."), Reply(text="[]"))
    monkeypatch.setattr("sys.stdin", io.StringIO("How many airlines are there?\n2\nexit\n"))
    assert main(["chat"]) == 0
    err = capsys.readouterr().err
    assert "  2. Which airline was most delayed?" in err and "› Which airline was most delayed?" in err
    conversation = (cli_data_dir / "cli-conversation").read_text().strip()
    assert [q for q, _ in _turns(cli_data_dir, conversation)] == [
        "How many airlines are there?",
        "Which airline was most delayed?",  # the number picked the follow-up, not a question "2"
    ]
