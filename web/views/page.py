"""The pages: the chat (at `/`, and at `/c/<id>` for one conversation), one query's own page (Slack's
answers link each query there), and the page a browser gets for an address that leads nowhere. Each page
is a shell that reads its data from the API with the access token the browser keeps."""

from __future__ import annotations

import re
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response

from chats.conversations import QUERY_KEY
from web.context import web_context

# A conversation's id as the store makes it (uuid4's hex): anything else in a chat URL is a mistyped one.
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
    web = web_context(request)
    context = {"needs_token": web.token is not None, "conversation_id": conversation_id}
    return web.templates.TemplateResponse(request, "index.html", context)


async def query_page(request: Request) -> Response:
    """Only a query's id opens the page: anything else in its place (`<id>.csv` would send the page's
    request, with the browser's token, to the CSV download) is a 404."""
    if not QUERY_KEY.fullmatch(request.path_params["query_id"]):
        return missing_page(request, 404, "This is not a link to a query: a query's page is /queries/<run id>-Q<n>.")
    return web_context(request).templates.TemplateResponse(request, "query.html", {})


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
