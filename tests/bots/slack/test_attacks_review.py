"""An outside review's attacks on the Slack bot's access claims, each written as the SAFE behaviour (so each
fails while the hole is open). Driven through the real bot (`agent serve`'s composition) against the strict
fake Slack and the fake model on chdb, or through the real SDK against the fake for the identity pieces.

Claims attacked: a channel's question runs under the channel's policy, never the asker's (bots/slack/access.py);
a Slack person is linked to a web person only by a VERIFIED email (bots/slack/people.py); someone removed from
a user group loses what it grants within the identity TTL (bots/slack/app.py IDENTITY_TTL_S, recent.py); a
Slack answer's links open only for its audience, under its policy (chats/audiences.py); every question leaves
an audit entry naming the right person (chats/audit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent.app import AgentApp
from bots.slack.people import SlackPeople, verified_email
from chats.people import channel_owner
from tests.bots.slack.test_slack_access import POLICY_FILE, RecordedRunner, by_origin_script, owner_of
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import DM_ID, GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack
from tests.slack_helpers import answer_message, bot_replies, carriers_script

DATA_TEAM = "S0DATA00001"
TTL_S = 60.0


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


@pytest.fixture
async def client(fake_slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    yield AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.base_url)


def im_typed_message_in_a_channel(text: str, ts: str) -> dict[str, Any]:
    """A `message` event in a public channel (C id) whose `channel_type` says `im`: the two disagree."""
    return events.message(text, channel=GENERAL_ID, ts=ts, channel_type="im")


# --- a channel taken for a DM ---


async def test_a_channel_message_whose_channel_type_says_im_still_runs_under_the_channels_policy(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """receive.py decides `is_dm` by `channel_type == "im"` OR a D id: when they disagree it believes the one
    that opens more. The answer is posted in #general (everyone there reads it) but was computed under
    Alice's own policy (jfk) and the conversation is owned by Alice, not the channel. Safe: the channel's id
    decides (a C id is never a DM) or the disagreement is refused; never the asker's policy in a channel."""
    bot, runner = bot_with_policies
    fake_anthropic.script(*by_origin_script())
    ts = fake_slack.add_message(GENERAL_ID, "flights by origin?")
    assert (await bot.event(im_typed_message_in_a_channel("flights by origin?", ts))).status_code == 200
    await bot.idle()
    used = [p.name if p else None for p in runner.policies]
    assert "jfk" not in used, f"a question in #general ran under the asker's policy: {used}"
    conversation = await bot.service.store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{ts}")
    if conversation is not None:
        assert await owner_of(bot, conversation) == channel_owner(TEAM_ID, GENERAL_ID)


