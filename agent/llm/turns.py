"""What every provider hands back: one model turn in the Messages API's block shape (the pipeline's own
shape, whichever provider answered), its usage, the errors callers catch, and the note a fallback leaves."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

log = logging.getLogger(__name__)

TextSink = Callable[[str], Awaitable[None]]
# What a stream's attempt that did not finish (cancelled, failed, retried) had been billed so far.
UsageSink = Callable[["Usage"], None]
RestartSink = Callable[[], Awaitable[None]]
# Why a run moved on to the next model: a bounded set (a metric label).
FallbackReason = Literal["overloaded", "rate_limited", "unavailable"]
FALLBACK_REASONS: tuple[FallbackReason, ...] = ("overloaded", "rate_limited", "unavailable")


class LLMError(Exception):
    """The model call failed; the message is fit to show a person."""


class LLMUnavailable(LLMError):
    """Overloaded, rate limited or unreachable after retries: try again later, or another model now."""

    def __init__(self, message: str, reason: FallbackReason = "unavailable") -> None:
        super().__init__(message)
        self.reason: FallbackReason = reason


class ModelUnreachable(LLMUnavailable):
    """No connection to the API could be made (refused, a failed DNS lookup): every model it serves is
    out of reach, so the models after it on the same provider are not asked either."""


class LLMConfigError(LLMError):
    """Bad key, unknown model or a rejected request: a person must fix settings or code."""


class ContextOverflow(LLMError):
    """The prompt is longer than the model's context window."""


class BadUsage(LLMError):
    """The provider reported token counts no model can have used (negative, not integers, absurd): the
    reply is not used, since its counts would go into budgets, receipts and metrics."""


# Far above any model's context window plus its output (a million or two), far below what breaks a sum.
MAX_USAGE_TOKENS = 100_000_000


def usage_count(name: str, value: object) -> int:
    """One token count as a provider reported it, checked where it enters the app; None (not reported)
    is 0. Raises BadUsage for a negative, non-integer (booleans and floats included) or absurd count."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_USAGE_TOKENS:
        raise bad_usage(name, value)
    return value


def usage_object(name: str, usage: object) -> Any:
    """A usage object as the SDK built it: the SDKs build their models without validating the JSON, so a
    usage sent as a string, a number or a list arrives as that, every count of it reads as None (not
    reported) and the reply would count as free. Raises BadUsage for anything but an object (or None)."""
    if usage is not None and not isinstance(usage, BaseModel):
        raise bad_usage(name, usage)
    return usage


def usage_not_below(name: str, before: int, now: int) -> int:
    """A cumulative count of a stream (message_delta's) that may only grow: one lower than reported before
    would take back tokens the provider billed. Raises BadUsage."""
    if now < before:
        raise bad_usage(name, f"{now}, after {before}")
    return now


def bad_usage(name: str, value: object) -> BadUsage:
    shown = repr(value)[:40]
    log.error("the model API reported an impossible token count: %s=%s", name, shown)
    return BadUsage(
        f"The model API reported an impossible token count ({name} = {shown}), so its reply was not used. "
        "The model server or a gateway in front of it is misbehaving; tell whoever runs this app."
    )


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_creation_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_creation_tokens += other.cache_creation_tokens


@dataclass
class ModelTurn:
    content: list[dict[str, Any]]  # Messages-API-shaped blocks (text, tool_use, thinking), empty text removed
    stop_reason: str | None  # end_turn, tool_use, max_tokens, ... (an OpenAI finish_reason is mapped to these)
    usage: Usage = field(default_factory=Usage)
    elapsed_s: float = 0.0
    model: str = ""  # `provider:name` of the model that answered
    later_model: bool = False  # the answering model is not the first of its list (a fallback, or its cooldown)

    @property
    def text(self) -> str:
        return "".join(b["text"] for b in self.content if b["type"] == "text").strip()

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b["type"] == "tool_use"]


@dataclass(frozen=True)
class Fallback:
    """A model was passed over for the next in its role's list."""

    role: str
    from_model: str
    to_model: str
    reason: FallbackReason


FallbackSink = Callable[[Fallback], Awaitable[None]]


async def ignore_fallback(_: Fallback) -> None:
    return None


def ignore_usage(_: Usage) -> None:
    return None
