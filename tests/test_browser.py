"""End to end in headless Chromium (Debian's package, driven by Playwright without its own browser):
type a question, see thinking, a query, the answer with a working citation link and follow-ups."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import LiveServer
from web.app import create_app
from web.store import ConversationStore

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).parent / "artifacts"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]


DEPARTURES_SQL = """
SELECT origin, count() AS departures
FROM nycflights13.flights
GROUP BY origin
ORDER BY departures DESC
"""


def script(fake: FakeAnthropic) -> None:
    fake.script(
        Reply(
            tool_calls=[
                ("think", {"content": "I'll count 2013 departures for each NYC airport."}),
                (
                    "execute_sql",
                    {
                        "queries": [
                            {
                                "question": "Departures per origin airport",
                                "sql": DEPARTURES_SQL,
                            }
                        ]
                    },
                ),
            ]
        ),
        Reply(
            text="**Newark (EWR)** had the most departures in 2013: **120,835** flights [Q1], ahead of "
            "JFK (111,279) and LaGuardia (104,662) [Q1]."
        ),
        Reply(text='["Which airlines flew the most from EWR?", "How did departures change by month?"]'),
    )


async def test_a_question_end_to_end_in_chromium(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    ARTIFACTS.mkdir(exist_ok=True)
    async with LiveServer(create_app(make_app(), store)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(server.url)
            await page.fill("#question", "Which NYC airport had the most departures in 2013?")
            await page.keyboard.press("Enter")

            await page.locator(".step.thinking", has_text="count 2013 departures").wait_for()
            card = page.locator(".query", has=page.locator(".badge", has_text="Q1"))
            await card.locator(".query-question", has_text="Departures per origin airport").wait_for()
            await card.locator(".query-status", has_text="3 rows").wait_for()
            answer = page.locator(".bubble.answer")
            await answer.locator("strong", has_text="120,835").wait_for()  # Markdown rendered
            followups = page.locator("button.followup")
            await followups.nth(1).wait_for()
            assert await followups.all_inner_texts() == [
                "Which airlines flew the most from EWR?",
                "How did departures change by month?",
            ]

            cite = answer.locator("a.cite").first
            assert await cite.inner_text() == "[Q1]"
            await cite.click()
            await page.locator(".query.highlight").wait_for()
            assert await card.locator("details.result").get_attribute("open") is not None
            assert await card.locator("table.preview tbody tr").count() == 3
            await page.wait_for_timeout(500)  # let the highlight fade in
            await page.screenshot(path=ARTIFACTS / "chat.png", full_page=True)

            await page.set_viewport_size({"width": 390, "height": 844})
            await page.emulate_media(color_scheme="dark")
            await page.wait_for_timeout(2500)  # the highlight fades and the sidebar slides away
            await page.screenshot(path=ARTIFACTS / "chat-phone-dark.png")
            sidebar = page.locator(".conversation", has_text="Which NYC airport")
            await page.click("#toggle-sidebar")
            await sidebar.wait_for()
            assert errors == []
        finally:
            await browser.close()
    store.close()
