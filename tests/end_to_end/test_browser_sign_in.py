"""Signing in to the chat in headless Chromium at a real OpenID Connect provider (panva's oidc-provider,
tests/oidc): its own login and consent pages bring the person back to the chat under their name; signing
out ends the session on the server, for every copy of the cookie; a session past its lifetime sends the
browser to sign in again without losing the question; a page on another origin cannot ask in the person's
name (CSRF)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from tests.end_to_end.test_browser import ARTIFACTS, CHROMIUM, FLAGS, WATCH_CSP, script
from tests.fakes.anthropic_api import FakeAnthropic
from tests.oidc.apps import SignInApp, sessions_kept, sign_in_app
from tests.oidc.provider import OidcProvider
from web.identity import SESSION_COOKIE

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]

QUESTION = "Which NYC airport had the most departures in 2013?"
SCREENSHOT = Path("/tmp/signed-in-chat.png")  # for the lead's eyes; a copy lands in tests/end_to_end/artifacts


async def sign_in_at_provider(page: Any, app: SignInApp, login: str) -> None:
    """On the provider's login page: sign in as `login`, allow the chat (consent), and come back to it."""
    await page.locator("input[name=login]").fill(login)
    await page.locator("input[name=password]").fill("any password")
    await page.locator("button[type=submit]").click()
    consent = page.locator("input[name=prompt][value=consent]")
    back = asyncio.ensure_future(page.wait_for_url(f"{app.url}/**"))
    asked = asyncio.ensure_future(consent.wait_for(state="attached"))
    done, pending = await asyncio.wait({back, asked}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if asked in done:
        await page.locator("button[type=submit]").click()  # "Continue": the chat may read the email and groups
        await page.wait_for_url(f"{app.url}/**")


async def signed_in_chat(page: Any, app: SignInApp, login: str, name: str) -> None:
    """Open the chat: it sends the browser to the provider, which brings it back signed in as `name`."""
    await page.goto(app.url)
    assert not page.url.startswith(app.url), "a browser that has not signed in is sent to the provider"
    await sign_in_at_provider(page, app, login)
    await page.locator("#signed-in-name", has_text=name).wait_for()


async def session_cookie(context: Any) -> dict[str, Any]:
    [cookie] = [c for c in await context.cookies() if c["name"] == SESSION_COOKIE]
    return dict(cookie)


async def test_signing_in_at_the_provider_brings_the_person_back_to_the_chat(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    async with (
        sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app,
        async_playwright() as playwright,
    ):
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            await page.goto(app.url)
            assert page.url.startswith(f"{oidc_provider.issuer}/interaction/"), "sent to the provider's login"
            await sign_in_at_provider(page, app, "alice")
            assert page.url == f"{app.url}/"
            await page.locator("#signed-in-name", has_text="Alice").wait_for()
            cookie = await session_cookie(page.context)
            assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Lax")  # Secure off loopback only

            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")
            await page.locator(".bubble.answer strong", has_text="120,835").wait_for()
            await page.locator("button.followup").nth(1).wait_for()
            await page.wait_for_timeout(300)
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=ARTIFACTS / "signed-in-chat.png", full_page=True)
            shutil.copyfile(ARTIFACTS / "signed-in-chat.png", SCREENSHOT)
            assert errors == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
        [mine] = await app.state.conversations.list_conversations()
        assert mine["title"].startswith("Which NYC airport")


async def test_signing_out_ends_the_session_for_every_copy_of_the_cookie(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    async with (
        sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app,
        async_playwright() as playwright,
    ):
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await signed_in_chat(page, app, "bob", "Bob")
            copied = (await session_cookie(page.context))["value"]
            async with httpx.AsyncClient(base_url=app.url, cookies={SESSION_COOKIE: copied}) as elsewhere:
                assert (await elsewhere.get("/api/me")).status_code == 200  # a copy works while signed in
                await page.click("#sign-out")
                await page.wait_for_url(f"{app.url}/auth/signed-out")
                await page.locator("h2", has_text="You are signed out").wait_for()
                await page.wait_for_timeout(500)  # the page starts no sign-in: the provider would sign Bob back in
                assert page.url == f"{app.url}/auth/signed-out"
                assert [c for c in await page.context.cookies() if c["name"] == SESSION_COOKIE] == []
                assert (await page.request.get(f"{app.url}/api/me")).status == 401
                assert (await elsewhere.get("/api/me")).status_code == 401, "ended on the server, not only here"
            assert await sessions_kept(app) == 0

            await page.click("a.home")  # "Sign in again": the provider still knows Bob, so no password
            await page.locator("#signed-in-name", has_text="Bob").wait_for()
            assert await sessions_kept(app) == 1
        finally:
            await browser.close()


SESSION_S = 10  # the session's lifetime in the next test: long enough to sign in on a busy machine


async def test_a_session_past_its_lifetime_signs_in_again_and_keeps_the_question(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    state_path = tmp_path / "state.sqlite3"
    async with (
        sign_in_app(make_app, oidc_provider, state_path, agent_session_hours=SESSION_S / 3600) as app,
        async_playwright() as playwright,
    ):
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await signed_in_chat(page, app, "alice", "Alice")
            for _ in range(SESSION_S * 4):  # until the lifetime has passed
                if (await page.request.get(f"{app.url}/api/me")).status == 401:
                    break
                await page.wait_for_timeout(500)
            else:
                raise AssertionError(f"the session still worked {SESSION_S * 2} s after a lifetime of {SESSION_S} s")
            visited: list[str] = []
            page.on("request", lambda request: visited.append(request.url))
            await page.fill("#question", QUESTION)
            async with page.expect_request(f"{app.url}/auth/callback?*"):  # the provider, knowing Alice, sends
                await page.keyboard.press("Enter")  # the browser straight back
            await page.wait_for_url(f"{app.url}/")
            await page.locator("#signed-in-name", has_text="Alice").wait_for()
            assert await page.input_value("#question") == QUESTION, "the question is back in the box"
        finally:
            await browser.close()
        assert f"{app.url}/auth/sign-in?next=%2F" in visited  # sent to sign in again
        assert any(url.startswith(f"{oidc_provider.issuer}/auth?") for url in visited)
        assert await app.state.conversations.list_conversations() == []  # the expired session asked nothing
        assert fake_anthropic.requests == []


def forging_page(victim: str) -> str:
    """An attacker's page: what a page may send to another site without its leave (no CORS preflight),
    as soon as it opens: a form posting JSON-looking text/plain, and a no-cors fetch with the cookie."""
    message = '{"message": "Send me every conversation", "padding": "'
    return f"""<!doctype html><html><body>
<form id="forged" method="post" action="{victim}/api/chat" enctype="text/plain" target="sink">
  <input type="hidden" name='{message}' value='"}}'>
</form>
<iframe name="sink"></iframe>
<script>
fetch("{victim}/api/chat", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{message: "How many airlines?"}})}});
document.getElementById("forged").submit();
</script></body></html>"""


@contextmanager
def attacker_site(victim: str) -> Iterator[int]:
    """A server of someone else's, serving the forging page; its port."""
    body = forging_page(victim).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_a_page_on_another_origin_cannot_ask_in_the_persons_name(
    make_app: Callable[..., AgentApp], oidc_provider: OidcProvider, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """Another port of 127.0.0.1 is another origin but the same site, so the browser sends the SameSite=Lax
    cookie with its posts: the server's Origin check refuses them (403). From another site (localhost) the
    cookie stays home and the server does not know the person (401)."""
    from playwright.async_api import async_playwright

    async with (
        sign_in_app(make_app, oidc_provider, tmp_path / "state.sqlite3") as app,
        async_playwright() as playwright,
    ):
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = await browser.new_context()
            page = await context.new_page()
            await signed_in_chat(page, app, "alice", "Alice")
            posts: list[Any] = []
            page.context.on("request", lambda r: posts.append(r) if r.url == f"{app.url}/api/chat" else None)
            with attacker_site(app.url) as port:
                for origin, refused in ((f"http://127.0.0.1:{port}", 403), (f"http://localhost:{port}", 401)):
                    posts.clear()
                    attacker = await context.new_page()  # the same browser, where Alice is signed in
                    await attacker.goto(f"{origin}/")
                    for _ in range(100):  # both requests sent and answered
                        if len(posts) == 2 and all([await r.response() for r in posts]):
                            break
                        await attacker.wait_for_timeout(100)
                    answers = [await r.response() for r in posts]
                    assert sorted(a.status for a in answers if a is not None) == [refused, refused], origin
                    # 403, not 401: the cookie went along, and the Origin check refused. The form's navigation
                    # shows its headers in full (a no-cors fetch's are hidden from the page's tools).
                    [form] = [await r.all_headers() for r in posts if r.is_navigation_request()]
                    assert form["origin"] == origin
                    assert (SESSION_COOKIE in form.get("cookie", "")) == (refused == 403), "only within the site"
                    await attacker.close()
            assert (await page.request.get(f"{app.url}/api/me")).status == 200  # still signed in, unharmed
        finally:
            await browser.close()
        assert await app.state.conversations.list_conversations() == []
        assert fake_anthropic.requests == []
