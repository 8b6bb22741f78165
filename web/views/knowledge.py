"""The team's knowledge as people open it from an answer's citation ([metric: on-time rate]): what the
asker's policy lets them see, no entry naming a table in scope they may not read (as the model is shown)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web.context import web_context
from web.identity import policy_of, require_identity


async def knowledge(request: Request) -> Response:
    agent = web_context(request).agent
    base = agent.knowledge
    policy = policy_of(request, await require_identity(request))
    if base is not None and policy is not None:
        hidden = [table for table in await agent.schema.tables_in_scope() if table not in policy.tables]
        base = base.without_tables(hidden)
    return JSONResponse({"entries": base.described() if base is not None else []})
