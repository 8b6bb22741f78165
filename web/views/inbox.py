"""The web inbox: where a schedule delivering to the web leaves each delivery (`/inbox`, `/inbox/<id>` and
their API). A delivery is an answer like any other: its text with the figures' check and the receipt, its
queries (each opened at `/api/queries/<id>`, the door every answer's queries share, with its owner's check
and the withholding of rows a policy no longer covers), what changed since the delivery before, and, when it
ran late, why. Deliveries are their owner's alone: anyone else's id answers as one never seen. The count of
unread ones shows in every page's header."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent.config import Settings
from chats.rate_limits import RateLimit
from chats.schedules import InboxItem, ScheduleStore
from chats.state import ChatState
from web.boundary import HttpError, check_rate
from web.identity import Identity, asker_key, require_identity
from web.views import page

Handler = Callable[[Request], Awaitable[Response]]
DELIVERY_ID = re.compile(r"[0-9a-f]{32}")  # as the store makes them (uuid4's hex)
LISTED = 100  # the newest deliveries the inbox lists


def routes(api: Callable[[Handler], Handler], state: ChatState, settings: Settings) -> list[BaseRoute]:
    changes = state.pacing.rate_limit("web:inbox", settings.agent_web_schedule_changes_per_minute)
    views = InboxViews(state.schedules, changes)
    return [
        Route("/inbox", views.page),
        Route("/inbox/{delivery_id}", views.page),
        Route("/api/inbox", api(views.listed)),
        Route("/api/inbox/unread", api(views.unread)),
        Route("/api/inbox/{delivery_id}", api(views.one), methods=["GET", "DELETE"]),
        Route("/api/inbox/{delivery_id}/read", api(views.read), methods=["POST"]),
    ]


class InboxViews:
    def __init__(self, store: ScheduleStore, changes: RateLimit) -> None:
        self._store, self._changes = store, changes

    async def page(self, request: Request) -> Response:
        """The inbox, opened on one delivery when its address names it (whose it is, the API decides)."""
        delivery_id = request.path_params.get("delivery_id")
        if delivery_id is not None and not DELIVERY_ID.fullmatch(delivery_id):
            why = "This is not a link to a delivery: a delivery's link is /inbox/<id>."
            return page.missing_page(request, 404, why)
        return await page.shell(request, "inbox.html", {"delivery_id": delivery_id})

    async def listed(self, request: Request) -> Response:
        owner = (await require_identity(request)).person.owner
        items = await self._store.inbox(owner, limit=LISTED)
        listed = [{k: v for k, v in item.as_json().items() if k in _LISTED_KEYS} for item in items]
        return JSONResponse({"deliveries": listed, "unread": await self._store.unread(owner)})

    async def unread(self, request: Request) -> Response:
        owner = (await require_identity(request)).person.owner
        return JSONResponse({"unread": await self._store.unread(owner)})

    async def one(self, request: Request) -> Response:
        item, identity = await self._owned(request)
        if request.method == "DELETE":
            await self._count_change(request, identity)
            if not await self._store.delete_inbox_item(item.id, owner=identity.person.owner):
                raise _missing(item.id)
            return JSONResponse({"deleted": item.id})
        return JSONResponse(item.as_json())

    async def read(self, request: Request) -> Response:
        item, identity = await self._owned(request)
        await self._count_change(request, identity)
        await self._store.mark_read(item.id, owner=identity.person.owner)
        return JSONResponse({"read": item.id, "unread": await self._store.unread(identity.person.owner)})

    async def _owned(self, request: Request) -> tuple[InboxItem, Identity]:
        delivery_id = request.path_params["delivery_id"]
        identity = await require_identity(request)
        found = await self._store.inbox_item(delivery_id, owner=identity.person.owner)
        if found is None:
            raise _missing(delivery_id)
        return found, identity

    async def _count_change(self, request: Request, identity: Identity) -> None:
        await check_rate(self._changes, asker_key(request, identity), "changes to the inbox")


_LISTED_KEYS = frozenset({"id", "schedule_id", "title", "at", "changed", "late", "read"})


def _missing(delivery_id: str) -> HttpError:
    return HttpError(404, f"No delivery {delivery_id}.")
