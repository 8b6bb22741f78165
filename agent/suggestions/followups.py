"""Follow-up questions: a separate, cheaper model call after the answer. Never breaks the answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from agent.config import ModelRef
from agent.llm import Fallback, LLMClient, LLMError, Usage
from agent.metrics import Metrics
from agent.prompts import PromptLibrary
from agent.runner import ExecutedQuery
from agent.suggestions.replies import json_strings, listed_items

log = logging.getLogger(__name__)
MAX_FOLLOWUPS = 3


class FollowupGenerator:
    def __init__(
        self,
        llm: LLMClient,
        prompts: PromptLibrary,
        model: tuple[ModelRef, ...],
        metrics: Metrics,
        timeout_s: float = 20.0,
    ) -> None:
        self._llm, self._prompts, self._model, self._metrics = llm, prompts, model, metrics
        self._timeout_s = timeout_s

    async def generate(
        self,
        question: str,
        answer: str,
        queries: Sequence[ExecutedQuery],
        *,
        on_usage: Callable[[str, Usage], None] | None = None,
    ) -> list[str]:
        """Up to three questions; `on_usage` hears the call's model and tokens (the run's receipt)."""
        prompt = self._prompts.render("FOLLOWUP_REQUEST.md", question=question, answer=answer, queries=queries)
        try:
            with self._metrics.llm_seconds.labels("followup").time():
                turn = await asyncio.wait_for(
                    self._llm.complete(
                        model=self._model,
                        system=self._prompts.render("FOLLOWUP.md"),
                        prompt=prompt,
                        max_tokens=400,
                        on_fallback=self._fell_back,
                        role="followup",
                    ),
                    self._timeout_s,
                )
        except (LLMError, TimeoutError) as exc:
            self._metrics.llm_calls.labels("followup", "error").inc()
            log.warning("follow-up suggestions skipped: %s", exc)
            return []
        self._metrics.llm_calls.labels("followup", "ok").inc()
        self._metrics.count_tokens(turn.usage)
        if on_usage is not None:
            on_usage(turn.model, turn.usage)
        return parse_followups(turn.text, exclude=question)

    async def _fell_back(self, fallback: Fallback) -> None:
        self._metrics.count_fallback(fallback.role, fallback.reason)


def parse_followups(text: str, exclude: str = "") -> list[str]:
    """Questions from a JSON array, or failing that from a bulleted or numbered list."""
    candidates = json_strings(text) or listed_items(text)
    seen = {exclude.strip().lower()}
    questions: list[str] = []
    for candidate in candidates:
        cleaned = " ".join(candidate.strip().strip('"').split())
        if 8 <= len(cleaned) <= 300 and cleaned.lower() not in seen:
            seen.add(cleaned.lower())
            questions.append(cleaned)
            if len(questions) == MAX_FOLLOWUPS:
                break
    return questions
