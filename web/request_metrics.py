"""Counts web requests by route template and status class (`agent_web_requests_total`). Pure ASGI, so a
streamed answer is neither buffered nor delayed; it counts as its response starts (so a client holding the
response can already read the count), or as a 500 if the app fails before it starts.
Labels stay bounded: the template a request matched (`/api/runs/{run_id}/events`), never the raw path;
`unmatched` for anything else."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.metrics import Metrics

UNMATCHED = "unmatched"


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        for template in [*(r.path_format for r in routes if isinstance(r, Route | Mount)), UNMATCHED]:
            for status in ("2xx", "4xx", "5xx"):  # at 0 from start-up: a rate reads 0 after a restart
                metrics.web_requests.labels(template, status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_template(self.routes, scope)  # before the router rewrites the scope (a Mount's root_path)
        started = False

        async def send_counting(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self._count(route, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        except Exception:
            if not started:
                self._count(route, 500)  # unsent: the server's catch-all answers 500
            raise
        if not started:
            self._count(route, 500)

    def _count(self, route: str, status: int) -> None:
        self.metrics.web_requests.labels(route, f"{status // 100}xx").inc()


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The path template of the route the router picks for `scope` (a wrong method still names its route)."""
    partial: str | None = None
    for route in routes:
        if not isinstance(route, Route | Mount):
            continue
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route.path_format
        if match is Match.PARTIAL and partial is None:
            partial = route.path_format
    return partial or UNMATCHED
