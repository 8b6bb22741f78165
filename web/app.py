"""The web chat: a Starlette app over the Runner. Parses requests, streams events, serves pages.
No SQL or prompt logic lives here."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agent.app import AgentApp
from agent.conversations import ConversationStore
from agent.db import EngineError, QueryRefused, csv_chunks, started
from agent.health import liveness, readiness, summarized
from agent.loop_lag import LoopLag
from agent.metrics import exposition
from agent.pacing import Pacing, RateLimit
from agent.runs import STREAM_MARGIN_S, RunEvent, RunRegistry, ShuttingDown
from web.boundary import (
    HttpError,
    check_json_content_type,
    check_rate,
    check_token,
    client_key,
    has_token,
    read_chat_request,
    read_last_event_id,
)
from web.downloads import DownloadResponse, DownloadSlots
from web.headers import SECURITY_HEADERS, SecurityHeadersMiddleware
from web.request_metrics import RequestMetricsMiddleware

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
KEEPALIVE_S = 15
Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    agent: AgentApp,
    store: ConversationStore,
    *,
    reattach_grace_s: float | None = None,
    owns_agent: bool = False,
    extra_routes: Sequence[BaseRoute] = (),
    runs: RunRegistry | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
    pacing: Pacing | None = None,
) -> Starlette:
    """The web app over `agent`'s runner. With `owns_agent`, shutting the app down closes the agent
    and the store too (as `agent web` wants); tests keep them. `extra_routes` are served beside the
    chat (`agent serve` mounts Slack's endpoint there). `runs` and `lifespan`: the process's registry and
    life cycle when a Service (agent/serve.py) owns them; by default the app has its own. `pacing`:
    rate limits shared with other workers; by default, this process's own."""
    settings = agent.settings
    owns_runs = runs is None
    runs = runs or RunRegistry(agent.runner, store, max_event_bytes=settings.max_event_bytes)
    # On shutdown a stream lives until its run is done: the registry ends every run within the grace
    # period (agent/serve.py), and the margin lets the last events out.
    stream_grace_s = settings.agent_shutdown_grace_s + STREAM_MARGIN_S
    grace_s = settings.agent_web_reattach_grace_s if reattach_grace_s is None else reattach_grace_s
    # Downloads have a budget of their own: each runs a full query, but a person fetching the CSVs
    # of one answer should not lose their next questions, nor a download flood starve the chat.
    pacing = pacing or Pacing()
    chats = pacing.rate_limit("web:questions", settings.agent_web_rate_per_minute)
    exports = pacing.rate_limit("web:downloads", settings.agent_web_exports_per_minute)
    downloading = DownloadSlots(settings.export_per_client)
    templates = Jinja2Templates(directory=HERE / "templates")
    token = settings.agent_web_token.get_secret_value() if settings.agent_web_token else None

    def api(handler: Handler) -> Handler:
        """Auth, JSON-only POSTs and JSON errors for every API route."""

        async def wrapped(request: Request) -> Response:
            try:
                check_token(request, token)
                if request.method == "POST":
                    check_json_content_type(request)
                return await handler(request)
            except HttpError as exc:
                return exc.response()

        return wrapped

    def limited(limit: RateLimit, what: str, handler: Handler) -> Handler:
        async def wrapped(request: Request) -> Response:
            await check_rate(limit, client_key(request), what)
            return await handler(request)

        return wrapped

    async def page(request: Request) -> Response:
        examples = await agent.examples.get()
        return templates.TemplateResponse(
            request, "index.html", {"needs_token": token is not None, "examples": examples}
        )

    async def chat(request: Request) -> Response:
        body = await read_chat_request(request, settings.agent_web_max_message_chars)
        if not runs.accepting:
            raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"})
        if body.conversation_id is None:
            conversation_id = await store.create_conversation(body.message)
        elif await store.exists(body.conversation_id):
            conversation_id = body.conversation_id
        else:
            raise HttpError(404, f"No conversation {body.conversation_id}.")
        history = await store.history(conversation_id)
        try:
            handle = runs.start(
                conversation_id, body.message, history, platform="web", interface="web", abandon_after_s=grace_s
            )
        except ShuttingDown:
            raise HttpError(503, ShuttingDown.message, {"Retry-After": "5"}) from None
        return _sse(_as_dicts(runs.follow(handle)), stream_grace_s)

    async def run_events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = read_last_event_id(request)
        handle = runs.get(run_id)
        if handle is not None:
            return _sse(_as_dicts(runs.follow(handle, after)), stream_grace_s)
        stored = await store.run_events(run_id)
        if stored is not None:
            return _sse(_replay(stored[1], after), stream_grace_s)
        elsewhere = await runs.follow_elsewhere(run_id, after)  # another worker process runs it
        if elsewhere is None:
            raise HttpError(404, f"No run {run_id}.")
        return _sse(_as_dicts(elsewhere), stream_grace_s)

    async def conversations(request: Request) -> Response:
        return JSONResponse({"conversations": await store.list_conversations()})

    async def conversation(request: Request) -> Response:
        conversation_id = request.path_params["conversation_id"]
        if request.method == "DELETE":
            if not await store.delete_conversation(conversation_id):
                raise HttpError(404, f"No conversation {conversation_id}.")
            return JSONResponse({"deleted": conversation_id})
        found = await store.get_conversation(conversation_id)
        if found is None:
            raise HttpError(404, f"No conversation {conversation_id}.")
        return JSONResponse(found)

    async def query_csv(request: Request) -> Response:
        key = request.path_params["query_id"]
        sql = await store.query_sql(key)
        if sql is None:
            raise HttpError(404, f"No stored query {key} (queries can be downloaded once their answer is done).")
        client = client_key(request)
        if not downloading.take(client):
            message = f"{downloading.per_client} downloads of yours are still running; let one finish first."
            raise HttpError(429, message, {"Retry-After": "10"})
        try:
            export = await started(await agent.db.export(sql, max_rows=settings.export_max_rows))
        except BaseException as exc:
            downloading.give_back(client)
            if isinstance(exc, (QueryRefused, EngineError)):
                raise HttpError(422, f"The query no longer runs: {exc}") from None
            raise
        headers = {
            "Content-Disposition": f'attachment; filename="{key}.csv"',
            "X-Row-Cap": str(settings.export_max_rows),
            "X-Byte-Cap": str(settings.export_max_bytes),
        }
        return DownloadResponse(
            csv_chunks(export, max_bytes=settings.export_max_bytes),
            send_timeout_s=settings.export_send_timeout_s,
            deadline_s=settings.export_deadline_s,
            on_end=lambda: downloading.give_back(client),
            media_type="text/csv; charset=utf-8",
            headers=headers,
        )

    @asynccontextmanager
    async def own_lifespan(app: Starlette) -> AsyncIterator[None]:
        async with LoopLag(agent.metrics).running():
            yield
        if owns_runs:  # no signal drains an app used alone (tests): what still runs is cancelled
            await runs.shutdown()
        if owns_agent:
            await agent.close()
            store.close()

    routes = [
        Route("/", page),
        Route("/api/chat", api(limited(chats, "questions", chat)), methods=["POST"]),
        Route("/api/conversations", api(conversations)),
        Route("/api/conversations/{conversation_id}", api(conversation), methods=["GET", "DELETE"]),
        Route("/api/runs/{run_id}/events", api(run_events)),
        Route("/api/queries/{query_id}.csv", api(limited(exports, "downloads", query_csv))),
        *probe_routes(agent, runs, token),
        *extra_routes,
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(RequestMetricsMiddleware, metrics=agent.metrics, routes=routes),
        Middleware(SecurityHeadersMiddleware),
        # Answers only to the names it is served under: a DNS-rebinding page gets 400, not the API.
        Middleware(TrustedHostMiddleware, allowed_hosts=settings.agent_web_allowed_hosts, www_redirect=False),
    ]
    handlers = {HTTPException: _http_error, Exception: _server_error}
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=lifespan or own_lifespan
    )
    app.state.runs = runs
    app.state.settings = settings
    return app


