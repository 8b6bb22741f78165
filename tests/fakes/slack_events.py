"""What Slack sends to an app: Events API payloads, interactivity payloads, and the signed HTTP requests
that carry them.

Payload shapes follow docs.slack.dev/reference/events/* and /interactivity; signing follows
docs.slack.dev/authentication/verifying-requests-from-slack (`v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`
with the signing secret, in `X-Slack-Signature`, beside `X-Slack-Request-Timestamp`). The same payloads
go over Socket Mode with `FakeSocketMode.events_api(...)` / `.interactive(...)`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from tests.fakes.slack_workspace import APP_ID, BOT_USER_ID, DM_ID, GENERAL_ID, HUMAN_ID, TEAM_ID, rich_text_blocks

SIGNING_SECRET = "test-signing-secret"
VERIFICATION_TOKEN = "fake-verification-token"  # the deprecated `token` field Slack still sends
STALE_AFTER_S = 5 * 60  # slack_sdk's SignatureVerifier refuses timestamps older than this
RETRY_REASONS = ("http_timeout", "too_many_redirects", "connection_failed", "ssl_error", "http_error", "unknown_error")
_ts_lock = threading.Lock()
_last_micros = 0


def new_ts() -> str:
    """A fresh message timestamp (`seconds.micros`) for events that did not go through FakeSlack."""
    global _last_micros
    with _ts_lock:
        _last_micros = max(int(time.time() * 1_000_000), _last_micros + 1)
        return f"{_last_micros // 1_000_000}.{_last_micros % 1_000_000:06d}"


# --- signed HTTP requests ---


@dataclass
class SignedRequest:
    body: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        return self.body.decode()


def sign(
    body: bytes | str,
    *,
    secret: str = SIGNING_SECRET,
    content_type: str = "application/json",
    timestamp: int | None = None,
    stale: bool = False,
    bad_signature: bool = False,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> SignedRequest:
    """Sign a body as Slack does. `stale` dates it beyond the five-minute window; `bad_signature` signs
    with the wrong secret; `retry_num` adds X-Slack-Retry-Num / X-Slack-Retry-Reason as on redeliveries."""
    raw = body.encode() if isinstance(body, str) else body
    when = int(time.time()) if timestamp is None else timestamp
    if stale:
        when -= STALE_AFTER_S + 60
    key = (secret + "-wrong" if bad_signature else secret).encode()
    digest = hmac.new(key, f"v0:{when}:".encode() + raw, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(when),
        "X-Slack-Signature": f"v0={digest}",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return SignedRequest(raw, headers)


def events_request(payload: dict[str, Any], **options: Any) -> SignedRequest:
    """An Events API delivery: the payload as a JSON body (options as for `sign`)."""
    return sign(json.dumps(payload), content_type="application/json", **options)


def interactivity_request(payload: dict[str, Any], **options: Any) -> SignedRequest:
    """An interactivity delivery: `payload=<json>` form-encoded (options as for `sign`)."""
    return sign(
        urlencode({"payload": json.dumps(payload)}), content_type="application/x-www-form-urlencoded", **options
    )


# --- Events API envelopes ---


def event_callback(
    event: dict[str, Any],
    *,
    team_id: str = TEAM_ID,
    api_app_id: str = APP_ID,
    bot_user_id: str = BOT_USER_ID,
    event_id: str | None = None,
    source_team: str | None = None,
) -> dict[str, Any]:
    """An Events API envelope. `source_team`: a Slack Connect channel, where the envelope's `team_id` (and
    the message's `team`, `user_team`, `source_team`) is the other organisation's and only `authorizations`
    names the installing team, as Bolt for Python 1.30.0's sample has it
    (tests/scenario_tests_async/test_events_shared_channels.py, `reaction_added_body`: `team_id: T_SOURCE`,
    `authorizations[0].team_id: T_INSTALLED`); Bolt's context takes the team from `authorizations`
    (slack_bolt/request/internals.py, extract_team_id)."""
    outer = source_team or team_id
    if source_team is not None and event.get("type") in ("message", "app_mention"):
        event = {**event, "team": source_team, "user_team": source_team, "source_team": source_team}
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": outer,
        "context_team_id": outer,
        "context_enterprise_id": None,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": source_team is not None,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def url_verification(challenge: str = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P") -> dict[str, Any]:
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}


# --- events ---


def app_mention(
    text: str,
    *,
    channel: str = GENERAL_ID,
    user: str = HUMAN_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    bot_user_id: str = BOT_USER_ID,
) -> dict[str, Any]:
    """`@analyst text`, top level or (with thread_ts) in a thread. The mention is prefixed unless present."""
    if f"<@{bot_user_id}>" not in text:
        text = f"<@{bot_user_id}> {text}"
    event = _user_message(text, user=user, ts=ts, channel=channel, thread_ts=thread_ts)
    return {**event, "type": "app_mention"}


def message(
    text: str,
    *,
    channel: str = GENERAL_ID,
    user: str = HUMAN_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str = "channel",
    parent_user_id: str | None = None,
) -> dict[str, Any]:
    """A person's message (message.channels / message.im / ...); with thread_ts, a reply in a thread."""
    event = {
        **_user_message(text, user=user, ts=ts, channel=channel, thread_ts=thread_ts),
        "channel_type": channel_type,
    }
    if parent_user_id is not None:
        event["parent_user_id"] = parent_user_id
    return event


