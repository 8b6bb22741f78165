"""The pages a browser opens, over a real socket: the chat at a conversation's own address, a page (not
raw JSON) for an address that leads nowhere, and the favicon."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from agent.app import AgentApp
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps, chat

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture
async def web(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    apps = WebApps(make_app, tmp_path)
    yield apps.start
    await apps.close()


async def test_a_conversation_has_an_address_that_opens_the_chat_on_it(web, fake_anthropic: FakeAnthropic) -> None:
    """`/c/<id>` is the chat page, told which conversation to load (the page reads it from the API with
    the browser's token, so the shell itself needs none)."""
    url, _ = await web(agent_web_token="s3cret")
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    auth = {"Authorization": "Bearer s3cret"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30, headers=auth) as client,
        httpx.AsyncClient(base_url=url, timeout=30, headers=BROWSER) as browser,
    ):
        conversation_id = (await chat(client, "hello"))[0].data["conversation_id"]
        page = await browser.get(f"/c/{conversation_id}")
        home = await browser.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert f'data-conversation="{conversation_id}"' in page.text and 'id="composer"' in page.text
    assert 'data-conversation=""' in home.text
    assert "Hello." not in page.text  # the shell carries no conversation's content


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/c/not-an-id", "This is not a link to a conversation"),
        ("/c/" + "0" * 31, "This is not a link to a conversation"),
        ("/queries/123", "This is not a link to a query"),
        ("/querys/" + "0" * 32 + "-Q1", "There is no page at this address."),
        ("/c/" + "0" * 32 + "/extra", "There is no page at this address."),
    ],
)
async def test_a_mistyped_address_shows_a_page_with_the_way_home(web, fake_anthropic, path: str, says: str) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=BROWSER) as browser:
        response = await browser.get(path)
    assert response.status_code == 404 and response.headers["content-type"] == "text/html; charset=utf-8"
    assert says in response.text and re.search(
        r'<a class="home" href="http://[^/"]+/">Go to the chat</a>', response.text
    )
    assert 'data-page="missing"' in response.text


async def test_the_api_and_scripts_still_answer_json(web, fake_anthropic: FakeAnthropic) -> None:
    """Only a browser opening a page's address gets a page: the API answers JSON whoever asks."""
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        api = await client.get("/api/nowhere", headers=BROWSER)
        script = await client.get("/nowhere")
    for response in (api, script):
        assert response.status_code == 404 and response.headers["content-type"] == "application/json"


async def test_the_pages_have_a_favicon(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=BROWSER) as browser:
        pages = [await browser.get(path) for path in ("/", "/queries/" + "0" * 32 + "-Q1", "/nowhere")]
        icon = await browser.get("/static/favicon.svg")
    for page in pages:
        assert f'<link rel="icon" type="image/svg+xml" href="{url}/static/favicon.svg">' in page.text
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert ElementTree.fromstring(icon.content).tag == "{http://www.w3.org/2000/svg}svg"
