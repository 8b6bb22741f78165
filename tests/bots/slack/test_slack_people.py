"""Who asks in Slack and who is in a channel, asked of the strict fake Slack through the real SDK: the
asker's verified email and user groups (bots/slack/people.py), which policy and owner a question gets
(bots/slack/access.py), and a channel's members for the web's links (bots/slack/channel_members.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent.access.policy import Asker, Member, Policies, Policy
from bots.slack.access import access_for, wants_groups
from bots.slack.channel_members import SlackChannelMembers
from bots.slack.people import EMAIL_SCOPE, SlackPeople
from bots.slack.receive import Question
from bots.slack.recent import Recent
from chats.people import Person, channel_owner, person_owner
from tests.fakes.slack_api import DM_ID, GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack

BOB, BOB_EMAIL = "U0BOB000001", "bob@example.com"
DATA_TEAM = "S0DATA00001"


@pytest.fixture
async def client(fake_slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    web = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.base_url)
    yield web


def calls(fake: FakeSlack, method: str) -> int:
    return len(fake.calls(method))


def question(channel: str, *, dm: bool) -> Question:
    return Question(
        team=TEAM_ID, channel=channel, user=HUMAN_ID, text="how many flights?", ts="1.000100",
        thread_ts="1.000100", event_id="Ev1", is_dm=dm, channel_type="im" if dm else "channel",
        assistant_thread=False, addressed=True, parent_user_id=None, received_at=time.perf_counter(),
    )  # fmt: skip


def policies() -> Policies:
    alice = Policy("jfk", {"nycflights13.flights": "origin = 'JFK'"}, members=(Member("email", HUMAN_EMAIL),))
    team = Policy("lga", {"nycflights13.flights": "origin = 'LGA'"}, members=(Member("slack_usergroup", DATA_TEAM),))
    return Policies((alice, team), Policy("no-data", contact="#data-help"), {GENERAL_ID: "lga"})


# --- the asker ---


async def test_a_slack_person_is_the_same_person_as_the_web_one_by_their_verified_email(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    found = await SlackPeople(lambda: client).person(TEAM_ID, HUMAN_ID)
    assert found.person.id == f"email:{HUMAN_EMAIL}" and found.person.slack == (TEAM_ID, HUMAN_ID)
    assert found.person.owner == person_owner(f"email:{HUMAN_EMAIL}")
    assert found.asker == Asker(email=HUMAN_EMAIL, slack_user=HUMAN_ID)
    assert found.missing_scope is None
    assert calls(fake_slack, "usergroups.list") == 0, "no policy names a user group: none is asked for"


async def test_without_the_email_scope_the_asker_is_unknown_and_the_scope_is_named(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    fake_slack.revoke(EMAIL_SCOPE)  # installed without users:read.email: users.info is ok, without the email
    found = await SlackPeople(lambda: client).person(TEAM_ID, HUMAN_ID)
    assert fake_slack.last("users.info").ok and "email" not in fake_slack.last("users.info").response["user"]["profile"]
    assert (found.asker, found.missing_scope) == (None, EMAIL_SCOPE)
    assert found.person.id == f"slack:{TEAM_ID}:{HUMAN_ID}"


async def test_without_users_read_the_lookup_fails_closed_naming_the_scope_slack_says_is_needed(
    fake_slack: FakeSlack, client: AsyncWebClient, caplog: pytest.LogCaptureFixture
) -> None:
    fake_slack.revoke("users:read")
    found = await SlackPeople(lambda: client).person(TEAM_ID, HUMAN_ID)
    refused = fake_slack.last("users.info")
    assert (refused.error, refused.response["needed"]) == ("missing_scope", "users:read")
    assert (found.asker, found.missing_scope) == (None, "users:read")
    assert "missing_scope users:read" in caplog.text and "Traceback" not in caplog.text


async def test_an_unconfirmed_email_or_another_organisations_is_not_believed(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    fake_slack.add_user(BOB, "bob", email=BOB_EMAIL, is_email_confirmed=False)
    fake_slack.add_user("U0EXT000001", "eve", email=HUMAN_EMAIL, team_id="T0OTHERORG1")  # claims Alice's address
    people = SlackPeople(lambda: client)
    bob, eve = await people.person(TEAM_ID, BOB), await people.person(TEAM_ID, "U0EXT000001")
    assert bob.person.id == f"slack:{TEAM_ID}:{BOB}" and bob.asker == Asker(slack_user=BOB)
    assert eve.person.id == "slack:T0OTHERORG1:U0EXT000001" and eve.asker == Asker(slack_user="U0EXT000001")


async def test_a_failing_slack_fails_closed_and_is_not_remembered(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    people = SlackPeople(lambda: client)
    fake_slack.fail("users.info", "internal_error")
    failed = await people.person(TEAM_ID, HUMAN_ID)
    assert (failed.asker, failed.missing_scope) == (None, None)
    assert (await people.person(TEAM_ID, HUMAN_ID)).asker is not None, "asked again: a failure is not kept"
    assert calls(fake_slack, "users.info") == 2


async def test_a_person_and_the_teams_groups_are_asked_once_within_the_ttl(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    fake_slack.add_usergroup(DATA_TEAM, "data-team", [HUMAN_ID, BOB])
    fake_slack.add_usergroup("S0OLD000001", "old-team", [HUMAN_ID], disabled=True)
    fake_slack.add_user(BOB, "bob", email=BOB_EMAIL)
    people = SlackPeople(lambda: client, wants_groups=True)
    alice = await people.person(TEAM_ID, HUMAN_ID)
    await people.person(TEAM_ID, HUMAN_ID)
    bob = await people.person(TEAM_ID, BOB)
    assert alice.asker is not None and alice.asker.slack_usergroups == frozenset({DATA_TEAM}), "enabled groups only"
    assert bob.asker is not None and bob.asker.slack_usergroups == frozenset({DATA_TEAM})
    assert (calls(fake_slack, "users.info"), calls(fake_slack, "usergroups.list")) == (2, 1)
    assert fake_slack.last("usergroups.list").args["include_users"] in ("1", "true", True)
    fresh = SlackPeople(lambda: client, wants_groups=True, ttl_s=0)  # nothing kept: every question asks again
    await fresh.person(TEAM_ID, HUMAN_ID)
    await fresh.person(TEAM_ID, HUMAN_ID)
    assert (calls(fake_slack, "users.info"), calls(fake_slack, "usergroups.list")) == (4, 3)


async def test_without_usergroups_read_a_policy_naming_groups_sends_the_asker_to_the_default(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    fake_slack.revoke("usergroups:read")
    found = await SlackPeople(lambda: client, wants_groups=True).person(TEAM_ID, HUMAN_ID)
    assert (found.asker, found.missing_scope) == (None, "usergroups:read")
    access = access_for(question(DM_ID, dm=True), found, policies())
    assert (access.policy.name, access.unknown_asker) == ("no-data", True), "not the jfk policy the email would give"


# --- which policy, and whose ---


async def test_a_dm_runs_under_the_askers_policy_and_a_channel_under_the_channels(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    fake_slack.add_usergroup(DATA_TEAM, "data-team", [BOB])
    found = await SlackPeople(lambda: client, wants_groups=wants_groups(policies())).person(TEAM_ID, HUMAN_ID)
    dm = access_for(question(DM_ID, dm=True), found, policies())
    channel = access_for(question(GENERAL_ID, dm=False), found, policies())
    assert (dm.policy.name, dm.owner) == ("jfk", person_owner(f"email:{HUMAN_EMAIL}"))
    assert (channel.policy.name, channel.owner) == ("lga", channel_owner(TEAM_ID, GENERAL_ID))
    other = access_for(question("C0RANDOM001", dm=False), found, policies())
    assert other.policy.name == "no-data", "a channel the file does not name gets the default, whoever asks"


# --- who is in a channel, for the web ---


def web_person(email: str | None) -> Person:
    return Person(f"email:{email}" if email else "oidc:https://idp#1", email=email)


async def test_channel_members_are_read_page_by_page_and_kept_briefly(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    crowd = {f"U0CROWD{i:04d}" for i in range(2_345)}
    fake_slack.add_channel("C0BIG000001", "big", members={*crowd, HUMAN_ID})
    fake_slack.add_user(BOB, "bob", email=BOB_EMAIL)
    members = SlackChannelMembers(lambda: client, lambda: TEAM_ID)
    assert await members.includes(TEAM_ID, "C0BIG000001", web_person(HUMAN_EMAIL))
    pages = calls(fake_slack, "conversations.members")
    assert pages == 3, "2,347 members, a thousand a page"
    assert await members.includes(TEAM_ID, "C0BIG000001", web_person(HUMAN_EMAIL))
    assert not await members.includes(TEAM_ID, "C0BIG000001", web_person(BOB_EMAIL)), "Bob is not in it"
    assert calls(fake_slack, "conversations.members") == pages, "the members are kept: no call for the next opens"
    assert calls(fake_slack, "users.lookupByEmail") == 2, "once per person"
    fresh = SlackChannelMembers(lambda: client, lambda: TEAM_ID, ttl_s=0)
    await fresh.includes(TEAM_ID, "C0BIG000001", web_person(HUMAN_EMAIL))
    await fresh.includes(TEAM_ID, "C0BIG000001", web_person(HUMAN_EMAIL))
    assert calls(fake_slack, "conversations.members") == pages + 6, "nothing kept: each open reads every page"


async def test_who_is_not_in_a_channel_is_answered_false(fake_slack: FakeSlack, client: AsyncWebClient) -> None:
    fake_slack.add_user("U0EXT000001", "eve", email="eve@example.com", team_id="T0OTHERORG1")
    fake_slack.add_channel("C0SHARED001", "shared", members={HUMAN_ID, "U0EXT000001"})
    members = SlackChannelMembers(lambda: client, lambda: TEAM_ID)
    assert await members.includes(TEAM_ID, GENERAL_ID, web_person(HUMAN_EMAIL))
    assert not await members.includes(TEAM_ID, GENERAL_ID, web_person(None)), "no verified email: no link to Slack"
    assert not await members.includes(TEAM_ID, GENERAL_ID, web_person("nobody@example.com")), "users_not_found"
    assert not await members.includes(TEAM_ID, "C0SHARED001", web_person("eve@example.com")), "another organisation's"
    assert not await members.includes("T0OTHERTEAM", GENERAL_ID, web_person(HUMAN_EMAIL)), "another workspace"
    not_started = SlackChannelMembers(lambda: None, lambda: None)
    assert not await not_started.includes(TEAM_ID, GENERAL_ID, web_person(HUMAN_EMAIL))


async def test_channel_members_fail_closed_when_slack_refuses(
    fake_slack: FakeSlack, client: AsyncWebClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    fake_slack.add_channel("G0SECRET001", "secret", is_private=True, members={HUMAN_ID})
    fake_slack.revoke("groups:read")
    members = SlackChannelMembers(lambda: client, lambda: TEAM_ID)
    assert await members.includes(TEAM_ID, GENERAL_ID, web_person(HUMAN_EMAIL)), "channels:read is still there"
    assert not await members.includes(TEAM_ID, "G0SECRET001", web_person(HUMAN_EMAIL))
    refused = fake_slack.last("conversations.members")
    assert (refused.error, refused.response["needed"]) == ("missing_scope", "groups:read")
    assert "missing_scope groups:read" in caplog.text and "Traceback" not in caplog.text
    fake_slack.revoke(EMAIL_SCOPE)
    assert not await SlackChannelMembers(lambda: client, lambda: TEAM_ID).includes(
        TEAM_ID, GENERAL_ID, web_person(HUMAN_EMAIL)
    ), "users.lookupByEmail needs users:read.email"


# --- the brief memory ---


def test_recent_forgets_after_its_ttl_and_keeps_at_most_its_bound() -> None:
    now = [0.0]
    recent: Recent[str, int] = Recent(ttl_s=10, max_entries=3, clock=lambda: now[0])
    for i in range(5):
        recent.put(f"k{i}", i)
    assert len(recent) == 3 and recent.get("k0") is None and recent.get("k4") == 4, "the oldest put goes first"
    now[0] = 9.9
    assert recent.get("k3") == 3
    now[0] = 10.0
    assert recent.get("k3") is None and len(recent) == 2


async def test_each_person_looked_up_is_told_to_whoever_keeps_who_they_are_now(
    fake_slack: FakeSlack, client: AsyncWebClient
) -> None:
    """The kit's schedules pick their owner's policy from who they are now (chats/schedules.py `seen`): each
    fresh lookup (a question) reports the person's owner and asker; one that cannot be reported loses nothing."""
    told: list[tuple[str, Asker]] = []

    async def seen(owner: str, asker: Asker) -> None:
        told.append((owner, asker))

    found = await SlackPeople(lambda: client, seen=seen).person(TEAM_ID, HUMAN_ID)
    assert told == [(person_owner(f"email:{HUMAN_EMAIL}"), Asker(email=HUMAN_EMAIL, slack_user=HUMAN_ID))]

    async def broken(owner: str, asker: Asker) -> None:
        raise ConnectionError("the state is down")

    again = await SlackPeople(lambda: client, seen=broken).person(TEAM_ID, HUMAN_ID)
    assert again == found