def im_message(
    text: str,
    *,
    channel: str = DM_ID,
    user: str = HUMAN_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    action_token: bool = False,
) -> dict[str, Any]:
    """A DM to the app (message.im). With `thread_ts` it is what a person types in Slack's AI container,
    shaped as Bolt for Python 1.30.0's own sample (tests/scenario_tests_async/test_events_assistant.py,
    `user_message_event_body`): no `assistant_thread` key, the thread's parent is the person, and
    `user_team` / `source_team` ride along. `action_token` adds the `assistant_thread: {action_token}`
    some of Slack's deliveries carry (`user_message_event_body_with_action_token` there)."""
    event = message(text, channel=channel, user=user, ts=ts, thread_ts=thread_ts, channel_type="im")
    event.update(user_team=TEAM_ID, source_team=TEAM_ID, user_profile={})
    if thread_ts is not None:
        event.setdefault("parent_user_id", user)
    if action_token:
        event["assistant_thread"] = {"action_token": f"{uuid.uuid4().int % 10**14}.{uuid.uuid4().hex}"}
    return event


def bot_message(
    text: str,
    *,
    channel: str = GENERAL_ID,
    bot_id: str = "B0OTHERBOT1",
    user: str | None = None,
    ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str = "channel",
) -> dict[str, Any]:
    """Another bot's message: the legacy `subtype: bot_message` shape, or, given `user` (the bot's user),
    an app's message, which carries `bot_id` but no subtype."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "text": text,
        "bot_id": bot_id,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type,
    }
    if user is None:
        event.update(subtype="bot_message", username="ci-bot")
    else:
        event.update(user=user, app_id="A0OTHERAPP1", bot_profile={"id": bot_id, "name": "other-bot"})
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def message_changed(
    *,
    channel: str,
    ts: str,
    text: str,
    previous_text: str,
    user: str = HUMAN_ID,
    thread_ts: str | None = None,
    channel_type: str = "channel",
) -> dict[str, Any]:
    event_ts = new_ts()
    previous = _user_message(previous_text, user=user, ts=ts, channel=None, thread_ts=thread_ts)
    current = {**previous, "text": text, "blocks": rich_text_blocks(text), "edited": {"user": user, "ts": event_ts}}
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": channel,
        "ts": event_ts,
        "event_ts": event_ts,
        "message": current,
        "previous_message": previous,
        "channel_type": channel_type,
    }


def message_deleted(
    *,
    channel: str,
    deleted_ts: str,
    previous_text: str,
    user: str = HUMAN_ID,
    thread_ts: str | None = None,
    channel_type: str = "channel",
) -> dict[str, Any]:
    event_ts = new_ts()
    previous = _user_message(previous_text, user=user, ts=deleted_ts, channel=None, thread_ts=thread_ts)
    return {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "channel": channel,
        "ts": event_ts,
        "deleted_ts": deleted_ts,
        "event_ts": event_ts,
        "previous_message": previous,
        "channel_type": channel_type,
    }


def assistant_thread_started(
    *,
    thread_ts: str,
    channel: str = DM_ID,
    user: str = HUMAN_ID,
    context_channel_id: str | None = None,
    team_id: str = TEAM_ID,
) -> dict[str, Any]:
    """The user opened the assistant container; `context` names the channel they were viewing, if any."""
    context = (
        {"channel_id": context_channel_id, "team_id": team_id, "enterprise_id": None} if context_channel_id else {}
    )
    return {
        "type": "assistant_thread_started",
        "assistant_thread": {"user_id": user, "context": context, "channel_id": channel, "thread_ts": thread_ts},
        "event_ts": new_ts(),
    }


def app_home_opened(*, tab: str = "messages", channel: str = DM_ID, user: str = HUMAN_ID) -> dict[str, Any]:
    """The person opened the app's Messages tab (its DM) or Home tab: the agent experience's start, where
    suggested prompts are pinned (docs.slack.dev/ai/migrating-to-agent-messaging). Shape: the `app_home_opened`
    sample of Bolt for Python 1.30.0 (tests/slack_bolt_async/middleware/attaching_conversation_kwargs)."""
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab, "event_ts": new_ts()}


def assistant_thread_context_changed(
    *, thread_ts: str, context_channel_id: str, channel: str = DM_ID, user: str = HUMAN_ID
) -> dict[str, Any]:
    """The user moved to another channel with the assistant container open."""
    event = assistant_thread_started(
        thread_ts=thread_ts, channel=channel, user=user, context_channel_id=context_channel_id
    )
    return {**event, "type": "assistant_thread_context_changed"}


def _user_message(
    text: str, *, user: str, ts: str | None, channel: str | None, thread_ts: str | None
) -> dict[str, Any]:
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "user": user,
        "type": "message",
        "ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "text": text,
        "team": TEAM_ID,
        "blocks": rich_text_blocks(text),
    }
    if channel is not None:
        event.update(channel=channel, event_ts=ts)
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


# --- interactivity ---


def block_actions(
    action_id: str,
    value: str = "",
    *,
    message_ts: str,
    channel: str = GENERAL_ID,
    user: str = HUMAN_ID,
    block_id: str = "actions",
    text: str = "Button",
    thread_ts: str | None = None,
    message: dict[str, Any] | None = None,
    team: str = TEAM_ID,
    element: str = "button",
) -> dict[str, Any]:
    """A button click on a message (`block_actions`), as posted to the interactivity Request URL. `team`:
    the clicker's team (in a Slack Connect channel, the other organisation's; the payload names no other).
    `element`: the clicked element's type; a `feedback_buttons` click reports the pressed button's text and
    value (FeedbackButtonsAction: docs.slack.dev/tools/bolt-js/reference/interfaces/FeedbackButtonsAction)."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if thread_ts is not None:
        container["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "alice", "name": "alice", "team_id": team},
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "team": {"id": team, "domain": "test-workspace"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "general"},
        "message": message or {"type": "message", "ts": message_ts, "text": "", "user": BOT_USER_ID},
        "state": {"values": {}},
        "response_url": f"https://hooks.slack.com/actions/{TEAM_ID}/{uuid.uuid4().int % 10**13}/{uuid.uuid4().hex}",
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": text, "emoji": True},
                "value": value,
                "type": element,
                "action_ts": new_ts(),
            }
        ],
    }


