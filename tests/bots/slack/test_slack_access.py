"""Which policy a Slack question runs under, end to end: the bot as `agent serve` runs it, with a policy file
(AGENT_ACCESS_FILE), against the strict fake Slack and the fake model, on the demo data. A channel's question
runs under the channel's policy whoever asks; a DM under the asker's; an asker Slack cannot name gets the
default. Asserted on the policy the runner was given, the tables the model was shown, and the rows the
engine returned to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.app import AgentApp
from agent.runner import RunResult
from bots.slack.blocks import escape
from bots.slack.failures import Failure, explain
from chats.people import Person, channel_owner, person_owner
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import DM_ID, GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack
from tests.slack_helpers import bot_replies, sql_call

BY_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
POLICY_FILE = f"""
contact: "#data-help"
policies:
  - name: jfk
    members:
      - email: {HUMAN_EMAIL}
    tables:
      nycflights13.flights: origin = 'JFK'
      nycflights13.weather: origin = 'JFK'
  - name: newark
    members:
      - email: ben@example.com
    tables:
      nycflights13.flights: origin = 'EWR'
      nycflights13.airlines:
channels:
  {GENERAL_ID}: newark
"""


class RecordedRunner:
    """The agent's own runner, noting the policy each run is given."""

    def __init__(self, runner: Any) -> None:
        self.runner, self.policies = runner, []  # type: list[Policy | None]

    async def run(self, question: str, **options: Any) -> RunResult:
        self.policies.append(options.get("policy"))
        result: RunResult = await self.runner.run(question, **options)
        return result


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text(POLICY_FILE, encoding="utf-8")
    return path


@pytest.fixture
async def bot_with_policies(start_bot, policy_file: Path) -> tuple[Any, RecordedRunner]:
    recorded: list[RecordedRunner] = []

    def record(agent: AgentApp) -> None:
        recorded.append(RecordedRunner(agent.runner))
        agent.runner = recorded[-1]

    bot = await start_bot(agent_access_file=str(policy_file), prepare=record)
    return bot, recorded[0]


def by_origin_script() -> list[Any]:
    return [Reply(tool_calls=[sql_call("Flights by origin", BY_ORIGIN)]), Reply(text="Counted [Q1]."), Reply(text="[]")]


def shown(fake: FakeAnthropic) -> tuple[str, str]:
    """What the model was shown: the system prompt of the first call, and what came back from the query."""
    system = " ".join(block["text"] for block in fake.requests[0]["system"])
    return system, json.dumps(fake.requests[1]["messages"])


async def dm(bot: Any, text: str) -> str:
    ts = bot.fake.add_message(DM_ID, text)
    await bot.event(events.im_message(text, ts=ts))
    await bot.idle()
    return ts


async def test_a_channel_question_runs_under_the_channels_policy_not_the_askers(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot, runner = bot_with_policies
    fake_anthropic.script(*by_origin_script())
    ts = await bot.ask("flights by origin?", channel=GENERAL_ID)  # Alice is in jfk; #general is newark's
    assert [p.name if p else None for p in runner.policies] == ["newark"]
    system, result = shown(fake_anthropic)
    assert "nycflights13.airlines" in system and "nycflights13.weather" not in system, "the channel's tables"
    assert "EWR" in result and "JFK" not in result and "LGA" not in result, "the engine returned Newark's rows only"
    conversation = await bot.service.store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{ts}")
    assert await owner_of(bot, conversation) == channel_owner(TEAM_ID, GENERAL_ID)


async def test_a_dm_runs_under_the_askers_policy(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot, runner = bot_with_policies
    fake_anthropic.script(*by_origin_script())
    ts = await dm(bot, "flights by origin?")
    assert [p.name if p else None for p in runner.policies] == ["jfk"]
    system, result = shown(fake_anthropic)
    assert "nycflights13.weather" in system and "nycflights13.airlines" not in system, "the asker's tables"
    assert "JFK" in result and "EWR" not in result and "LGA" not in result
    conversation = await bot.service.store.find(f"slack:{TEAM_ID}:{DM_ID}:{ts}")
    assert await owner_of(bot, conversation) == person_owner(f"email:{HUMAN_EMAIL}")
    assert fake_slack.last("users.info").args["user"] == HUMAN_ID


async def test_a_dm_asker_slack_cannot_name_for_a_missing_scope_gets_the_default_and_is_told_why(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot, runner = bot_with_policies
    fake_slack.revoke("users:read.email")  # an app installed from the manifest before this release
    ts = await dm(bot, "flights by origin?")
    assert [p.name if p else None for p in runner.policies] == ["no-data"]
    assert fake_anthropic.requests == [], "a policy that reads nothing is answered without the model"
    told = [m["text"] for m in bot_replies(fake_slack, DM_ID, ts)]
    assert escape(explain(Failure.ASKER_UNKNOWN, scope="users:read.email", reads_nothing=True)) in told
    assert any("#data-help" in text for text in told), "the default's answer names who to ask"


async def owner_of(bot: Any, conversation_id: str | None) -> str:
    assert conversation_id is not None
    store = bot.service.store
    row = await store._file.run(  # the owner column (chats/schema.py); no reader of it is the store's yet
        lambda c: c.execute("SELECT owner FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    )
    return str(row["owner"])


async def test_the_web_asks_the_bot_who_is_in_a_channel_and_slack_is_asked_once_per_ttl(
    start_bot, fake_slack: FakeSlack
) -> None:
    bot = await start_bot()
    audiences = bot.service.audiences
    alice = Person(f"email:{HUMAN_EMAIL}", email=HUMAN_EMAIL)
    bob = Person("email:bob@example.com", email="bob@example.com")
    fake_slack.add_user("U0BOB000001", "bob", email="bob@example.com")
    general = channel_owner(TEAM_ID, GENERAL_ID)
    assert await audiences.includes(alice, general)
    assert not await audiences.includes(bob, general), "Bob is not in #general"
    assert await audiences.includes(alice, general)
    assert len(fake_slack.calls("conversations.members")) == 1, "the members, kept briefly, serve every open"
    assert not await audiences.includes(alice, channel_owner(TEAM_ID, "C0NOWHERE01")), "a channel Slack does not know"
