"""In headless Chromium: a person makes a schedule from an answer ("Repeat…", a dialog in the page that keeps
what they typed when the server refuses it), the scheduler fires it on a clock the test moves, the delivery
arrives in the inbox (the unread count in the header), is opened as an answer with its figures checked, its
receipt, its query linked to its page and its line on what changed; then the schedule is paused and deleted
on the schedules page, after an edit in the same dialog. No native dialog is ever shown."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.metrics import Metrics
from agent.prompts import prompt_library
from chats.schedule_deliveries import InboxOutlet
from chats.schedule_runs import FireMaker
from chats.schedules import INBOX, ScheduleStore
from chats.state import ChatState
from process.scheduler import Scheduler
from tests.end_to_end.test_browser import ARTIFACTS, CHROMIUM, FLAGS, WATCH_CSP, script
from tests.fakes.anthropic_api import FakeAnthropic
from tests.moved_clock import MovedClock
from tests.web_helpers import LiveServer
from web.app import create_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)"),
]

QUESTION = "Which NYC airport had the most departures in 2013?"
OWNER = "person:local"  # where nobody signs in, the one local person


def scheduler(agent: AgentApp, state: ChatState, clock: MovedClock) -> Scheduler:
    """The scheduler as a server runs it, on the test's clock, delivering to the web inbox."""
    return Scheduler(
        state.schedules,
        state.conversations,
        FireMaker(agent, prompt_library(agent.settings.agent_prompts_dir)),
        {INBOX: InboxOutlet(state.schedules)},
        Metrics(CollectorRegistry()),
        policies=lambda: agent.policies,
        clock=clock,
    )


