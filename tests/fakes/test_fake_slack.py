"""The fake Slack accepts what Slack accepts and rejects what Slack rejects, seen through the real
slack_sdk clients (AsyncWebClient, WebClient, the aiohttp SocketModeClient) and slack_sdk's own
SignatureVerifier."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.request import payload_utils
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import MarkdownTextChunk, TaskUpdateChunk
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes import slack_events as events
from tests.fakes.slack_api import (
    BOT_USER_ID,
    DM_ID,
    GENERAL_ID,
    HUMAN_EMAIL,
    HUMAN_ID,
    TEAM_ID,
    FakeSlack,
    FakeSocketMode,
)
from tests.fakes.slack_limits import SENT_AT_HEADER, RateLimits
from tests.fakes.slack_rules import SlackError
from tests.fakes.slack_scopes import EVERY_BOT_SCOPE
from tests.slack_helpers import stamp_sends

SECTION = {"type": "section", "text": {"type": "mrkdwn", "text": "*Flights* by carrier"}}
METADATA = {"event_type": "analyst_answer", "event_payload": {"run_id": "r1", "queries": 2}}


@pytest.fixture(scope="module")
def socket_mode_server() -> Iterator[FakeSocketMode]:
    server = FakeSocketMode().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def slack_server(socket_mode_server: FakeSocketMode) -> Iterator[FakeSlack]:
    server = FakeSlack(socket_mode=socket_mode_server, scopes=EVERY_BOT_SCOPE).start()  # every method is tried
    yield server
    server.stop()


@pytest.fixture
def slack(slack_server: FakeSlack, socket_mode_server: FakeSocketMode) -> Iterator[FakeSlack]:
    slack_server.reset()
    socket_mode_server.reset()
    yield slack_server
    slack_server.reset()


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)


async def post(client: AsyncWebClient, **args: Any) -> Any:
    """chat.postMessage over the SDK's JSON transport, without its client-side missing-text warning."""
    return await client.api_call("chat.postMessage", json=args)


def stored(slack: FakeSlack, channel: str, ts: str) -> dict[str, Any]:
    message = slack.message(channel, ts)
    assert message is not None, f"no message {ts} in {channel}"
    return message


async def assert_errors(calls: Mapping[str, Awaitable[Any]]) -> None:
    """Each call answers the error it is keyed by (every call is awaited, so a failure shows them all)."""
    answered: dict[str, str | None] = {}
    for expected, call in calls.items():
        try:
            await call
            answered[expected] = None
        except SlackApiError as exc:
            answered[expected] = exc.response["error"]
    assert answered == {error: error for error in calls}


async def slack_error(call: Any) -> SlackApiError:
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value


# --- authentication ---


async def test_tokens_are_checked_like_slack(slack: FakeSlack) -> None:
    anonymous = AsyncWebClient(base_url=slack.base_url)
    await assert_errors(
        {
            "not_authed": anonymous.auth_test(),
            "invalid_auth": AsyncWebClient(token="xoxb-wrong", base_url=slack.base_url).auth_test(),
            "not_allowed_token_type": AsyncWebClient(token=slack.app_token, base_url=slack.base_url).auth_test(),
        }
    )
    bot_token_for_socket_mode = await slack_error(anonymous.apps_connections_open(app_token=slack.bot_token))
    assert bot_token_for_socket_mode.response["error"] == "not_allowed_token_type"
    assert {c.status for c in slack.calls()} == {200}, "Slack answers auth errors with HTTP 200"
    identity = await AsyncWebClient(token=slack.bot_token, base_url=slack.base_url).auth_test()
    assert (identity["user_id"], identity["team_id"], identity["bot_id"]) == (BOT_USER_ID, TEAM_ID, slack.bot_id)


async def test_a_method_whose_scope_the_token_lacks_answers_missing_scope(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
    slack.revoke("files:write", "channels:history")
    upload = await slack_error(client.files_getUploadURLExternal(filename="c.png", length=10))
    assert upload.response.data == {
        "ok": False,
        "error": "missing_scope",
        "needed": "files:write",
        "provided": ",".join(sorted(EVERY_BOT_SCOPE - {"files:write", "channels:history"})),
    }
    question = slack.add_message(GENERAL_ID, "hi")
    history = await slack_error(client.conversations_replies(channel=GENERAL_ID, ts=question))
    assert history.response["needed"] == "channels:history", "the scope of the conversation's type"
    assert (await client.conversations_replies(channel=DM_ID, ts=slack.add_message(DM_ID, "hi")))["ok"]
    slack.revoke("chat:write")
    thread = slack.add_message(DM_ID, "hi")
    allowed = await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is thinking…")
    assert allowed["ok"], "assistant:write still allows it, for now"
    slack.revoke("assistant:write")
    status = await slack_error(client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="…"))
    assert status.response["needed"] == "chat:write", "the scope that stays"
    refused = ["files.getUploadURLExternal", "conversations.replies", "assistant.threads.setStatus"]
    assert [c.method for c in slack.scope_refusals()] == refused


def test_token_travels_in_the_header_or_a_form_body_but_never_in_a_json_body(slack: FakeSlack) -> None:
    url = slack.base_url + "auth.test"
    assert httpx.post(url, data={"token": slack.bot_token}).json()["ok"] is True
    in_json = httpx.post(url, json={"token": slack.bot_token})
    assert (in_json.status_code, in_json.json()["error"]) == (200, "not_authed")
    bare_json = httpx.post(
        url, content=b"{}", headers={"authorization": f"Bearer {slack.bot_token}", "content-type": "application/json"}
    )
    assert bare_json.json()["warning"] == "missing_charset"


# --- chat.postMessage ---


def msg(**fields: Any) -> dict[str, Any]:
    return {"channel": GENERAL_ID, "text": "t", **fields}


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


