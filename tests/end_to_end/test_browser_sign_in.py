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
            assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (True, True, "Lax")

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
                assert (await elsewhere.get("/api/me")).status_code == 200  # the copy works while signed in
                visited: list[str] = []
                page.on("request", lambda request: visited.append(request.url))
                await page.click("#sign-out")
                await page.wait_for_timeout(3000)
                print(visited, page.url, await page.content())
                assert (await elsewhere.get("/api/me")).status_code == 401
            assert await sessions_kept(app) == 0
        finally:
            await browser.close()
