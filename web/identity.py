"""Who is asking the web chat, decided once per request from what the request carries:

- a bearer token (`AGENT_WEB_TOKEN`): a machine client, or the one local person where nobody signs in;
- a trusted reverse proxy's identity header (`AGENT_WEB_IDENTITY_HEADER`), believed only when the socket's
  peer is one of `AGENT_WEB_IDENTITY_PROXIES`; the proxy must overwrite it and the groups header on every
  request, since a copy the client sent cannot be told from its own: two copies of either are no identity;
- the signed session cookie of an OpenID Connect sign-in (web/views/auth.py), whose server-side record
  (chats/sessions.py) must still last;
- nothing, where no token and no sign-in is configured: the one local person, as before sign-in existed.

The proxy's header and the cookie are sent by the browser on its own (ambient credentials), so requests
that change something with them must prove they come from our own pages (web/boundary.py's Origin check).
Budgets and rate limits count a signed-in person by their id, and everyone else by their address.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from agent.access.policy import Asker, Policy
from agent.app import AgentApp
from agent.config import Settings
from chats.people import LOCAL, MACHINE, Person, person_id
from chats.sessions import SessionStore
from web.boundary import HttpError, address_key
from web.exposure import PEER, is_loopback

log = logging.getLogger(__name__)

SESSION_COOKIE = "agent_session"  # Starlette's signed cookie; it holds the session id (key SESSION_KEY)
# Served Secure, the name says so: a browser keeps a `__Host-` cookie only when it is Secure, Path=/ and has
# no Domain, set by this very host, so a page on a sibling subdomain cannot plant its own (login CSRF).
SECURE_SESSION_COOKIE = f"__Host-{SESSION_COOKIE}"
SESSION_KEY = "sid"

MAX_GROUPS = 200
Via = Literal["session", "proxy", "token", "local"]


@dataclass(frozen=True)
class Identity:
    person: Person
    via: Via

    @property
    def signed_in(self) -> bool:
        """A person known by name (a cookie or a proxy's header), not a shared token or the local user."""
        return self.via in ("session", "proxy")

    @property
    def ambient(self) -> bool:
        """Sent by the browser whatever page made the request: what CSRF forges."""
        return self.via in ("session", "proxy")


class Identities:
    """Finds the identity of each request by the settings' rules (module docstring)."""

    def __init__(self, settings: Settings, sessions: SessionStore) -> None:
        token = settings.agent_web_token
        self._token = token.get_secret_value() if token else None
        self._oidc = bool(settings.agent_oidc_issuer)
        self._header = (settings.agent_web_identity_header or "").lower() or None
        self._groups_header = (settings.agent_web_identity_groups_header or "").lower() or None
        self._proxies = [ipaddress.ip_network(item, strict=False) for item in settings.agent_web_identity_proxies]
        self._sessions = sessions
        self.sign_in = "oidc" if self._oidc else "proxy" if self._header else None
        # With nobody signing in, whoever passes (the token's holders, or this machine's user) is one person.
        self._token_person = Person(MACHINE, "Machine client") if self.sign_in else Person(LOCAL, "Local user")

    async def of(self, request: HTTPConnection) -> Identity | None:
        """The request's identity, or None when it has none that counts (the caller answers 401)."""
        given = request.headers.get("authorization")
        if given is not None and self._token is not None:  # never falls back to the cookie: a wrong token is refused
            return self._by_token(given, self._token)
        if (proxied := self._by_proxy(request)) is not None:
            return proxied
        if (session := await self._by_session(request)) is not None:
            return session
        if self._token is None and self.sign_in is None:
            return Identity(self._token_person, "local")
        return None

    @property
    def takes_token(self) -> bool:
        return self._token is not None

    def _by_token(self, given: str, token: str) -> Identity | None:
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), token.encode()):
            return None
        return Identity(self._token_person, "token")

    def _by_proxy(self, request: HTTPConnection) -> Identity | None:
        if self._header is None or not self._from_identity_proxy(request):
            return None
        given = request.headers.getlist(self._header)
        email = verified_email(given[0]) if len(given) == 1 else None  # two: one of them was not the proxy's
        listed = request.headers.getlist(self._groups_header) if self._groups_header else []
        if email is None or len(listed) > 1:  # the groups pick the policy: a second copy is the same forgery
            return None
        named = frozenset(group.strip() for group in "".join(listed).split(",")[:MAX_GROUPS] if group.strip())
        return Identity(Person(person_id(email=email, fallback=""), email, email, named), "proxy")

    def _from_identity_proxy(self, request: HTTPConnection) -> bool:
        peer = request.scope.get(PEER) or request.scope.get("client")
        try:
            address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0]) if peer else None
        except ValueError:
            return False
        return address is not None and any(address in network for network in self._proxies)

    async def _by_session(self, request: HTTPConnection) -> Identity | None:
        session: dict[str, Any] | None = request.scope.get("session")
        session_id = session.get(SESSION_KEY) if session else None
        if not isinstance(session_id, str):
            return None
        person = await self._sessions.person(session_id)
        return Identity(person, "session") if person is not None else None


