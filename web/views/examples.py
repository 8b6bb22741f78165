"""GET /api/examples: the example questions an empty chat offers. They are written from the schema the
asker's policy sees (agent/suggestions/examples.py), so they name its tables and columns: an API route
behind the token or sign-in, never part of the page shell. The first call may start the model writing
them; until then, generic ones."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.context import web_context
from web.identity import policy_of, require_identity


async def examples(request: Request) -> Response:
    """The questions written from the schema the asker's policy sees (none for a policy that reads nothing)."""
    policy = policy_of(request, await require_identity(request))
    return JSONResponse({"questions": await web_context(request).agent.examples.get(policy=policy)})
