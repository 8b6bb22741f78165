"""Slack's payloads as Bolt for Python's own tests carry them (slack_bolt 1.30.0, the installed version),
with Bolt's placeholder ids (T111, W222, D111, ...) swapped for the fake workspace's, so a replay reaches
a channel and a user the fake knows. Every other field is Bolt's, as written there.

Sources (github.com/slackapi/bolt-python at v1.30.0):
- tests/scenario_tests_async/test_events_assistant.py: `build_payload`, `thread_started_event_body`,
  `user_message_event_body`, `user_message_event_body_with_action_token`, `message_changed_event_body`
- tests/scenario_tests_async/test_events_shared_channels.py: `app_mention_body` (a Slack Connect channel)
- tests/slack_bolt_async/middleware/attaching_conversation_kwargs/test_async_attaching_conversation_kwargs.py:
  `app_home_opened_messages_event_body`, `app_home_opened_home_event_body` (the agent experience's start)
"""

from __future__ import annotations

from typing import Any

from tests.fakes.slack_workspace import APP_ID, BOT_USER_ID, DM_ID, GENERAL_ID, HUMAN_ID, TEAM_ID


def build_payload(event: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    return {
        "token": "verification_token",
        "team_id": TEAM_ID,
        "enterprise_id": "E111",
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1599616881,
        "authorizations": [
            {
                "enterprise_id": "E111",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
    }


def thread_started(thread_ts: str) -> dict[str, Any]:
    return build_payload(
        {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": HUMAN_ID,
                "context": {"channel_id": GENERAL_ID, "team_id": TEAM_ID, "enterprise_id": "E111"},
                "channel_id": DM_ID,
                "thread_ts": thread_ts,
            },
            "event_ts": "1726133698.665188",
        },
        event_id="Ev111",
    )


def app_home_opened(tab: str) -> dict[str, Any]:
    """The person opened the app's Messages tab ("messages": its DM, where an agent_view app pins suggested
    prompts) or its Home tab ("home")."""
    event = {"type": "app_home_opened", "user": HUMAN_ID, "channel": DM_ID, "tab": tab, "event_ts": "1726133700.887259"}
    return build_payload(event, event_id=f"Ev_home_{tab}")


def user_message(text: str, *, ts: str, thread_ts: str, action_token: bool = False) -> dict[str, Any]:
    event: dict[str, Any] = {
        "user": HUMAN_ID,
        "type": "message",
        "ts": ts,
        "text": text,
        "team": TEAM_ID,
        "user_team": TEAM_ID,
        "source_team": "T222",
        "user_profile": {},
        "thread_ts": thread_ts,
        "parent_user_id": HUMAN_ID,
        "channel": DM_ID,
        "event_ts": ts,
        "channel_type": "im",
    }
    if action_token:
        event["assistant_thread"] = {"action_token": "10647138185092.960436384805.afce3599"}
    return build_payload(event, event_id=f"Ev{ts.replace('.', '')}")


def title_changed(thread_ts: str, title: str) -> dict[str, Any]:
    """Slack edits the thread's root when the app sets a title: a message_changed the app must ignore."""
    root = {
        "text": "New chat",
        "subtype": "assistant_app_thread",
        "user": BOT_USER_ID,
        "type": "message",
        "edited": {},
        "thread_ts": thread_ts,
        "reply_count": 2,
        "reply_users_count": 2,
        "latest_reply": thread_ts,
        "reply_users": [BOT_USER_ID, HUMAN_ID],
        "is_locked": False,
        "ts": thread_ts,
    }
    return build_payload(
        {
            "type": "message",
            "subtype": "message_changed",
            "message": {**root, "assistant_app_thread": {"title": title, "title_blocks": [], "artifacts": []}},
            "previous_message": root,
            "channel": DM_ID,
            "hidden": True,
            "ts": "1726133701.028300",
            "event_ts": "1726133701.028300",
            "channel_type": "im",
        },
        event_id="Ev222",
    )


def shared_channel_mention(text: str, *, ts: str) -> dict[str, Any]:
    """`app_mention_body` of the shared-channels scenario: the outer `enterprise_id` is the source org's,
    `authorizations` the installer's."""
    return {
        "token": "verification_token",
        "team_id": TEAM_ID,
        "enterprise_id": "E_SOURCE",
        "api_app_id": APP_ID,
        "event": {
            "client_msg_id": "9cbd4c5b-7ddf-4ede-b479-ad21fca66d63",
            "type": "app_mention",
            "text": f"<@{BOT_USER_ID}> {text}",
            "user": HUMAN_ID,
            "ts": ts,
            "team": TEAM_ID,
            "channel": GENERAL_ID,
            "event_ts": ts,
        },
        "type": "event_callback",
        "event_id": "Ev333",
        "event_time": 1595926230,
        "authorizations": [
            {
                "enterprise_id": "E_INSTALLED",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
    }