@pytest.mark.parametrize(
    ("args", "error", "detail"),
    [
        pytest.param(msg(channel="C0NOWHERE"), "channel_not_found", None, id="unknown-channel"),
        pytest.param({"text": "hi"}, "invalid_arguments", "missing required field: channel", id="no-channel"),
        pytest.param({"channel": GENERAL_ID}, "no_text", None, id="no-content"),
        pytest.param(msg(text="", blocks=[]), "no_text", None, id="empty-content"),
        pytest.param(msg(markdown_text="**hi**"), "markdown_text_conflict", None, id="markdown-with-text"),
        pytest.param(
            {"channel": GENERAL_ID, "blocks": [SECTION], "markdown_text": "**hi**"},
            "markdown_text_conflict",
            None,
            id="markdown-with-blocks",
        ),
        pytest.param(
            {"channel": GENERAL_ID, "markdown_text": "x" * 12_001}, "invalid_arguments", "12001", id="markdown-12001"
        ),
        pytest.param(msg(blocks=[{"type": "divider"}] * 51), "invalid_blocks", "no more than 50", id="51-blocks"),
        pytest.param(
            msg(blocks=[section("x" * 3001)]),
            "invalid_blocks",
            "must be less than 3001 characters [json-pointer:/blocks/0/text/text]",
            id="section-3001",
        ),
        pytest.param(
            msg(blocks=[{"type": "markdown", "text": "x" * 12_001}]), "invalid_blocks", "12001", id="markdown-block"
        ),
        pytest.param(
            msg(blocks=[{"type": "markdown", "text": "x" * 7_000}] * 2),
            "msg_blocks_too_long",
            None,
            id="markdown-blocks-cumulative",
        ),
        pytest.param(
            msg(blocks=[{"type": "header", "text": {"type": "plain_text", "text": "x" * 151}}]),
            "invalid_blocks",
            "151",
            id="header-151",
        ),
        pytest.param(msg(blocks=[{"type": "section"}]), "invalid_blocks", "/blocks/0", id="empty-section"),
        pytest.param(msg(blocks=[{"type": "carousel"}]), "invalid_blocks", "/blocks/0", id="unknown-block"),
        pytest.param(
            msg(blocks=[{**SECTION, "block_id": "a"}, {**SECTION, "block_id": "a"}]),
            "invalid_blocks",
            "duplicate block_id",
            id="duplicate-block-id",
        ),
        pytest.param(
            msg(metadata={"event_type": "answer"}), "invalid_metadata_format", "event_payload", id="metadata-payload"
        ),
        pytest.param(msg(metadata={"event_payload": {}}), "invalid_metadata_format", "event_type", id="metadata-type"),
        pytest.param(msg(metadata="not json"), "invalid_metadata_format", None, id="metadata-not-json"),
        pytest.param(msg(thread_ts="0"), "invalid_thread_ts", "0 is not a valid thread_ts", id="thread-ts"),
        pytest.param(msg(attachments=[{"text": "a"}] * 101), "too_many_attachments", None, id="101-attachments"),
    ],
)
async def test_post_message_rejects_what_slack_rejects(
    client: AsyncWebClient, slack: FakeSlack, args: dict[str, Any], error: str, detail: str | None
) -> None:
    failure = await slack_error(post(client, **args))
    assert failure.response.status_code == 200 and failure.response["error"] == error
    if detail:
        assert any(detail in m for m in failure.response["response_metadata"]["messages"])
    assert slack.bot_messages(GENERAL_ID) == []


async def test_channel_membership_and_archival_are_enforced(client: AsyncWebClient, slack: FakeSlack) -> None:
    slack.add_channel("C0ARCHIVE01", "old", is_archived=True)
    slack.add_channel("C0OUTSIDE01", "outside", is_member=False)
    slack.add_channel("G0SECRET001", "secret", is_private=True, is_member=False)
    errors = [
        (await slack_error(post(client, channel=c, text="hi"))).response["error"]
        for c in ("C0ARCHIVE01", "C0OUTSIDE01", "G0SECRET001")
    ]
    assert errors == ["is_archived", "not_in_channel", "channel_not_found"]


async def test_a_valid_post_is_stored_as_slack_shapes_it(client: AsyncWebClient, slack: FakeSlack) -> None:
    by_name = await client.chat_postMessage(
        channel="#general", text="Flights by carrier", blocks=[SECTION], metadata=METADATA
    )
    assert by_name["channel"] == GENERAL_ID and by_name["message"]["bot_id"] == slack.bot_id
    markdown = await client.chat_postMessage(channel=DM_ID, markdown_text="**1,234** flights")
    assert stored(slack, DM_ID, markdown["ts"])["text"] == "**1,234** flights"
    message = stored(slack, GENERAL_ID, by_name["ts"])
    assert (message["user"], message["blocks"], message["metadata"]) == (BOT_USER_ID, [SECTION], METADATA)
    assert slack.calls("chat.postMessage")[0].args["metadata"] == METADATA
    sync = WebClient(token=slack.bot_token, base_url=slack.base_url)
    form = sync.api_call(
        "chat.postMessage", params={"channel": GENERAL_ID, "text": "form", "blocks": json.dumps([SECTION])}
    )
    multipart = sync.api_call(  # a file part makes the SDK send multipart/form-data
        "chat.postMessage", data={"channel": GENERAL_ID, "text": "multipart"}, files={"attachment": b"x"}
    )
    assert [c.transport for c in slack.calls("chat.postMessage")] == ["json", "json", "form", "multipart"]
    assert slack.calls("chat.postMessage")[2].args["blocks"] == [SECTION] and form["ok"] and multipart["ok"]


async def test_text_beyond_40000_characters_is_truncated_with_a_warning(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    posted = await client.chat_postMessage(channel=GENERAL_ID, text="x" * 40_001)
    assert posted["warning"] == "message_truncated"
    assert posted["response_metadata"]["warnings"] == ["message_truncated"]
    assert len(stored(slack, GENERAL_ID, posted["ts"])["text"]) == 40_000


async def test_blocks_sent_as_a_form_string_must_be_json(slack: FakeSlack) -> None:
    sync = WebClient(token=slack.bot_token, base_url=slack.base_url)
    with pytest.raises(SlackApiError) as caught:
        sync.api_call("chat.postMessage", params={"channel": GENERAL_ID, "text": "t", "blocks": "[{not json"})
    assert caught.value.response["error"] == "invalid_blocks_format"


# --- chat.update / chat.delete / chat.postEphemeral ---


async def test_update_follows_slack_rules(client: AsyncWebClient, slack: FakeSlack) -> None:
    posted = await client.chat_postMessage(channel=GENERAL_ID, text="Working…", blocks=[SECTION], metadata=METADATA)
    human = slack.add_message(GENERAL_ID, "how many flights?")
    errors = {
        "msg_too_long": client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="x" * 4_001),
        "message_not_found": client.chat_update(channel=GENERAL_ID, ts="1700000000.000001", text="t"),
        "cant_update_message": client.chat_update(channel=GENERAL_ID, ts=human, text="t"),
        "channel_not_found": client.chat_update(channel="C0NOWHERE", ts=posted["ts"], text="t"),
    }
    await assert_errors(errors)
    await client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="Done: 336,776 flights", metadata={})
    updated = stored(slack, GENERAL_ID, posted["ts"])
    assert updated["text"] == "Done: 336,776 flights" and "metadata" not in updated
    assert [b["type"] for b in updated["blocks"]] == ["rich_text"], "new text replaces the old blocks"
    assert updated["edited"]["user"] == BOT_USER_ID


