"""Slack's Web API rate limits as the fake enforces them: each method's tier, counted per app per workspace
(chat.postMessage per channel as well), answered as Slack answers: HTTP 429, `{"ok": false, "error":
"ratelimited"}` and a `Retry-After` header with the whole seconds to wait.

"Broadly, you'll encounter limits like these, applied on a 'per API method per workspace/team per app'
basis": Tier 1 1+ per minute, Tier 2 20+, Tier 3 50+, Tier 4 100+; "chat.postMessage generally allows
posting one message per second per channel", with short bursts allowed
(https://docs.slack.dev/apis/web-api/rate-limits). The fake counts each limit over a sliding window of
`window_s` (Slack: a minute), so a burst within the allowance passes and one beyond it is refused; tests
shorten the window to stay fast.

A call counts when it was sent: against a minute, the moment it takes to reach Slack is nothing, but against
a window of two seconds a busy machine's delay is not (a call sent after an old one left the bot's window
arrived while that one was still in the fake's, and was refused: the test's clock, not the bot's budget).
A client that stamps its calls with `SENT_AT_HEADER` (tests/slack_helpers.py stamp_sends) is counted at
that moment; any other call when it arrives.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.slack_rules import SlackError

TIER_PER_MINUTE = {1: 1, 2: 20, 3: 50, 4: 100}
# Each method's tier from its reference page (docs.slack.dev/reference/methods/<method>, "Rate Limits"):
# chat.update "Tier 3: 50+ per minute"; chat.startStream and chat.stopStream "Tier 2: 20+ per minute";
# chat.appendStream "Tier 4: 100+ per minute"; chat.delete Tier 3.
METHOD_TIERS = {
    "chat.update": 3,
    "chat.delete": 3,
    "chat.startStream": 2,
    "chat.appendStream": 4,
    "chat.stopStream": 2,
    # "Special rate limits apply" (docs.slack.dev/reference/methods/assistant.threads.setStatus), not
    # quantified there: counted as Tier 3.
    "assistant.threads.setStatus": 3,
    # Who is asking, and who may open an answer's links: users.info and conversations.members "Tier 4: 100+
    # per minute", users.lookupByEmail "Tier 3", usergroups.list and usergroups.users.list "Tier 2" (their
    # reference pages, as slack_kit's priv/docs/methods/*.json mirror them).
    "users.info": 4,
    "conversations.members": 4,
    "users.lookupByEmail": 3,
    "usergroups.list": 2,
    "usergroups.users.list": 2,
    # files_upload_v2's two methods: "Tier 4: 100+ per minute" (.../methods/files.getUploadURLExternal,
    # .../methods/files.completeUploadExternal).
    "files.getUploadURLExternal": 4,
    "files.completeUploadExternal": 4,
}
PER_CHANNEL = {"chat.postMessage": 60}  # one per second per channel, as 60 in the window: bursts pass
SENT_AT_HEADER = "X-Fake-Sent-At"  # time.monotonic() when the client made the call (same process only)


def sent_at(headers: Any) -> float | None:
    """When the call was sent, if its client said so."""
    value = headers.get(SENT_AT_HEADER)
    return float(value) if value else None


def per_window(method: str) -> int | None:
    """The calls `method` may make in one window (None: not limited by the fake)."""
    if method in PER_CHANNEL:
        return PER_CHANNEL[method]
    tier = METHOD_TIERS.get(method)
    return TIER_PER_MINUTE[tier] if tier is not None else None


class RateLimits:
    """Counts calls per (team, method[, channel]) and refuses the one over its tier with 429 + Retry-After."""

    def __init__(self, *, window_s: float = 60.0, enabled: bool = True, clock: Callable[[], float] = time.monotonic):
        self.window_s, self.enabled, self.clock = window_s, enabled, clock
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, ...], list[float]] = {}  # sorted: stamped calls may arrive out of order
        self.refused: list[str] = []  # each call refused for its tier, by method

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()
            self.refused.clear()

    def check(self, team: str, method: str, channel: str, *, sent_at: float | None = None) -> None:
        """Count a call (at `sent_at`, else now), or raise `ratelimited` (429) when a window holding it would
        hold more than the method's limit."""
        limit = per_window(method)
        if not self.enabled or limit is None:
            return
        key = (team, method, channel) if method in PER_CHANNEL else (team, method)
        with self._lock:
            now = self.clock() if sent_at is None else sent_at
            calls = self._calls.setdefault(key, [])
            del calls[: bisect.bisect_right(calls, now - 2 * self.window_s)]  # no window holds both
            before = bisect.bisect_right(calls, now) - bisect.bisect_right(calls, now - self.window_s)
            after = bisect.bisect_left(calls, now + self.window_s) - bisect.bisect_left(calls, now)
            if max(before, after) >= limit:
                oldest = calls[bisect.bisect_right(calls, now - self.window_s)] if before >= limit else now
                wait_s = max(1, math.ceil(oldest + self.window_s - self.clock()))
                self.refused.append(method)
                raise SlackError("ratelimited", status=429, headers={"Retry-After": str(wait_s)})
            bisect.insort(calls, now)
