"""`agent evals schedule` makes, lists and deletes eval schedules in the state store, owned by the local
person (or the person named with --as); a bad cron expression, time zone, suite or destination is one
line a person can act on, exit 2, and nothing is made."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chats.people import LOCAL, person_owner
from chats.schedules import Schedule
from chats.state import ChatState
from process.cli import main
from process.evals_schedule import EvalSpec
from tests.evals_helpers import write_suite
from tests.fakes.slack_api import FakeSlack


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("AGENT_STATE_URL", str(tmp_path / "state.sqlite3"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    return tmp_path / "state.sqlite3"


def _schedules(path: Path, owner: str = person_owner(LOCAL)) -> list[Schedule]:
    state = ChatState(path)
    try:
        return asyncio.run(state.schedules.list_for(owner))
    finally:
        state.close()


def test_a_person_makes_lists_and_deletes_an_eval_schedule(
    _state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path)
    argv = ["evals", "schedule", "--cron", "0 6 * * 1", "--tz", "Europe/Berlin", "--suite", str(suite)]
    assert main([*argv, "--when-knowledge-changes"]) == 0
    [made] = _schedules(_state)
    assert capsys.readouterr().out.startswith(f"scheduled: {made.id}")
    assert made.kind == "evals" and made.draft.destination == "inbox"
    assert (made.draft.cadence.cron, made.draft.cadence.timezone) == ("0 6 * * 1", "Europe/Berlin")
    assert EvalSpec.of(made.draft.question) == EvalSpec((str(suite.resolve()),), when_knowledge_changes=True)

    assert main(["evals", "schedule", "--list"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert made.id in line and "Europe/Berlin" in line and "--when-knowledge-changes" in line

    assert main(["evals", "schedule", "--delete", made.id]) == 0
    assert capsys.readouterr().out.strip() == f"deleted: {made.id}"
    assert _schedules(_state) == []
    assert main(["evals", "schedule", "--delete", made.id]) == 2
    assert f"No eval schedule {made.id} of yours" in capsys.readouterr().err


def test_a_schedule_belongs_to_the_person_it_is_made_as(_state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evals", "schedule", "--cron", "0 6 * * *", "--to", "slack:T1:C42", "--as", "Ann@Example.com"]
    assert main(argv) == 0
    ann = person_owner("email:ann@example.com")
    [made] = _schedules(_state, ann)
    assert made.draft.destination == "slack:T1:C42"
    assert _schedules(_state) == [], "not the local person's"
    capsys.readouterr()
    assert main(["evals", "schedule", "--delete", made.id]) == 2, "another's schedule is as one that does not exist"
    assert [s.id for s in _schedules(_state, ann)] == [made.id]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--cron", "0 6 * *"], "--cron '0 6 * *' --tz UTC: A cron expression has five fields"),
        (["--cron", "0 25 * * *"], "--cron '0 25 * * *' --tz UTC:"),
        (["--cron", "0 6 * * 1", "--tz", "Mars/Olympus"], "Unknown time zone 'Mars/Olympus'"),
        (["--cron", "0 6 * * 1", "--suite", "missing.yaml"], "missing.yaml: cannot be read"),
        (["--cron", "0 6 * * 1", "--to", "email:ann"], "--to 'email:ann': say inbox, slack:CHANNEL"),
        (["--cron", "0 6 * * 1", "--to", "slack:C42"], "set SLACK_BOT_TOKEN, or name the workspace"),
        ([], "Say one of --cron"),
        (["--list", "--delete", "x"], "Say one of --cron"),
    ],
)
def test_a_bad_schedule_is_one_line_exit_2_and_nothing_is_made(
    _state: Path, options: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evals", "schedule", *options]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and said in err, err
    assert _schedules(_state) == []


def test_a_slack_channel_is_in_the_bots_workspace_as_slack_says(
    _state: Path, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_API_URL", fake_slack.base_url)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-the-bots")
    assert main(["evals", "schedule", "--cron", "0 6 * * 1", "--to", "slack:C42"]) == 2
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in capsys.readouterr().err
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake_slack.bot_token)
    assert main(["evals", "schedule", "--cron", "0 6 * * 1", "--to", "slack:C42"]) == 0
    [made] = _schedules(_state)
    assert made.draft.destination == f"slack:{fake_slack.team_id}:C42"
