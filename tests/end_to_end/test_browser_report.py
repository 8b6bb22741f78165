"""In headless Chromium: a report asked with the chat's Report choice. Its steps show as they run, the turn
links to the report's own page, and that page shows the sections, the chart, the figure that did not check
out marked (why on hover), citations that open their query's page, and the downloads. A partial report has a
Resume button that finishes it in the page. The report page's screenshot is kept in docs/screenshots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.db import Database
from chats.state import ChatState
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.end_to_end.test_browser import ARTIFACTS, CHROMIUM, FLAGS, WATCH_CSP
from tests.fakes.anthropic_api import FakeAnthropic
from tests.report_helpers import partial_then_resumed_script, report_script
from tests.web_helpers import LiveServer
from web.app import create_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]
SCREENSHOTS = Path(__file__).parents[2] / "docs" / "screenshots"


async def test_a_report_from_the_chat_opens_on_its_own_page(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    fake_anthropic.script(*report_script())
    state = ChatState(tmp_path / "state.sqlite3")
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            await page.goto(server.url)
            await page.fill("#question", "Why did delays rise in July?")
            await page.click("#send-report")

            link = page.locator(".report-link a", has_text="Open the report")
            await link.wait_for(timeout=60_000)
            assert await page.locator(".turn .report-step.done").count() == 3, "the live plan's three steps, done"
            await page.reload()  # the conversation reopened from the store: its report turn keeps the link
            await page.locator(".turn").first.wait_for()
            await link.wait_for(timeout=10_000)
            await link.click()
            await page.wait_for_url(re.compile(r"/reports/[0-9a-f]{32}$"))
            report = page.locator("#report")
            await report.locator(".report-section.findings").wait_for()
            assert await page.locator("#report-outcome").inner_text() == "Report"
            assert await page.locator("#report-question").inner_text() == "Why did delays rise in July?"
            sections = await report.locator(".report-section h3").all_inner_texts()
            assert sections == [
                "Answer", "Findings", "How this was found", "Queries", "Caveats and what remains uncertain",
                "What could not be answered",
            ]  # fmt: skip
            assert await report.locator(".finding").count() == 3
            wrong = report.locator(".figure.unverified")
            assert await wrong.all_inner_texts() == ["9.2"]
            assert (await wrong.get_attribute("title") or "").startswith("Did not match:")
            assert "9.2" in await page.locator(".figure-note").inner_text()
            await report.locator(".finding .chart svg").first.wait_for()
            assert "claude-sonnet-5-5" in await page.locator(".receipt").inner_text()
            assert await page.locator("#resume").count() == 0, "a complete report has nothing to resume"
            ARTIFACTS.mkdir(exist_ok=True)
            SCREENSHOTS.mkdir(exist_ok=True)
            await page.set_viewport_size({"width": 1100, "height": 1700})  # the page scrolls inside its main area
            await wrong.hover()
            await page.screenshot(path=SCREENSHOTS / "report.png", full_page=True)

            async with page.expect_download() as pdf:
                await page.click("button.report-download:text('Download PDF')")
            assert (await pdf.value).suggested_filename == "why-did-delays-rise-in-july.pdf"
            async with page.expect_download() as markdown:
                await page.click("button.report-download:text('Download Markdown')")
            assert "21.7" in Path(await (await markdown.value).path()).read_text()

            cite = report.locator(".finding a.cite", has_text="[Q2]")
            await cite.click()
            await page.wait_for_url(re.compile(r"/queries/[0-9a-f]{32}-Q2$"))
            await page.locator("#query .query-question", has_text="July's delays per origin airport").wait_for()
            assert errors == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_a_partial_report_resumes_from_its_page(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path, db: Database
) -> None:
    """Two queries allowed, three asked: the report stops partial, saying what remains. Resume on its page
    runs the third and finishes it; the first two are not run again."""
    from playwright.async_api import async_playwright

    counting = CountingDatabase(db)
    first, resumed = partial_then_resumed_script()
    fake_anthropic.script(*first)
    state = ChatState(tmp_path / "state.sqlite3")
    app = make_app(database=counting, agent_report_max_queries=2)
    async with LiveServer(create_app(app, state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(server.url)
            await page.fill("#question", "Why did delays rise in July?")
            await page.click("#send-report")
            link = page.locator(".report-link a", has_text="Open the report")
            await link.wait_for(timeout=60_000)
            await link.click()
            resume = page.locator("#resume")
            await resume.wait_for()
            assert (await page.locator("#report-outcome").inner_text()).startswith("Partial report")
            assert "precipitation in June and July" in await page.locator(".report-section.remaining").inner_text()
            assert len(counting.executed) == 2
            fake_anthropic.reset()
            fake_anthropic.script(*resumed)
            await resume.click()
            await page.locator("#report-outcome.complete").wait_for(timeout=60_000)
            assert await page.locator("#report-outcome").inner_text() == "Report"
            assert await page.locator(".finding").count() == 2 and await page.locator("#resume").count() == 0
            assert len(counting.executed) == 3 and "nycflights13.weather" in counting.executed[2], "Q1, Q2 not again"
            assert errors == []
        finally:
            await browser.close()
    state.close()
