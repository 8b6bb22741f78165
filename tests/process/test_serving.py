"""Serving in production: JSON logs, /healthz and /readyz, draining on shutdown, and the shared log that
lets a worker follow a run another worker owns. tests/end_to_end/test_serve_process.py runs the real `agent serve`
process (SIGTERM, several workers)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agent.app import AgentApp
from agent.db import Database
from agent.db.scope import Scope
from agent.logs import REDACTED, _Stderr, configure_logging
from chats.people import LOCAL, person_owner
from chats.runs import RunRegistry, ShuttingDown
from chats.state import STATE_FILE, ChatState
from process.service import Service, _uvicorn_config
from tests.conftest import make_settings
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.clients import make_llm
from tests.slack_helpers import carriers_script
from tests.web_helpers import LiveServer, bound_socket, sse_events
from web.app import create_app

QUESTION = "Which carrier flew the most flights in 2013?"


# --- structured logs ---


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """Configure JSON logging with the given settings; the returned function reads the lines so far,
    each of which must be one JSON object."""
    root = logging.getLogger()
    level = root.level

    def configure(**values: Any) -> Callable[[], list[dict[str, Any]]]:
        configure_logging(make_settings(agent_log_format="json", **values))

        def lines() -> list[dict[str, Any]]:
            text = capsys.readouterr().err
            return [json.loads(line) for line in text.splitlines() if line.strip()]

        return lines

    yield configure  # type: ignore[misc]
    for handler in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(handler)
    root.setLevel(level)


async def _answer_once(make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path) -> str:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    fake_anthropic.script(*carriers_script())
    conversation = await store.create_conversation(QUESTION)
    handle = runs.start(conversation, QUESTION, [], platform="web", interface="web")
    assert handle.task is not None
    await handle.task
    state.close()
    return handle.run_id


async def test_json_logs_give_each_run_one_line_with_its_id_interface_outcome_and_timings(
    json_logs: Any, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    lines = json_logs()
    run_id = await _answer_once(make_app, fake_anthropic, tmp_path)
    logged = lines()
    finished = [line for line in logged if line.get("outcome")]
    assert len(finished) == 1
    line = finished[0]
    assert line["run_id"] == run_id and line["interface"] == "web" and line["outcome"] == "answered"
    assert line["level"] == "info" and line["logger"] == "agent.pipeline.state" and line["pid"] == os.getpid()
    assert line["rounds"] == 2 and line["sql_queries"] == 1 and line["llm_calls"] == 2
    assert line["total_ms"] >= line["first_event_ms"] >= 0 and line["llm_ms"] >= 0 and line["sql_ms"] >= 0
    assert all(QUESTION not in json.dumps(entry) for entry in logged), "a question is logged only at DEBUG"


async def test_at_debug_the_question_is_logged_with_its_run(
    json_logs: Any, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    lines = json_logs(log_level="DEBUG")
    run_id = await _answer_once(make_app, fake_anthropic, tmp_path)
    asked = [line for line in lines() if line.get("question") == QUESTION]
    assert [(line["run_id"], line["level"]) for line in asked] == [(run_id, "debug")]


def test_no_secret_reaches_a_log_line_whatever_logs_it(json_logs: Any) -> None:
    secrets = {
        "anthropic_api_key": "sk-ant-api03-secret-key-value",
        "slack_bot_token": "xoxb-1234-secret-bot-token",
        "slack_signing_secret": 'signing"secret\\with-quotes',
        "agent_web_token": "web-token-0123456789",
    }
    lines = json_logs(clickhouse_url="http://agent:p%40ss-w0rd@clickhouse:8123/db", **secrets)
    log = logging.getLogger("tests.serving")
    for value in [*secrets.values(), "p%40ss-w0rd", "p@ss-w0rd"]:
        log.warning("configured with %s", value, extra={"detail": {"value": value}})
        try:
            raise RuntimeError(f"a failure that quotes {value}")
        except RuntimeError:
            log.exception("failed")
    logged = lines()
    assert len(logged) == 12
    text = json.dumps(logged)
    for value in [*secrets.values(), "p%40ss-w0rd", "p@ss-w0rd", json.dumps(secrets["slack_signing_secret"])[1:-1]]:
        assert value not in text
    assert logged[0]["message"] == f"configured with {REDACTED}" and logged[0]["detail"] == {"value": REDACTED}
    assert "RuntimeError: a failure that quotes [redacted]" in logged[1]["exception"]


def test_the_sign_in_secrets_are_redacted(json_logs: Any) -> None:
    secrets = {"agent_oidc_client_secret": "oidc-client-secret-value", "agent_session_secret": "s" * 40}
    lines = json_logs(agent_oidc_issuer="https://id.example", agent_oidc_client_id="analyst", **secrets)
    for value in secrets.values():
        logging.getLogger("tests.serving").warning("configured with %s", value)
    assert [line["message"] for line in lines()] == [f"configured with {REDACTED}"] * 2


def test_secrets_are_redacted_as_a_url_or_a_basic_auth_header_carries_them(json_logs: Any) -> None:
    import base64

    lines = json_logs(agent_web_token="tok/en+with=chars", clickhouse_url="http://agent:pw%2Fx@h:8123/db")
    basic = base64.b64encode(b"agent:pw/x").decode()
    logging.getLogger("tests.serving").warning(
        "%s", f"GET /x?token=tok%2Fen%2Bwith%3Dchars Authorization: Basic {basic}"
    )
    assert lines()[0]["message"] == f"GET /x?token={REDACTED} Authorization: Basic {REDACTED}"


async def test_uvicorns_access_lines_keep_no_sign_in_query_string(json_logs: Any) -> None:
    """The callback's query string is the provider's one-time code and state; other paths keep theirs."""
    lines = json_logs()  # INFO, as `agent serve` logs; uvicorn's config as process/service.py builds it

    async def missing(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    settings = make_settings(agent_log_format="json")
    bound = bound_socket()
    server = uvicorn.Server(_uvicorn_config(settings, missing, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[bound]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bound.getsockname()[1]}", timeout=30) as client:
            await client.get("/auth/callback", params={"code": "the-code-0123", "state": "the-state-4567"})
            await client.get("/api/conversations", params={"before": "2013-01-01"})
    finally:
        server.should_exit = True
        await task
        bound.close()
    access = [line["message"] for line in lines() if line["logger"] == "uvicorn.access"]
    assert [message.split('"')[1] for message in access] == [
        f"GET /auth/callback?{REDACTED} HTTP/1.1",
        "GET /api/conversations?before=2013-01-01 HTTP/1.1",
    ]


def test_text_logs_are_redacted_too(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    level = root.level
    try:
        configure_logging(make_settings(anthropic_api_key="sk-ant-api03-secret-key-value"))
        logging.getLogger("tests.serving").warning("key sk-ant-api03-secret-key-value")
    finally:
        for handler in [h for h in root.handlers if isinstance(h, _Stderr)]:
            root.removeHandler(handler)
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "WARNING tests.serving: key [redacted]" in err and "sk-ant" not in err


# --- health and readiness ---


async def _probe(app: Any) -> tuple[httpx.Response, httpx.Response]:
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        return await client.get("/healthz"), await client.get("/readyz")


async def test_ready_says_which_check_fails_while_alive_stays_ok(
    make_app: Callable[..., AgentApp], db: Database, fake_anthropic: FakeAnthropic, tmp_path: Path, metrics: Any
) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    empty = Database(db.backend, scope=Scope.of(["no_such_database"]), functions=db.functions)
    nothing = AgentApp.start(make_app().settings, llm=make_llm(fake_anthropic), db=empty, metrics=metrics)
    health, ready = await _probe(create_app(nothing, state))
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ready.status_code == 503
    assert ready.json()["status"] == "not ready" and ready.json()["database"] == "ok"
    assert ready.json()["schema"].startswith("no tables in scope")

    draining = RunRegistry(make_app().runner, store)
    await draining.drain(0)
    _, ready = await _probe(create_app(make_app(), state, runs=draining))
    assert ready.status_code == 503 and ready.json()["accepting"] == "shutting down"
    await nothing.llm.close()
    state.close()


async def test_ready_fails_while_the_database_is_down(fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    """A ClickHouse server that stopped answering: not ready, saying why; still alive."""
    from agent.db.server import ServerBackend

    settings = make_settings(
        clickhouse_url="http://agent:pw@127.0.0.1:9/nycflights13",  # the discard port: nothing listens
        anthropic_api_key="test-key",
        anthropic_base_url=fake_anthropic.base_url,
        agent_data_dir=tmp_path,
    )
    agent = AgentApp.start(settings)
    assert isinstance(agent.db.backend, ServerBackend)
    state = ChatState(tmp_path / "c.sqlite3")
    try:
        health, ready = await _probe(create_app(agent, state))
    finally:
        await agent.close()
        state.close()
    assert health.status_code == 200
    assert ready.status_code == 503 and ready.json()["database"] != "ok"
    assert "ClickHouse" in ready.json()["database"] and ready.json()["schema"] == "waiting for the database"


async def test_without_the_web_token_ready_says_which_check_fails_not_why(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    await runs.drain(0)
    app = create_app(make_app(agent_web_token="web-token-0123456789"), state, runs=runs)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        anonymous = await client.get("/readyz")
        operator = await client.get("/readyz", headers={"Authorization": "Bearer web-token-0123456789"})
    state.close()
    assert anonymous.status_code == operator.status_code == 503
    assert anonymous.json() == {**operator.json(), "accepting": "failing"}
    assert operator.json()["accepting"] == "shutting down"


# --- draining ---


def _gated(script: list[Any]) -> tuple[threading.Event, list[Any]]:
    """The script, with its first reply held back until the event is set (a slow model round)."""
    gate = threading.Event()
    first = script[0]

    def held(body: dict[str, Any]) -> Any:
        gate.wait(30)
        return first

    return gate, [held, *script[1:]]


async def test_drain_lets_a_running_answer_finish_and_stores_it(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    gate, script = _gated(carriers_script())
    fake_anthropic.script(*script)
    conversation = await store.create_conversation(QUESTION)
    handle = runs.start(conversation, QUESTION, [], platform="web", interface="web")
    await asyncio.sleep(0.3)
    draining = asyncio.create_task(runs.drain(30))
    await asyncio.sleep(0.2)
    with pytest.raises(ShuttingDown):
        runs.start(conversation, "another", [], platform="web", interface="web")
    assert not draining.done(), "drain waits for the running answer"
    gate.set()
    assert await asyncio.wait_for(draining, 30) == (1, 0)
    stored = await store.get_conversation(conversation)
    state.close()
    assert stored is not None and [t["outcome"] for t in stored["turns"]] == ["answered"]
    assert stored["turns"][0]["run_id"] == handle.run_id


async def test_drain_cancels_what_outlasts_the_grace_and_stores_it_as_cancelled(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    hang = Hang()
    fake_anthropic.script(hang)
    conversation = await store.create_conversation(QUESTION)
    runs.start(conversation, QUESTION, [], platform="web", interface="web")
    await asyncio.sleep(0.3)
    assert await asyncio.wait_for(runs.drain(0.5), 10) == (0, 1)
    hang.release.set()
    stored = await store.get_conversation(conversation)
    state.close()
    assert stored is not None and [t["outcome"] for t in stored["turns"]] == ["cancelled"]


async def test_the_web_refuses_new_questions_while_draining(make_app: Callable[..., AgentApp], tmp_path: Path) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    await runs.drain(0)
    app = create_app(make_app(), state, runs=runs)
    async with LiveServer(app) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        refused = await client.post("/api/chat", json={"message": QUESTION})
        conversations = (await client.get("/api/conversations")).json()["conversations"]
    state.close()
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json() == {"error": "The server is restarting; ask again in a moment."}
    assert conversations == [], "a refused question leaves no empty conversation behind"


# --- a run followed from another worker ---


@pytest.fixture
async def two_workers(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> AsyncIterator[tuple[ChatState, RunRegistry, ChatState, RunRegistry]]:
    """An owner's and a reader's state and registry, each with its own connection to the shared file,
    as two worker processes have them."""
    path = tmp_path / "c.sqlite3"
    owner_state, reader_state = ChatState(path, workers=2), ChatState(path, workers=2)
    owner = RunRegistry(make_app().runner, owner_state.conversations, shared=owner_state.shared_runs)
    yield (
        owner_state,
        owner,
        reader_state,
        RunRegistry(make_app().runner, reader_state.conversations, shared=reader_state.shared_runs),
    )
    await owner.drain(30)  # the owner takes its run out of the shared file after its readers saw the end
    owner_state.close()
    reader_state.close()


async def test_a_worker_follows_a_run_another_worker_owns_to_its_end(
    two_workers, fake_anthropic: FakeAnthropic
) -> None:
    owner_state, owner, _, reader = two_workers
    gate, script = _gated(carriers_script())
    fake_anthropic.script(*script)
    conversation = await owner_state.conversations.create_conversation(QUESTION)
    handle = owner.start(conversation, QUESTION, [], platform="web", interface="web", abandon_after_s=0.5)
    await asyncio.sleep(0.5)
    assert reader.get(handle.run_id) is None

    async def read_all() -> list[Any]:
        followed = await reader.follow_elsewhere(handle.run_id, after=0)
        assert followed is not None
        return [event async for event in followed]

    reading = asyncio.create_task(read_all())
    await asyncio.sleep(1.5)  # three abandon periods: only the other worker's reader watches it
    assert not handle.done, "a run watched from another worker is not cancelled as abandoned"
    gate.set()
    events = await asyncio.wait_for(reading, 30)
    assert events[0].name == "started" and events[-1].name == "done"
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert events[-1].data["result"]["outcome"] == "answered"
    assert [e.as_dict() for e in events] == [e.as_dict() for e in handle.events]
    assert handle.task is not None
    await asyncio.wait_for(handle.task, 30)  # the owner takes the shared copy out after the reader saw "done"
    late = await reader.follow_elsewhere(handle.run_id)
    assert late is None, "once done, the shared copy is gone: the stored turn replays it"


async def test_a_run_whose_worker_died_ends_with_an_error_not_a_wait(tmp_path: Path, make_app: Any) -> None:
    """Its owner stopped beating (killed, or its container restarted: a pid would be reused there)."""
    path = tmp_path / "c.sqlite3"
    owner_state = ChatState(path, workers=2)
    shared = owner_state.shared_runs
    assert shared is not None
    await shared.open("r1", "c1")
    await shared.add("r1", [(1, "started", {"run_id": "r1", "question": "q"})], beat=True)
    reader_state = ChatState(path, workers=2)
    reader = RunRegistry(make_app().runner, reader_state.conversations, shared=reader_state.shared_runs)
    await asyncio.to_thread(_stop_beating, path, "r1")  # it died after the reader's worker started
    followed = await reader.follow_elsewhere("r1")
    assert followed is not None
    events = [event async for event in followed]
    assert [e.name for e in events] == ["started", "error", "done"]
    assert events[1].data["message"] == "The server process answering this stopped; ask again."
    starting = ChatState(path, workers=2)
    assert starting.shared_runs is not None
    assert await starting.shared_runs.find("r1") is None, "a worker starting up forgets runs of dead workers"
    for state in (owner_state, reader_state, starting):
        state.close()


async def test_a_reader_ends_with_the_stored_turn_even_if_the_shared_copy_is_left_behind(
    tmp_path: Path, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic
) -> None:
    """The owner's last flush failed: its row stays (beating), but the answer is stored, so readers end."""
    path = tmp_path / "c.sqlite3"
    state = ChatState(path, workers=2)
    store, shared = state.conversations, state.shared_runs
    assert shared is not None
    owner = RunRegistry(make_app().runner, store)
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    conversation = await store.create_conversation("hi")
    handle = owner.start(conversation, "hi", [], platform="web", interface="web")
    assert handle.task is not None
    await handle.task
    await shared.open(handle.run_id, conversation)  # a copy left behind, as a failed close would
    await shared.add(handle.run_id, [(1, "started", handle.events[0].data)], beat=True)
    reader_state = ChatState(path, workers=2)
    reader = RunRegistry(make_app().runner, reader_state.conversations, shared=reader_state.shared_runs)
    followed = await reader.follow_elsewhere(handle.run_id)
    assert followed is not None
    events = await asyncio.wait_for(_all(followed), 10)
    state.close()
    reader_state.close()
    assert [e.as_dict() for e in events] == [e.as_dict() for e in handle.events]


