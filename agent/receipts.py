"""The receipt under every answer: which models, how many rounds and tokens, what it cost (from the price
list, agent/pricing.yaml; a model without a price is named, never guessed), which queries ran and what
ClickHouse says they read, and how long the first event and the answer took (or, when the run failed or
was cancelled before its answer, that there was none and when it ended). Summed per conversation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field, computed_field

from agent.llm.turns import Usage
from agent.pricing import PriceList


class ModelUse(BaseModel):
    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float | None = None  # None: the price list has no price for this model

    def tokens(self) -> dict[str, int]:
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cache_read": self.cache_read_tokens,
            "cache_creation": self.cache_creation_tokens,
        }


class Receipt(BaseModel):
    models: list[ModelUse] = Field(default_factory=list)
    answers: int = 1  # how many answers it covers (a conversation's sum covers several; a failed run none)
    answered: bool = True  # False: the run ended (an error, a cancel) before its answer; answer_ms is when
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float | None = None  # the priced models' cost; None when no model used has a price
    unpriced_models: list[str] = Field(default_factory=list)
    queries: int = 0  # queries the engine ran (reused results not counted)
    rows_read: int = 0
    bytes_read: int = 0
    unmeasured_queries: int = 0  # queries whose engine did not say what they read
    first_event_ms: int | None = None
    answer_ms: int = 0
    resumed: int = 0  # times another host took the run over and went on from its checkpoint

    @classmethod
    def build(
        cls,
        *,
        usage: Mapping[str, tuple[int, Usage]],
        prices: PriceList | None,
        rounds: int,
        reads: Iterable[tuple[int | None, int | None]],
        first_event_ms: int | None,
        answer_ms: int,
        answered: bool = True,
        resumed: int = 0,
    ) -> Receipt:
        """`usage`: calls and tokens by model; `reads`: (rows, bytes) each query read, None unknown;
        `answered`: False when the run ended without an answer (`answer_ms` is then when it ended)."""
        models = []
        for model, (calls, used) in usage.items():
            use = ModelUse(
                model=model,
                calls=calls,
                input_tokens=used.input_tokens,
                output_tokens=used.output_tokens,
                cache_read_tokens=used.cache_read_tokens,
                cache_creation_tokens=used.cache_creation_tokens,
            )
            use.cost_usd = prices.cost(model, use.tokens()) if prices is not None else None
            models.append(use)
        listed = list(reads)
        receipt = cls(
            models=models,
            rounds=rounds,
            queries=len(listed),
            rows_read=sum(rows or 0 for rows, _ in listed),
            bytes_read=sum(read or 0 for _, read in listed),
            unmeasured_queries=sum(rows is None for rows, _ in listed),
            first_event_ms=first_event_ms,
            answer_ms=answer_ms,
            answers=int(answered),
            answered=answered,
            resumed=resumed,
        )
        return receipt._totalled()

    def _totalled(self) -> Receipt:
        models = self.models
        priced = [m.cost_usd for m in models if m.cost_usd is not None]
        return self.model_copy(
            update={
                "input_tokens": sum(m.input_tokens for m in models),
                "output_tokens": sum(m.output_tokens for m in models),
                "cache_read_tokens": sum(m.cache_read_tokens for m in models),
                "cache_creation_tokens": sum(m.cache_creation_tokens for m in models),
                "cost_usd": sum(priced) if priced else None,
                "unpriced_models": [m.model for m in models if m.cost_usd is None],
            }
        )

    @classmethod
    def total(cls, receipts: Iterable[Receipt]) -> Receipt | None:
        """A conversation's receipts summed (the answer time too: time spent answering, not wall time)."""
        listed = list(receipts)
        if not listed:
            return None
        by_model: dict[str, ModelUse] = {}
        for receipt in listed:
            for use in receipt.models:
                into = by_model.setdefault(use.model, ModelUse(model=use.model, cost_usd=0.0))
                into.calls += use.calls
                into.input_tokens += use.input_tokens
                into.output_tokens += use.output_tokens
                into.cache_read_tokens += use.cache_read_tokens
                into.cache_creation_tokens += use.cache_creation_tokens
                into.cost_usd = None if use.cost_usd is None or into.cost_usd is None else into.cost_usd + use.cost_usd
        summed = cls(
            models=list(by_model.values()),
            answers=sum(r.answers for r in listed),
            rounds=sum(r.rounds for r in listed),
            queries=sum(r.queries for r in listed),
            rows_read=sum(r.rows_read for r in listed),
            bytes_read=sum(r.bytes_read for r in listed),
            unmeasured_queries=sum(r.unmeasured_queries for r in listed),
            first_event_ms=None,  # a sum of first-event times means nothing; the answers' times are summed
            answer_ms=sum(r.answer_ms for r in listed),
            answered=any(r.answered for r in listed),
            resumed=sum(r.resumed for r in listed),
        )
        return summed._totalled()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def text(self) -> str:
        """The receipt as one compact line of plain text, as every adapter shows it."""
        return self.line()

    def line(self) -> str:
        return " · ".join(self.parts())

    def parts(self) -> list[str]:
        # Named as AGENT_MODEL names them: no provider means Anthropic's API.
        models = ", ".join(m.model.removeprefix("anthropic:") for m in self.models) or "no model call"
        tokens = (
            f"{_count(self.input_tokens)} in, {_count(self.output_tokens)} out, "
            f"{_count(self.cache_read_tokens)} cache read, {_count(self.cache_creation_tokens)} cache write tokens"
        )
        parts = [models, f"{self.rounds} round{'s' if self.rounds != 1 else ''}", tokens, self.cost_text()]
        if self.queries:
            read = f"{_count(self.rows_read)} row{'s' if self.rows_read != 1 else ''}, {_bytes(self.bytes_read)} read"
            unmeasured = f" ({self.unmeasured_queries} not measured)" if self.unmeasured_queries else ""
            parts.append(f"{self.queries} quer{'ies' if self.queries != 1 else 'y'}: {read}{unmeasured}")
        else:
            parts.append("no queries")
        first = f"first event {self.first_event_ms / 1000:.1f} s, " if self.first_event_ms is not None else ""
        seconds = f"{self.answer_ms / 1000:.1f} s"
        parts.append(f"{first}answer {seconds}" if self.answered else f"{first}no answer (ended after {seconds})")
        if self.resumed:
            parts.append("resumed after a host stopped" + (f" ({self.resumed} times)" if self.resumed > 1 else ""))
        return parts

    def cost_text(self) -> str:
        if self.cost_usd is None:
            return f"cost unknown (no price for {', '.join(self.unpriced_models)})" if self.models else "no cost"
        unpriced = f" + unpriced {', '.join(self.unpriced_models)}" if self.unpriced_models else ""
        return f"≈ ${self.cost_usd:.4f}{unpriced}"


def _count(value: int) -> str:
    """`999,999` reads 1.0M, not 1000.0k: the unit is chosen after rounding."""
    if round(value / 1000, 1) >= 1000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,}"


def _bytes(value: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"
