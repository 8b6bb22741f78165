"""The one model client every role uses: an ordered list of models per call, each served by its
provider, falling back to the next when one is overloaded, rate limited past its retries or unreachable.

A fallback keeps the run: the same messages (every earlier round, tool results included) go to the next
model; only the reply the failed model had begun is dropped (`on_restart`). Errors that are the
request's fault (invalid request, context too long, a refused key) are raised at once: another model
would refuse the same request. After a model is passed over, calls start at the models after it for
`cooldown_s`, so the rounds of a run do not wait out its retries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

from agent.config import MISSING_ANTHROPIC_KEY, ModelRef, Provider, Settings, parse_models
from agent.llm.capabilities import Capabilities, log_gaps, translate
from agent.llm.providers import ModelProvider, providers_for
from agent.llm.turns import (
    Fallback,
    FallbackSink,
    LLMConfigError,
    LLMUnavailable,
    ModelTurn,
    ModelUnreachable,
    RestartSink,
    TextSink,
    Usage,
    ignore_fallback,
    ignore_usage,
)
from agent.tracing import span

log = logging.getLogger(__name__)


Models = str | Sequence[ModelRef]


@lru_cache(maxsize=64)
def _parsed(text: str) -> tuple[ModelRef, ...]:
    try:
        return parse_models(text)
    except ValueError as exc:
        raise LLMConfigError(f"Bad model list: {exc}") from None


def _refs(models: Models) -> tuple[ModelRef, ...]:
    return _parsed(models) if isinstance(models, str) else tuple(models)


class LLMClient:
    def __init__(
        self,
        providers: Mapping[Provider, ModelProvider],
        *,
        caps: Capabilities | None = None,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._providers = dict(providers)
        self._caps = caps or Capabilities()
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._passed_over: dict[ModelRef, float] = {}

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> LLMClient:
        refs = [*settings.models("main"), *settings.models("followup"), *settings.models("judge")]
        caps = Capabilities(prompt_caching=settings.agent_prompt_caching)
        log_gaps(refs, caps=caps, thinking_budget=settings.agent_thinking_budget)
        return cls(
            providers_for(settings, {ref.provider for ref in refs}),
            caps=caps,
            cooldown_s=settings.agent_model_cooldown_s,
            **kwargs,
        )

    def order(self, models: Models) -> list[ModelRef]:
        """The list as this call tries it: models passed over in the last `cooldown_s` go last."""
        refs = _refs(models)
        now = self._clock()
        resting = {ref for ref in refs if self._passed_over.get(ref, float("-inf")) > now}
        return [ref for ref in refs if ref not in resting] + [ref for ref in refs if ref in resting]

    async def stream_turn(
        self,
        *,
        model: Models,
        on_text: TextSink,
        on_restart: RestartSink,
        on_fallback: FallbackSink = ignore_fallback,
        on_usage: Callable[[str, Usage], None] | None = None,
        role: str = "main",
        **request: Any,
    ) -> ModelTurn:
        """One streamed model call (a neutral request: see agent/llm/capabilities.py); text deltas go to
        `on_text` as they arrive. `turn.model` names the model that answered. `on_usage` gets the model
        and the tokens of each attempt that did not finish (cancelled, failed, retried): the provider
        billed what it reported."""
        sent = False  # text of the model being asked has reached `on_text`

        async def text(delta: str) -> None:
            nonlocal sent
            sent = True
            await on_text(delta)

        async def restart() -> None:
            nonlocal sent
            sent = False
            await on_restart()

        async def ask(ref: ModelRef, provider_request: dict[str, Any], last: bool) -> ModelTurn:
            billed = ignore_usage if on_usage is None else partial(on_usage, str(ref))
            return await self._provider(ref).stream(
                ref.name, provider_request, text, restart, last=last, on_usage=billed
            )

        async def drop_partial() -> None:
            if sent:  # the failed model's partial reply is not the answer
                await restart()

        return await self._first_answer(model, request, ask, role, on_fallback, before_next=drop_partial)

    async def complete(
        self,
        *,
        model: Models,
        system: str,
        prompt: str,
        max_tokens: int,
        on_fallback: FallbackSink = ignore_fallback,
        role: str = "followup",
    ) -> ModelTurn:
        """A plain, non-streamed call (follow-ups, example questions, the judge), with the same fallback;
        `turn.model` names the model that answered."""
        request = {"max_tokens": max_tokens, "system": system, "messages": [{"role": "user", "content": prompt}]}

        async def ask(ref: ModelRef, provider_request: dict[str, Any], last: bool) -> ModelTurn:
            return await self._provider(ref).complete(ref.name, provider_request, last=last)

        return await self._first_answer(model, request, ask, role, on_fallback)

    async def _first_answer(
        self,
        models: Models,
        request: dict[str, Any],
        ask: Callable[[ModelRef, dict[str, Any], bool], Awaitable[ModelTurn]],
        role: str,
        on_fallback: FallbackSink,
        before_next: Callable[[], Awaitable[None]] | None = None,
    ) -> ModelTurn:
        """The turn of the first model in the list that can answer; the last one's error when none can.
        An API that cannot be reached at all takes the rest of its provider's models with it."""
        refs = self.order(models)
        if not refs:
            raise LLMConfigError("No model is configured for this call.")
        while True:
            ref, refs = refs[0], refs[1:]
            try:
                with span(
                    "agent.llm.call", agent__role=role, gen_ai__system=ref.provider, gen_ai__request__model=ref.name
                ) as traced:
                    turn = await ask(ref, translate(ref.provider, request, self._caps), not refs)
                    traced.set(
                        gen_ai__usage__input_tokens=turn.usage.input_tokens,
                        gen_ai__usage__output_tokens=turn.usage.output_tokens,
                    )
            except LLMUnavailable as exc:
                if isinstance(exc, ModelUnreachable):
                    refs = [other for other in refs if other.provider != ref.provider]
                if not refs:
                    raise
                if before_next is not None:
                    await before_next()
                await self._fall_back(exc, ref, refs[0], role, on_fallback)
                continue
            turn.model, turn.later_model = str(ref), ref != _refs(models)[0]
            return turn

    def _provider(self, ref: ModelRef) -> ModelProvider:
        provider = self._providers.get(ref.provider)
        if provider is None:
            raise LLMConfigError(f"{ref}: no {ref.provider} client is configured in this process.")
        return provider

    async def _fall_back(
        self, exc: LLMUnavailable, failed: ModelRef, after: ModelRef, role: str, on_fallback: FallbackSink
    ) -> None:
        if self._cooldown_s > 0:
            self._passed_over[failed] = self._clock() + self._cooldown_s
        note = Fallback(role=role, from_model=str(failed), to_model=str(after), reason=exc.reason)
        log.warning("model %s %s (%s); %s goes on with %s", failed, exc.reason, exc, role, after)
        await on_fallback(note)

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.close()


MISSING_KEY = MISSING_ANTHROPIC_KEY
