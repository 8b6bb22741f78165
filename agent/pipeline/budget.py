"""The per-question budget (AGENT_QUESTION_MAX_TOKENS, AGENT_QUESTION_MAX_ROWS_READ; off by default):
checked after each round of tools. Past it, the loop stops asking for more and one synthesis call
answers from what was gathered; the answer says why (prompts/loop/budget_note.md)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary


@dataclass(frozen=True)
class QuestionBudget:
    max_tokens: int | None = None
    max_rows_read: int | None = None

    def spent(self, state: RunState) -> str | None:
        """The note to add to the answer when the question has spent its budget; None while it has not."""
        if self.max_tokens is not None:
            tokens = sum(
                u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_creation_tokens
                for _, u in state.model_usage.values()
            )
            if tokens >= self.max_tokens:
                return self._stop(state, "tokens", tokens, self.max_tokens)
        if self.max_rows_read is not None:
            rows = sum(q.result.rows_read or 0 for q in state.queries if not q.reused_from)
            if rows >= self.max_rows_read:
                return self._stop(state, "rows_read", rows, self.max_rows_read)
        return None

    @staticmethod
    def _stop(state: RunState, kind: str, spent: int, limit: int) -> str:
        state.metrics.budget_stops.labels(kind).inc()
        return f"{kind}:{spent}:{limit}"

    @staticmethod
    def note(prompts: PromptLibrary, reason: str) -> str:
        kind, spent, limit = reason.split(":")
        return prompts.render("loop/budget_note.md", kind=kind, spent=f"{int(spent):,}", limit=f"{int(limit):,}")
