"""Slack's routine refusals, read so someone can act on them: the bot is not in the channel, the app lacks
a scope, Slack kept rate limiting after the SDK's retries. Each is one log line with Slack's error code
and what to do (no stack trace: nothing is broken in the code), and, where a message can still be posted,
a message saying the same to the person who asked."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from slack_sdk.errors import SlackApiError

from bots.slack.failures import Failure

T = TypeVar("T")
FINAL_DEADLINE_S = 30.0  # how long an answer's last write keeps waiting out Slack's rate limit
NOT_A_MEMBER = frozenset({"not_in_channel", "channel_not_found"})
ROUTINE = NOT_A_MEMBER | {"missing_scope", "ratelimited"}


def code(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or "unknown")


def routine(exc: BaseException) -> bool:
    return isinstance(exc, SlackApiError) and code(exc) in ROUTINE


def needed_scope(exc: SlackApiError) -> str:
    return str(exc.response.get("needed") or "")


def advice(exc: SlackApiError, bot_user_id: str = "") -> str:
    """What an admin does about a routine refusal, for the log."""
    error = code(exc)
    if error in NOT_A_MEMBER:
        who = f" (user {bot_user_id})" if bot_user_id else ""
        return f"{error}: invite the bot{who} to the channel with /invite, or check that the channel exists"
    if error == "missing_scope":
        return (
            f"missing_scope {needed_scope(exc)}: add it under OAuth & Permissions in the app's settings, "
            "then reinstall the app (docs/slack.md lists every scope)"
        )
    return f"{error}: Slack kept rate limiting after the retries"


def failure(exc: SlackApiError) -> Failure:
    """What to tell the person about a routine refusal (NOT_IN_CHANNEL cannot be posted: it is counted)."""
    error = code(exc)
    if error == "missing_scope":
        return Failure.SLACK_SCOPE
    if error == "ratelimited":
        return Failure.SLACK_BUSY
    return Failure.NOT_IN_CHANNEL


def log_refusal(logger: logging.Logger, doing: str, exc: SlackApiError, bot_user_id: str = "") -> None:
    """One line for a routine refusal; any other Slack error keeps its stack trace."""
    if routine(exc):
        logger.warning("Slack refused to %s: %s", doing, advice(exc, bot_user_id))
    else:
        logger.warning("Slack refused to %s (%s)", doing, code(exc), exc_info=exc)


def retry_after_s(exc: SlackApiError) -> float | None:
    """The seconds Slack asks to wait (`Retry-After` on a 429, docs.slack.dev/apis/web-api/rate-limits),
    or None when the refusal is not a rate limit."""
    if code(exc) != "ratelimited":
        return None
    headers: Any = getattr(exc.response, "headers", None) or {}
    for name, value in dict(headers).items():
        if name.lower() == "retry-after":
            first = value[0] if isinstance(value, list | tuple) else value
            try:
                return max(0.0, float(first))
            except (TypeError, ValueError):
                break
    return 1.0


async def until_landed(call: Callable[[], Awaitable[T]], *, deadline: float) -> T:
    """`call`, tried again after each `ratelimited` (past the SDK's own retries) as long as Slack's
    Retry-After ends before `deadline` (time.monotonic()): the last state of an answer must land, not be
    dropped. One deadline serves all of an answer's last writes, so together they hold its thread no longer
    than FINAL_DEADLINE_S plus one call."""
    while True:
        try:
            return await call()
        except SlackApiError as exc:
            wait_s = retry_after_s(exc)
            if wait_s is None or time.monotonic() + wait_s > deadline:
                raise
        await asyncio.sleep(wait_s)
