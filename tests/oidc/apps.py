"""The web app signing people in with the test provider: served on a real socket, with a client of its own
registered at the provider for its callback address."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agent.app import AgentApp
from agent.limits import Limits
from chats.state import ChatState
from tests.oidc.provider import OidcClient, OidcProvider, sign_in_at_provider
from tests.web_helpers import LiveServer, bound_socket
from web.app import create_app

SESSION_SECRET = "a-session-secret-for-tests-only-0123456789"


@dataclass(frozen=True)
class SignInApp:
    url: str
    client: OidcClient
    state: ChatState

    @property
    def redirect_uri(self) -> str:
        return self.client.redirect_uri


@asynccontextmanager
async def sign_in_app(
    make_app: Callable[..., AgentApp], provider: OidcProvider, state_path: Path, **overrides: Any
) -> AsyncIterator[SignInApp]:
    """The chat with OpenID Connect sign-in at `provider`; keyword arguments go to settings."""
    bound = bound_socket()
    url = f"http://127.0.0.1:{bound.getsockname()[1]}"
    client = provider.register_client(f"{url}/auth/callback")
    agent = make_app(
        agent_oidc_issuer=provider.issuer,
        agent_oidc_client_id=client.client_id,
        agent_oidc_client_secret=client.client_secret,
        agent_session_secret=SESSION_SECRET,
        agent_oidc_scopes="openid email profile groups",
        **overrides,
    )
    state = ChatState(state_path, limits=Limits.of(agent.settings))
    try:
        async with LiveServer(create_app(agent, state), bound) as server:
            assert server.url == url
            yield SignInApp(url, client, state)
    finally:
        state.close()


async def authorize_url(http: httpx.AsyncClient, app: SignInApp) -> str:
    """Where the app's sign-in sends the browser: the provider's authorization endpoint."""
    started = await http.get(f"{app.url}/auth/sign-in")
    assert started.is_redirect, f"/auth/sign-in answered {started.status_code}: {started.text[:300]}"
    return started.headers["location"]


async def sign_in(http: httpx.AsyncClient, app: SignInApp, login: str) -> httpx.Response:
    """The whole sign-in as a browser makes it; returns the app's answer to the provider's redirect back."""
    back = await sign_in_at_provider(http, await authorize_url(http, app), login, app.redirect_uri)
    return await http.get(back)


async def sessions_kept(app: SignInApp) -> int:
    """How many sign-in sessions the server keeps."""
    count: int = await app.state.file.run(lambda c: c.execute("SELECT count(*) FROM web_sessions").fetchone()[0])
    return count


def browser() -> httpx.AsyncClient:
    """An HTTP client that keeps cookies as a browser does on loopback, and follows no redirect by itself.
    Browsers send Secure cookies to http://127.0.0.1 (a potentially trustworthy origin); httpx keeps them
    for https only, so each cookie kept is marked for any scheme as it arrives."""
    client = httpx.AsyncClient(timeout=30)

    async def as_on_loopback(_: httpx.Response) -> None:
        for cookie in client.cookies.jar:
            cookie.secure = False

    client.event_hooks["response"].append(as_on_loopback)
    return client
