"""Signing in to the web chat with OpenID Connect, as the server sees it: the redirect to the provider
(code flow, PKCE S256, state and nonce, via Authlib), the signed session cookie and its flags, sessions
kept server-side (made in the store here, for speed; the real provider and Chromium are in the browser
tests), CSRF on cookie-authenticated changes, expiry and sign-out ending a session wherever its cookie
went, pages sending a browser to sign in, and the shared bearer token still serving machine clients."""

from __future__ import annotations

import hashlib
import json
import threading
from base64 import b64decode, urlsafe_b64encode
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from itsdangerous import TimestampSigner

from agent.app import AgentApp
from agent.config import ConfigError, load_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web.people_helpers import SESSION_SECRET, Served, email_person, session_cookie
from web.identity import SECURE_SESSION_COOKIE, SESSION_COOKIE
from web.oidc import OidcSignIn, merged_claims

TOKEN = "machine-token-for-scripts"
ALICE, BOB = email_person("alice@example.com", "Alice"), email_person("bob@example.com", "Bob")


@pytest.fixture(scope="module")
def discovery() -> Iterator[str]:
    """An issuer's published metadata, and nothing else: what the sign-in redirect reads. (The whole provider,
    signing real ID tokens, is the browser tests'.)"""

    class Metadata(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
            body = json.dumps({
                "issuer": issuer, "authorization_endpoint": f"{issuer}/auth", "token_endpoint": f"{issuer}/token",
                "jwks_uri": f"{issuer}/jwks", "userinfo_endpoint": f"{issuer}/me",
                "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"],
            }).encode()  # fmt: skip
            self.send_response(200 if self.path == "/.well-known/openid-configuration" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def oidc(issuer: str = "http://127.0.0.1:9", **more: Any) -> dict[str, Any]:
    return {
        "agent_oidc_issuer": issuer,
        "agent_oidc_client_id": "analyst",
        "agent_oidc_client_secret": "client-secret",
        "agent_session_secret": SESSION_SECRET,
        "agent_session_hours": 8,
        **more,
    }


@pytest.fixture
async def site(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[Served]:
    """A chat where people sign in with OIDC, and machine clients hold the shared token."""
    async with Served(make_app, tmp_path, **oidc(agent_web_token=TOKEN)) as served:
        yield served


async def test_sign_in_sends_the_browser_to_the_provider_with_pkce_state_and_nonce(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str
) -> None:
    served = oidc(discovery, agent_web_allowed_hosts="analyst.example,127.0.0.1")  # other machines reach it
    async with Served(make_app, tmp_path, **served) as site:
        sent = await site.client().get("/auth/sign-in", params={"next": "/c/" + "a" * 32})
        offsite = await site.client().get("/auth/sign-in", params={"next": "//evil.example/x"})
        forged = await site.client(cookie=_cookie_of(sent)).get("/auth/callback?code=stolen&state=guessed")
        sessions = await site.state.file.run(lambda c: c.execute("SELECT count(*) FROM web_sessions").fetchone()[0])
    assert sent.status_code == 302
    where = urlsplit(sent.headers["location"])
    asked = {name: values[0] for name, values in parse_qs(where.query).items()}
    assert f"{where.scheme}://{where.netloc}{where.path}" == f"{discovery}/auth"
    assert asked["response_type"] == "code" and asked["client_id"] == "analyst"
    assert asked["redirect_uri"] == f"{site.url}/auth/callback"
    assert asked["scope"] == "openid email profile" and asked["code_challenge_method"] == "S256"
    assert len(asked["code_challenge"]) == 43 and len(asked["state"]) >= 20 and len(asked["nonce"]) >= 20
    cookie = sent.headers["set-cookie"]
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert cookie.startswith(f"{SECURE_SESSION_COOKIE}="), "served to other machines: Secure, named __Host-"
    assert {"httponly", "secure", "samesite=lax", f"max-age={8 * 3600}", "path=/"} <= flags
    kept = _session_of(sent)
    assert kept["next"] == "/c/" + "a" * 32 and f"_state_oidc_{asked['state']}" in kept
    verifier = kept[f"_state_oidc_{asked['state']}"]["data"]["code_verifier"]
    s256 = urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert s256 == asked["code_challenge"], "the cookie keeps the verifier of the challenge sent (PKCE, S256)"
    assert _session_of(offsite)["next"] == "/", "a sign-in never returns off this site"
    assert forged.status_code == 400 and "Signing in did not work" in forged.text and sessions == 0


async def test_the_cookie_is_secure_unless_the_server_answers_only_this_machine(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str
) -> None:
    """Served to loopback names alone, the chat is used over plain http://localhost, where a Secure cookie
    would not be sent back by every browser; anywhere else the cookie is Secure, and named `__Host-` (Path=/,
    no Domain) so that no sibling subdomain can plant one. A scheme is case-blind: HTTPS:// is https://."""
    async with Served(make_app, tmp_path / "local", **oidc(discovery)) as local:
        plain = await local.client().get("/auth/sign-in")
    public = oidc(discovery, agent_web_url="HTTPS://analyst.example")
    async with Served(make_app, tmp_path / "public", **public) as behind_tls:
        secure = await behind_tls.client().get("/auth/sign-in")
        cookie = await behind_tls.session(ALICE)
        me = await behind_tls.client(cookie=cookie).get("/api/me")  # sent back under the __Host- name
    assert "secure" not in _flags(plain) and {"httponly", "samesite=lax"} <= _flags(plain)
    assert plain.headers["set-cookie"].startswith(f"{SESSION_COOKIE}=")
    assert "secure" in _flags(secure) and "path=/" in _flags(secure)
    assert not any(flag.startswith("domain=") for flag in _flags(secure)), "a __Host- cookie names no Domain"
    assert secure.headers["set-cookie"].startswith(f"{SECURE_SESSION_COOKIE}=")
    assert me.status_code == 200 and me.json()["email"] == ALICE.email, "the server reads its cookie by that name"
    assert parse_qs(urlsplit(secure.headers["location"]).query)["redirect_uri"] == [
        "https://analyst.example/auth/callback"
    ], "the provider sends people back to the public address"


def _flags(response: Any) -> set[str]:
    return {part.strip().lower() for part in response.headers["set-cookie"].split(";")[1:]}


def _cookie_of(response: Any) -> str:
    return str(response.headers["set-cookie"].split(";")[0].split("=", 1)[1])


def _session_of(response: Any) -> dict[str, Any]:
    data = TimestampSigner(SESSION_SECRET).unsign(_cookie_of(response).encode())
    found: dict[str, Any] = json.loads(b64decode(data))
    return found


async def test_a_signed_in_person_is_known_and_others_are_sent_to_sign_in(site: Served) -> None:
    cookie = await site.session(ALICE)
    me = await site.client(cookie=cookie).get("/api/me")
    assert me.status_code == 200
    assert me.json() == {
        "id": "email:alice@example.com", "name": "Alice", "email": "alice@example.com", "groups": [],
        "signed_in_with": "session", "policy": None,
    }  # fmt: skip
    anonymous = site.client()
    api = await anonymous.get("/api/conversations")
    page = await anonymous.get("/c/" + "b" * 32, headers={"Accept": "text/html"})
    home = await site.client(cookie=cookie).get("/", headers={"Accept": "text/html"})
    assert api.status_code == 401 and api.json() == {"error": "Sign in first: open /auth/sign-in."}
    assert page.status_code == 303 and page.headers["location"] == "/auth/sign-in?next=%2Fc%2F" + "b" * 32
    assert home.status_code == 200 and 'data-sign-in="oidc"' in home.text


async def test_without_a_token_or_sign_in_a_stale_bearer_is_ignored(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """A local chat with neither token nor sign-in serves its one person, whatever token a browser still keeps."""
    async with Served(make_app, tmp_path) as local:
        me = await local.client(Authorization="Bearer left-from-another-server").get("/api/me")
    assert me.status_code == 200 and me.json()["id"] == "local" and me.json()["signed_in_with"] == "local"


async def test_a_cookie_not_signed_with_the_servers_key_is_nobody(site: Served) -> None:
    session_id = await site.state.sessions.start(ALICE, 3600)
    forged = session_cookie(session_id, secret="another-key-another-key-another-key")
    assert (await site.client(cookie=forged).get("/api/me")).status_code == 401


async def test_an_expired_session_is_over(site: Served) -> None:
    cookie = await site.session(ALICE, lifetime_s=0)
    api = await site.client(cookie=cookie).get("/api/conversations")
    page = await site.client(cookie=cookie).get("/", headers={"Accept": "text/html"})
    assert api.status_code == 401
    assert page.status_code == 303 and page.headers["location"] == "/auth/sign-in?next=%2F"


async def test_signing_out_ends_the_session_wherever_its_cookie_went(site: Served) -> None:
    cookie = await site.session(ALICE)
    browser, copied = site.client(cookie=cookie), site.client(cookie=cookie)
    out = await browser.post("/auth/sign-out", json={})
    assert out.status_code == 200 and out.json() == {"signed_out": True}
    cleared = out.headers["set-cookie"]
    assert cleared.startswith(f"{SESSION_COOKIE}=null;") and "expires=Thu, 01 Jan 1970" in cleared
    assert (await copied.get("/api/me")).status_code == 401, "the server ended it, not only the browser's cookie"


async def test_changes_under_the_cookie_must_come_from_our_own_pages(
    site: Served, fake_anthropic: FakeAnthropic
) -> None:
    cookie = await site.session(ALICE)
    body = {"message": "How many airlines?"}
    cross = await site.client(cookie=cookie, origin=False, Origin="https://evil.example").post("/api/chat", json=body)
    no_origin = await site.client(cookie=cookie, origin=False).post("/api/chat", json=body)
    null = await site.client(cookie=cookie, origin=False, Origin="null").post("/api/chat", json=body)
    form = await site.client(cookie=cookie).post("/api/chat", data={"message": "How many airlines?"})
    sign_out_cross = await site.client(cookie=cookie, origin=False, Origin="https://evil.example").post(
        "/auth/sign-out", json={}
    )
    sign_out_form = await site.client(cookie=cookie).post("/auth/sign-out", data={"x": "1"})
    assert [r.status_code for r in (cross, no_origin, null, form, sign_out_cross, sign_out_form)] == [
        403, 403, 403, 415, 403, 415,
    ]  # fmt: skip
    assert (await site.client(cookie=cookie).get("/api/me")).status_code == 200, "the forged sign-out did nothing"
    fake_anthropic.script(Reply(text="16 airlines."), Reply(text="[]"))
    referred = site.client(cookie=cookie, origin=False, Referer=f"{site.url}/c/{'c' * 32}")
    asked = await referred.post("/api/chat", json=body)
    assert asked.status_code == 200, "a browser that sends no Origin is known by its Referer"
    conversation_id = (await referred.get("/api/conversations")).json()["conversations"][0]["id"]
    delete_cross = await site.client(cookie=cookie, origin=False, Origin="https://evil.example").delete(
        f"/api/conversations/{conversation_id}"
    )
    assert delete_cross.status_code == 403
    assert (await site.client(cookie=cookie).delete(f"/api/conversations/{conversation_id}")).status_code == 200


async def test_the_shared_token_serves_machine_clients_apart_from_people(
    site: Served, fake_anthropic: FakeAnthropic
) -> None:
    """A script with the token needs no Origin (a bearer is never sent by a browser on its own) and is one
    more owner: it sees its own conversations, and a person does not see them."""
    machine = site.client(origin=False, Authorization=f"Bearer {TOKEN}")
    fake_anthropic.script(Reply(text="16 airlines."), Reply(text="[]"))
    asked = await machine.post("/api/chat", json={"message": "How many airlines?"})
    assert asked.status_code == 200
    me = (await machine.get("/api/me")).json()
    assert (me["id"], me["signed_in_with"]) == ("token", "token")
    [theirs] = (await machine.get("/api/conversations")).json()["conversations"]
    alice = site.client(cookie=await site.session(ALICE))
    assert (await alice.get("/api/conversations")).json() == {"conversations": []}
    assert (await alice.get(f"/api/conversations/{theirs['id']}")).status_code == 404
    wrong = site.client(cookie=await site.session(BOB), Authorization="Bearer not-the-token")
    assert (await wrong.get("/api/me")).status_code == 401, "a wrong token is refused, not passed to the cookie"


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"agent_oidc_issuer": "https://id.example", "agent_session_secret": SESSION_SECRET}, "AGENT_OIDC_CLIENT_ID"),
        ({**oidc(), "agent_session_secret": "short"}, "AGENT_SESSION_SECRET"),
        ({**oidc(), "agent_session_secret": ""}, "AGENT_SESSION_SECRET"),
        ({"agent_web_identity_header": "X-Forwarded-Email"}, "AGENT_WEB_IDENTITY_PROXIES"),
        ({"agent_web_identity_header": "X-Email", "agent_web_identity_proxies": "*"}, "AGENT_WEB_IDENTITY_PROXIES"),
    ],
)
def test_sign_in_settings_are_whole_or_refused(settings: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        load_settings(**settings)


@pytest.mark.parametrize("everyone", ["0.0.0.0/1", "0.0.0.0/7", "::/6", "2000::/3", "::ffff:0:0/96", "::fffe:0:0/95"])
def test_identity_proxies_wider_than_a_private_network_are_refused(everyone: str) -> None:
    """Half of the internet, or every IPv4 client as a dual-stack socket writes it (::ffff:a.b.c.d), is `*`."""
    with pytest.raises(ConfigError, match="AGENT_WEB_IDENTITY_PROXIES"):
        load_settings(agent_web_identity_header="X-Email", agent_web_identity_proxies=f"127.0.0.1,{everyone}")


@pytest.mark.parametrize(
    "proxies", ["10.0.0.0/8", "fd00::/8", "127.0.0.1,::1", "192.168.0.0/16", "::ffff:10.0.0.0/104"]
)
def test_identity_proxies_on_a_private_network_are_taken(proxies: str) -> None:
    settings = load_settings(agent_web_identity_header="X-Email", agent_web_identity_proxies=proxies)
    assert settings.agent_web_identity_proxies == proxies.split(",")


def test_a_public_address_is_kept_with_its_scheme_in_lower_case() -> None:
    assert load_settings(agent_web_url=" HTTPS://analyst.example ").agent_web_url == "https://analyst.example"


ID_TOKEN = {"sub": "s-1", "iss": "https://id.example"}


@pytest.mark.parametrize(
    ("id_token", "userinfo", "email"),
    [
        # the ID token's address, unverified there; userinfo vouches for another: nobody's address is verified
        ({"email": "mallory@example.com"}, {"email": "alice@example.com", "email_verified": True}, None),
        ({"email": "alice@example.com", "email_verified": False}, {"email_verified": True}, None),
        # the ID token's flag without its address never vouches for userinfo's address
        ({"email_verified": True}, {"email": "mallory@example.com"}, None),
        ({"email": "alice@example.com", "email_verified": True}, {"email": "mallory@example.com"}, "alice@example.com"),
        ({}, {"email": "alice@example.com", "email_verified": True}, "alice@example.com"),  # oidc-provider's way
        ({}, {"sub": "s-2", "email": "mallory@example.com", "email_verified": True}, None),  # another subject's
    ],
)
def test_an_email_and_its_verification_come_from_one_answer(
    id_token: dict[str, Any], userinfo: dict[str, Any], email: str | None
) -> None:
    """The ID token's email and `email_verified`, or userinfo's pair when the ID token names no email, and
    userinfo only for the ID token's own subject (OIDC Core 5.3.4)."""
    merged = merged_claims(ID_TOKEN | id_token, {"sub": ID_TOKEN["sub"]} | userinfo)
    person = OidcSignIn(load_settings(**oidc())).person_of(merged)
    assert person.email == email
    assert person.id == (f"email:{email}" if email else "oidc:http://127.0.0.1:9#s-1")
