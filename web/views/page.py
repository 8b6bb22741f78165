"""The pages: the chat (at `/`, and at `/c/<id>` for one conversation), one query's own page (Slack's
answers link each query there), a report's own page (`/reports/<id>`), and the page a browser gets for an
address that leads nowhere. Each page is a shell that reads its data from the API with the sign-in cookie, or
the access token the browser keeps.
Where people sign in with OpenID Connect, a browser that has not is sent to sign in first, and back."""

from __future__ import annotations

import re
from http import HTTPStatus
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from chats.conversations import QUERY_KEY
from web.context import web_context
from web.identity import Identities, identify

# A conversation's id as the store makes it (uuid4's hex), and a report's (its first run's, the same shape):
# anything else in a chat or report URL is a mistyped one.
CONVERSATION_ID = re.compile(r"[0-9a-f]{32}")


async def index(request: Request) -> Response:
    return await _chat(request, None)


async def conversation_page(request: Request) -> Response:
    """The chat, opened on one conversation: a reload or a shared link comes back to it. Whether it exists
    (and is the browser's to read) the page learns from the API, as the chat's own list does."""
    conversation_id = request.path_params["conversation_id"]
    if not CONVERSATION_ID.fullmatch(conversation_id):
        return missing_page(request, 404, "This is not a link to a conversation: a conversation's link is /c/<id>.")
    return await _chat(request, conversation_id)


async def _chat(request: Request, conversation_id: str | None) -> Response:
    """The shell holds nothing from the data and starts no model call: the example questions, written from
    the schema, come from the API (GET /api/examples), behind the token."""
    if (sign_in := await _sign_in_first(request)) is not None:
        return sign_in
    web = web_context(request)
    return web.templates.TemplateResponse(request, "index.html", {**_auth(request), "conversation_id": conversation_id})


async def query_page(request: Request) -> Response:
    """Only a query's id opens the page: anything else in its place (`<id>.csv` would send the page's
    request, with the browser's token, to the CSV download) is a 404."""
    if not QUERY_KEY.fullmatch(request.path_params["query_id"]):
        return missing_page(request, 404, "This is not a link to a query: a query's page is /queries/<run id>-Q<n>.")
    if (sign_in := await _sign_in_first(request)) is not None:
        return sign_in
    return web_context(request).templates.TemplateResponse(request, "query.html", _auth(request))


async def shell(request: Request, template: str, context: dict[str, object] | None = None) -> Response:
    """A page whose data its script reads from the API (web/views/schedules.py and inbox.py use it)."""
    if (sign_in := await _sign_in_first(request)) is not None:
        return sign_in
    return web_context(request).templates.TemplateResponse(request, template, {**_auth(request), **(context or {})})


async def report_page(request: Request) -> Response:
    """A report's own page (web/views/reports.py reads it): only a report's id opens it."""
    if not CONVERSATION_ID.fullmatch(request.path_params["report_id"]):
        return missing_page(request, 404, "This is not a link to a report: a report's page is /reports/<id>.")
    if (sign_in := await _sign_in_first(request)) is not None:
        return sign_in
    return web_context(request).templates.TemplateResponse(request, "report.html", _auth(request))


async def _sign_in_first(request: Request) -> Response | None:
    """Where people sign in with OpenID Connect, a browser that has not goes to sign in, and comes back here."""
    identities: Identities = request.app.state.identities
    if identities.sign_in != "oidc" or await identify(request) is not None:
        return None
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/auth/sign-in?{urlencode({'next': back})}", status_code=303)


def _auth(request: Request) -> dict[str, object]:
    """What the page's script needs to know to authenticate: a token to ask for, or a sign-in to go to."""
    identities: Identities = request.app.state.identities
    return {
        "needs_token": web_context(request).token is not None and identities.sign_in is None,
        "sign_in": identities.sign_in or "",
    }


def wants_page(request: Request) -> bool:
    """A browser opening an address (not the API, which always answers JSON) is shown a page."""
    return not request.url.path.startswith("/api/") and "text/html" in request.headers.get("accept", "")


def missing_page(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """A page saying what went wrong, with the way back to the chat: never raw JSON in a browser's tab."""
    if status == 404 and message == HTTPStatus.NOT_FOUND.phrase:  # Starlette's words for an unknown route
        message = "There is no page at this address."
    context = {"status": status, "message": message}
    templates = web_context(request).templates
    return templates.TemplateResponse(request, "missing.html", context, status_code=status, headers=headers)
