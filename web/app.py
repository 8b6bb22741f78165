"""The web chat: a Starlette app over the Runner. Parses requests, streams events, serves pages.
No SQL or prompt logic lives here."""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agent.app import AgentApp
from agent.db import DatabaseError, DatabaseUnavailable, QueryRefused
from agent.db.result import to_json_value
from web.boundary import HttpError, RateLimiter, check_token, read_chat_request
from web.runs import RunRegistry, SseEvent
from web.store import ConversationStore

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
KEEPALIVE_S = 15
Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    agent: AgentApp, store: ConversationStore, *, reattach_grace_s: float = 5.0, owns_agent: bool = False
) -> Starlette:
    """The web app over `agent`'s runner. With `owns_agent`, shutting the app down closes the agent
    and the store too (as `agent web` wants); tests keep them."""
    settings = agent.settings
    runs = RunRegistry(agent.runner, store, grace_s=reattach_grace_s)
    limiter = RateLimiter(settings.agent_web_rate_per_minute)
    templates = Jinja2Templates(directory=HERE / "templates")
    token = settings.agent_web_token.get_secret_value() if settings.agent_web_token else None

    def api(handler: Handler) -> Handler:
        """Auth and JSON errors for every API route."""

        async def wrapped(request: Request) -> Response:
            try:
                check_token(request, token)
                return await handler(request)
            except HttpError as exc:
                return exc.response()

        return wrapped

    async def page(request: Request) -> Response:
        return templates.TemplateResponse(request, "index.html", {"needs_token": token is not None})

    async def chat(request: Request) -> Response:
        limiter.check(request.client.host if request.client else "unknown")
        body = await read_chat_request(request, settings.agent_web_max_message_chars)
        if body.conversation_id is None:
            conversation_id = await store.create_conversation(body.message)
        elif await store.exists(body.conversation_id):
            conversation_id = body.conversation_id
        else:
            raise HttpError(404, f"No conversation {body.conversation_id}.")
        handle = runs.start(conversation_id, body.message, await store.history(conversation_id))
        return _sse(_as_dicts(runs.follow(handle)))

    async def run_events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = _last_event_id(request)
        handle = runs.get(run_id)
        if handle is not None:
            return _sse(_as_dicts(runs.follow(handle, after)))
        stored = await store.run_events(run_id)
        if stored is None:
            raise HttpError(404, f"No run {run_id}.")
        return _sse(_replay(stored[1], after))

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
        stream = agent.db.stream(sql, max_rows=settings.export_max_rows)
        try:
            first = await anext(stream)
        except (QueryRefused, DatabaseError) as exc:
            raise HttpError(422, f"The query no longer runs: {exc}") from None
        except StopAsyncIteration:
            first = None
        headers = {
            "Content-Disposition": f'attachment; filename="{key}.csv"',
            "X-Row-Cap": str(settings.export_max_rows),
        }
        return StreamingResponse(_csv_lines(first, stream), media_type="text/csv; charset=utf-8", headers=headers)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(agent.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        checks = {"settings": "ok" if settings.anthropic_api_key else "ANTHROPIC_API_KEY is not set"}
        try:
            await agent.db.ping()
            checks["database"] = "ok"
        except DatabaseUnavailable as exc:
            checks["database"] = str(exc)
        healthy = all(value == "ok" for value in checks.values())
        return JSONResponse({"status": "ok" if healthy else "unhealthy", **checks}, status_code=200 if healthy else 503)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await runs.shutdown()
        if owns_agent:
            await agent.close()
            store.close()

    routes = [
        Route("/", page),
        Route("/api/chat", api(chat), methods=["POST"]),
        Route("/api/conversations", api(conversations)),
        Route("/api/conversations/{conversation_id}", api(conversation), methods=["GET", "DELETE"]),
        Route("/api/runs/{run_id}/events", api(run_events)),
        Route("/api/queries/{query_id}.csv", api(query_csv)),
        Route("/metrics", metrics),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.runs = runs
    return app


def _sse(events: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    return EventSourceResponse(
        events, ping=KEEPALIVE_S, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _as_dicts(events: AsyncIterator[SseEvent]) -> AsyncIterator[dict[str, Any]]:
    async for event in events:
        yield _wire(event.as_dict())


async def _replay(events: list[dict[str, Any]], after: int) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        if event["id"] > after:
            yield _wire(event)


def _wire(event: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(event["id"]), "event": event["event"], "data": json.dumps(event["data"], ensure_ascii=False)}


def _last_event_id(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    return int(raw) if raw.isdigit() else 0


async def _csv_lines(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[str]:
    if first is None:
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(first.columns)
    block = first
    while True:
        writer.writerows([_csv_cell(v) for v in row] for row in block.rows)
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        try:
            block = await anext(rest)
        except StopAsyncIteration:
            return


def _csv_cell(value: Any) -> Any:
    # A text cell starting with =, +, - or @ is evaluated as a formula by spreadsheets.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    plain = to_json_value(value)
    if isinstance(plain, list | dict):
        return json.dumps(plain, ensure_ascii=False)
    return "" if plain is None else plain
