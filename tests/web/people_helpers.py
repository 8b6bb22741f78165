"""Two or more people at one web chat over HTTP, quickly: a real uvicorn server on loopback whose people
are told apart by a trusted proxy's identity header (AGENT_WEB_IDENTITY_HEADER), or by sign-in sessions
made in the store and carried in the cookie as Starlette's SessionMiddleware signs it. A twin server over
an empty file answers the same requests as for ids never seen."""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from itsdangerous import TimestampSigner

from agent.app import AgentApp
from agent.limits import Limits
from chats.audiences import Audiences, ChannelMembers
from chats.people import Person
from chats.state import STATE_FILE, ChatState
from tests.web_helpers import LiveServer
from web.app import create_app
from web.identity import SESSION_KEY, session_cookie_name

EMAIL_HEADER = "X-Forwarded-Email"
GROUPS_HEADER = "X-Forwarded-Groups"
SESSION_SECRET = "a-test-signing-key-of-at-least-32-chars"
PROXY_MODE = {
    "agent_web_identity_header": EMAIL_HEADER,
    "agent_web_identity_groups_header": GROUPS_HEADER,
    "agent_web_identity_proxies": "127.0.0.1",
}
UNSEEN_HEADERS = {"date", "server"}  # what may differ between two responses that say the same


class Served:
    """One web app on a real socket, over its own state file."""

    def __init__(
        self,
        make_app: Callable[..., AgentApp],
        folder: Path,
        *,
        channel_members: ChannelMembers | None = None,
        **settings: Any,
    ) -> None:
        self.agent = make_app(**settings)
        self.state = ChatState(folder / STATE_FILE, limits=Limits.of(self.agent.settings))
        self.app = create_app(self.agent, self.state, reattach_grace_s=0.3, audiences=Audiences(channel_members))
        self._server = LiveServer(self.app)
        self.url = self._server.url
        self._clients: list[httpx.AsyncClient] = []

    async def __aenter__(self) -> Served:
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *_: Any) -> None:
        for client in self._clients:
            await client.aclose()
        await self._server.__aexit__()
        self.state.close()

    def client(
        self, *, email: str | None = None, cookie: str | None = None, origin: bool = True, **headers: str
    ) -> httpx.AsyncClient:
        """A browser of this site: signed in by the proxy's header (`email`) or a session cookie, sending
        its Origin as a browser does with changes."""
        sent = dict(headers)
        if email is not None:
            sent[EMAIL_HEADER] = email
        if cookie is not None:
            sent["Cookie"] = f"{session_cookie_name(self.agent.settings)}={cookie}"
        if origin:
            sent["Origin"] = self.url
        client = httpx.AsyncClient(base_url=self.url, headers=sent, timeout=30)
        self._clients.append(client)
        return client

    async def session(self, person: Person, lifetime_s: float = 3600) -> str:
        """A sign-in session made in the store, as the callback makes one; the cookie that carries it."""
        return session_cookie(await self.state.sessions.start(person, lifetime_s))


def session_cookie(session_id: str, secret: str = SESSION_SECRET) -> str:
    """The cookie's value as Starlette's SessionMiddleware writes it: the session, JSON in base64, signed."""
    data = b64encode(json.dumps({SESSION_KEY: session_id}).encode())
    return TimestampSigner(secret).sign(data).decode()


def said(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {name: value for name, value in response.headers.items() if name not in UNSEEN_HEADERS}
    return response.status_code, headers, response.content


def email_person(email: str, name: str = "") -> Person:
    return Person(id=f"email:{email}", name=name or email, email=email)
