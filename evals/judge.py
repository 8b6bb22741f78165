"""The model judge: reads the question, the answer, the case's rubric and the query results (nothing
else: no gold SQL, no expectations) and answers pass or fail with a reason. Its verdict is kept
apart from the deterministic checks, and a judge that fails leaves a judge error, never a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agent import linear_re
from agent.db import format_for_model
from agent.llm import LLMClient
from agent.prompts import PromptLibrary
from agent.runner import RunResult
from evals.results import JudgeVerdict, Tokens

SYSTEM_PROMPT = "evals/JUDGE.md"
REQUEST_PROMPT = "evals/JUDGE_REQUEST.md"
# A line starting with PASS or FAIL (a word of its own), and the reason after it. RE2, which has no
# \b: the word ends where non-word characters or the text's end follow.
_VERDICT_LINE = linear_re.compile(
    r"^\W*(?:verdict\W*)?(pass|fail)(?:ed)?(?:\W+|\z)(.*)$", ignore_case=True, multiline=True
)
# Each `{` is tried as the start of an object, and each try may read to the end of the reply: a bounded
# number of tries keeps that linear.
MAX_OBJECT_STARTS = 64


class VerdictError(ValueError):
    """The judge's reply holds no verdict."""


class Judge:
    def __init__(
        self,
        llm: LLMClient,
        prompts: PromptLibrary,
        model: str,
        *,
        temperature: float | None = None,
        max_tokens: int = 800,
        max_result_chars: int = 4_000,
    ) -> None:
        self._llm, self._prompts, self.model = llm, prompts, model
        self._temperature, self._max_tokens, self._max_result_chars = temperature, max_tokens, max_result_chars

    def request(self, question: str, rubric: str, result: RunResult) -> dict[str, Any]:
        """The neutral request (agent/llm/capabilities.py): only the question, the answer, the rubric and the
        query results. `model` is the judge's model list, tried in order."""
        queries = [
            {"id": q.id, "question": q.question, "result": format_for_model(q.result, self._max_result_chars)}
            for q in result.queries
        ]
        prompt = self._prompts.render(
            REQUEST_PROMPT, question=question, rubric=rubric, answer=result.answer or "(no answer)", queries=queries
        )
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "system": self._prompts.render(SYSTEM_PROMPT),
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self._temperature,
        }
        return request

    async def grade(self, question: str, rubric: str, result: RunResult) -> JudgeVerdict:
        try:
            turn = await self._llm.stream_turn(
                **self.request(question, rubric, result), on_text=_ignore_text, on_restart=_ignore_restart, role="judge"
            )
        except Exception as exc:  # a judge failure is recorded, never a crashed run
            return JudgeVerdict(model=self.model, error=f"{type(exc).__name__}: {exc}")
        usage = turn.usage
        tokens = Tokens(
            input=usage.input_tokens,
            output=usage.output_tokens,
            cache_read=usage.cache_read_tokens,
            cache_creation=usage.cache_creation_tokens,
        )
        try:
            passed, reason = parse_verdict(turn.text)
        except VerdictError as exc:
            return JudgeVerdict(model=turn.model, error=str(exc), tokens=tokens)
        return JudgeVerdict(model=turn.model, passed=passed, reason=reason, tokens=tokens)


def parse_verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) from the judge's reply: a JSON object (possibly fenced or among other text)
    with `verdict` pass/fail (or a boolean `passed`/`pass`), or failing that a line starting with
    PASS or FAIL."""
    decoder = json.JSONDecoder()
    for start in _braces(text, MAX_OBJECT_STARTS):
        try:
            value, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nested deeper than the parser goes
            continue
        if isinstance(value, dict) and (verdict := _verdict_of(value)) is not None:
            return verdict, str(value.get("reason") or value.get("explanation") or "").strip()
    if match := _VERDICT_LINE.search(text):
        return match.group(1).lower() == "pass", match.group(2).strip()
    snippet = " ".join(text.split())[:120] or "an empty reply"
    raise VerdictError(f"the judge gave no verdict: {snippet!r}")


def _braces(text: str, most: int) -> Iterator[int]:
    start = text.find("{")
    for _ in range(most):
        if start == -1:
            return
        yield start
        start = text.find("{", start + 1)


def _verdict_of(value: dict[str, Any]) -> bool | None:
    verdict = value.get("verdict")
    if isinstance(verdict, str) and verdict.strip().lower() in ("pass", "passed", "fail", "failed"):
        return verdict.strip().lower().startswith("pass")
    for key in ("passed", "pass"):
        if isinstance(value.get(key), bool):
            return bool(value[key])
    return None


async def _ignore_text(_: str) -> None:
    return None


async def _ignore_restart() -> None:
    return None
