"""Where streaming (chat.startStream) and the plan inside a stream work, as Slack last said.

Remembered per workspace and channel type once Slack says they do not work there, and tried there again
after a while (a scope can be added, a workspace can gain the methods or the blocks).
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Answers from chat.startStream that mean streaming does not work here (this workspace, this kind of
# conversation) for now.
NO_STREAMING = {
    "unknown_method",
    "method_deprecated",
    "missing_scope",
    "not_allowed_token_type",
    "channel_type_not_supported",
}
# ... and that the plan (task_update chunks, task_display_mode) does not, where plain streaming may.
NO_PLANS = NO_STREAMING | {"invalid_chunks", "invalid_blocks", "invalid_arguments", "streaming_mode_mismatch"}
STREAMING_RETRY_S = 600.0

Where = tuple[str, str]  # the installing team, the channel type


class Streaming:
    """Where to try streaming, and the plan in it: elsewhere they are still tried."""

    def __init__(self, retry_s: float = STREAMING_RETRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_s, self.clock = retry_s, clock
        self._off_until: dict[tuple[str, Where], float] = {}

    def allowed(self, where: Where) -> bool:
        return self._allowed(("stream", where))

    def plans_allowed(self, where: Where) -> bool:
        return self._allowed(("stream", where)) and self._allowed(("plan", where))

    def refused(self, where: Where, error: str) -> None:
        if error in NO_STREAMING:
            self._off_until[("stream", where)] = self.clock() + self.retry_s

    def plan_refused(self, where: Where, error: str) -> None:
        if error in NO_PLANS:
            self._off_until[("plan", where)] = self.clock() + self.retry_s

    def _allowed(self, key: tuple[str, Where]) -> bool:
        until = self._off_until.get(key)
        if until is not None and self.clock() >= until:
            del self._off_until[key]
            return True
        return until is None
