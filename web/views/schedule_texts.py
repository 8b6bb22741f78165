"""A schedule as the web shows it: the kit's JSON (chats/schedules.py `Schedule.as_json`) with a line in
words for the list ("every day at 09:00 (Europe/Paris), to your inbox, re-running its SQL") and its alert's
condition in words; and where in Slack the person may have it post."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from chats.schedule_runs import describe_alert
from chats.schedules import Alert, Schedule, slack_destination, slack_of
from web.context import web_context
from web.identity import require_identity

HOW = {"rerun": "re-running its SQL", "ask": "asking afresh"}


def described(schedule: Schedule) -> dict[str, Any]:
    shown = schedule.as_json()
    draft = schedule.draft
    watched = draft.queries[0].label if draft.queries else ""
    alert = {**shown["alert"], "query": watched, "text": alert_text(draft.alert, watched)} if draft.alert else None
    how = "checking its SQL" if draft.kind == "alert" else HOW[draft.how]
    return {**shown, "alert": alert, "summary": f"{shown['when']}, {where_text(draft.destination)}, {how}"}


def where_text(destination: str) -> str:
    slack = slack_of(destination)
    return f"to Slack channel {slack[1]}" if slack else "to your inbox"


def alert_text(alert: Alert, query: str) -> str:
    """ "Q1, when n is above 1,000": the kit's words for the condition, on the query it watches."""
    return f"{query}, {describe_alert(alert)}"


async def slack_member(request: Request, channel: str) -> tuple[str, str] | None:
    """(the Slack destination of `channel`, the person's Slack user id) when they are one of its members now
    (Slack says so, by their verified email: chats/audiences.py); else None. The scheduler checks the user id
    is still there before each post."""
    person = (await require_identity(request)).person
    found = await web_context(request).audiences.slack_member(person, channel)
    return (slack_destination(found[0], channel), found[1]) if found is not None else None
