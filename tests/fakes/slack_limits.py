"""Slack's Web API rate limits as the fake enforces them: each method's tier, counted per app per workspace
(chat.postMessage per channel as well), answered as Slack answers: HTTP 429, `{"ok": false, "error":
"ratelimited"}` and a `Retry-After` header with the whole seconds to wait.

"Broadly, you'll encounter limits like these, applied on a 'per API method per workspace/team per app'
basis": Tier 1 1+ per minute, Tier 2 20+, Tier 3 50+, Tier 4 100+; "chat.postMessage generally allows
posting one message per second per channel", with short bursts allowed
(https://docs.slack.dev/apis/web-api/rate-limits). The fake counts each limit over a sliding window of
`window_s` (Slack: a minute), so a burst within the allowance passes and one beyond it is refused; tests
shorten the window to stay fast.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

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
}
PER_CHANNEL = {"chat.postMessage": 60}  # one per second per channel, as 60 in the window: bursts pass


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
        self._calls: dict[tuple[str, ...], deque[float]] = {}
        self.refused: list[str] = []  # each call refused for its tier, by method

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()
            self.refused.clear()

    def check(self, team: str, method: str, channel: str) -> None:
        """Count a call, or raise `ratelimited` (429) when it is over the method's limit."""
        limit = per_window(method)
        if not self.enabled or limit is None:
            return
        key = (team, method, channel) if method in PER_CHANNEL else (team, method)
        with self._lock:
            now = self.clock()
            calls = self._calls.setdefault(key, deque())
            while calls and calls[0] <= now - self.window_s:
                calls.popleft()
            if len(calls) >= limit:
                wait_s = max(1, math.ceil(calls[0] + self.window_s - now))
                self.refused.append(method)
                raise SlackError("ratelimited", status=429, headers={"Retry-After": str(wait_s)})
            calls.append(now)