async def _all(events: Any) -> list[Any]:
    return [event async for event in events]


def _stop_beating(path: Path, run_id: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE live_runs SET beat_at = 0 WHERE run_id = ?", (run_id,))


async def test_answers_carry_over_reattach_through_the_web_with_a_shared_log(
    two_workers, make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic
) -> None:
    """The web route: a run another worker owns streams from /api/runs/{id}/events here."""
    owner_state, owner, reader_state, reader = two_workers
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    conversation = await owner_state.conversations.create_conversation("hi", owner=person_owner(LOCAL))  # as the web
    async with LiveServer(create_app(make_app(), reader_state, runs=reader)) as server:
        handle = owner.start(conversation, "hi", [], platform="web", interface="web")
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            async with client.stream("GET", f"/api/runs/{handle.run_id}/events") as response:
                assert response.status_code == 200
                names = [event.event async for event in sse_events(response)]
            missing = await client.get("/api/runs/nope/events")
    assert names[0] == "started" and names[-1] == "done" and "answer" in names
    assert missing.status_code == 404


async def test_a_worker_opens_its_state_file_once(
    make_app: Callable[..., AgentApp], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversations, the run log the other workers read, rate limits, budgets, turns and proposals of
    one worker share one connection (they were four, and one more per thumb's proposal)."""
    opened: list[str] = []
    connect = sqlite3.connect

    def counting(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(Path(database).name)
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", counting)
    agent = make_app(agent_data_dir=tmp_path)
    service = Service.build(agent.settings, web=True, slack=False, agent=agent, workers=2)
    try:
        assert service.state.shared_runs is not None and service.state.pacing.shared
        conversation = await service.store.create_conversation("hi")
        assert await service.store.exists(conversation) and await service.state.proposals.pending() == []
    finally:
        await service.close()
    assert opened == [STATE_FILE]