async def test_a_scripted_rate_limit_answers_429_with_retry_after_once(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    posted = await client.chat_postMessage(channel=GENERAL_ID, text="Working…")
    slack.ratelimit("chat.update", retry_after=3)
    limited = await slack_error(client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="Done"))
    assert (limited.response.status_code, limited.response["error"]) == (429, "ratelimited")
    assert limited.response.headers["Retry-After"] == "3"
    assert (await client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="Done"))["ok"]
    assert [c.status for c in slack.calls("chat.update")] == [429, 200]
    assert slack.over_tiers() == [], "a scripted rate limit is not the bot going past a tier"


async def test_each_method_is_held_to_its_rate_limit_tier_per_workspace(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    """chat.update is Tier 3 (50 a minute), chat.postMessage one a second per channel (60 a minute here),
    counted per app per workspace; the call over the limit answers 429 with the whole seconds to wait."""
    posted = await client.chat_postMessage(channel=GENERAL_ID, text="Working…")
    for n in range(50):
        await client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text=f"step {n}")
    limited = await slack_error(client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="one more"))
    assert (limited.response.status_code, limited.response["error"]) == (429, "ratelimited")
    assert 1 <= int(limited.response.headers["Retry-After"]) <= 60
    for n in range(59):
        await client.chat_postMessage(channel=GENERAL_ID, text=f"post {n}")
    await assert_errors({"ratelimited": client.chat_postMessage(channel=GENERAL_ID, text="over")})
    assert (await client.chat_postMessage(channel=DM_ID, text="another channel has its own"))["ok"]
    assert [c.method for c in slack.throttled()] == ["chat.update", "chat.postMessage"]
    assert slack.over_tiers() == ["chat.update", "chat.postMessage"], "the fake_slack fixture fails such a test"
    slack.expect_rate_limits()
    assert slack.over_tiers() == [], "unless it went past the tiers on purpose"


async def test_a_stamped_call_counts_when_it_was_sent_not_when_it_arrived(slack: FakeSlack) -> None:
    """Fifty chat.update sent at once and carried late by a busy machine: one sent a window after them is not
    over the tier, however soon after them it arrives; one sent within their window is."""
    now = [0.9]
    limits = RateLimits(window_s=2.0, clock=lambda: now[0])
    for _ in range(50):
        limits.check(TEAM_ID, "chat.update", GENERAL_ID, sent_at=0.0)
    now[0] = 2.01
    limits.check(TEAM_ID, "chat.update", GENERAL_ID, sent_at=2.01)
    assert limits.refused == []
    with pytest.raises(SlackError):
        limits.check(TEAM_ID, "chat.update", GENERAL_ID, sent_at=1.5)  # a window (0, 1.5] holds the fifty
    # Through the SDK: a client that stamps its calls is counted at the stamp.
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
    stamp_sends(client)
    posted = await client.chat_postMessage(channel=GENERAL_ID, text="Working…")
    slack.rate_limits = RateLimits(window_s=60.0, clock=lambda: 1e9)  # arrivals all "now"; the stamps differ
    for n in range(50):
        await client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text=f"step {n}")
    stamps = [float(c.headers[SENT_AT_HEADER]) for c in slack.calls("chat.update")]
    assert len(stamps) == 50 and stamps == sorted(stamps) and slack.over_tiers() == []


async def test_a_rate_limit_frees_up_as_its_window_passes() -> None:
    fake = FakeSlack(rate_window_s=0.5).start()
    try:
        client = AsyncWebClient(token=fake.bot_token, base_url=fake.base_url)
        question = fake.add_message(DM_ID, "how many flights?")
        for _ in range(20):  # chat.startStream is Tier 2
            await client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="Counting")
        await assert_errors(
            {"ratelimited": client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="x")}
        )
        await asyncio.sleep(0.6)
        assert (await client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="again"))["ok"]
    finally:
        fake.stop()


async def test_delete_and_ephemeral(client: AsyncWebClient, slack: FakeSlack) -> None:
    parent = await client.chat_postMessage(channel=GENERAL_ID, text="parent")
    await client.chat_postMessage(channel=GENERAL_ID, text="reply", thread_ts=parent["ts"])
    lone = await client.chat_postMessage(channel=GENERAL_ID, text="lone")
    await client.chat_delete(channel=GENERAL_ID, ts=lone["ts"])
    await client.chat_delete(channel=GENERAL_ID, ts=parent["ts"])
    assert slack.message(GENERAL_ID, lone["ts"]) is None
    assert stored(slack, GENERAL_ID, parent["ts"])["subtype"] == "tombstone"
    assert (await slack_error(client.chat_delete(channel=GENERAL_ID, ts=lone["ts"]))).response[
        "error"
    ] == "message_not_found"
    slack.add_user("U0OUTSIDER1", "bob")
    outsider = await slack_error(client.chat_postEphemeral(channel=GENERAL_ID, user="U0OUTSIDER1", text="only you"))
    assert outsider.response["error"] == "user_not_in_channel"
    shown = await client.chat_postEphemeral(channel=GENERAL_ID, user=HUMAN_ID, text="only you")
    assert (
        slack.ephemeral[0]["message_ts"] == shown["message_ts"]
        and slack.message(GENERAL_ID, shown["message_ts"]) is None
    )


# --- reading: conversations.replies / history / info, users.info ---


async def test_replies_return_the_thread_with_metadata_on_request(client: AsyncWebClient, slack: FakeSlack) -> None:
    question = slack.add_message(GENERAL_ID, "<@U0BOT000001> how many flights?")
    answer = await client.chat_postMessage(channel=GENERAL_ID, thread_ts=question, text="336,776", metadata=METADATA)
    follow_up = slack.add_message(GENERAL_ID, "and in May?", thread_ts=answer["ts"])  # a reply's ts joins its thread
    plain = await client.conversations_replies(channel=GENERAL_ID, ts=question)
    full = await client.conversations_replies(channel=GENERAL_ID, ts=follow_up, include_all_metadata=True)
    assert [m["ts"] for m in full["messages"]] == [question, answer["ts"], follow_up]
    assert full["messages"][0]["reply_count"] == 2 and full["messages"][2]["parent_user_id"] == HUMAN_ID
    assert full["messages"][1]["metadata"] == METADATA and "metadata" not in plain["messages"][1]
    first = await client.conversations_replies(channel=GENERAL_ID, ts=question, limit=2)
    rest = await client.conversations_replies(
        channel=GENERAL_ID, ts=question, cursor=first["response_metadata"]["next_cursor"]
    )
    assert first["has_more"] and [m["ts"] for m in first["messages"] + rest["messages"]] == [
        question,
        answer["ts"],
        follow_up,
    ]
    missing = await slack_error(client.conversations_replies(channel=GENERAL_ID, ts="1700000000.000001"))
    unnamed = await slack_error(
        client.api_call("conversations.replies", http_verb="GET", params={"channel": GENERAL_ID})
    )
    assert (missing.response["error"], unnamed.response["error"]) == ("thread_not_found", "invalid_arguments")


