"""The test provider is what the sign-in tests take it for: a code flow that requires PKCE, an ID token for
the subject, and the person (email, verified, groups) at the UserInfo endpoint. Driven by Authlib's OAuth
client, the library the web app signs in with."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.oidc.provider import OidcProvider, sign_in_at_provider

REDIRECT_URI = "http://127.0.0.1:9/auth/callback"  # never opened: the flow stops where the provider sends it


async def test_a_code_flow_with_pkce_names_the_person(oidc_provider: OidcProvider) -> None:
    registered = oidc_provider.register_client(REDIRECT_URI)
    client = AsyncOAuth2Client(
        registered.client_id,
        registered.client_secret,
        scope="openid email profile groups",
        redirect_uri=REDIRECT_URI,
        code_challenge_method="S256",
        timeout=30,
    )
    async with httpx.AsyncClient(timeout=30) as http, client:
        discovery = (await http.get(f"{oidc_provider.issuer}/.well-known/openid-configuration")).json()
        assert discovery["code_challenge_methods_supported"] == ["S256"]
        verifier, nonce = generate_token(48), generate_token(20)
        url, _ = client.create_authorization_url(
            discovery["authorization_endpoint"], code_verifier=verifier, nonce=nonce
        )
        back = await sign_in_at_provider(http, url, "alice", REDIRECT_URI)
        token = await client.fetch_token(
            discovery["token_endpoint"], authorization_response=back, code_verifier=verifier
        )
        keys = KeySet.import_key_set((await http.get(discovery["jwks_uri"])).json())
        info = (await client.get(discovery["userinfo_endpoint"])).json()
    claims = jwt.decode(token["id_token"], keys).claims
    assert claims["iss"] == oidc_provider.issuer and claims["aud"] == registered.client_id
    assert claims["nonce"] == nonce and claims["sub"] == "alice"
    assert "email" not in claims, "as OIDC Core says for the code flow: the rest is the UserInfo endpoint's"
    assert info == {
        "sub": "alice",
        "name": "Alice",
        "email": "alice@example.com",
        "email_verified": True,
        "groups": ["analysts", "ewr"],
    }


async def test_an_authorization_request_without_pkce_is_refused(oidc_provider: OidcProvider) -> None:
    registered = oidc_provider.register_client(REDIRECT_URI)
    client = AsyncOAuth2Client(
        registered.client_id, registered.client_secret, scope="openid", redirect_uri=REDIRECT_URI
    )
    async with httpx.AsyncClient(timeout=30) as http, client:
        url, _ = client.create_authorization_url(f"{oidc_provider.issuer}/auth")  # no code_challenge
        refused = await http.get(url)
    assert refused.is_redirect and refused.headers["location"].startswith(REDIRECT_URI)
    error = parse_qs(urlsplit(refused.headers["location"]).query)
    assert error["error"] == ["invalid_request"] and "requires PKCE" in error["error_description"][0]
