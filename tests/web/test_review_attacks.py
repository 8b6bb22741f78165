"""An outside review's attacks on the web chat. Each test reproduces something that did not hold, and
fails until it is fixed; what held is in the review's report, not here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from chats.conversations import ConversationStore
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps
from web.app import create_app

TOKEN = "s3cret"


@pytest.fixture
async def web(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    apps = WebApps(make_app, tmp_path)
    yield apps.start
    await apps.close()


async def send_and_hang_up(port: int, request: bytes) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


def web_5xx(metrics_text: str, route: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith("agent_web_requests_total{") and f'route="{route}"' in line and 'status="5xx"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_client_that_hangs_up_mid_body_is_not_a_server_error(web, capfd: pytest.CaptureFixture[str]) -> None:
    """Claim 4 (disconnects). A question whose body never arrives whole (the client went away: a closed tab,
    a dropped network) raises Starlette's ClientDisconnect out of read_json_body. Nothing catches it, so the
    catch-all answers 500, uvicorn logs "Exception in ASGI application" with a traceback at ERROR, and the
    5xx counter (what alerts watch) goes up. Any token holder can fill the error log this way; the same holds
    for thumbs."""
    url, _ = await web(agent_web_token=TOKEN)
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        before = web_5xx((await client.get("/metrics")).text, "/api/chat")
        capfd.readouterr()
        head = (
            f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        await send_and_hang_up(port, head.encode() + b'{"message": "Which carrier')
        await asyncio.sleep(0.5)
        after = web_5xx((await client.get("/metrics")).text, "/api/chat")
    logged = capfd.readouterr().err
    assert "Exception in ASGI application" not in logged and "ClientDisconnect" not in logged, logged[-600:]
    assert after == before, "a client that went away was counted as a server error"


async def test_thumbs_budget_is_per_address_so_one_ipv6_client_has_no_limit(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """Claim 2 (thumbs are rate limited per client). The key is the peer's whole address (web/boundary.py
    client_key), so a client on IPv6, which holds a /64 (2^64 addresses) from any ISP or cloud, takes a new
    budget with each address. The same key counts questions and downloads. Served on `::` (the address the
    server refuses without AGENT_WEB_ALLOWED_HOSTS, so meant for exactly this) it is no limit at all."""
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    app = create_app(make_app(agent_web_thumbs_per_minute=3), store)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=("2001:db8:0:2::1", 50000)), base_url="http://localhost"
    ) as one:  # the budget works for one address: the fourth thumb within the minute is refused
        alone = [(await one.post(f"/api/runs/{'0' * 32}/feedback", json={"value": "up"})).status_code for _ in range(4)]
    assert alone == [404, 404, 404, 429]
    answers = []
    for n in range(1, 9):  # eight addresses of one /64: one machine
        transport = httpx.ASGITransport(app=app, client=(f"2001:db8:0:1::{n:x}", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            response = await client.post(f"/api/runs/{'0' * 32}/feedback", json={"value": "up"})
            answers.append(response.status_code)
    store.close()
    assert 429 in answers, f"8 thumbs from one /64 against a budget of 3 a minute: {answers}"


async def test_the_page_without_the_token_does_not_show_questions_written_from_the_schema(
    web, fake_anthropic: FakeAnthropic
) -> None:
    """Claim 3 (the token). With AGENT_WEB_TOKEN set, every API route asks for it, but `/` (and `/c/<id>`)
    render the example questions into the HTML with no token: the questions the model writes from the
    database's schema (agent/suggestions/examples.py), so anyone who can reach the port reads what the data
    holds (tables, columns, what they mean) before giving any token. The page shell should need nothing
    secret; the examples could come from the API, behind the token."""
    fake_anthropic.script(
        Reply(text='["Which carrier had the longest arr_delay in nycflights13.flights?", '
              '"How many planes per manufacturer in nycflights13.planes?", "What was the windiest day at JFK?"]')
    )  # fmt: skip
    url, _ = await web(agent_web_token=TOKEN, agent_example_questions=[])  # written by the model, as by default
    async with httpx.AsyncClient(base_url=url, timeout=30) as stranger:  # no Authorization header
        assert (await stranger.get("/api/conversations")).status_code == 401
        await stranger.get("/")  # starts writing the examples
        for _ in range(100):
            page = (await stranger.get("/")).text
            if "nycflights13" in page:
                break
            await asyncio.sleep(0.05)
        conversation_page = (await stranger.get(f"/c/{'0' * 32}")).text
    assert "nycflights13.planes" not in page, "the schema's questions are shown to a client without the token"
    assert "nycflights13.planes" not in conversation_page


async def test_metrics_need_the_token_when_one_is_set(web) -> None:
    """Claims 1 and 3. /metrics answers anyone who can reach the port, token or not, and in `agent serve`
    it counts the Slack side too: runs by interface, Slack events, answers, thumbs, model tokens, budget
    refusals. A client without the token learns when and how much the Slack workspace asks (and whether a
    Slack thumb was given), which the web API itself never tells even a token holder. /readyz already hides
    its reasons from a caller without the token; /metrics does not."""
    url, _ = await web(agent_web_token=TOKEN)
    async with httpx.AsyncClient(base_url=url, timeout=30) as stranger:
        response = await stranger.get("/metrics")
    assert response.status_code == 401, 'agent_runs_total{interface="slack"} etc. served without the token'