async def test_a_schedule_made_from_an_answer_delivers_to_the_inbox_and_is_paused_and_deleted(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    state = ChatState(tmp_path / "state.sqlite3")
    state.schedules = ScheduleStore(state.file, clock=clock)
    agent = make_app()
    ARTIFACTS.mkdir(exist_ok=True)
    async with LiveServer(create_app(agent, state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900}, timezone_id="Europe/Paris")
            errors: list[str] = []
            native: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("dialog", lambda dialog: native.append(dialog.message))
            await page.add_init_script(WATCH_CSP)
            await page.goto(server.url)
            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")

            # "Repeat…" under the answer: a dialog in the page, the browser's time zone by default.
            await page.locator("button.repeat").click()
            dialog = page.locator("#schedule-dialog")
            await dialog.wait_for()
            assert await page.input_value("#schedule-zone") == "Europe/Paris"
            assert await page.input_value("#schedule-name") == QUESTION
            await page.fill("#schedule-name", "Departures by airport")
            await page.fill("#schedule-zone", "Europe/Pariss")  # a typo the server refuses
            await dialog.get_by_role("button", name="Make the schedule").click()
            await page.locator("#schedule-error", has_text="Unknown time zone 'Europe/Pariss'").wait_for()
            assert await dialog.is_visible() and await page.input_value("#schedule-name") == "Departures by airport"
            await page.screenshot(path=ARTIFACTS / "schedule-dialog.png")
            assert await state.schedules.list_for(OWNER) == []
            await page.fill("#schedule-zone", "Europe/Paris")
            await dialog.get_by_role("button", name="Make the schedule").click()
            await dialog.wait_for(state="hidden")
            note = page.locator(".scheduled-note")
            await note.wait_for()
            assert "every day at 09:00 (Europe/Paris), to your inbox, re-running its SQL" in await note.inner_text()
            [made] = await state.schedules.list_for(OWNER)
            assert made.title == "Departures by airport" and made.draft.cadence.timezone == "Europe/Paris"

            # The scheduler fires it at 09:00 in Paris (08:00 UTC in March), and again the next morning (07:00
            # UTC, after the clocks went forward): two deliveries in the inbox.
            fires = []
            for when in [(3, 28, 7, 59), (3, 28, 8, 0), (3, 29, 6, 59), (3, 29, 7, 0)]:
                clock.to(datetime(2026, *when, tzinfo=UTC))
                fires.append(await scheduler(agent, state, clock).tick())
            assert fires == [0, 1, 0, 1]
            await page.reload()
            await page.locator("#unread", has_text="2").wait_for()
            await page.locator("#inbox-link").click()
            await page.wait_for_url(f"{server.url}/inbox")
            items = page.locator("button.delivery", has_text="Departures by airport")
            await items.nth(1).wait_for()
            await items.first.click()  # the newest
            answer = page.locator(".bubble.answer")
            await answer.locator(".figure.verified", has_text="120835").first.wait_for()  # figures checked
            await page.locator(".receipt").wait_for()
            card = page.locator(".query", has=page.locator(".badge", has_text="Q1"))
            await card.locator(".query-status", has_text="3 rows").wait_for()
            assert (await card.locator("a.query-link").get_attribute("href") or "").startswith("/queries/")
            changed = page.locator(".delivery-head .changed")
            assert (await changed.inner_text()).startswith("No change since the previous delivery (2026-03-28")
            await page.locator("#unread", has_text="1").wait_for()  # opened: read
            assert await state.schedules.unread(OWNER) == 1
            assert page.url.startswith(f"{server.url}/inbox/")
            await page.screenshot(path=ARTIFACTS / "inbox.png", full_page=True)

            # The schedules page: pause, then delete (asked in the page).
            await page.goto(f"{server.url}/schedules")
            row = page.locator("li.schedule", has_text="Departures by airport")
            await row.locator(".schedule-state", has_text="Active").wait_for()
            await page.screenshot(path=ARTIFACTS / "schedules.png", full_page=True)
            await row.get_by_role("button", name="Edit").click()  # the same dialog, filled with what it is
            await dialog.locator("h2", has_text="Edit this schedule").wait_for()
            assert await page.input_value("#schedule-name") == "Departures by airport"
            assert await page.input_value("#schedule-zone") == "Europe/Paris"
            await page.fill("#schedule-time", "10:00")
            await dialog.get_by_role("button", name="Save changes").click()
            await row.locator(".schedule-summary", has_text="every day at 10:00 (Europe/Paris)").wait_for()
            await row.get_by_role("button", name="Pause").click()
            await row.locator(".schedule-state", has_text="Paused").wait_for()
            paused = await state.schedules.get(made.id, owner=OWNER)
            assert paused is not None and paused.state == "paused"
            await row.get_by_role("button", name="Delete").click()
            confirm = page.locator("#delete-dialog")
            await confirm.get_by_role("button", name="Delete").click()
            await page.locator("#schedules-empty").wait_for()
            assert await state.schedules.list_for(OWNER) == []
            assert errors == [] and native == [] and await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_an_alert_made_in_the_dialog_posts_when_its_condition_holds(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """The dialog's alert: a column of the answer's query above a threshold. Checked by the scheduler with SQL
    only (no model call), it holds (EWR's 120,835 departures are above 100,000) and posts once to the inbox."""
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    state = ChatState(tmp_path / "state.sqlite3")
    state.schedules = ScheduleStore(state.file, clock=clock)
    agent = make_app()
    async with LiveServer(create_app(agent, state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900}, timezone_id="America/New_York")
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(server.url)
            await page.fill("#question", QUESTION)
            await page.keyboard.press("Enter")
            await page.locator("button.repeat").click()
            dialog = page.locator("#schedule-dialog")
            await dialog.wait_for()
            await dialog.get_by_label("An alert: only when a condition holds").check()
            await page.locator("#schedule-alert").wait_for()
            assert await page.locator("#schedule-how").is_hidden()
            assert await page.locator("#alert-query option").all_inner_texts() == ["Q1 · Departures per origin airport"]
            assert await page.locator("#alert-column option").all_inner_texts() == ["origin", "departures"]
            await page.select_option("#alert-column", "departures")
            await page.fill("#alert-value", "")
            await dialog.get_by_role("button", name="Make the schedule").click()
            await page.locator("#schedule-error", has_text="needs a threshold").wait_for()  # kept open, as typed
            await page.fill("#alert-value", "100000")
            await dialog.get_by_role("button", name="Make the schedule").click()
            await dialog.wait_for(state="hidden")
            [made] = await state.schedules.list_for(OWNER)
            assert made.kind == "alert" and made.draft.alert is not None
            assert (made.draft.alert.kind, made.draft.alert.column, made.draft.alert.threshold) == (
                "above",
                "departures",
                100000,
            )
            assert made.draft.cadence.timezone == "America/New_York"

            asked = len(fake_anthropic.requests)
            clock.to(datetime(2026, 3, 28, 13, 0, tzinfo=UTC))  # 09:00 in New York
            assert await scheduler(agent, state, clock).tick() == 1
            assert len(fake_anthropic.requests) == asked, "checking and posting the alert called no model"
            await page.goto(f"{server.url}/schedules")
            row = page.locator("li.schedule", has_text="Alert")
            await row.locator("p", has_text="Q1, when departures is above 100,000").wait_for()
            await page.goto(f"{server.url}/inbox")
            await page.locator("#unread", has_text="1").wait_for()
            await page.locator("button.delivery").click()
            await page.locator(".bubble.answer", has_text="120835").wait_for()
            assert errors == []
        finally:
            await browser.close()
    state.close()
