"""Failures as a person would want to read them: what happened and what to do, never a stack trace.

The Runner reports a failure as a message fit to show (agent/llm.py and agent/db word them), so the
kind is read from that message and from the failed queries' ClickHouse error codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from chats.run_view import QueryView

TIMEOUT_CODE = 159  # ClickHouse TIMEOUT_EXCEEDED


class Failure(StrEnum):
    MODEL_BUSY = "model_busy"
    MODEL_SETUP = "model_setup"
    DATABASE_UNREACHABLE = "database_unreachable"
    QUERY_TIMEOUT = "query_timeout"
    TOO_LONG = "too_long"
    THREAD_TOO_LONG = "thread_too_long"
    RATE_LIMITED = "rate_limited"
    OVER_BUDGET = "over_budget"  # the asker's daily budget is spent
    RESTARTING = "restarting"
    NOT_IN_CHANNEL = "not_in_channel"  # Slack refused: the bot is not a member (nowhere to say so)
    SLACK_SCOPE = "slack_scope"  # Slack refused: the app lacks a scope
    SLACK_BUSY = "slack_busy"  # Slack kept rate limiting after the retries
    ASKER_UNKNOWN = "asker_unknown"  # Slack could not say who asks in a DM: the default policy applies
    LOST = "lost"  # the server answering stopped and the answer could not be picked up (chats/durable.py)
    INTERNAL = "internal"


_PATTERNS = (  # (a phrase of the Runner's message, lower-cased, and what it means), first match wins
    ("could not be picked up again", Failure.LOST),  # chats/durable.py lost_message: said before the rest
    ("overloaded or rate limited", Failure.MODEL_BUSY),
    ("could not reach the model", Failure.MODEL_BUSY),
    ("prompt is too long", Failure.THREAD_TOO_LONG),
    ("context window", Failure.THREAD_TOO_LONG),
    ("anthropic_api_key", Failure.MODEL_SETUP),
    ("openai_api_key", Failure.MODEL_SETUP),
    ("cloud_ml_region", Failure.MODEL_SETUP),
    ("models need", Failure.MODEL_SETUP),  # a provider's SDK extra is missing (agent/llm/providers.py)
    ("refused the key", Failure.MODEL_SETUP),
    ("rejected the request", Failure.MODEL_SETUP),
    ("impossible token count", Failure.MODEL_SETUP),  # a misbehaving server or gateway (agent/llm/turns.py)
    ("clickhouse", Failure.DATABASE_UNREACHABLE),
    ("database", Failure.DATABASE_UNREACHABLE),
)


def classify(message: str | None, queries: Sequence[QueryView] = ()) -> Failure:
    """The kind of a failed run from its error message and its queries' results."""
    text = (message or "").lower()
    for phrase, kind in _PATTERNS:
        if phrase in text:
            return kind
    if any(timed_out(query) for query in queries):
        return Failure.QUERY_TIMEOUT
    return Failure.INTERNAL


def timed_out(query: QueryView) -> bool:
    """A query that ran out of time."""
    return query.error_code == TIMEOUT_CODE or "TIMEOUT_EXCEEDED" in (query.error or "")


def explain(kind: Failure, **facts: Any) -> str:
    """What to tell the person. Facts: `length`/`limit` (too_long), `wait_s` (rate_limited),
    `seconds` (query_timeout), `scope` (slack_scope, asker_unknown), `reads_nothing` (asker_unknown)."""
    if kind is Failure.MODEL_BUSY:
        return "The model is busy right now, so I couldn't finish. Please try again in a minute."
    if kind is Failure.MODEL_SETUP:
        return (
            "I can't use the model with the settings I was given (its API key or model name needs fixing). "
            "Please tell whoever runs me; the details are in my log."
        )
    if kind is Failure.DATABASE_UNREACHABLE:
        return "I can't reach the database right now, so I couldn't run any queries. Please try again in a few minutes."
    if kind is Failure.QUERY_TIMEOUT:
        limit = f" ({facts['seconds']} s)" if facts.get("seconds") else ""
        return (
            f"The query took longer than I'm allowed{limit}, so I stopped it. Try a narrower question: a shorter "
            "period, fewer groups, or one item at a time."
        )
    if kind is Failure.TOO_LONG:
        return (
            f"That question is {facts.get('length', 0):,} characters long; I can take up to "
            f"{facts.get('limit', 0):,}. Could you shorten it?"
        )
    if kind is Failure.THREAD_TOO_LONG:
        return "This thread has grown too long for me to read in full. Please ask again in a new thread."
    if kind is Failure.RATE_LIMITED:
        wait = max(1, round(facts.get("wait_s", 60)))
        return f"You're asking faster than I can keep up. Please wait about {wait} seconds and ask again."
    if kind is Failure.OVER_BUDGET:
        return str(facts.get("message") or "You have used today's budget for questions. It resets at 00:00 UTC.")
    if kind is Failure.NOT_IN_CHANNEL:
        return "I'm not a member of this channel, so I can't answer here. Invite me with /invite and ask again."
    if kind is Failure.SLACK_SCOPE:
        scope = f"`{facts['scope']}`" if facts.get("scope") else "a"
        return (
            f"Slack didn't let me do all of this: the app lacks the {scope} permission. A workspace admin can add "
            "it under OAuth & Permissions in the app's settings (api.slack.com/apps), then reinstall the app."
        )
    if kind is Failure.ASKER_UNKNOWN:
        return asker_unknown(facts.get("scope"), reads_nothing=bool(facts.get("reads_nothing")))
    if kind is Failure.SLACK_BUSY:
        return "Slack is limiting how fast I can post right now, so I couldn't finish. Please ask again in a minute."
    if kind is Failure.RESTARTING:
        return "I'm restarting right now, so I can't take this question. Please ask again in a minute."
    if kind is Failure.LOST:
        return (
            "The server answering this stopped, and I couldn't pick your question up again where it left off. "
            "Please ask it again."
        )
    return "Something went wrong on my side and I couldn't finish. Please try again."


def asker_unknown(scope: str | None, *, reads_nothing: bool) -> str:
    """Why this answer uses the default access: Slack could not say who is asking."""
    default = "the default access, which reads no data" if reads_nothing else "the default access"
    if scope:
        return (
            f"I couldn't tell from Slack who you are: the app lacks the `{scope}` permission, so I can only "
            f"answer with {default}. A workspace admin can add it under OAuth & Permissions in the app's settings "
            "(api.slack.com/apps), then reinstall the app."
        )
    return (
        f"I couldn't check with Slack who you are just now, so I can only answer with {default}. Try again in a minute."
    )
