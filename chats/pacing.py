"""Pacing for every adapter: how many questions a client may ask a minute (`rate_limits.py`), and one
answer at a time per conversation (`turns.py`). Both live in memory in one process, and in the kit's
state file (opened by chats/state.py) when the process is one of several workers.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agent.config import Settings
from chats.daily_budgets import DailyBudget
from chats.rate_limits import LocalRateLimit, RateLimit, SharedRateLimit
from chats.state_file import StateFile
from chats.turns import Turns


class Pacing:
    """Rate limits and turns for one process: in memory, or through the kit's state file (`shared`,
    chats/state.py) for a process that is one of several workers."""

    def __init__(self, shared: StateFile | None = None, *, workers: int = 1) -> None:
        self.workers = workers  # processes sharing the app's limits at Slack and elsewhere
        self._file = shared
        self._turns = Turns(self._file)

    @property
    def shared(self) -> bool:
        return self._file is not None

    def rate_limit(self, scope: str, per_minute: int) -> RateLimit:
        if self._file is None:
            return LocalRateLimit(per_minute)
        return SharedRateLimit(self._file, scope, per_minute)

    def asker_budget(self, settings: Settings) -> DailyBudget:
        """The daily budget of each asker as the settings give it. One model call can add its whole
        context window and output past the per-question check (agent/pipeline/question_budget.py)."""
        call = settings.agent_context_tokens + settings.agent_max_tokens + (settings.agent_thinking_budget or 0)
        return self.daily_budget(
            settings.agent_daily_user_tokens,
            settings.agent_daily_user_cost_usd,
            settings.agent_question_max_tokens,
            call_tokens=call,
        )

    def daily_budget(
        self,
        max_tokens: int | None,
        max_cost_usd: float | None,
        question_tokens: int | None = None,
        call_tokens: int = 0,
    ) -> DailyBudget:
        """What one asker may spend per UTC day, counted where the rate limits are; a question reserves
        `question_tokens` of it (the per-question budget) plus what one model call can add past that
        budget's check (`call_tokens`) while it runs."""
        return DailyBudget(
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
            question_tokens=question_tokens,
            call_tokens=call_tokens,
            file=self._file,
        )

    def turn(self, key: str, position: int | None = None) -> AbstractAsyncContextManager[None]:
        """Hold `key`'s turn (see Turns.turn)."""
        return self._turns.turn(key, position)
