"""The chat page."""

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
