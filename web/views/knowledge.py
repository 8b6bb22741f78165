"""The team's knowledge as people open it from an answer's citation ([metric: on-time rate])."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.context import web_context


async def knowledge(request: Request) -> Response:
    base = web_context(request).agent.knowledge
    return JSONResponse({"entries": base.described() if base is not None else []})