async def test_history_info_and_users(client: AsyncWebClient, slack: FakeSlack) -> None:
    first = slack.add_message(GENERAL_ID, "first")
    slack.add_message(GENERAL_ID, "in a thread", thread_ts=first)
    second = slack.add_message(GENERAL_ID, "deploy finished", user=None, bot_id="B0OTHERBOT1", subtype="bot_message")
    history = await client.conversations_history(channel=GENERAL_ID)
    assert [m["ts"] for m in history["messages"]] == [second, first]
    slack.add_channel("C0OUTSIDE01", "outside", is_member=False)
    assert (await slack_error(client.conversations_history(channel="C0OUTSIDE01"))).response[
        "error"
    ] == "not_in_channel"
    info = await client.conversations_info(channel=DM_ID)
    assert info["channel"]["is_im"] and info["channel"]["user"] == HUMAN_ID
    user = await client.users_info(user=HUMAN_ID)
    assert user["user"]["real_name"] == "Alice Analyst"
    assert (await slack_error(client.users_info(user="U0NOBODY001"))).response["error"] == "user_not_found"


async def test_a_users_email_is_shown_only_with_users_read_email_and_every_answer_names_the_scopes(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    shown = await client.users_info(user=HUMAN_ID)
    assert shown["user"]["profile"]["email"] == HUMAN_EMAIL and shown["user"]["is_email_confirmed"] is True
    assert shown.headers["x-oauth-scopes"] == ",".join(sorted(EVERY_BOT_SCOPE))
    slack.revoke("users:read.email")
    hidden = await client.users_info(user=HUMAN_ID)
    assert hidden["ok"] and "email" not in hidden["user"]["profile"], "the field is absent, the call still ok"
    assert "users:read.email" not in hidden.headers["x-oauth-scopes"].split(",")
    refused = await slack_error(client.users_lookupByEmail(email=HUMAN_EMAIL))
    assert (refused.response["error"], refused.response["needed"]) == ("missing_scope", "users:read.email")


async def test_lookup_by_email_members_and_usergroups(client: AsyncWebClient, slack: FakeSlack) -> None:
    found = await client.users_lookupByEmail(email=HUMAN_EMAIL.upper())
    assert found["user"]["id"] == HUMAN_ID
    assert (await slack_error(client.users_lookupByEmail(email="x@example.com"))).response["error"] == "users_not_found"
    slack.add_channel("C0BIG000001", "big", members={f"U0M{i:05d}" for i in range(250)})
    first = await client.conversations_members(channel="C0BIG000001")
    assert len(first["members"]) == 100 and first["response_metadata"]["next_cursor"], "100 by default"
    pages: list[list[str]] = []  # the SDK's pagination hands out the same response object, page after page
    async for page in await client.conversations_members(channel="C0BIG000001", limit=100):
        pages.append(page["members"])
    assert [len(p) for p in pages] == [100, 100, 51] and len({m for p in pages for m in p}) == 251
    await assert_errors(
        {
            "invalid_cursor": client.conversations_members(channel="C0BIG000001", cursor="bm9wZQ=="),
            "invalid_limit": client.conversations_members(channel="C0BIG000001", limit=0),
            "channel_not_found": client.conversations_members(channel="C0NOWHERE01"),
        }
    )
    slack.add_usergroup("S0DATA00001", "data-team", [HUMAN_ID])
    slack.add_usergroup("S0OLD000001", "old-team", [HUMAN_ID], disabled=True)
    listed = await client.usergroups_list(include_users=True)
    assert [(g["id"], g["users"]) for g in listed["usergroups"]] == [("S0DATA00001", [HUMAN_ID])]
    assert "users" not in (await client.usergroups_list())["usergroups"][0], "members only with include_users"
    assert len((await client.usergroups_list(include_disabled=True))["usergroups"]) == 2
    assert (await client.usergroups_users_list(usergroup="S0DATA00001"))["users"] == [HUMAN_ID]
    slack.add_channel("G0SECRET001", "secret", is_private=True, members={HUMAN_ID})
    slack.revoke("groups:read", "usergroups:read")
    private = await slack_error(client.conversations_members(channel="G0SECRET001"))
    assert private.response["needed"] == "groups:read", "the read scope of the conversation's type"
    assert (await client.conversations_members(channel=GENERAL_ID))["ok"], "channels:read is still there"
    assert (await slack_error(client.usergroups_list())).response["needed"] == "usergroups:read"


async def test_reactions(client: AsyncWebClient, slack: FakeSlack) -> None:
    ts = slack.add_message(GENERAL_ID, "how many flights?")
    await client.reactions_add(channel=GENERAL_ID, timestamp=ts, name="eyes")
    assert stored(slack, GENERAL_ID, ts)["reactions"] == [{"name": "eyes", "users": [BOT_USER_ID], "count": 1}]
    errors = {
        "already_reacted": client.reactions_add(channel=GENERAL_ID, timestamp=ts, name="eyes"),
        "invalid_name": client.reactions_add(channel=GENERAL_ID, timestamp=ts, name="not an emoji"),
        "message_not_found": client.reactions_add(channel=GENERAL_ID, timestamp="1700000000.000001", name="eyes"),
        "bad_timestamp": client.reactions_add(channel=GENERAL_ID, timestamp="yesterday", name="eyes"),
    }
    await assert_errors(errors)


async def test_assistant_thread_methods(client: AsyncWebClient, slack: FakeSlack) -> None:
    slack.experience = "assistant_view"  # prompts per thread
    thread = slack.start_assistant_thread(DM_ID)
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is querying ClickHouse…")
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="")
    prompts = [{"title": "Busiest airport", "message": "Which airport had the most departures?"}]
    await client.assistant_threads_setSuggestedPrompts(channel_id=DM_ID, thread_ts=thread, prompts=prompts)
    await client.assistant_threads_setTitle(channel_id=DM_ID, thread_ts=thread, title="Flights")
    state = slack.assistant_thread(DM_ID, thread)
    assert state["status_history"] == ["is querying ClickHouse…", ""] and state["prompts"] == prompts
    assert state["title"] == stored(slack, DM_ID, thread)["assistant_app_thread"]["title"] == "Flights"
    errors = {
        "invalid_thread_ts": client.assistant_threads_setStatus(
            channel_id=DM_ID, thread_ts="1700000000.000001", status="x"
        ),
        "channel_not_found": client.assistant_threads_setTitle(channel_id="D0NOWHERE01", thread_ts=thread, title="x"),
        "invalid_arguments": client.assistant_threads_setSuggestedPrompts(
            channel_id=DM_ID, thread_ts=thread, prompts=prompts * 5
        ),
    }
    await assert_errors(errors)


# --- files_upload_v2 ---