def verified_email(value: str) -> str | None:
    """The address a proxy's header carries: bare, or after a provider's prefix (IAP sends
    `accounts.google.com:alice@example.com`); None unless it looks like one address."""
    email = value.strip().rsplit(":", 1)[-1].strip()
    local, at, domain = email.partition("@")
    if not (at and local and "." in domain and len(email) <= 254) or any(c.isspace() or c in ",;<>" for c in email):
        return None
    return email


def cookie_is_secure(settings: Settings) -> bool:
    """The sign-in cookie goes only over https, unless the server answers only loopback names (plain
    http://localhost) and its public address (AGENT_WEB_URL, behind a TLS proxy on this machine) is not https."""
    local = all(is_loopback(host) for host in settings.agent_web_allowed_hosts)
    return not local or urlsplit(settings.agent_web_url or "").scheme == "https"


def session_cookie_name(settings: Settings) -> str:
    return SECURE_SESSION_COOKIE if cookie_is_secure(settings) else SESSION_COOKIE


_IDENTITY = "agent.identity"


async def identify(request: HTTPConnection) -> Identity | None:
    """The request's identity, found once and kept on the request."""
    if _IDENTITY not in request.scope:
        identities: Identities = request.app.state.identities
        request.scope[_IDENTITY] = found = await identities.of(request)
        if found is not None and found.signed_in and (schedules := getattr(request.app.state, "schedules", None)):
            # who they are now picks the policy their schedules fire under (chats/schedules.py `seen`)
            try:
                await schedules.seen(found.person.owner, email=found.person.email, groups=found.person.groups)
            except Exception:  # the request goes on; the next one notes it again (nothing was cached)
                log.warning("web: could not note who a person is now for their schedules")
    found = request.scope[_IDENTITY]
    return found


async def require_identity(request: HTTPConnection) -> Identity:
    """The identity of an API request, or 401 saying how to get one."""
    found = await identify(request)
    if found is not None:
        return found
    identities: Identities = request.app.state.identities
    machines = {"WWW-Authenticate": "Bearer"} if identities.takes_token else {}  # what a machine client may send
    if identities.sign_in == "oidc":
        raise HttpError(401, "Sign in first: open /auth/sign-in.", machines)
    if identities.sign_in == "proxy":
        raise HttpError(401, "Sign in first, through the sign-in proxy in front of this server.", machines)
    raise HttpError(
        401, "This server needs an access token (Authorization: Bearer ...).", {"WWW-Authenticate": "Bearer"}
    )


def asker_key(request: HTTPConnection, identity: Identity) -> str:
    """Who budgets and rate limits count: a signed-in person by id, anyone else by address."""
    if identity.signed_in:
        return identity.person.id
    return address_key(request.client.host) if request.client else "unknown"


def policy_of(request: HTTPConnection, identity: Identity) -> Policy | None:
    """The policy a web person's questions run under (the file's first that names their verified email or
    one of their groups, else its default); None without a policy file. The one place the web picks it."""
    person = identity.person
    agent: AgentApp = request.app.state.web.agent
    policies = agent.policies
    return policies.for_asker(Asker(email=person.email, groups=person.groups)) if policies is not None else None
