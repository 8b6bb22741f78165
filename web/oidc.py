"""Signing in with OpenID Connect, through Authlib's Starlette client: the authorization code flow with
PKCE (S256), state and nonce (Authlib makes and checks all three, keeping them in the signed session
cookie between the redirect and the callback), the ID token's signature, issuer, audience and nonce
checked against the provider's published keys. Nothing of the protocol is written here: this module
only names the provider and turns its verified claims into a Person."""

from __future__ import annotations

from typing import Any

import httpx2
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.starlette_client import OAuth
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import Response

from agent.config import Settings
from chats.people import Person, person_id

PROVIDER = "oidc"  # Authlib's name for it (its keys in the session are `_state_oidc_<state>`)
MAX_GROUPS = 200
# What the provider's answers can raise. Authlib's HTTP client is httpx2 (authlib/integrations/httpx_client/
# _compat.py; plain httpx only where httpx2 is not installed, and it is one of ours): an unreachable provider
# is an httpx2.RequestError, an error status an httpx2.HTTPStatusError. A refused code is Authlib's OAuthError
# (an AuthlibBaseError); an ID token that fails its checks is joserfc's JoseError; missing metadata is a
# RuntimeError, a body that is not JSON a ValueError.
PROVIDER_ERRORS = (httpx2.HTTPError, AuthlibBaseError, JoseError, RuntimeError, ValueError, KeyError)


class SignInFailed(Exception):
    """The provider's answer did not sign anyone in (refused, forged, replayed or unreachable); one line."""


class OidcSignIn:
    def __init__(self, settings: Settings) -> None:
        assert settings.agent_oidc_issuer and settings.agent_oidc_client_id
        self.issuer = settings.agent_oidc_issuer.rstrip("/")
        secret = settings.agent_oidc_client_secret
        client_kwargs: dict[str, Any] = {"scope": settings.agent_oidc_scopes, "code_challenge_method": "S256"}
        if secret is None:  # a public client: PKCE alone proves the callback is ours
            client_kwargs["token_endpoint_auth_method"] = "none"
        self._client: Any = OAuth().register(
            PROVIDER,
            client_id=settings.agent_oidc_client_id,
            client_secret=secret.get_secret_value() if secret else None,
            server_metadata_url=f"{self.issuer}/.well-known/openid-configuration",
            client_kwargs=client_kwargs,
        )

    async def redirect(self, request: Request, callback_url: str) -> Response:
        """The redirect to the provider's sign-in page; raises SignInFailed when it cannot be reached."""
        try:
            response: Response = await self._client.authorize_redirect(request, callback_url)
        except PROVIDER_ERRORS as exc:
            raise SignInFailed(f"the sign-in provider could not be reached ({_said(exc)})") from None
        return response

    async def person(self, request: Request) -> Person:
        """Who the provider's callback signed in; raises SignInFailed otherwise."""
        try:
            token = await self._client.authorize_access_token(request)
            claims = dict(token.get("userinfo") or {})
            if not claims.get("sub"):
                raise SignInFailed("the provider sent no ID token")
            claims = await self._with_userinfo(token, claims)
        except PROVIDER_ERRORS as exc:
            raise SignInFailed(_said(exc)) from None
        return self.person_of(claims)

    async def _with_userinfo(self, token: dict[str, Any], claims: dict[str, Any]) -> dict[str, Any]:
        """Providers that keep the ID token small (oidc-provider, Keycloak) give email and groups at the
        userinfo endpoint (`merged_claims` says how the two answers combine)."""
        metadata = await self._client.load_server_metadata()
        if not metadata.get("userinfo_endpoint"):
            return claims
        return merged_claims(claims, dict(await self._client.userinfo(token=token)))

    def person_of(self, claims: dict[str, Any]) -> Person:
        """The person verified claims name: their email only where `email_verified` is true, else the subject."""
        email = claims.get("email") if claims.get("email_verified") is True else None
        email = email if isinstance(email, str) and "@" in email else None
        groups = claims.get("groups")
        named = [g for g in groups[:MAX_GROUPS] if isinstance(g, str)] if isinstance(groups, list) else []
        name = claims.get("name") or claims.get("preferred_username") or email or ""
        return Person(
            id=person_id(email=email, fallback=f"oidc:{self.issuer}#{claims['sub']}"),
            name=str(name)[:200],
            email=email,
            groups=frozenset(named),
        )


def merged_claims(id_token: dict[str, Any], userinfo: dict[str, Any]) -> dict[str, Any]:
    """The ID token's claims, completed by the userinfo endpoint's. Userinfo counts only for the ID token's
    own subject (OIDC Core 5.3.4: its `sub` must equal the ID token's, else its answer must not be used).
    An email and its `email_verified` always come from one answer: the ID token's pair when it names an
    email, userinfo's only when it does not; a flag from one answer never vouches for another's address."""
    if userinfo.get("sub") != id_token["sub"]:
        return id_token
    merged = {**userinfo, **{key: value for key, value in id_token.items() if value is not None}}
    source = id_token if id_token.get("email") is not None else userinfo
    merged["email"], merged["email_verified"] = source.get("email"), source.get("email_verified")
    return merged


def _said(exc: Exception) -> str:
    if isinstance(exc, AuthlibBaseError):
        return exc.description or exc.error or "refused"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"the provider answered {exc.response.status_code}"
    if isinstance(exc, httpx2.HTTPError):
        return f"the provider did not answer: {type(exc).__name__}"
    return str(exc)[:200] or type(exc).__name__