@pytest.mark.parametrize("sync", [False, True])
async def test_files_upload_v2_works_end_to_end(slack: FakeSlack, sync: bool) -> None:
    thread = slack.add_message(GENERAL_ID, "export that as CSV")
    upload: dict[str, Any] = {
        "channel": GENERAL_ID,
        "thread_ts": thread,
        "content": "carrier,n\nUA,58665\n",
        "filename": "flights.csv",
        "title": "Flights by carrier",
        "alt_txt": "table of flights",
        "initial_comment": "Here it is",
    }
    if sync:
        result = WebClient(token=slack.bot_token, base_url=slack.base_url).files_upload_v2(**upload).data
    else:
        result = (await AsyncWebClient(token=slack.bot_token, base_url=slack.base_url).files_upload_v2(**upload)).data
    assert isinstance(result, dict)
    [file] = slack.files
    assert (file.data, file.filename, file.title, file.alt_txt) == (
        b"carrier,n\nUA,58665\n",
        "flights.csv",
        "Flights by carrier",
        "table of flights",
    )
    assert (file.channel, file.thread_ts, result["file"]["id"]) == (GENERAL_ID, thread, file.id)
    [share] = slack.replies(GENERAL_ID, thread)
    assert share["text"] == "Here it is" and share["files"][0]["name"] == "flights.csv"


async def test_upload_errors(client: AsyncWebClient, slack: FakeSlack) -> None:
    errors = {
        "missing_argument": client.files_getUploadURLExternal(filename="empty.csv", length=0),
        "alt_txt_too_large": client.files_getUploadURLExternal(filename="a.png", length=3, alt_txt="x" * 1001),
        "file_not_found": client.files_completeUploadExternal(files=[{"id": "F0NOTHING01"}], channel_id=GENERAL_ID),
    }
    await assert_errors(errors)
    declared = await client.files_getUploadURLExternal(filename="never-sent.csv", length=3)
    not_uploaded = client.files_completeUploadExternal(files=[{"id": declared["file_id"]}], channel_id=GENERAL_ID)
    assert (await slack_error(not_uploaded)).response["error"] == "file_not_found"


async def test_a_report_and_its_files_share_one_message_in_the_thread(client: AsyncWebClient, slack: FakeSlack) -> None:
    """files_upload_v2 with `file_uploads`: a getUploadURLExternal per file, an upload per file, then one
    completeUploadExternal that shares them all in the thread under the initial comment."""
    thread = slack.add_message(GENERAL_ID, "report: why did delays rise in July?")
    uploads = [
        {"content": b"%PDF-1.7 report", "filename": "report.pdf", "title": "Report (PDF)"},
        {"content": "# Report\n", "filename": "report.md", "title": "Report (Markdown)"},
    ]
    await client.files_upload_v2(
        file_uploads=uploads, channel=GENERAL_ID, thread_ts=thread, initial_comment="The report"
    )
    assert [c.method for c in slack.calls() if c.method.startswith("files.") or c.method == "upload"] == [
        "files.getUploadURLExternal", "files.getUploadURLExternal", "upload", "upload", "files.completeUploadExternal",
    ]  # fmt: skip
    [share] = slack.replies(GENERAL_ID, thread)
    assert share["text"] == "The report" and [f["name"] for f in share["files"]] == ["report.pdf", "report.md"]
    assert [f["mimetype"] for f in share["files"]] == ["application/pdf", "text/markdown"]


async def test_completing_an_upload_follows_the_documented_rules(client: AsyncWebClient, slack: FakeSlack) -> None:
    thread = slack.add_message(GENERAL_ID, "a thread")

    async def uploaded(name: str = "r.md") -> str:
        declared = await client.files_getUploadURLExternal(filename=name, length=2)
        async with httpx.AsyncClient() as http:
            assert (await http.post(declared["upload_url"], content=b"ok")).status_code == 200
        return str(declared["file_id"])

    many = ",".join(f"C{n:010d}" for n in range(101))
    errors = {
        "channels_limit_exceeded": client.files_completeUploadExternal(files=[{"id": await uploaded()}], channels=many),
        "invalid_arguments": client.files_completeUploadExternal(
            files=[{"id": await uploaded()}], channels=f"{GENERAL_ID},{DM_ID}", thread_ts=thread
        ),
        "channel_not_found": client.files_completeUploadExternal(
            files=[{"id": await uploaded()}], channel_id="C0NOPE0001"
        ),
        "snippet_too_large": client.files_getUploadURLExternal(
            filename="a.py", length=(1 << 20) + 1, snippet_type="python"
        ),
    }
    await assert_errors(errors)
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Report*"}}]
    share = {"channel_id": GENERAL_ID, "thread_ts": thread, "blocks": json.dumps(blocks)}
    await client.files_completeUploadExternal(files=[{"id": await uploaded()}], **share)
    await client.files_completeUploadExternal(files=[{"id": await uploaded()}], initial_comment="Hi", **share)
    with_blocks, with_comment = slack.replies(GENERAL_ID, thread)
    assert with_blocks["blocks"] == blocks, "without initial_comment, the blocks are the share's message"
    assert with_comment["text"] == "Hi" and with_comment.get("blocks") != blocks, "the comment wins: blocks ignored"
    private = await client.files_completeUploadExternal(files=[{"id": await uploaded()}])
    assert private["files"][0]["channels"] == [], "no channel: the file stays private"


async def test_a_teams_upload_preference_is_enforced(client: AsyncWebClient, slack: FakeSlack) -> None:
    slack.workspace.file_uploads = "images"
    assert (await slack_error(client.files_getUploadURLExternal(filename="r.pdf", length=3))).response[
        "error"
    ] == "file_uploads_except_images_disabled"
    assert (await client.files_getUploadURLExternal(filename="chart.png", length=3))["ok"]
    slack.workspace.file_uploads = "none"
    assert (await slack_error(client.files_getUploadURLExternal(filename="chart.png", length=3))).response[
        "error"
    ] == "file_uploads_disabled"


