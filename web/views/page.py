"""The pages: the chat, and one query's own page (Slack's answers link each query there). Each is a shell
that reads its data from the API with the access token the browser keeps."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from chats.conversations import QUERY_KEY
from web.context import web_context


async def index(request: Request) -> Response:
    web = web_context(request)
    examples = await web.agent.examples.get()
    return web.templates.TemplateResponse(
        request, "index.html", {"needs_token": web.token is not None, "examples": examples}
    )


async def query_page(request: Request) -> Response:
    """Only a query's id opens the page: anything else in its place (`<id>.csv` would send the page's
    request, with the browser's token, to the CSV download) is a 404."""
    if not QUERY_KEY.fullmatch(request.path_params["query_id"]):
        raise HTTPException(404, "No such page: a query's page is /queries/<run id>-Q<n>.")
    return web_context(request).templates.TemplateResponse(request, "query.html", {})
