"""The web chat's boundary against an outside review's attacks: a client hanging up mid-body is not a server
error, rate limits count an IPv6 client by its /64 and keep bounded memory, the page shell holds nothing
written from the schema (the examples come from the API, behind the token), /metrics needs the token, and a
HEAD on a CSV download runs no query."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from agent.app import AgentApp
from chats.rate_limits import LocalRateLimit
from chats.state import ChatState
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps, chat
from web.app import create_app
from web.boundary import client_key

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
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        before = web_5xx((await client.get("/metrics")).text, "/api/chat")
        capfd.readouterr()
        head = (
            f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        await send_and_hang_up(port, head.encode() + b'{"message": "Which carrier')
        await asyncio.sleep(0.5)
        metrics = (await client.get("/metrics")).text
        after = web_5xx(metrics, "/api/chat")
        conversations = (await client.get("/api/conversations")).json()["conversations"]
    logged = capfd.readouterr().err
    assert "Exception in ASGI application" not in logged and "ClientDisconnect" not in logged, logged[-600:]
    assert after == before, "a client that went away was counted as a server error"
    assert 'agent_web_requests_total{route="/api/chat",status="4xx"} 1.0' in metrics  # a client-side outcome
    assert conversations == [], "nothing is stored for a question that never arrived"


async def test_thumbs_budget_is_per_address_so_one_ipv6_client_has_no_limit(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """Claim 2 (thumbs are rate limited per client). The key is the peer's whole address (web/boundary.py
    client_key), so a client on IPv6, which holds a /64 (2^64 addresses) from any ISP or cloud, takes a new
    budget with each address. The same key counts questions and downloads. Served on `::` (the address the
    server refuses without AGENT_WEB_ALLOWED_HOSTS, so meant for exactly this) it is no limit at all."""
    state = ChatState(tmp_path / "state.sqlite3")
    app = create_app(make_app(agent_web_thumbs_per_minute=3), state)
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
    state.close()
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


def keyed(host: str) -> str:
    return client_key(Request({"type": "http", "client": (host, 50000), "headers": []}))


def test_a_client_is_keyed_by_its_ipv4_address_or_its_ipv6_64() -> None:
    assert keyed("203.0.113.7") == "203.0.113.7" != keyed("203.0.113.8")
    assert keyed("::ffff:203.0.113.7") == "203.0.113.7", "an IPv4-mapped IPv6 address is its IPv4 client"
    assert keyed("2001:db8:0:1::1") == keyed("2001:db8:0:1:ffff:ffff:ffff:ffff") == "2001:db8:0:1::/64"
    assert keyed("2001:db8:0:2::1") != keyed("2001:db8:0:1::1"), "the next /64 is another client"
    assert keyed("testclient") == "testclient"  # not an address (a test transport's name): as given


async def test_the_local_rate_limit_holds_a_bounded_number_of_keys_and_forgets_idle_ones() -> None:
    """A stream of fresh keys (a client walking addresses) within one window: the table stops at its cap and
    refuses new keys (429) rather than grow; once the window passes, idle keys are dropped and new ones fit."""
    now = [1000.0]
    limit = LocalRateLimit(5, clock=lambda: now[0], max_keys=100)
    waits = [await limit.take(f"10.0.{n // 256}.{n % 256}") for n in range(1_000)]
    assert sum(wait is None for wait in waits) == 100 and len(limit._seen) == 100
    assert all(wait is not None and wait > 0 for wait in waits[100:])
    assert await limit.take("10.0.0.1") is None, "a key already counted keeps its own budget"
    now[0] += 61
    assert [await limit.take(f"fresh-{n}") for n in range(50)] == [None] * 50
    assert len(limit._seen) == 50, "the idle keys were dropped"


async def test_the_page_shell_starts_no_model_call_and_the_examples_come_from_the_api(
    web, fake_anthropic: FakeAnthropic
) -> None:
    written = ["How many planes per manufacturer in nycflights13.planes?", "Which carrier flew the most flights?"]
    fake_anthropic.script(Reply(text=json.dumps(written)))
    url, _ = await web(agent_web_token=TOKEN, agent_example_questions=[])
    async with httpx.AsyncClient(base_url=url, timeout=30) as stranger:
        pages = [(await stranger.get(path)).status_code for path in ("/", f"/c/{'0' * 32}", "/", "/")]
        refused = await stranger.get("/api/examples")
        await asyncio.sleep(0.3)
        asked_by_strangers = len(fake_anthropic.requests)
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as holder:
            for _ in range(100):
                questions = (await holder.get("/api/examples")).json()["questions"]
                if "nycflights13.planes" in " ".join(questions):
                    break
                await asyncio.sleep(0.05)
    assert pages == [200, 200, 200, 200] and refused.status_code == 401
    assert asked_by_strangers == 0, "a page load without the token asked the model"
    assert questions == written
    assert len(fake_anthropic.requests) == 1


async def test_a_head_on_a_csv_download_answers_its_headers_without_running_the_query(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Starlette routes HEAD to a GET route: on the CSV download it ran the whole export to send no body."""
    made: list[AgentApp] = []
    exports: list[str] = []

    def making(**overrides: Any) -> AgentApp:
        made.append(make_app(**overrides))
        return made[-1]

    apps = WebApps(making, tmp_path)
    url, _ = await apps.start()
    export = made[0].export

    async def counted(sql: str, *, max_rows: int, **options: Any) -> Any:
        exports.append(sql)
        return await export(sql, max_rows=max_rows, **options)

    made[0].export = counted  # type: ignore[method-assign]
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Weather", "sql": "SELECT 1 AS n"}]})]),
        Reply(text="One [Q1]."),
        Reply(text='["More?"]'),
    )
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            run_id = (await chat(client, "One?"))[-1].data["run_id"]
            head = await client.head(f"/api/queries/{run_id}-Q1.csv")
            missing = await client.head("/api/queries/nope-Q1.csv")
            after_head = len(exports)
            got = await client.get(f"/api/queries/{run_id}-Q1.csv")
    finally:
        await apps.close()
    assert head.status_code == 200 and head.content == b"" and got.status_code == 200
    assert head.headers["content-disposition"] == got.headers["content-disposition"]
    assert head.headers["content-disposition"] == 'attachment; filename="weather.csv"'
    assert missing.status_code == 404
    assert after_head == 0, "a HEAD ran the export"
    assert len(exports) == 1, "a GET runs it"