async def test_upload_methods_are_held_to_tier_4(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
    for _ in range(100):
        await client.files_getUploadURLExternal(filename="c.png", length=1)
    refused = await slack_error(client.files_getUploadURLExternal(filename="c.png", length=1))
    assert refused.response.status_code == 429 and slack.rate_limits.refused == ["files.getUploadURLExternal"]


# --- streaming ---


async def test_chat_stream_streams_into_the_thread(client: AsyncWebClient, slack: FakeSlack) -> None:
    question = slack.add_message(DM_ID, "how many flights?")
    streamer = await client.chat_stream(channel=DM_ID, thread_ts=question, buffer_size=8)
    await streamer.append(markdown_text="**336,776** ")
    await streamer.append(
        markdown_text="flights", chunks=[TaskUpdateChunk(id="q1", title="Count flights", status="complete")]
    )
    stream_ts = streamer.ts
    assert stream_ts is not None
    conflict = await slack_error(client.chat_update(channel=DM_ID, ts=stream_ts, text="x"))
    await streamer.stop(markdown_text=" in 2013.", blocks=[SECTION], metadata=METADATA)
    [answer] = slack.replies(DM_ID, question)
    assert (
        answer["text"] == "**336,776** flights in 2013."
        and answer["metadata"] == METADATA
        and answer["blocks"][-1] == SECTION
    )
    assert conflict.response["error"] == "streaming_state_conflict"
    stream = slack.stream(DM_ID, stream_ts)
    assert stream is not None and not stream.open
    assert [c["type"] for c in stream.chunks] == ["markdown_text", "markdown_text", "task_update", "markdown_text"]
    assert [c.method for c in slack.calls() if c.method.endswith("Stream")] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
    ]
    late = await slack_error(client.chat_appendStream(channel=DM_ID, ts=stream_ts, markdown_text="more"))
    assert late.response["error"] == "message_not_in_streaming_state"


async def test_stream_arguments_are_checked(client: AsyncWebClient, slack: FakeSlack) -> None:
    question = slack.add_message(GENERAL_ID, "<@U0BOT000001> how many flights?")
    in_channel = await slack_error(client.chat_startStream(channel=GENERAL_ID, thread_ts=question, markdown_text="hi"))
    assert in_channel.response["error"] == "missing_recipient_team_id"
    started = await client.chat_startStream(
        channel=GENERAL_ID,
        thread_ts=question,
        recipient_team_id=TEAM_ID,
        recipient_user_id=HUMAN_ID,
        chunks=[MarkdownTextChunk(text="Counting")],
    )
    errors = {
        "invalid_chunks": client.chat_appendStream(
            channel=GENERAL_ID,
            ts=started["ts"],
            chunks=[{"type": "task_update", "id": "1", "title": "t", "status": "done"}],
        ),
        "no_text": client.chat_appendStream(channel=GENERAL_ID, ts=started["ts"]),
        "invalid_arguments": client.chat_appendStream(channel=GENERAL_ID, ts=started["ts"], markdown_text="x" * 12_001),
        "msg_blocks_too_many": client.chat_stopStream(
            channel=GENERAL_ID, ts=started["ts"], blocks=[{"type": "divider"}] * 51
        ),
        "message_not_owned_by_app": client.chat_appendStream(channel=GENERAL_ID, ts=question, markdown_text="x"),
    }
    await assert_errors(errors)
    slack.expire_stream(GENERAL_ID, started["ts"])
    expired = await slack_error(client.chat_appendStream(channel=GENERAL_ID, ts=started["ts"], markdown_text="more"))
    assert expired.response["error"] == "message_not_in_streaming_state"
    await client.chat_update(channel=GENERAL_ID, ts=started["ts"], text="Counting done")  # the documented fallback


TASK = {"type": "task_update", "id": "Q1", "title": "Flights per carrier", "status": "in_progress"}
SOURCE = {"type": "url", "url": "https://analyst.example/queries/r1-Q1", "text": "SQL of Q1"}
FEEDBACK = {
    "type": "context_actions",
    "elements": [
        {
            "type": "feedback_buttons",
            "action_id": "analyst_feedback",
            "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "up:r1"},
            "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "down:r1"},
        }
    ],
}


async def test_a_plan_stream_keeps_each_tasks_latest_state_as_a_plan_block(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    question = slack.add_message(DM_ID, "which carrier flew the most?")
    started = await client.chat_startStream(
        channel=DM_ID,
        thread_ts=question,
        task_display_mode="plan",
        chunks=[{"type": "plan_update", "title": "Querying"}, TASK],
    )
    done = {**TASK, "status": "complete", "output": "16 rows", "sources": [SOURCE]}
    await client.chat_appendStream(
        channel=DM_ID, ts=started["ts"], chunks=[done, {"type": "markdown_text", "text": "UA flew the most."}]
    )
    await client.chat_stopStream(channel=DM_ID, ts=started["ts"], blocks=[FEEDBACK])
    plan, text, feedback = stored(slack, DM_ID, started["ts"])["blocks"]
    assert plan["title"] == "Querying" and feedback == FEEDBACK and text["type"] == "rich_text"
    [card] = plan["tasks"]
    assert (card["task_id"], card["status"], card["sources"]) == ("Q1", "complete", [SOURCE])
    assert card["output"]["elements"][0]["elements"][0]["text"] == "16 rows"


async def test_chunks_and_display_modes_are_checked_like_slack(client: AsyncWebClient, slack: FakeSlack) -> None:
    question = slack.add_message(DM_ID, "how many flights?")
    by_chunks = await client.chat_startStream(channel=DM_ID, thread_ts=question, chunks=[TASK])
    by_text = await client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="Counting")

    def append(*chunks: dict[str, Any]) -> Awaitable[Any]:
        return client.chat_appendStream(channel=DM_ID, ts=by_chunks["ts"], chunks=list(chunks))

    errors = {
        "invalid_chunks": append({**TASK, "status": "done"}),
        "invalid_arguments": client.chat_startStream(
            channel=DM_ID, thread_ts=question, markdown_text="x", task_display_mode="grid"
        ),
        "streaming_mode_mismatch": client.chat_appendStream(channel=DM_ID, ts=by_chunks["ts"], markdown_text="x"),
    }
    await assert_errors(errors)
    bad_tasks = [
        {**TASK, "title": ""},
        {k: v for k, v in TASK.items() if k != "id"},
        {**TASK, "sources": [{"type": "url", "url": "https://analyst.example/q"}]},  # a source needs its text
        {**TASK, "output": {"rows": 16}},
        {"type": "plan_update"},
    ]
    for chunk in bad_tasks:
        assert (await slack_error(append(chunk))).response["error"] == "invalid_chunks", chunk
    mixed = [MarkdownTextChunk(text="more")]
    mismatch = await slack_error(client.chat_appendStream(channel=DM_ID, ts=by_text["ts"], chunks=mixed))
    assert mismatch.response["error"] == "streaming_mode_mismatch"
    assert (await append({**TASK, "status": "error", "details": "Code 60: no such table"}))["ok"]


