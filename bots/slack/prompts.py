"""Where and when to offer the example questions as Slack's suggested prompts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from slack_bolt.request.payload_utils import is_app_home_opened_event

from bots.slack.receive import Allowed, asker_team

PROMPTS_EVERY_S = 600.0  # a DM's pinned prompts are set again at most this often
MAX_REMEMBERED = 10_000


def prompts_place(body: dict[str, Any]) -> tuple[str, str | None] | None:
    """Where an event asks for suggested prompts: (channel, thread_ts), or None.

    Legacy `assistant_view`: `assistant_thread_started` opens a thread, and the prompts go on it. The agent
    experience (`agent_view`) has no such event: `app_home_opened` with tab "messages" says the DM was opened,
    and the prompts are set with only the channel; "Including [thread_ts] in a call for an agent app will
    cause the call to silently fail" (docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts).
    Only a DM with the app (a `D` channel) has them.
    """
    event = body.get("event") or {}
    if event.get("type") == "assistant_thread_started":
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        return (str(channel), str(thread_ts)) if channel and thread_ts and str(channel).startswith("D") else None
    channel = str(event.get("channel") or "")
    if is_app_home_opened_event(body, tab="messages") and channel.startswith("D"):
        return channel, None
    return None


def prompts_asker(body: dict[str, Any]) -> str:
    """Whose DM the prompts are for (their policy writes them): the thread's or the tab's user ('' unknown)."""
    event = body.get("event") or {}
    thread = event.get("assistant_thread") or {}
    return str(thread.get("user_id") or event.get("user") or "")


class PromptsGate:
    """Prompts only for askers the allowlist admits (both the installing team and the person's own), and a
    DM's pinned prompts at most once per `every_s`: Slack sends `app_home_opened` each time a person
    enters the DM."""

    def __init__(
        self, allowed: Allowed, every_s: float = PROMPTS_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._allowed, self._every_s, self._clock = allowed, every_s, clock
        self._last: dict[str, float] = {}

    def admits(self, body: dict[str, Any], installed_team: str) -> bool:
        return self._allowed.admits_teams(installed_team, asker_team(body))

    def due(self, channel: str, thread_ts: str | None) -> bool:
        if thread_ts is not None:  # a new assistant thread: each gets its own
            return True
        now = self._clock()
        if now - self._last.get(channel, -self._every_s) < self._every_s:
            return False
        if len(self._last) >= MAX_REMEMBERED:
            self._last = {c: t for c, t in self._last.items() if now - t < self._every_s}
        self._last[channel] = now
        return True
