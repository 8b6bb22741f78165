"""Scheduled questions and alerts on the web: the schedules page (`/schedules`) and its API.

A schedule is made from one of the person's own web answers (`POST /api/schedules` naming its run: "Repeat…"
under the answer) and is theirs alone: listed, read, edited (`PATCH`), paused, resumed and deleted by them.
Any id anyone else sends, and an answer of another person or interface, is answered exactly as an id never
seen (the store finds only the owner's; web/ownership.py's rule for the answer). Every change needs our own
pages (the Origin check of web/app.py's `_api`) and JSON, and counts against the person's budget of changes
(`AGENT_WEB_SCHEDULE_CHANGES_PER_MINUTE`). What a schedule means (its next fire, its alert's condition,
whether its owner may still read and post what it delivers) is the kit's (chats/schedules.py) and the
scheduler's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent.access.policy import Asker
from agent.config import Settings
from chats.rate_limits import RateLimit
from chats.schedule_runs import AccessLost, fire_policy
from chats.schedules import INBOX, Draft, SavedQuery, Schedule, ScheduleError, ScheduleStore, slack_of
from chats.state import ChatState
from web.boundary import HttpError, check_json_content_type, check_rate, read_json_body
from web.context import WEB, web_context
from web.identity import Identity, asker_key, require_identity
from web.ownership import check_owned
from web.views import page
from web.views.schedule_requests import EXAMPLE, AlertIn, ScheduleRequest
from web.views.schedule_texts import described, slack_member

Handler = Callable[[Request], Awaitable[Response]]


def routes(api: Callable[[Handler], Handler], state: ChatState, settings: Settings) -> list[BaseRoute]:
    """The page and its API, each API route wrapped by `api` (web/app.py: identity, Origin, JSON errors)."""
    changes = state.pacing.rate_limit("web:schedules", settings.agent_web_schedule_changes_per_minute)
    views = ScheduleViews(state.schedules, changes)
    return [
        Route("/schedules", views.page),
        Route("/api/schedules", api(views.listed_or_made), methods=["GET", "POST"]),
        Route("/api/schedules/{schedule_id}", api(views.one), methods=["GET", "PATCH", "DELETE"]),
        Route("/api/schedules/{schedule_id}/pause", api(views.pause), methods=["POST"]),
        Route("/api/schedules/{schedule_id}/resume", api(views.resume), methods=["POST"]),
    ]


class ScheduleViews:
    def __init__(self, store: ScheduleStore, changes: RateLimit) -> None:
        self._store, self._changes = store, changes

    async def page(self, request: Request) -> Response:
        return await page.shell(request, "schedules.html")

    async def listed_or_made(self, request: Request) -> Response:
        identity = await require_identity(request)
        if request.method == "POST":
            return await self._make(request, identity)
        listed = await self._store.list_for(identity.person.owner)
        return JSONResponse({"schedules": [described(s) for s in listed], "destinations": destinations(request)})

    async def one(self, request: Request) -> Response:
        schedule, identity = await self._owned(request)
        if request.method == "GET":
            return JSONResponse({"schedule": await _in_full(request, schedule)})
        await self._count_change(request, identity)
        if request.method == "DELETE":
            if not await self._store.delete(schedule.id, owner=schedule.owner):
                raise _missing(schedule.id)
            return JSONResponse({"deleted": schedule.id})
        check_json_content_type(request)  # web/app.py checks it for POSTs; an edit carries JSON too
        body = await read_json_body(request, ScheduleRequest, EXAMPLE)
        return JSONResponse({"schedule": described(await self._edit(request, schedule, body))})

    async def pause(self, request: Request) -> Response:
        schedule, identity = await self._owned(request)
        await self._count_change(request, identity)
        await self._store.pause(schedule.id, owner=schedule.owner)
        return JSONResponse({"schedule": described(await self._found(schedule))})

    async def resume(self, request: Request) -> Response:
        schedule, identity = await self._owned(request)
        await self._count_change(request, identity)
        await self._store.resume(schedule.id, owner=schedule.owner)
        return JSONResponse({"schedule": described(await self._found(schedule))})

    async def _make(self, request: Request, identity: Identity) -> Response:
        await self._count_change(request, identity)
        body = await read_json_body(request, ScheduleRequest, EXAMPLE)
        if body.run_id is None:
            raise HttpError(400, "run_id: name the answer to repeat (its run id)")
        missing = HttpError(404, f"No answer {body.run_id}.")
        store = web_context(request).store
        await check_owned(request, await store.run_owner(body.run_id, interface=WEB), missing)
        person = identity.person
        destination, slack_user = await _destination(request, body)
        draft = await self._store.draft_from_answer(
            body.run_id,
            cadence=body.cadence.cadence(),
            destination=destination,
            how=body.how,
            title=body.title,
            alert=body.alert.alert() if body.alert else None,
            asker=Asker(email=person.email, groups=person.groups, slack_user=slack_user),
        )
        if draft is None:
            raise missing
        if body.alert is not None:
            draft = await _watching(request, draft, body.alert)
        _deliverable(request, draft)
        made = await _kit(self._store.create(person.owner, draft))
        return JSONResponse({"schedule": described(made)}, status_code=201)

    async def _edit(self, request: Request, schedule: Schedule, body: ScheduleRequest) -> Schedule:
        if body.kind != schedule.kind:
            raise HttpError(400, "kind: a schedule stays what it was made as; make a new one from the answer")
        watched = schedule.draft.queries[0].label if schedule.draft.queries else ""
        if body.alert is not None and body.alert.query != watched:
            raise HttpError(400, f"alert.query: this alert watches {watched}; make a new one to watch another query")
        destination, slack_user = await _destination(request, body)
        if slack_user is not None and slack_user != schedule.draft.asker.slack_user:
            # the kit keeps who made it as they were then (chats/schedules.py `Draft.asker`): a Slack user it
            # never knew would be refused at its first post
            raise HttpError(400, "destination: a schedule made for your inbox cannot move to Slack; make a new one")
        if destination != schedule.draft.destination:
            _deliverable(request, replace(schedule.draft, destination=destination))
        edited = await _kit(
            self._store.edit(
                schedule.id,
                owner=schedule.owner,
                title=body.title or None,
                cadence=body.cadence.cadence(),
                destination=destination,
                how=body.how,
                alert=body.alert.alert() if body.alert else None,
            )
        )
        if edited is None:  # deleted meanwhile
            raise _missing(schedule.id)
        return edited

    async def _owned(self, request: Request) -> tuple[Schedule, Identity]:
        """The schedule the path names, when it is the caller's; else 404 as for an id never seen."""
        schedule_id = request.path_params["schedule_id"]
        identity = await require_identity(request)
        found = await self._store.get(schedule_id, owner=identity.person.owner)
        if found is None:
            raise _missing(schedule_id)
        return found, identity

    async def _found(self, schedule: Schedule) -> Schedule:
        found = await self._store.get(schedule.id, owner=schedule.owner)
        if found is None:  # deleted meanwhile
            raise _missing(schedule.id)
        return found

    async def _count_change(self, request: Request, identity: Identity) -> None:
        await check_rate(self._changes, asker_key(request, identity), "changes to schedules")


