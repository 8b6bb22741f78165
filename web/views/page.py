"""The pages: the chat, and one query's own page (Slack's answers link each query there). Each is a shell
that reads its data from the API with the access token the browser keeps."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from web.context import web_context


async def index(request: Request) -> Response:
    web = web_context(request)
    examples = await web.agent.examples.get()
    return web.templates.TemplateResponse(
        request, "index.html", {"needs_token": web.token is not None, "examples": examples}
    )


async def query_page(request: Request) -> Response:
    return web_context(request).templates.TemplateResponse(request, "query.html", {})
