"""The web app over a real socket: SSE event order, persistence, reattach, cancellation, bad input."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from agent.db import Database
from chats.state import ChatState
from tests.conftest import HEAVY, make_settings, until_running
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.web_helpers import LiveServer, Sse, WebApps, chat, read_all, sse_events
from web.app import create_app

EVENT_NAMES = {"started", "thinking", "executing", "result", "answer", "followups", "error", "done"}


def sql(question: str, text: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": text}]})


def two_round_script() -> list[Any]:
    return [
        Reply(
            tool_calls=[
                ("think", {"content": "Count departures per airport."}),
                sql(
                    "Departures per origin",
                    "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC",
                ),
            ]
        ),
        Reply(text="EWR had the most departures: 120,835 [Q1]."),
        Reply(text='["Which carrier flew most from EWR?", "How did EWR compare by month?"]'),
    ]


@pytest.fixture
async def apps(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[WebApps]:
    apps = WebApps(make_app, tmp_path)
    yield apps
    await apps.close()


@pytest.fixture
def web(apps: WebApps) -> Callable[..., Any]:
    """Start the web app on a real socket; keyword arguments go to settings."""
    return apps.start


async def test_event_order_for_a_two_round_answer(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(*two_round_script())
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        events = await chat(client, "Which airport had the most departures?")
    names = [e.event for e in events]
    assert names[:4] == ["started", "thinking", "executing", "result"] and names[-2:] == ["followups", "done"]
    assert set(names) <= EVENT_NAMES and "answer" in names
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    first = events[0].data
    assert first["run_id"] and first["conversation_id"]
    assert all(e.data["run_id"] == first["run_id"] for e in events)
    done = events[-1].data["result"]
    assert done["answer"] == "EWR had the most departures: 120,835 [Q1]." and "transcript" not in done
    assert fake_anthropic.requests[0]["system"][2]["text"].count("web chat") == 1  # the web format


async def test_the_turn_is_stored_before_done_is_sent(web, fake_anthropic: FakeAnthropic) -> None:
    url, store = await web()
    fake_anthropic.script(*two_round_script())
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("POST", "/api/chat", json={"message": "q", "conversation_id": None}) as response,
    ):
        async for event in sse_events(response):
            if event.event == "done":
                stored = await store.get_conversation(event.data["conversation_id"])
                break
    assert stored is not None
    (turn,) = stored["turns"]
    assert turn["answer"] == "EWR had the most departures: 120,835 [Q1]."
    assert turn["followups"] == ["Which carrier flew most from EWR?", "How did EWR compare by month?"]
    assert turn["queries"][0]["label"] == "Q1" and turn["queries"][0]["rows"][0] == ["EWR", 120835]


async def test_history_comes_from_the_store_and_survives_a_restart(
    web, apps: WebApps, fake_anthropic, tmp_path: Path
) -> None:
    path = tmp_path / "kept.sqlite3"
    url, _ = await web(store_path=path)
    fake_anthropic.script(*two_round_script())
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        conversation_id = (await chat(client, "Which airport had the most departures?"))[0].data["conversation_id"]
    apps.states[-1].close()

    url, _ = await web(store_path=path)  # a new process would open the same file
    fake_anthropic.script(Reply(text="EWR again."), Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        listed = (await client.get("/api/conversations")).json()["conversations"]
        assert [c["id"] for c in listed] == [conversation_id] and listed[0]["turns"] == 1
        await chat(client, "And the busiest?", conversation_id)
    messages = fake_anthropic.requests[-2]["messages"]
    assert messages[0]["content"][0]["text"] == "Which airport had the most departures?"
    assert messages[-1]["content"][0]["text"] == "And the busiest?"


async def test_reattach_after_a_disconnect_loses_nothing(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(grace_s=5)
    hang = Hang()
    fake_anthropic.script(
        Reply(tool_calls=[sql("Airlines", "SELECT count() FROM nycflights13.airlines")]),
        lambda body: hang if not hang.release.is_set() else Reply(text="16 [Q1]."),
        Reply(text="16 airlines [Q1]."),
        Reply(text="[]"),
    )
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        seen: list[Sse] = []
        async with client.stream("POST", "/api/chat", json={"message": "airlines?"}) as response:
            async for event in sse_events(response):
                seen.append(event)
                if event.event == "result":
                    break  # the page reloads
        run_id = seen[0].data["run_id"]
        hang.release.set()  # the stalled model call ends; the model is asked again
        async with client.stream(
            "GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": str(seen[-1].id)}
        ) as response:
            rest = await read_all(response)
        async with client.stream("GET", f"/api/runs/{run_id}/events") as response:
            replay = await read_all(response)  # a finished run replays whole
    combined = seen + rest
    assert [e.id for e in combined] == list(range(1, len(combined) + 1))
    assert combined[-1].event == "done" and combined[-1].data["result"]["outcome"] == "answered"
    assert [e.id for e in replay] == [e.id for e in combined]


async def test_a_client_that_disconnects_cancels_its_run(web, fake_anthropic, db: Database) -> None:
    url, store = await web(grace_s=0.2)
    fake_anthropic.script(Reply(tool_calls=[sql("Heavy", HEAVY)]))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/api/chat", json={"message": "heavy"}) as response:
            async for event in sse_events(response):
                if event.event == "executing":
                    conversation_id = event.data["conversation_id"]
                    break
        await until_running(db)
    for _ in range(100):  # the grace period passes, the run is cancelled, its query killed
        stored = await store.get_conversation(conversation_id)
        if stored and stored["turns"]:
            break
        await asyncio.sleep(0.1)
    assert stored["turns"][0]["outcome"] == "cancelled"
    assert await db.running_queries() == []


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"message": "x" * 10_001}, 413, "message: longer than 10000 characters"),
        (b"{not json", 400, "The body must be JSON"),
        ({"conversation_id": None}, 400, "message: Field required"),
        ({"message": "   "}, 400, "message: must not be empty"),
        ({"message": "hi", "conversation_id": "nope"}, 404, "No conversation nope"),
        (b"x" * 70_000, 413, "larger than 64 KB"),
    ],
)
async def test_bad_input_gets_a_clear_json_error(web, fake_anthropic, body: Any, status: int, message: str) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        kwargs = (
            {"content": body, "headers": {"Content-Type": "application/json"}}
            if isinstance(body, bytes)
            else {"json": body}
        )
        response = await client.post("/api/chat", **kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert fake_anthropic.requests == []


async def test_too_many_requests_from_one_client(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(agent_web_rate_per_minute=2)
    fake_anthropic.always(Reply(text="ok"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for _ in range(2):
            await chat(client, "hello")
        response = await client.post("/api/chat", json={"message": "hello"})
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0
    assert "Too many questions" in response.json()["error"]


async def test_the_token_guards_every_api_route(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(agent_web_token="s3cret")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for method, path in [
            ("GET", "/api/conversations"),
            ("POST", "/api/chat"),
            ("GET", "/api/runs/x/events"),
            ("GET", "/api/conversations/x"),
            ("GET", "/api/queries/x.csv"),
            ("GET", "/api/queries/x"),
        ]:
            response = await client.request(method, path)
            assert response.status_code == 401 and "access token" in response.json()["error"], path
        ok = await client.get("/api/conversations", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert (await client.get("/")).status_code == 200  # the page itself asks for the token


async def test_conversations_can_be_listed_read_and_deleted(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(*two_round_script())
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        conversation_id = (await chat(client, "Busiest airport?"))[0].data["conversation_id"]
        listed = (await client.get("/api/conversations")).json()["conversations"]
        assert listed[0]["title"] == "Busiest airport?"
        one = (await client.get(f"/api/conversations/{conversation_id}")).json()
        assert one["turns"][0]["question"] == "Busiest airport?"
        assert (await client.delete(f"/api/conversations/{conversation_id}")).json() == {"deleted": conversation_id}
        assert (await client.get(f"/api/conversations/{conversation_id}")).status_code == 404
        assert (await client.delete(f"/api/conversations/{conversation_id}")).status_code == 404


async def test_csv_download_streams_the_full_result_with_its_own_cap(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(export_max_rows=1000)
    fake_anthropic.script(
        Reply(
            tool_calls=[
                sql("Weather", "SELECT origin, time_hour, temp FROM nycflights13.weather ORDER BY origin, time_hour")
            ]
        ),
        Reply(text="Lots of weather [Q1]."),
        Reply(text="[]"),
    )
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        run_id = (await chat(client, "weather"))[0].data["run_id"]
        response = await client.get(f"/api/queries/{run_id}-Q1.csv")
        missing = await client.get("/api/queries/nope-Q1.csv")
    rows = list(csv.reader(io.StringIO(response.text)))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert rows[0] == ["origin", "time_hour", "temp"] and len(rows) == 1001
    assert rows[1][0] == "EWR" and rows[1][1] == "2013-01-01 01:00:00"
    assert missing.status_code == 404
    assert response.headers["content-disposition"] == 'attachment; filename="weather.csv"'


@pytest.mark.parametrize(
    ("question", "disposition"),
    [
        ("Departures per origin airport", 'attachment; filename="departures-per-origin-airport.csv"'),
        (
            "Départs par aéroport d'origine",
            'attachment; filename="departs-par-aeroport-d-origine.csv"; '
            "filename*=UTF-8''d%C3%A9parts-par-a%C3%A9roport-d-origine.csv",
        ),
        ("出発便数", "attachment; filename=\"{key}.csv\"; filename*=UTF-8''%E5%87%BA%E7%99%BA%E4%BE%BF%E6%95%B0.csv"),
        ('Flights "to" ../../etc; x=1\r\n', 'attachment; filename="flights-to-etc-x-1.csv"'),
    ],
)
async def test_a_csv_is_named_from_its_querys_question(
    web, fake_anthropic: FakeAnthropic, question: str, disposition: str
) -> None:
    """`Q1.csv` says nothing in a downloads folder: the file is named after what the query answers, in
    ASCII for every client and (RFC 6266) in UTF-8 where the question is not all ASCII."""
    url, _ = await web()
    origins = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
    fake_anthropic.script(Reply(tool_calls=[sql(question, origins)]), Reply(text="Three [Q1]."), Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        run_id = (await chat(client, "departures per airport"))[0].data["run_id"]
        response = await client.get(f"/api/queries/{run_id}-Q1.csv")
    assert response.status_code == 200 and response.text.splitlines()[:2] == ["origin,n", "EWR,120835"]
    assert response.headers["content-disposition"] == disposition.format(key=f"{run_id}-Q1")


async def test_a_query_has_a_page_of_its_own(web, fake_anthropic: FakeAnthropic) -> None:
    """Slack's answers link each query to /queries/<run>-<Q>: a page shell anyone may load, which reads the
    query (its SQL, columns and preview, and the question its answer was for) with the access token."""
    url, _ = await web(agent_web_token="s3cret")
    weather = "SELECT origin, time_hour, temp FROM nycflights13.weather ORDER BY origin, time_hour"
    fake_anthropic.script(Reply(tool_calls=[sql("Weather", weather)]), Reply(text="Weather [Q1]."), Reply(text="[]"))
    token = {"Authorization": "Bearer s3cret"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30, headers=token) as client,
        httpx.AsyncClient(base_url=url, timeout=30) as anonymous,
    ):
        run_id = (await chat(client, "weather by hour"))[0].data["run_id"]
        page = await anonymous.get(f"/queries/{run_id}-Q1")
        # The page's own request would carry the browser's token to whatever its id names: only an id opens it.
        not_pages = [await client.get(f"/queries/{odd}") for odd in (f"{run_id}-Q1.csv", f"{run_id}-Q1%3F.csv", "x")]
        unauthorised = await anonymous.get(f"/api/queries/{run_id}-Q1")
        query = (await client.get(f"/api/queries/{run_id}-Q1")).json()
        missing = await client.get("/api/queries/nope-Q1")
    assert page.status_code == 200 and 'data-page="query"' in page.text and run_id not in page.text
    assert unauthorised.status_code == 401
    # A page's address answers a page, with the way back to the chat, even when mistyped.
    assert [(r.status_code, r.headers["content-type"]) for r in not_pages] == [(404, "text/html; charset=utf-8")] * 3
    assert all("This is not a link to a query" in r.text and f'href="{url}/"' in r.text for r in not_pages)
    assert query["label"] == "Q1" and query["question"] == "Weather" and query["sql"] == weather
    assert query["run_id"] == run_id and query["asked"] == "weather by hour" and query["answered_at"] > 0
    assert query["columns"] == ["origin", "time_hour", "temp"] and query["has_more"] is True
    assert query["rows"][0][:2] == ["EWR", "2013-01-01 01:00:00"] and query["error"] is None
    assert missing.status_code == 404 and "No stored query nope-Q1" in missing.json()["error"]


async def test_metrics_and_health(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await chat(client, "hello")
        metrics = (await client.get("/metrics")).text
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert 'agent_runs_total{classification="conversational",interface="web",outcome="answered"} 1.0' in metrics
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["engine_sandbox"].startswith("Landlock ABI")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "model": "ok",
        "accepting": "ok",
        "database": "ok",
        "schema": "ok",
    }


async def test_the_page_loads_its_assets(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        page = await client.get("/")
        assert page.status_code == 200 and "ClickHouse analyst" in page.text
        for asset in ["app.js", "app.css", "vendor/marked-18.2.1.umd.js", "vendor/purify-3.4.18.min.js"]:
            assert (await client.get(f"/static/{asset}")).status_code == 200, asset


async def test_without_an_api_key_the_server_starts_and_says_why(settings, db, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from agent.app import AgentApp
    from agent.metrics import Metrics

    keyless = make_settings(**{**settings.model_dump(), "anthropic_api_key": None})
    state = ChatState(tmp_path / "c.sqlite3")
    agent = AgentApp.start(keyless, db=db, metrics=Metrics(CollectorRegistry()))
    async with LiveServer(create_app(agent, state)) as server, httpx.AsyncClient(base_url=server.url) as client:
        events = await chat(client, "hello")
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    state.close()
    assert [e.event for e in events] == ["started", "error", "done"]
    assert events[1].data["message"] == "ANTHROPIC_API_KEY is not set; the agent needs it to ask the model."
    assert health.status_code == 200, "alive: the process answers, whatever its settings"
    assert ready.status_code == 503 and ready.json()["model"] == "ANTHROPIC_API_KEY is not set"


async def test_a_client_over_its_daily_budget_is_refused_politely(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(agent_daily_user_tokens=1)
    fake_anthropic.always(Reply(text="ok"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await chat(client, "hello")  # answered: the question that crosses the budget is the last
        response = await client.post("/api/chat", json={"message": "hello again"})
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0
    message = response.json()["error"]
    assert message.startswith("You have used today's budget for questions (") and "resets at 00:00 UTC" in message
