"""Signing in with OpenID Connect, through Authlib's Starlette client: the authorization code flow with
PKCE (S256), state and nonce (Authlib makes and checks all three, keeping them in the signed session
cookie between the redirect and the callback), the ID token's signature, issuer, audience and nonce
checked against the provider's published keys. Nothing of the protocol is written here: this module
only names the provider and turns its verified claims into a Person."""

from __future__ import annotations

from typing import Any

import httpx
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.starlette_client import OAuth
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import Response

from agent.config import Settings
from chats.people import Person, person_id

PROVIDER = "oidc"  # Authlib's name for it (its keys in the session are `_state_oidc_<state>`)
MAX_GROUPS = 200


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
        except (httpx.HTTPError, AuthlibBaseError, RuntimeError, ValueError) as exc:
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
        except (httpx.HTTPError, AuthlibBaseError, JoseError, RuntimeError, ValueError, KeyError) as exc:
            raise SignInFailed(_said(exc)) from None
        return self._person(claims)

    async def _with_userinfo(self, token: dict[str, Any], claims: dict[str, Any]) -> dict[str, Any]:
        """Providers that keep the ID token small (oidc-provider, Keycloak) give email and groups at the
        userinfo endpoint; its answer counts only for the ID token's own subject."""
        metadata = await self._client.load_server_metadata()
        if not metadata.get("userinfo_endpoint"):
            return claims
        info = dict(await self._client.userinfo(token=token))
        if info.get("sub") != claims["sub"]:
            return claims
        return {**info, **{key: value for key, value in claims.items() if value is not None}}

    def _person(self, claims: dict[str, Any]) -> Person:
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


def _said(exc: Exception) -> str:
    if isinstance(exc, AuthlibBaseError):
        return exc.description or exc.error or "refused"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"the provider answered {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return f"the provider did not answer: {type(exc).__name__}"
    return str(exc)[:200] or type(exc).__name__