async def test_plan_task_card_and_feedback_blocks_are_checked_like_slack(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    card = {"type": "task_card", "task_id": "Q1", "title": "Flights per carrier", "status": "complete"}
    buttons = FEEDBACK["elements"][0]
    wrong = {
        "plan without a title": {"type": "plan", "tasks": [card]},
        "plan with a section as a task": {"type": "plan", "title": "Querying", "tasks": [SECTION]},
        "unknown task status": {**card, "status": "done"},
        "details not rich text": {**card, "details": "16 rows"},
        "a source without its text": {**card, "sources": [{"type": "url", "url": "https://analyst.example/q"}]},
        "six context actions": {**FEEDBACK, "elements": [buttons] * 6},
        "a button in context actions": {"type": "context_actions", "elements": [{"type": "button"}]},
        "feedback without a value": {
            **FEEDBACK,
            "elements": [{**buttons, "negative_button": {"text": {"type": "plain_text", "text": "👎"}}}],
        },
        "feedback text over 75": {
            **FEEDBACK,
            "elements": [
                {**buttons, "positive_button": {"text": {"type": "plain_text", "text": "y" * 76}, "value": "up"}}
            ],
        },
    }
    for what, block in wrong.items():
        refused = await slack_error(client.chat_postMessage(channel=GENERAL_ID, text="t", blocks=[block]))
        assert refused.response["error"] == "invalid_blocks", what
    plan = {"type": "plan", "title": "Querying", "tasks": [{**card, "sources": [SOURCE]}]}
    assert (await client.chat_postMessage(channel=GENERAL_ID, text="t", blocks=[plan, FEEDBACK]))["ok"]


async def test_a_stream_its_reader_stopped_refuses_more_with_stopped_by_user(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    question = slack.add_message(GENERAL_ID, "how many flights?")
    started = await client.chat_startStream(
        channel=GENERAL_ID,
        thread_ts=question,
        markdown_text="Count",
        recipient_team_id=TEAM_ID,
        recipient_user_id=HUMAN_ID,
    )
    slack.stop_by_user(GENERAL_ID, started["ts"])
    await assert_errors(
        {"stopped_by_user": client.chat_appendStream(channel=GENERAL_ID, ts=started["ts"], markdown_text="ing")}
    )
    stopped = await slack_error(client.chat_stopStream(channel=GENERAL_ID, ts=started["ts"]))
    assert stopped.response["error"] == "stopped_by_user"
    assert stored(slack, GENERAL_ID, started["ts"])["text"] == "Count", "as the reader stopped it"


async def test_streaming_can_be_scripted_to_fail(client: AsyncWebClient, slack: FakeSlack) -> None:
    question = slack.add_message(DM_ID, "how many flights?")
    slack.disable("chat.startStream", "chat.appendStream", "chat.stopStream")
    unknown = await slack_error(client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="hi"))
    assert (unknown.response["error"], unknown.response["req_method"]) == ("unknown_method", "chat.startStream")
    slack.reset()
    question = slack.add_message(DM_ID, "how many flights?")
    slack.fail("chat.appendStream", "not_allowed")
    started = await client.chat_startStream(channel=DM_ID, thread_ts=question, markdown_text="Count")
    refused = await slack_error(client.chat_appendStream(channel=DM_ID, ts=started["ts"], markdown_text="ing"))
    assert refused.response["error"] == "not_allowed"
    assert (await client.chat_appendStream(channel=DM_ID, ts=started["ts"], markdown_text="ing"))["ok"]


async def test_unimplemented_methods_say_so(client: AsyncWebClient) -> None:
    failure = await slack_error(client.chat_getPermalink(channel=GENERAL_ID, message_ts="1700000000.000001"))
    assert (
        failure.response["error"] == "unknown_method"
        and "not implemented" in failure.response["response_metadata"]["messages"][0]
    )


# --- Socket Mode ---


async def test_socket_mode_hello_event_and_ack_round_trip(slack: FakeSlack, socket_mode_server: FakeSocketMode) -> None:
    requests: list[SocketModeRequest] = []
    hello = asyncio.Event()

    async def on_message(client: Any, message: dict[str, Any], raw: str | None) -> None:
        if message.get("type") == "hello":
            hello.set()

    async def on_request(client: Any, request: SocketModeRequest) -> None:
        requests.append(request)
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    client = SocketModeClient(app_token=slack.app_token, web_client=AsyncWebClient(base_url=slack.base_url))
    client.message_listeners.append(on_message)
    client.socket_mode_request_listeners.append(on_request)
    try:
        await client.connect()
        await asyncio.wait_for(hello.wait(), 5)
        mention = events.event_callback(events.app_mention("how many flights?"))
        event_envelope = socket_mode_server.events_api(mention, retry_attempt=1, retry_reason="timeout")
        click = socket_mode_server.interactive(events.block_actions("rerun", "r1", message_ts=events.new_ts()))
        acks = [await socket_mode_server.wait_for_ack(e) for e in (event_envelope, click)]
    finally:
        await client.close()
    assert [a.envelope_id for a in acks] == [event_envelope, click]
    assert [(r.type, r.retry_attempt) for r in requests] == [("events_api", 1), ("interactive", None)]
    assert requests[0].payload["event"]["type"] == "app_mention"
    assert slack.last("apps.connections.open").ok


# --- what Slack sends to the app ---


def test_signed_requests_verify_with_slack_sdk() -> None:
    verifier = SignatureVerifier(events.SIGNING_SECRET)
    body = events.event_callback(events.app_mention("how many flights?"))
    good = events.events_request(body, retry_num=1, retry_reason="http_timeout")
    assert verifier.is_valid_request(good.body, good.headers)
    assert (good.headers["X-Slack-Retry-Num"], good.headers["X-Slack-Retry-Reason"]) == ("1", "http_timeout")
    assert not verifier.is_valid_request(*_parts(events.events_request(body, stale=True)))
    assert not verifier.is_valid_request(*_parts(events.events_request(body, bad_signature=True)))
    click = events.interactivity_request(events.block_actions("rerun", "r1", message_ts="1700000000.000100"))
    assert verifier.is_valid_request(click.body, click.headers)
    assert json.loads(parse_qs(click.text)["payload"][0])["actions"][0]["action_id"] == "rerun"
    assert json.loads(events.events_request(events.url_verification("abc")).body)["challenge"] == "abc"


def _parts(request: events.SignedRequest) -> tuple[bytes, dict[str, str]]:
    return request.body, request.headers


def test_event_payloads_are_recognised_by_bolt() -> None:
    thread_ts = events.new_ts()
    recognised = [
        (
            payload_utils.is_assistant_thread_started_event,
            events.assistant_thread_started(thread_ts=thread_ts, context_channel_id=GENERAL_ID),
        ),
        (
            payload_utils.is_assistant_thread_context_changed_event,
            events.assistant_thread_context_changed(thread_ts=thread_ts, context_channel_id=GENERAL_ID),
        ),
        (
            payload_utils.is_user_message_event_in_assistant_thread,
            events.im_message("how many flights?", thread_ts=thread_ts),
        ),
        (
            payload_utils.is_bot_message_event_in_assistant_thread,
            events.bot_message("done", channel=DM_ID, user="U0OTHER0001", thread_ts=thread_ts, channel_type="im"),
        ),
    ]
    for check, event in recognised:
        assert check(events.event_callback(event)), check.__name__
    mention = events.app_mention("how many?", thread_ts=thread_ts)
    assert mention["text"].startswith(f"<@{BOT_USER_ID}>") and mention["thread_ts"] == thread_ts
    assert mention["blocks"][0]["elements"][0]["elements"][0] == {"type": "user", "user_id": BOT_USER_ID}
    changed = events.message_changed(channel=GENERAL_ID, ts=thread_ts, text="new", previous_text="old")
    deleted = events.message_deleted(channel=GENERAL_ID, deleted_ts=thread_ts, previous_text="old")
    legacy_bot = events.bot_message("deploy done")
    assert (changed["subtype"], changed["message"]["edited"]["user"], changed["previous_message"]["text"]) == (
        "message_changed",
        HUMAN_ID,
        "old",
    )
    assert (deleted["subtype"], deleted["deleted_ts"]) == ("message_deleted", thread_ts)
    assert legacy_bot["subtype"] == "bot_message" and legacy_bot["bot_id"]


async def test_a_bolt_app_answers_signed_events_through_the_fakes(slack: FakeSlack) -> None:
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.base_url),
        signing_secret=events.SIGNING_SECRET,
        process_before_response=True,
    )

    @app.event("app_mention")
    async def answer(event: dict[str, Any], say: Any) -> None:
        await say(text="336,776 flights", thread_ts=event.get("thread_ts") or event["ts"])

    async def deliver(request: events.SignedRequest) -> int:
        response = await app.async_dispatch(AsyncBoltRequest(body=request.text, headers=dict(request.headers)))
        return response.status

    question = slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how many flights?")
    mention = events.event_callback(events.app_mention("how many flights?", ts=question))
    statuses = [
        await deliver(events.events_request(mention)),
        await deliver(events.events_request(mention, bad_signature=True)),
        await deliver(events.events_request(mention, stale=True)),
        await deliver(events.events_request(events.url_verification())),
    ]
    assert statuses == [200, 401, 401, 200]
    assert [m["text"] for m in slack.replies(GENERAL_ID, question)] == ["336,776 flights"]


