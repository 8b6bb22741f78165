"""What /healthz and /readyz answer, for every HTTP adapter.

/healthz: the process is alive and its event loop answers. /readyz: it can answer a question now: the
database answers, the schema prompt is built (with at least one table), a model key is configured, and
the process is not shutting down. Orchestrators restart on the first and route traffic on the second.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent import AgentApp, DatabaseUnavailable
from agent.metrics import exposition
from chats.runs import RunRegistry
from web.boundary import HttpError, check_token, has_token

CHECK_TIMEOUT_S = 5.0
NO_TABLES = "no tables in scope (CLICKHOUSE_DATABASES); load the demo data with `agent demo load`"


def liveness(agent: AgentApp) -> dict[str, Any]:
    return {"status": "ok", "engine_sandbox": agent.sandbox_status}


def summarized(body: dict[str, Any]) -> dict[str, Any]:
    """For a caller without the web token: which checks fail, not why (the reasons name hosts, users and
    versions)."""
    return {key: value if value in ("ok", "ready", "not ready") else "failing" for key, value in body.items()}


async def readiness(agent: AgentApp, runs: RunRegistry | None) -> tuple[bool, dict[str, Any]]:
    checks: dict[str, str] = {
        "model": (agent.settings.missing_model_key() or "ok").split(";")[0],
        "accepting": "ok" if runs is None or runs.accepting else "shutting down",
    }
    try:
        await asyncio.wait_for(agent.ping(), CHECK_TIMEOUT_S)
        checks["database"] = "ok"
    except (DatabaseUnavailable, TimeoutError) as exc:
        checks["database"] = str(exc) or "no answer within 5 s"
    if checks["database"] == "ok":
        checks["schema"] = await _schema_check(agent)
    else:
        checks["schema"] = "waiting for the database"
    ready = all(value == "ok" for value in checks.values())
    return ready, {"status": "ready" if ready else "not ready", **checks}


async def _schema_check(agent: AgentApp) -> str:
    """Built once (then cached for SCHEMA_TTL_S), so the first question does not pay for it either."""
    try:
        tables = await asyncio.wait_for(asyncio.shield(agent.schema.counting()), CHECK_TIMEOUT_S)
    except TimeoutError:
        return "still reading the schema"
    except DatabaseUnavailable as exc:
        return str(exc)
    return "ok" if tables else NO_TABLES


def probe_routes(agent: AgentApp, runs: RunRegistry, token: str | None) -> list[Route]:
    """/metrics, /healthz and /readyz, for every HTTP app a process serves. With a `token`, /metrics needs
    it (it counts the Slack side too, which the web API never shows: Prometheus scrapes with the token), and
    a caller without it learns which readiness checks fail, not why; /healthz stays open."""

    async def metrics(request: Request) -> Response:
        try:
            check_token(request, token)
        except HttpError as exc:
            return exc.response()
        await agent.metrics.refresh_shared()  # the eval runs' figures, as the state has them now
        return Response(exposition(agent.metrics), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        return JSONResponse(liveness(agent))

    async def readyz(request: Request) -> Response:
        ready, body = await readiness(agent, runs)
        if token is not None and not has_token(request, token):
            body = summarized(body)
        return JSONResponse(body, status_code=200 if ready else 503)

    return [Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)]