def _missing(schedule_id: str) -> HttpError:
    return HttpError(404, f"No schedule {schedule_id}.")


async def _kit(made: Awaitable[Any]) -> Any:
    """The kit's refusal (too many schedules, a cadence that never fires) as a 400 in its own words."""
    try:
        return await made
    except (ScheduleError, ValueError) as exc:
        raise HttpError(400, str(exc)) from None


def _deliverable(request: Request, draft: Draft) -> None:
    """Slack's modal's check (chats/schedule_runs.py `fire_policy`) as it is made: a schedule whose rows its
    destination's readers may not all read would only stop at its first fire, so it is refused now."""
    policies = web_context(request).agent.policies
    for checked, field in ((replace(draft, destination=INBOX), ""), (draft, "destination: ")):
        try:
            fire_policy(policies, checked)
        except AccessLost as lost:  # first one's own access, then the destination's readers'
            raise HttpError(400, f"{field}{lost.reason}; it could not deliver there.") from None


def destinations(request: Request) -> dict[str, bool]:
    """Where this server can deliver: the web inbox always, Slack where the bot runs beside the web."""
    return {"inbox": True, "slack": web_context(request).settings.slack_bot_token is not None}


async def _destination(request: Request, body: ScheduleRequest) -> tuple[str, str | None]:
    """Where it delivers, and the person's Slack user id when that is a Slack channel they are in now."""
    if body.destination.to == "inbox":
        return INBOX, None
    if not destinations(request)["slack"]:
        raise HttpError(400, "destination: Slack is not configured on this server; deliver to your inbox")
    found = await slack_member(request, body.destination.channel)
    if found is None:
        raise HttpError(400, f"destination: you are not a member of {body.destination.channel} in Slack")
    return found


async def _watching(request: Request, draft: Draft, alert: AlertIn) -> Draft:
    """The draft with the alert's query first (the one the kit watches), once it is known to be one of the
    answer's queries that ran, with the column the alert names."""
    chosen = [q for q in draft.queries if q.label == alert.query]
    if not chosen:
        raise HttpError(400, f"alert.query: the answer has no {alert.query} that ran to watch")
    if alert.kind != "rows":
        columns = await _columns(request, draft.source_run_id, chosen[0])
        if alert.column not in columns:
            has = ", ".join(columns)
            raise HttpError(400, f"alert.column: {alert.query} has no column {alert.column!r} (it has {has})")
    rest = tuple(q for q in draft.queries if q.label != alert.query)
    return replace(draft, queries=(chosen[0], *rest))


async def _columns(request: Request, run_id: str, query: SavedQuery) -> list[str]:
    found = await web_context(request).store.get_query(f"{run_id}-{query.label}")
    return [str(c) for c in found["columns"]] if found else []


async def _in_full(request: Request, schedule: Schedule) -> dict[str, Any]:
    """One schedule as the edit dialog wants it: with each query's question and columns."""
    queries = []
    for query in schedule.draft.queries:
        columns = await _columns(request, schedule.draft.source_run_id, query)
        queries.append({"label": query.label, "question": query.question, "columns": columns, "rerunnable": True})
    return {**described(schedule), "queries": queries, "channel": (slack_of(schedule.draft.destination) or ("", ""))[1]}