async def test_a_markdown_block_is_kept_only_as_slacks_translation(client: AsyncWebClient, slack: FakeSlack) -> None:
    sent = "**UA** leads [Q1].\n\n```\nSELECT 1\n```"
    posted = await client.chat_postMessage(
        channel=GENERAL_ID, text="UA leads", blocks=[{"type": "markdown", "text": sent}]
    )
    stored = slack.message(GENERAL_ID, posted["ts"])
    assert stored is not None and [b["type"] for b in stored["blocks"]] == ["rich_text", "rich_text"]
    assert stored["blocks"][0]["elements"][0]["elements"][0]["text"] == "UA leads [Q1]."
    assert slack.markdown(GENERAL_ID, posted["ts"]) == sent
    await client.chat_update(channel=GENERAL_ID, ts=posted["ts"], text="plain now")
    assert slack.markdown(GENERAL_ID, posted["ts"]) is None


async def test_suggested_prompts_follow_the_apps_experience(client: AsyncWebClient, slack: FakeSlack) -> None:
    """agent_view (the manifest's): prompts are pinned on the DM by a call without thread_ts, and a call with
    one "will silently fail". Legacy assistant_view: without thread_ts, "the prompts will be set for the
    latest message in the channel" (docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts)."""
    prompts = [{"title": "Busiest airport", "message": "Which airport had the most departures?"}]
    assert slack.experience == "agent_view"
    thread = slack.add_message(DM_ID, "hello")
    dropped = await client.assistant_threads_setSuggestedPrompts(channel_id=DM_ID, thread_ts=thread, prompts=prompts)
    assert dropped["ok"], "silently"
    assert slack.pinned_prompts(DM_ID) is None and "prompts" not in slack.assistant_thread(DM_ID, thread)
    await client.assistant_threads_setSuggestedPrompts(channel_id=DM_ID, title="Try", prompts=prompts)
    assert slack.pinned_prompts(DM_ID) == {"prompts": prompts, "prompts_title": "Try"}
    # Pinned anywhere but the DM is not documented: the general rule, which fails on a channel with no message.
    await assert_errors(
        {"message_not_found": client.assistant_threads_setSuggestedPrompts(channel_id=GENERAL_ID, prompts=prompts)}
    )
    assert slack.pinned_prompts(GENERAL_ID) is None

    slack.experience = "assistant_view"
    latest = slack.start_assistant_thread(DM_ID)
    await client.assistant_threads_setSuggestedPrompts(channel_id=DM_ID, prompts=prompts)
    assert slack.assistant_thread(DM_ID, latest)["prompts"] == prompts
    empty = client.assistant_threads_setSuggestedPrompts(channel_id=GENERAL_ID, prompts=prompts)
    await assert_errors({"message_not_found": empty})


async def test_a_reply_from_the_app_clears_the_status(client: AsyncWebClient, slack: FakeSlack) -> None:
    """ "The status will be automatically cleared when the app sends a reply" (.../assistant.threads.setStatus);
    the person's own message does not clear it."""
    thread = slack.start_assistant_thread(DM_ID)
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is thinking…")
    slack.add_message(DM_ID, "still there?", thread_ts=thread)
    assert slack.shown_status(DM_ID, thread) == "is thinking…"
    await client.chat_startStream(channel=DM_ID, thread_ts=thread, markdown_text="UA ")
    assert slack.shown_status(DM_ID, thread) == ""
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is running Q2…")
    assert slack.shown_status(DM_ID, thread) == "is running Q2…", "a status set after the reply shows"
    await client.chat_postMessage(channel=DM_ID, thread_ts=thread, text="UA flew the most.")
    assert slack.shown_status(DM_ID, thread) == ""


async def test_a_status_expires_two_minutes_after_it_was_set_by_the_fakes_clock(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    now = [1000.0]
    slack.clock = lambda: now[0]
    thread = slack.start_assistant_thread(DM_ID)
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is thinking…")
    now[0] += 119.0
    assert slack.shown_status(DM_ID, thread) == "is thinking…"
    now[0] += 2.0
    assert slack.shown_status(DM_ID, thread) == ""


async def test_an_assistant_status_is_removed_after_its_timeout(client: AsyncWebClient, slack: FakeSlack) -> None:
    slack.status_expiry_s = 0.2  # Slack: two minutes
    thread = slack.start_assistant_thread(DM_ID)
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is thinking…")
    assert slack.shown_status(DM_ID, thread) == "is thinking…"
    await asyncio.sleep(0.3)
    assert slack.shown_status(DM_ID, thread) == ""
    await client.assistant_threads_setStatus(channel_id=DM_ID, thread_ts=thread, status="is thinking…")
    assert slack.shown_status(DM_ID, thread) == "is thinking…"
