"""In headless Chromium: the chat's addresses and the questions it asks in the page. A conversation has
an address that a reload, Back and Forward come back to; each query card links to the query's own page;
a mistyped address is a page with the way home; the 👎's reason is asked in the page (dismissing it
gives no thumb); an error offers to ask the same question again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chats.state import ChatState
from tests.end_to_end.test_browser import ARTIFACTS, CHROMIUM, FLAGS, WATCH_CSP, script
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply
from tests.web_helpers import LiveServer
from web.app import create_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]

QUESTION = "Which NYC airport had the most departures in 2013?"


async def test_a_conversation_has_an_address_and_each_query_a_page(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    state = ChatState(tmp_path / "state.sqlite3")
    store = state.conversations
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            await page.goto(server.url)
            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")
            card = page.locator(".query", has=page.locator(".badge", has_text="Q1"))
            link = card.locator("a.query-link")
            await link.wait_for()  # shown once the answer (and so the query) is stored
            [listed] = await store.list_conversations()
            conversation = f"{server.url}/c/{listed['id']}"
            assert page.url == conversation  # "/" became the new conversation's address
            key = await card.get_attribute("data-key")
            assert await link.get_attribute("href") == f"/queries/{key}"

            await page.reload()  # the address opens the conversation again
            await page.locator(".bubble.answer strong", has_text="120,835").wait_for()
            assert await page.locator(".turn").count() == 1
            assert await page.locator(".bubble.user").inner_text() == QUESTION

            await page.locator("a.query-link").click()  # the query's own page
            await page.wait_for_url(f"{server.url}/queries/{key}")
            await page.locator(".query .query-status", has_text="3 rows").wait_for()
            await page.go_back()
            await page.wait_for_url(conversation)
            await page.locator(".bubble.answer strong", has_text="120,835").wait_for()

            await page.click("#new-chat")
            await page.wait_for_url(f"{server.url}/")
            assert await page.locator(".turn").count() == 0
            await page.go_back()  # Back returns to the conversation, without a reload
            await page.wait_for_url(conversation)
            await page.locator(".bubble.answer strong", has_text="120,835").wait_for()
            assert await page.locator(".turn").count() == 1
            assert errors == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_a_mistyped_address_is_a_page_with_the_way_home(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    state = ChatState(tmp_path / "state.sqlite3")

    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 700})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            for path, says in [
                ("/c/42", "This is not a link to a conversation"),
                ("/queries/abc-Q1", "This is not a link to a query"),
                ("/conversations", "There is no page at this address."),
            ]:
                response = await page.goto(server.url + path)
                assert response is not None and response.status == 404
                assert response.headers["content-type"].startswith("text/html")
                assert await page.locator("h2").inner_text() == "Nothing here"
                assert says in await page.locator("#missing-message").inner_text()
                if path == "/c/42":
                    ARTIFACTS.mkdir(exist_ok=True)
                    await page.screenshot(path=ARTIFACTS / "missing.png")
            await page.click("a.home")
            await page.wait_for_url(f"{server.url}/")
            await page.locator("#composer").wait_for()

            # A well-formed id that names no conversation: the chat, saying so.
            await page.goto(f"{server.url}/c/{'0' * 32}")
            await page.locator("#banner", has_text=f"No conversation {'0' * 32}").wait_for()
            assert await page.locator("#composer").is_visible()
            assert errors == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_the_thumbs_down_reason_is_asked_in_the_page(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    state = ChatState(tmp_path / "state.sqlite3")
    store = state.conversations
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            native: list[str] = []
            page.on("dialog", lambda dialog: native.append(dialog.message))
            await page.goto(server.url)
            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")
            down = page.locator(".thumbs button[aria-label='Wrong answer']")
            await down.wait_for()
            dialog = page.locator("#reason-dialog")
            for dismiss in ("Escape", "Cancel"):  # dismissed: no thumb, and not a word said
                await down.click()
                await dialog.wait_for()
                assert await dialog.locator("h2").inner_text() == "What was wrong?"
                await page.fill("#reason-input", "half-typed")
                if dismiss == "Escape":
                    await page.keyboard.press("Escape")
                else:
                    await dialog.get_by_role("button", name="Cancel").click()
                await dialog.wait_for(state="hidden")
                assert await down.get_attribute("aria-pressed") == "false"
                assert await page.locator(".thumbs .thanks").count() == 0 and await page.locator("#banner").is_hidden()
            [listed] = await store.list_conversations()
            conversation = await store.get_conversation(listed["id"])
            assert conversation is not None and conversation["turns"][0]["feedback"] is None

            await down.click()
            assert await page.input_value("#reason-input") == ""  # the dismissed text is gone
            await page.fill("#reason-input", "It should count cancelled flights too")
            await dialog.get_by_role("button", name="Send 👎").click()
            await page.locator(".thumbs .thanks", has_text="Thanks, noted.").wait_for()
            assert await down.get_attribute("aria-pressed") == "true" and native == []
        finally:
            await browser.close()
    conversation = await store.get_conversation(listed["id"])
    assert conversation is not None and conversation["turns"][0]["feedback"] == "down"
    [proposal] = await state.proposals.pending()
    assert proposal.reason == "It should count cancelled flights too"
    state.close()


async def test_an_error_offers_to_ask_again(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    fake_anthropic.script(
        Failure(400, "invalid_request_error", "fake: this request is refused"),
        Reply(text="EWR, with 120,835 departures."),
        Reply(text="[]"),
    )
    state = ChatState(tmp_path / "state.sqlite3")
    store = state.conversations
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(server.url)
            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")
            failed = page.locator(".turn").first.locator(".error-box")
            await failed.wait_for()
            await page.locator("#send:not([disabled])").wait_for()  # the run is over
            await failed.get_by_role("button", name="Try again").click()
            again = page.locator(".turn").nth(1)
            await again.locator(".bubble.answer", has_text="EWR, with 120,835 departures.").wait_for()
            assert await again.locator(".bubble.user").inner_text() == QUESTION
            asked = fake_anthropic.requests[-2]["messages"][-1]["content"]
            assert any(block.get("text") == QUESTION for block in asked if isinstance(block, dict))

            await page.reload()  # the stored conversation still offers to ask the failed question again
            await page.locator(".turn").nth(1).wait_for()
            stored = page.locator(".turn").first.locator(".error-box")
            assert "got no answer" in await stored.inner_text()
            assert await stored.get_by_role("button", name="Try again").is_visible()
            assert errors == []
        finally:
            await browser.close()
    [listed] = await store.list_conversations()  # both turns in the one conversation
    conversation = await store.get_conversation(listed["id"])
    assert conversation is not None
    assert [t["outcome"] for t in conversation["turns"]] == ["error", "answered"]
    assert re.fullmatch(r"[0-9a-f]{32}", listed["id"])
    state.close()
