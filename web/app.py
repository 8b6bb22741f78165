"""The web chat: a Starlette app over the Runner. `create_app` lists the views (`web/views/`) and the
middleware; each view reads its dependencies from the app. No SQL or prompt logic lives here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agent.app import AgentApp
from agent.config import Settings
from agent.loop_lag import LoopLag
from chats.audiences import Audiences
from chats.rate_limits import RateLimit
from chats.runs import STREAM_MARGIN_S, RunRegistry
from chats.state import ChatState
from web.boundary import HttpError, TrustedHosts, check_json_content_type, check_rate, check_same_origin
from web.context import WebContext, web_context
from web.downloads import DownloadSlots
from web.exposure import proxy_middleware
from web.headers import SECURITY_HEADERS, SecurityHeadersMiddleware
from web.identity import Identities, asker_key, cookie_is_secure, require_identity, session_cookie_name
from web.oidc import OidcSignIn
from web.probes import probe_routes
from web.request_metrics import RequestMetricsMiddleware
from web.views import (
    auth,
    chat,
    conversations,
    examples,
    feedback,
    inbox,
    knowledge,
    page,
    queries,
    reports,
    run_events,
    schedules,
)

HERE = Path(__file__).parent
Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    agent: AgentApp,
    state: ChatState,
    *,
    reattach_grace_s: float | None = None,
    owns_agent: bool = False,
    extra_routes: Sequence[BaseRoute] = (),
    runs: RunRegistry | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
    audiences: Audiences | None = None,
) -> Starlette:
    """The web app over `agent`'s runner and the kit's `state` (its stores and pacing). With `owns_agent`,
    shutting the app down closes the agent and the state too (as `agent web` wants); tests keep them.
    `extra_routes` are served beside the chat (`agent serve` mounts Slack's endpoint there). `runs` and
    `lifespan`: the process's registry and life cycle when a Service (process/service.py) owns them; by
    default the app has its own. `audiences`: who is in what owns a thing (with the Slack adapter's
    channel members under `agent serve`); by default each person only."""
    settings = agent.settings
    owns_runs = runs is None
    store, pacing = state.conversations, state.pacing
    registry = runs or RunRegistry(agent.runner, store, max_event_bytes=settings.max_event_bytes)
    token = settings.agent_web_token.get_secret_value() if settings.agent_web_token else None
    web = WebContext(
        agent=agent,
        store=store,
        proposals=state.proposals,
        runs=registry,
        templates=Jinja2Templates(directory=HERE / "templates"),
        token=token,
        reattach_grace_s=settings.agent_web_reattach_grace_s if reattach_grace_s is None else reattach_grace_s,
        # On shutdown a stream lives until its run is done: the registry ends every run within the grace
        # period (process/service.py), and the margin lets the last events out.
        stream_grace_s=settings.agent_shutdown_grace_s + STREAM_MARGIN_S,
        questions=pacing.rate_limit("web:questions", settings.agent_web_rate_per_minute),
        downloads=pacing.rate_limit("web:downloads", settings.agent_web_exports_per_minute),
        thumbs=pacing.rate_limit("web:thumbs", settings.agent_web_thumbs_per_minute),
        downloading=DownloadSlots(settings.export_per_client),
        budget=pacing.asker_budget(settings),
        sessions=state.sessions,
        audiences=audiences or Audiences(),
    )

    @asynccontextmanager
    async def own_lifespan(app: Starlette) -> AsyncIterator[None]:
        async with LoopLag(agent.metrics).running():
            yield
        if owns_runs:  # no signal drains an app used alone (tests): what still runs is cancelled
            await registry.shutdown()
        if owns_agent:
            await agent.close()
            state.close()

    routes = [
        Route("/", page.index),
        Route("/c/{conversation_id}", page.conversation_page),
        Route("/api/chat", _api(_limited(_QUESTIONS, chat.chat)), methods=["POST"]),
        Route("/api/conversations", _api(conversations.conversations)),
        Route("/api/conversations/{conversation_id}", _api(conversations.conversation), methods=["GET", "DELETE"]),
        Route("/api/knowledge", _api(knowledge.knowledge)),
        Route("/api/examples", _api(examples.examples)),
        Route("/api/runs/{run_id}/events", _api(run_events.run_events)),
        Route("/api/runs/{run_id}/feedback", _api(_limited(_THUMBS, feedback.feedback)), methods=["POST"]),
        Route("/queries/{query_id}", page.query_page),
        # The CSV route first: `{query_id}` would match "<id>.csv" too.
        Route("/api/queries/{query_id}.csv", _api(_limited(_DOWNLOADS, queries.query_csv))),
        Route("/api/queries/{query_id}", _api(queries.query)),
        Route("/reports/{report_id}", page.report_page),
        Route("/api/reports", _api(_limited(_QUESTIONS, reports.start_report)), methods=["POST"]),
        # The downloads first: `{report_id}` would match "<id>.md" too.
        Route("/api/reports/{report_id}.md", _api(_limited(_DOWNLOADS, reports.report_markdown))),
        Route("/api/reports/{report_id}.pdf", _api(_limited(_DOWNLOADS, reports.report_pdf))),
        Route("/api/reports/{report_id}", _api(reports.report)),
        Route("/api/me", _api(auth.me)),
        *schedules.routes(_api, state, settings),
        *inbox.routes(_api, state, settings),
        *_sign_in_routes(settings),
        *probe_routes(agent, registry, token),
        *extra_routes,
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        *proxy_middleware(settings),
        Middleware(RequestMetricsMiddleware, metrics=agent.metrics, routes=routes),
        Middleware(SecurityHeadersMiddleware),
        # Answers only to the names it is served under: a DNS-rebinding page gets 400, not the API.
        Middleware(TrustedHosts, allowed_hosts=settings.agent_web_allowed_hosts),
        *_session_middleware(settings),
    ]
    handlers = {HTTPException: _http_error, Exception: _server_error}
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=lifespan or own_lifespan
    )
    app.state.web = web
    app.state.settings = settings
    app.state.identities = Identities(settings, state.sessions)
    app.state.schedules = state.schedules  # each signed-in request refreshes who owns its schedules
    app.state.oidc = OidcSignIn(settings) if settings.agent_oidc_issuer else None
    return app


def _sign_in_routes(settings: Settings) -> list[Route]:
    """Signing in with OpenID Connect, when an issuer is set (web/views/auth.py)."""
    if not settings.agent_oidc_issuer:
        return []
    return [
        Route("/auth/sign-in", auth.sign_in),
        Route("/auth/callback", auth.callback, name="auth_callback"),
        Route("/auth/sign-out", auth.sign_out, methods=["POST"]),
        Route("/auth/signed-out", auth.signed_out),
    ]


def _session_middleware(settings: Settings) -> list[Middleware]:
    """The signed sign-in cookie (Starlette's SessionMiddleware, itsdangerous): HttpOnly, SameSite=Lax (the
    provider's redirect back is a top-level GET, which carries it), lasting as long as the session, and
    Secure (and then named `__Host-`, Path=/, no Domain) unless the server answers only loopback names (local
    use over plain http://localhost): web/identity.py's `cookie_is_secure`."""
    if not settings.agent_oidc_issuer or settings.agent_session_secret is None:
        return []
    return [
        Middleware(
            SessionMiddleware,
            secret_key=settings.agent_session_secret.get_secret_value(),
            session_cookie=session_cookie_name(settings),
            max_age=round(settings.agent_session_hours * 3600),
            path="/",
            domain=None,  # with Path=/ and Secure, what a `__Host-` name requires
            same_site="lax",
            https_only=cookie_is_secure(settings),
        )
    ]


def _api(handler: Handler) -> Handler:
    """Who is asking (web/identity.py), changes from our own pages under a cookie, JSON-only POSTs and
    JSON errors for every API route."""

    async def wrapped(request: Request) -> Response:
        try:
            identity = await require_identity(request)
            if request.method not in _SAFE_METHODS and identity.ambient:
                check_same_origin(request)
            if request.method == "POST":
                check_json_content_type(request)
            return await handler(request)
        except HttpError as exc:
            return exc.response()

    return wrapped


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class _Budget:
    what: str  # as a refusal names it: "Too many questions"
    limit: Callable[[WebContext], RateLimit]


_QUESTIONS = _Budget("questions", lambda web: web.questions)
_DOWNLOADS = _Budget("downloads", lambda web: web.downloads)
_THUMBS = _Budget("thumbs", lambda web: web.thumbs)


def _limited(budget: _Budget, handler: Handler) -> Handler:
    """The asker's `budget` (a signed-in person's, else the address's) is checked before the handler (and
    before it looks anything up)."""

    async def wrapped(request: Request) -> Response:
        identity = await require_identity(request)
        try:
            await check_rate(budget.limit(web_context(request)), asker_key(request, identity), budget.what)
        except HttpError:
            if budget is _QUESTIONS:
                await chat.refused(request, identity, "rate_limited")
            raise
        return await handler(request)

    return wrapped


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and methods (404, 405) answer in JSON like the API does; a browser opening a page's
    address is shown a page."""
    assert isinstance(exc, HTTPException)
    if page.wants_page(request):
        return page.missing_page(request, exc.status_code, exc.detail, dict(exc.headers or {}))
    return HttpError(exc.status_code, exc.detail, dict(exc.headers or {})).response()


async def _server_error(request: Request, exc: Exception) -> Response:
    """The last resort: a JSON 500 without a stack trace. It is sent from outside the middleware, so it
    carries the security headers itself."""
    headers = {**SECURITY_HEADERS, **({"Cache-Control": "no-store"} if request.url.path.startswith("/api/") else {})}
    return JSONResponse({"error": "Something went wrong on the server; try again."}, status_code=500, headers=headers)
