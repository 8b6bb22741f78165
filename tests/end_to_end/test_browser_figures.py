"""In headless Chromium: the answer's figures checked against its queries. An unverified figure is
marked and says why (on hover, and in a note under the answer); a verified one shows its cell on hover;
the receipt sits under the answer. A hostile figure text is only ever text."""

from __future__ import annotations

from pathlib import Path

import pytest

from chats.state import ChatState
from tests.end_to_end.test_browser import ARTIFACTS, CHROMIUM, FLAGS, WATCH_CSP
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import LiveServer
from web.app import create_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]

SQL = "SELECT origin, count() AS departures FROM nycflights13.flights GROUP BY origin ORDER BY departures DESC"
ANSWER = "**Newark** had 130,000 departures in 2013 [Q1], ahead of JFK with 111,279 [Q1]."


async def test_figures_are_marked_and_the_receipt_shown(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Departures per origin", "sql": SQL}]})]),
        Reply(text=ANSWER),
        Reply(text=ANSWER),  # the correction round changes nothing: 130,000 stays unverified
        Reply(text='["Which airlines flew the most from EWR?"]'),
    )
    state = ChatState(tmp_path / "state.sqlite3")
    app = make_app()
    async with LiveServer(create_app(app, state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            await page.goto(server.url)
            await page.fill("#question", "Which NYC airport had the most departures?")
            await page.keyboard.press("Enter")

            answer = page.locator(".bubble.answer")
            wrong = answer.locator(".figure.unverified")
            await wrong.wait_for()
            assert await wrong.inner_text() == "130,000"
            assert (await wrong.get_attribute("title") or "").startswith("Did not match: no cell of Q1 gives it")
            right = answer.locator(".figure.verified")
            assert await right.inner_text() == "111,279"
            assert await right.get_attribute("title") == "From Q1, row 2, departures: 111279"
            assert await answer.locator(".figure").count() == 2  # 2013 is a year, [Q1] a citation
            note = page.locator(".figure-note")
            assert (
                "1 figure checked against Q1 did not match:" in await note.inner_text()
            )  # checked: not "could not be"
            assert "could not be checked" not in await note.inner_text() and "130,000" in await note.inner_text()
            receipt = page.locator(".receipt")
            assert "claude-sonnet-5-5" in await receipt.inner_text()
            assert "1 query: 336.8k rows" in await receipt.inner_text() and "≈ $" in await receipt.inner_text()
            await right.hover()
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=ARTIFACTS / "figures.png", full_page=True)

            await page.reload()  # the stored conversation shows the same marks
            await page.locator(".conversation", has_text="Which NYC airport").click()
            await page.locator(".figure.unverified", has_text="130,000").wait_for()
            assert await page.locator(".receipt").count() == 1
            assert errors == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_a_spent_daily_budget_is_explained_in_the_page(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    fake_anthropic.always(Reply(text="Hello."))
    state = ChatState(tmp_path / "state.sqlite3")
    async with LiveServer(create_app(make_app(agent_daily_user_tokens=1), state)) as server, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            await page.goto(server.url)
            await page.fill("#question", "hello")
            await page.keyboard.press("Enter")
            await page.locator(".bubble.answer", has_text="Hello.").wait_for()
            await page.locator(".receipt").wait_for()
            await page.fill("#question", "hello again")
            await page.keyboard.press("Enter")
            refusal = page.locator(".error-box", has_text="You have used today's budget for questions")
            await refusal.wait_for()
            assert "resets at 00:00 UTC" in await refusal.inner_text()
        finally:
            await browser.close()
    state.close()


async def test_a_figure_that_could_not_be_checked_is_told_apart_from_one_that_did_not_match(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """42 stands on no result (the one query failed): it could not be checked, which is not the same as
    checked and matched nothing (130,000 above). The note, the mark and its title say which."""
    from playwright.async_api import async_playwright

    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Cancellations", "sql": "SELECT nope"}]})]),
        Reply(text="There were 42 cancellations that day."),
        Reply(text="[]"),
    )
    state = ChatState(tmp_path / "state.sqlite3")
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(server.url)
            await page.fill("#question", "How many cancellations were there on 1 January?")
            await page.keyboard.press("Enter")
            note = page.locator(".figure-note")
            await note.wait_for()
            assert await note.locator("p").all_inner_texts() == ["1 figure could not be checked:"]
            reason = "it cites no query, and no query of this answer returned a result"
            assert await note.locator("li").all_inner_texts() == [f"42 — {reason}"]
            unchecked = page.locator(".bubble.answer .figure.unverified.unchecked")
            assert await unchecked.inner_text() == "42"
            assert await unchecked.get_attribute("title") == f"Could not be checked: {reason}"
            # A chart's caption counts its rows in words that agree with the number.
            label = "chartLabel({kind: 'bar', rows: 1, capped: false, query_id: 'Q1', "
            label += "spec: {encoding: {x: {title: 'origin'}, y: {title: 'n'}}}})"
            assert await page.evaluate(label) == "bar chart of n by origin from Q1, 1 row"
            assert errors == []
        finally:
            await browser.close()
    state.close()