async def test_a_channel_message_whose_channel_type_says_im_does_not_pass_the_channel_allowlist(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """SLACK_ALLOWED_CHANNELS skips DMs; a C channel whose event says `im` is taken for one and answered
    in a channel the allowlist does not name. Safe: ignored, as an app_mention there is."""
    bot = await start_bot(slack_allowed_channels=["C0ELSEWHERE"])
    fake_anthropic.script(*carriers_script())
    ts = fake_slack.add_message(GENERAL_ID, "which carrier flew the most?")
    assert (await bot.event(im_typed_message_in_a_channel("which carrier flew the most?", ts))).status_code == 200
    await bot.idle()
    assert fake_anthropic.requests == [], "the model was asked about a channel the allowlist does not name"
    assert bot_replies(fake_slack, GENERAL_ID, ts) == [], "the bot answered in a channel not allowed"


# --- a verified email ---


def test_an_email_slack_does_not_say_is_confirmed_is_not_believed() -> None:
    """verified_email() rejects `is_email_confirmed: False` but believes a profile that does not say at all
    (and one naming no team): absence of proof is taken as proof, and the person becomes the web person with
    that address, with their policy and their DMs' conversations. Safe: only `is_email_confirmed: True`
    of a person shown to be of this workspace links."""
    unconfirmed = {"id": "U0EVE000001", "team_id": TEAM_ID, "profile": {"email": HUMAN_EMAIL}}
    assert verified_email(unconfirmed, TEAM_ID) is None, "an email Slack never said was confirmed was believed"
    no_team = {"id": "U0EVE000001", "is_email_confirmed": True, "profile": {"email": HUMAN_EMAIL}}
    assert verified_email(no_team, TEAM_ID) is None, "a person of no stated team was taken for this workspace's"


# --- user groups, kept too long ---


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_someone_removed_from_a_user_group_loses_it_within_the_ttl(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    """The person and the team's groups are kept in two caches of 60 s each, and a person is built from the
    groups cache: a person looked up at 59 s from groups read at 0 s is kept until 119 s. Someone removed
    from a group just after 0 s still holds it at 100 s, past the promised 60 s (app.py IDENTITY_TTL_S:
    "someone removed from a channel or a group keeps its access at most this long")."""
    group = fake_slack.add_usergroup(DATA_TEAM, "data-team", [HUMAN_ID, "U0BOB000001"])
    fake_slack.add_user("U0BOB000001", "bob", email="bob@example.com")
    people = SlackPeople(lambda: client, wants_groups=True, ttl_s=TTL_S)
    clock = Clock()
    people._people._clock = people._groups._clock = clock  # the caches' own clock, moved by hand
    await people.person(TEAM_ID, "U0BOB000001")  # 0 s: the team's groups are read (Alice in data-team)
    group.users.remove(HUMAN_ID)  # 1 s: an admin takes Alice out of the group
    clock.now += 59
    await people.person(TEAM_ID, HUMAN_ID)  # 59 s: Alice asks
    clock.now += 41
    later = await people.person(TEAM_ID, HUMAN_ID)  # 100 s: 99 s after she left the group
    assert later.asker is not None
    assert DATA_TEAM not in later.asker.slack_usergroups, "a group left 99 s ago still grants its policy"


# --- the web's doors to a Slack answer's queries ---


def query_id_of(fake: FakeSlack, channel: str, ts: str) -> str:
    run_id = answer_message(fake, channel, ts)["metadata"]["event_payload"]["run_id"]
    return f"{run_id}-Q1"


async def test_a_channel_answers_csv_link_is_read_under_the_channels_policy(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """#general's policy (newark) reads EWR's flights only, and the answer's preview shows EWR only. The CSV
    download its query links to (web/views/queries.py query_csv) runs the stored SQL again through
    agent.export without the policy (`policy=None`: every row in scope), so whoever follows the link gets
    JFK's and LGA's rows too. Safe: the download runs under the policy the question was asked under."""
    bot, runner = bot_with_policies
    fake_anthropic.script(*by_origin_script())
    ts = await bot.ask("flights by origin?", channel=GENERAL_ID)
    assert [p.name if p else None for p in runner.policies] == ["newark"]
    response = await bot.http.get(f"/api/queries/{query_id_of(fake_slack, GENERAL_ID, ts)}.csv")
    assert response.status_code in (200, 404), response.text
    assert "JFK" not in response.text and "LGA" not in response.text, f"rows newark may not read: {response.text}"


async def test_a_dm_answers_query_is_not_served_to_a_web_request_that_is_not_its_asker(
    bot_with_policies, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Alice's DM ran under her policy (jfk) and its conversation is hers (person:email:alice). The query
    page's API (GET /api/queries/{id}, and its CSV) consults no owner: chats/audiences.py is built by
    process/service.py and never asked by any route, so any request holding the server's token (here: none
    is set) reads her question, SQL and JFK rows. Safe: 404 to whoever is not in the answer's audience."""
    bot, runner = bot_with_policies
    fake_anthropic.script(*by_origin_script())
    ts = fake_slack.add_message(DM_ID, "flights by origin?")
    await bot.event(events.im_message("flights by origin?", ts=ts))
    await bot.idle()
    assert [p.name if p else None for p in runner.policies] == ["jfk"]
    query = query_id_of(fake_slack, DM_ID, ts)
    page, csv = await bot.http.get(f"/api/queries/{query}"), await bot.http.get(f"/api/queries/{query}.csv")
    assert (page.status_code, csv.status_code) == (404, 404), "Alice's DM query opened for an anonymous request"


# --- a Slack Connect person, named in the audit ---

PARTNER_TEAM, EVE = "T0OTHERORG1", "U0EXT000001"


async def test_a_slack_connect_askers_audit_entry_names_their_own_organisation(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Eve, of another organisation, asks in a shared channel. Her email is rightly not believed, so she is
    named by team and user id: but the team written is the installing workspace's (Question.team), not hers
    (users.info says T0OTHERORG1; the event's `user_team` too). The audit then reads as if one of this
    organisation's own people asked. Safe: a person's team is their own."""
    bot = await start_bot()
    fake_slack.add_user(EVE, "eve", email=HUMAN_EMAIL, team_id=PARTNER_TEAM)  # she also claims Alice's address
    fake_anthropic.script(*carriers_script())
    asked = fake_slack.add_message(
        GENERAL_ID, f"<@{fake_slack.bot_user_id}> which carrier?", user=EVE, team=PARTNER_TEAM
    )
    mention = events.app_mention("which carrier?", ts=asked, user=EVE)
    await bot.deliver(events.events_request(events.event_callback(mention, source_team=PARTNER_TEAM)))
    await bot.idle()
    [entry] = await bot.service.state.audit.entries()
    assert entry.person != f"person:email:{HUMAN_EMAIL}", "held: her claim to Alice's address is not believed"
    assert entry.person == f"person:slack:{PARTNER_TEAM}:{EVE}", f"named as this workspace's person: {entry.person}"


# --- a question refused before it runs ---


async def test_a_question_refused_by_the_rate_limit_still_leaves_an_audit_entry(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Entries are written where a run ends (chats/runs.py), so a question refused before its run (the rate
    limit here; the daily budget and the length cap alike) leaves no trace of who asked what, where. Safe:
    every question, answered or refused, has its entry (the claim: every question leaves one)."""
    bot = await start_bot(slack_rate_per_minute=1)
    fake_anthropic.script(*carriers_script())
    await bot.ask("which carrier flew the most?")
    await bot.ask("and which flew the least?")
    entries = await bot.service.state.audit.entries()
    assert len(entries) == 2, f"two questions asked in #general, {len(entries)} audited"
