"""GET /api/examples: the example questions an empty chat offers. They are written from the database's
schema (agent/suggestions/examples.py), so they name its tables and columns: an API route behind the token,
never part of the page shell. The first call may start the model writing them; until then, generic ones."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.context import web_context


async def examples(request: Request) -> Response:
    return JSONResponse({"questions": await web_context(request).agent.examples.get()})
