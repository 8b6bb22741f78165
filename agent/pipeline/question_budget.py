"""The per-question budget (AGENT_QUESTION_MAX_TOKENS, AGENT_QUESTION_MAX_ROWS_READ; off by default):
checked before every model call. Past its rows read, the loop stops asking for more and one synthesis
call answers from what was gathered; the answer says why (prompts/loop/budget_note.md). Past its tokens,
no model call is made at all, the synthesis and the follow-ups included: the answer says what was
gathered and why it stopped (prompts/loop/budget_stopped.md). A call's input is known only once it is
reported, so a question spends at most its token budget plus one call (its context window and output):
what the asker's daily budget holds for it (chats/daily_budgets.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary


@dataclass(frozen=True)
class Overspent:
    """Which of the question's budgets it reached, how much it spent and what the limit was."""

    kind: str  # "tokens" or "rows_read"; a report's own limits (agent/pipeline/reporting.py) name theirs
    spent: float
    limit: float


@dataclass(frozen=True)
class QuestionBudget:
    max_tokens: int | None = None
    max_rows_read: int | None = None

    def tokens_spent(self, state: RunState) -> bool:
        """The question may make no more model calls."""
        return self.max_tokens is not None and _tokens(state) >= self.max_tokens

    def spent(self, state: RunState) -> Overspent | None:
        """What the question has spent past its budget; None while it has not."""
        if self.max_tokens is not None:
            tokens = _tokens(state)
            if tokens >= self.max_tokens:
                return self._stop(state, "tokens", tokens, self.max_tokens)
        if self.max_rows_read is not None:
            rows = sum(q.result.rows_read or 0 for q in state.queries if not q.reused_from)
            if rows >= self.max_rows_read:
                return self._stop(state, "rows_read", rows, self.max_rows_read)
        return None

    @staticmethod
    def _stop(state: RunState, kind: Literal["tokens", "rows_read"], spent: int, limit: int) -> Overspent:
        state.metrics.budget_stops.labels(kind).inc()
        return Overspent(kind, spent, limit)

    @staticmethod
    def note(prompts: PromptLibrary, overspent: Overspent, *, counted: bool = True) -> str:
        """The note added to the answer when the question stopped at its budget. Not `counted` (a policy
        filters rows): ClickHouse's rows read include the rows the policy hides, so no figure is named."""
        figures = counted or overspent.kind == "tokens"
        spent = f"{overspent.spent:,}" if figures else None
        limit = f"{overspent.limit:,}" if figures else None
        return prompts.render("loop/budget_note.md", kind=overspent.kind, spent=spent, limit=limit)

    @staticmethod
    def stopped(prompts: PromptLibrary, overspent: Overspent, gathered: str) -> str:
        """The whole answer when the question spent its tokens before one was written."""
        spent, limit = f"{overspent.spent:,}", f"{overspent.limit:,}"
        return prompts.render("loop/budget_stopped.md", spent=spent, limit=limit, gathered=gathered)


def _tokens(state: RunState) -> int:
    return sum(
        u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_creation_tokens
        for _, u in state.model_usage.values()
    )
