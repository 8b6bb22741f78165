"""Signing in to the web chat at a real OpenID Connect provider (panva's oidc-provider, tests/oidc), over
HTTP as a browser makes it: the whole code flow with PKCE ends in a session that names the person, and
a forged state, a replayed or injected code and an ID token for another nonce sign nobody in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx

from agent.app import AgentApp
from tests.oidc.apps import SignInApp, authorize_url, browser, sessions_kept, sign_in, sign_in_app
from tests.oidc.provider import OidcProvider, sign_in_at_provider
from web.identity import SESSION_COOKIE


def with_query(url: str, **changed: str) -> str:
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()} | changed
    return urlunsplit(parts._replace(query=urlencode(query)))


async def assert_nobody_signed_in(app: SignInApp, refused: httpx.Response, http: httpx.AsyncClient) -> None:
    assert refused.status_code == 400 and "Signing in did not work" in refused.text
    assert await sessions_kept(app) == 0
    assert (await http.get(f"{app.url}/api/me")).status_code == 401


async def test_the_code_flow_with_pkce_signs_the_person_in(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, tmp_path: Path
) -> None:
    async with sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app, browser() as http:
        assert (await http.get(f"{app.url}/api/me")).status_code == 401
        asked = parse_qs(urlsplit(await authorize_url(http, app)).query)
        assert asked["code_challenge_method"] == ["S256"] and asked["redirect_uri"] == [app.redirect_uri]
        landed = await sign_in(http, app, "alice")
        me = await http.get(f"{app.url}/api/me")
    assert landed.status_code == 303 and landed.headers["location"] == "/"
    assert SESSION_COOKIE in landed.headers["set-cookie"]
    assert me.status_code == 200
    assert me.json() | {"policy": None} == {
        "id": "email:alice@example.com",
        "name": "Alice",
        "email": "alice@example.com",
        "groups": ["analysts", "ewr"],
        "signed_in_with": "session",
        "policy": None,
    }


async def test_a_tampered_state_signs_nobody_in(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, tmp_path: Path
) -> None:
    async with sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app, browser() as http:
        back = await sign_in_at_provider(http, await authorize_url(http, app), "alice", app.redirect_uri)
        state = parse_qs(urlsplit(back).query)["state"][0]
        refused = await http.get(with_query(back, state=state[:-1] + ("A" if state[-1] != "A" else "B")))
        await assert_nobody_signed_in(app, refused, http)


async def test_a_replayed_code_signs_nobody_in(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, tmp_path: Path
) -> None:
    """The browser that signed in, and another that stole the address it came back to (with a sign-in of
    its own under way, so a state of its own), get nothing more from the code."""
    async with sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app, browser() as http:
        back = await sign_in_at_provider(http, await authorize_url(http, app), "alice", app.redirect_uri)
        assert (await http.get(back)).status_code == 303
        replayed = await http.get(back)
        assert replayed.status_code == 400 and await sessions_kept(app) == 1
        async with browser() as thief:
            own = await sign_in_at_provider(thief, await authorize_url(thief, app), "mallory", app.redirect_uri)
            code = parse_qs(urlsplit(back).query)["code"][0]
            injected = await thief.get(with_query(own, code=code))  # its own state and verifier, alice's code
            assert injected.status_code == 400 and "Signing in did not work" in injected.text
            assert (await thief.get(f"{app.url}/api/me")).status_code == 401
        assert await sessions_kept(app) == 1  # alice's, from the first use only


async def test_an_id_token_for_another_nonce_signs_nobody_in(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, tmp_path: Path
) -> None:
    """The authorization request passes through the browser: one that changed its nonce gets an ID token
    the app did not ask for (the state and PKCE verifier are right), and the app refuses it."""
    async with sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app, browser() as http:
        authorize = await authorize_url(http, app)
        assert parse_qs(urlsplit(authorize).query)["nonce"][0] != "another-nonce-0123456789"
        back = await sign_in_at_provider(
            http, with_query(authorize, nonce="another-nonce-0123456789"), "alice", app.redirect_uri
        )
        refused = await http.get(back)
        await assert_nobody_signed_in(app, refused, http)