def feedback_click(
    answer: dict[str, Any], choice: str = "positive", *, thread_ts: str, channel: str = GENERAL_ID, **options: Any
) -> dict[str, Any]:
    """A click on one of the feedback buttons (`positive` or `negative`) of an answer message as stored."""
    [block] = [b for b in answer["blocks"] if b["type"] == "context_actions"]
    element = next(e for e in block["elements"] if e["type"] == "feedback_buttons")
    button = element[f"{choice}_button"]
    return block_actions(
        element["action_id"],
        button["value"],
        message_ts=answer["ts"],
        channel=channel,
        block_id=block.get("block_id", "feedback"),
        text=button["text"]["text"],
        thread_ts=thread_ts,
        element="feedback_buttons",
        **options,
    )


def view_submission(
    view: dict[str, Any], choices: dict[str, str] | None = None, *, user: str = HUMAN_ID, team: str = TEAM_ID
) -> dict[str, Any]:
    """A modal submitted (`view_submission`, docs.slack.dev/reference/interaction-payloads/view-interactions-payload),
    as posted to the interactivity Request URL: the opened `view` with `state.values[block_id][action_id]`
    holding each input's value. `choices`: block id -> the value typed or the option chosen; an input left
    out keeps its initial value (or none)."""
    values: dict[str, Any] = {}
    for block in view.get("blocks") or []:
        if block.get("type") != "input":
            continue
        element, block_id = block["element"], block["block_id"]
        chosen = (choices or {}).get(block_id)
        values[block_id] = {element["action_id"]: _input_state(element, chosen)}
    submitted = {**view, "state": {"values": values}}
    return {
        "type": "view_submission",
        "team": {"id": team, "domain": "test-workspace"},
        "user": {"id": user, "username": "alice", "name": "alice", "team_id": team},
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def _input_state(element: dict[str, Any], chosen: str | None) -> dict[str, Any]:
    kind = element["type"]
    if kind in ("static_select", "radio_buttons"):
        options = element.get("options") or []
        option = next((o for o in options if o["value"] == chosen), None) if chosen is not None else None
        return {"type": kind, "selected_option": option or element.get("initial_option")}
    value = chosen if chosen is not None else element.get("initial_value")
    return {"type": kind, "value": value}
