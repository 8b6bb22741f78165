"""Serving the chat safely: refuse an exposed address without protection, and believe forwarded
headers only from trusted proxies. process/service.py runs the server."""

from __future__ import annotations

import ipaddress
from typing import Any

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
    if settings.agent_web_token is None and not settings.agent_web_allow_no_token:
        raise ConfigError(
            f"AGENT_WEB_TOKEN: --host {host} serves other machines, so set a token "
            "(or AGENT_WEB_ALLOW_NO_TOKEN=true to serve everyone who can reach the port)."
        )
    if "agent_web_allowed_hosts" not in settings.model_fields_set:
        raise ConfigError(
            f"AGENT_WEB_ALLOWED_HOSTS: --host {host} serves other machines; list the names clients use to reach "
            "it (e.g. AGENT_WEB_ALLOWED_HOSTS=analyst.example.com); requests with any other Host get 400."
        )


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options for the app. X-Forwarded-For/-Proto are believed only from the proxies in
    AGENT_WEB_TRUSTED_PROXIES (uvicorn's own ProxyHeadersMiddleware); by default they are ignored, so a
    client cannot choose its own rate-limit key."""
    trusted = settings.agent_web_trusted_proxies
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": list(trusted) or None, "server_header": False}