def probe_routes(agent: AgentApp, runs: RunRegistry, token: str | None) -> list[Route]:
    """/metrics, /healthz and /readyz, for every HTTP app a process serves. With a `token`, a caller
    without it learns which readiness checks fail, not why."""

    async def metrics(request: Request) -> Response:
        return Response(exposition(agent.metrics), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        return JSONResponse(liveness(agent))

    async def readyz(request: Request) -> Response:
        ready, body = await readiness(agent, runs)
        if token is not None and not has_token(request, token):
            body = summarized(body)
        return JSONResponse(body, status_code=200 if ready else 503)

    return [Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)]


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and methods (404, 405) answer in JSON like the API does."""
    assert isinstance(exc, HTTPException)
    return HttpError(exc.status_code, exc.detail, dict(exc.headers or {})).response()


async def _server_error(request: Request, exc: Exception) -> Response:
    """The last resort: a JSON 500 without a stack trace. It is sent from outside the middleware, so it
    carries the security headers itself."""
    return JSONResponse(
        {"error": "Something went wrong on the server; try again."}, status_code=500, headers=SECURITY_HEADERS
    )


def _sse(events: AsyncIterator[dict[str, Any]], shutdown_grace_s: float) -> EventSourceResponse:
    """On shutdown the stream goes on until its run is done (at most `shutdown_grace_s`), so a
    restart does not cut an answer being written."""
    return EventSourceResponse(
        events,
        ping=KEEPALIVE_S,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        shutdown_grace_period=shutdown_grace_s,
    )


async def _as_dicts(events: AsyncIterator[RunEvent]) -> AsyncIterator[dict[str, Any]]:
    async for event in events:
        yield _wire(event.as_dict())


async def _replay(events: list[dict[str, Any]], after: int) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        if event["id"] > after:
            yield _wire(event)


def _wire(event: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(event["id"]), "event": event["event"], "data": json.dumps(event["data"], ensure_ascii=False)}
