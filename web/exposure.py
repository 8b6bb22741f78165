"""Serving the chat safely: refuse an exposed address without protection, and believe forwarded
headers only from trusted proxies. process/service.py runs the server."""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from agent.config import ConfigError, Settings

LOOPBACK_NAMES = {"localhost", "localhost."}


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere


def check_exposure(settings: Settings, host: str) -> None:
    """Refuse to serve a non-loopback address unprotected. Loopback is for this machine's user; any other
    address (0.0.0.0 above all) lets the network ask questions and read every conversation."""
    if is_loopback(host):
        return
    if settings.agent_web_token is None and not settings.web_sign_in and not settings.agent_web_allow_no_token:
        raise ConfigError(
            f"AGENT_WEB_TOKEN: --host {host} serves other machines, so set a token or sign-in (AGENT_OIDC_ISSUER "
            "or AGENT_WEB_IDENTITY_HEADER), or AGENT_WEB_ALLOW_NO_TOKEN=true to serve everyone who can reach the port."
        )
    if "agent_web_allowed_hosts" not in settings.model_fields_set:
        raise ConfigError(
            f"AGENT_WEB_ALLOWED_HOSTS: --host {host} serves other machines; list the names clients use to reach "
            "it (e.g. AGENT_WEB_ALLOWED_HOSTS=analyst.example.com); requests with any other Host get 400."
        )


# How long an idle kept-alive connection stays open. uvicorn's 5 s equals the idle expiry of httpx's (and
# Slack's, and most proxies') connection pools, so a client could send on a connection in the instant the
# server closed it: the request fails with a read error (a Slack event or button click lost under load).
# Longer than common load balancers' 60 s idle time, as their guides ask of the servers behind them.
KEEP_ALIVE_S = 75


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options for the app. Forwarded headers are the app's to believe (`proxy_middleware`), never
    uvicorn's: the app must see the socket's peer first, to know whether a proxy's sign-in header counts."""
    return {"proxy_headers": False, "server_header": False, "timeout_keep_alive": KEEP_ALIVE_S}


PEER = "agent.peer"  # the scope's key for the socket's peer, before forwarded headers replace the client


def proxy_middleware(settings: Settings) -> list[Middleware]:
    """X-Forwarded-For/-Proto believed only from the proxies in AGENT_WEB_TRUSTED_PROXIES (uvicorn's own
    ProxyHeadersMiddleware); by default they are ignored, so a client cannot choose its own rate-limit key.
    The socket's peer is kept first (`PEER`) for web/identity.py."""
    trusted = settings.agent_web_trusted_proxies
    forwarded = [Middleware(ProxyHeadersMiddleware, trusted_hosts=list(trusted))] if trusted else []
    return [Middleware(_KeepPeer), *forwarded]


class _KeepPeer:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope[PEER] = scope.get("client")
        await self.app(scope, receive, send)
