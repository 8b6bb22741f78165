"""One question cannot freeze, bloat or starve the service, whatever its SQL returns.

Each finding of the second attack review is a test here, on both engines where the path differs (the
embedded engine, and a server: the HTTP fake). tests/end_to_end/test_responsive.py keeps /healthz
answering beside each of them; the regular expressions are tests/agent/test_linear_text.py's, the
sandbox tests/agent/db/test_sandbox.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import socket
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from agent.chart_images import ChartRenderError, render_png
from agent.db import Database, Scope
from agent.limits import Limits, json_size
from agent.loop_lag import worst_lag_during
from agent.runner import Outcome
from chats.run_view import QueryView
from chats.state import ChatState
from tests.conftest import HEAVY, Recorder, until_running
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.timing import fastest_wall_s
from tests.web_helpers import WebApps, chat

# As fast as a plain error (the fastest of three tries of each, so a busy machine slows both alike): the
# freeze of the finding took 17.5 s, a thousand times a plain error.
AS_FAST = 20

# Two columns named by a tuple's element names: 300,000 characters each, from 170 characters of SQL.
# Types must be literal strings (the check refuses a computed one), so what a statement can name is bounded
# by its own length; `*` repeats a name at no cost, so past-every-cap output is still cheap to ask for.
HUGE_NAMES = "SELECT t.* FROM (SELECT CAST(tuple(1, 2), 'Tuple({} UInt8, {} UInt8)') AS t)".format(
    "a" * 25_000, "b" * 25_000
)
HUGE_TYPE = "SELECT CAST(1, 'Enum8(''{}'' = 1)') AS e".format("a" * 50_000)
# Names past what any column at its caps could take: refused, never read whole.
FAR_TOO_LONG = "SELECT {} FROM (SELECT CAST(tuple(1), 'Tuple({} UInt8)') AS t)".format(
    ", ".join(["t.*"] * 300), "a" * 20_000
)
LONG_LABELS = "SELECT toString(number) || repeat('x', 100000) AS label, number AS n FROM numbers(1000)"
WHITESPACE_ERROR = "SELECT throwIf(1, repeat(' ', 4000))"


def sql(*queries: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": f"q{i}", "sql": q} for i, q in enumerate(queries, 1)]})


def chart(**spec: Any) -> tuple[str, dict[str, Any]]:
    return ("chart", {"query_id": "Q1", **spec})


def peak_bytes(work: Callable[[], Any]) -> Any:
    """Run `work` (a coroutine factory) and return (its result, the peak of Python allocations meanwhile)."""

    async def measured() -> tuple[Any, int]:
        tracemalloc.start()
        try:
            result = await work()
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    return measured()


# --- 1. error text is cleaned in linear time ---


async def test_a_whitespace_heavy_error_is_cleaned_as_fast_as_a_plain_one(engine_db: Database) -> None:
    result = await engine_db.execute(WHITESPACE_ERROR)
    assert result.error_code == 395
    plain = await fastest_wall_s(lambda: engine_db.execute("SELECT throwIf(1, 'plain')"))
    took = await fastest_wall_s(lambda: engine_db.execute(WHITESPACE_ERROR))
    assert took < AS_FAST * plain, f"{took:.3f} s against {plain:.3f} s for a plain error"


# --- 2. column names and types are cut where they enter ---


async def test_huge_column_names_and_types_are_cut_where_they_enter(engine_db: Database) -> None:
    limits = engine_db.limits
    (named, peak) = await peak_bytes(lambda: engine_db.execute(HUGE_NAMES))
    assert named.ok and named.rows == [["1", "2"]], named.error
    assert [len(c) for c in named.columns] == [limits.max_column_name_chars] * 2
    assert named.columns[0].startswith("t.aaa") and named.columns[0].endswith("…")
    assert peak < 8_000_000  # the names are 50,000 characters; the statement's own text is not kept
    typed = await engine_db.execute(HUGE_TYPE)
    assert typed.ok and len(typed.types[0]) == limits.max_column_type_chars and typed.types[0].startswith("Enum8('aaa")


async def test_names_far_past_every_cap_are_refused_unread(engine_db: Database) -> None:
    result, peak = await peak_bytes(lambda: engine_db.execute(FAR_TOO_LONG))
    assert result.error and "column names or types are far too long" in result.error
    assert peak < 8_000_000


async def test_the_model_sees_a_bounded_result_whatever_the_names(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(HUGE_NAMES, HUGE_TYPE)]), Reply(text="Done [Q1] [Q2]."))
    events = Recorder()
    result = await make_app().runner.run("names?", on_event=events, followups=False)
    assert result.outcome is Outcome.ANSWERED
    sent = json.dumps(fake_anthropic.requests[1]["messages"][-1])
    assert len(sent) < 2 * 10_000 + 2_000  # two results of at most MAX_RESULT_CHARS each
    # Events carry the model's own SQL (at most MAX_SQL_CHARS); beyond it, the names add little.
    statements = (HUGE_NAMES, HUGE_TYPE)
    beyond_sql = [
        json_size(wire) - sum(len(q) * json.dumps(wire).count(q) for q in statements)
        for wire in (event.wire() for event in events.events)
    ]
    assert max(beyond_sql) < 20_000


# --- 3. charts are bounded before the spec is built ---


async def test_a_chart_of_long_labels_is_cut_by_the_engine_and_small(
    make_app, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(LONG_LABELS)]),
        Reply(tool_calls=[chart(kind="bar", x="label", y="n")]),
        Reply(text="Drawn [Q1]."),
    )
    app = make_app()
    events = Recorder()
    result, peak = await peak_bytes(lambda: app.runner.run("labels?", on_event=events, followups=False))
    (drawn,) = result.charts
    labels = [record["f0"] for record in drawn.spec["data"]["values"]]
    cut = app.settings.chart_max_label_chars
    assert len(labels) == 1000 and all(len(label) == cut + len("…[+99901 chars]") for label in labels[:10])
    assert json_size(drawn.spec) < app.settings.chart_max_spec_bytes
    assert max(json_size(event.wire()) for event in events.events) < app.settings.max_event_bytes
    assert peak < 40_000_000  # the query's text is 100 MB; the chart reads 1000 labels of 100 characters
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    try:
        conversation = await store.create_conversation("labels?")
        await store.save_turn(conversation, "run1", result, [{"id": 1, "event": "done", "data": {}}])
    finally:
        state.close()
    assert sum(path.stat().st_size for path in tmp_path.glob("c.sqlite3*")) < 3_000_000


async def test_a_chart_past_its_byte_cap_is_refused_with_what_to_change(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    labels = "SELECT toString(number) || repeat('y', 200) AS label, number AS n FROM numbers(5000)"
    fake_anthropic.script(
        Reply(tool_calls=[sql(labels)]), Reply(tool_calls=[chart(kind="bar", x="label", y="n")]), Reply(text="No.")
    )
    result = await make_app().runner.run("labels?", followups=False)
    assert result.charts == []
    (refusal,) = [b for b in fake_anthropic.requests[2]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert refusal["is_error"] and "aggregate to fewer rows" in refusal["content"]
    assert metrics.registry.get_sample_value("agent_chart_errors_total", {"reason": "too_large"}) == 1


async def test_one_answer_draws_at_most_its_charts(make_app, fake_anthropic: FakeAnthropic) -> None:
    query = "SELECT number AS n, number * 2 AS m FROM numbers(10)"
    fake_anthropic.script(
        Reply(tool_calls=[sql(query)]),
        Reply(tool_calls=[chart(kind="line", x="n", y="m") for _ in range(5)]),
        Reply(text="Done [Q1]."),
    )
    result = await make_app(chart_max_per_run=3).runner.run("charts?", followups=False)
    assert len(result.charts) == 3


# --- 4. Slack's chart images are rendered apart, with a time limit ---


def _spec_with_labels(count: int, length: int) -> dict[str, Any]:
    values = [{"f0": f"{i}" + "z" * length, "f1": i} for i in range(count)]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "data": {"values": values},
        "mark": "bar",
        "encoding": {"x": {"field": "f0", "type": "nominal"}, "y": {"field": "f1", "type": "quantitative"}},
    }


async def test_a_chart_image_renders_in_its_own_process_without_holding_the_loop() -> None:
    started = time.perf_counter()
    # A generous limit: what is asserted is the loop's lag, not the time a loaded machine takes to render.
    png, lag = await worst_lag_during(render_png(_spec_with_labels(3, 5_000), timeout_s=150))
    took = time.perf_counter() - started
    # Rendered on the loop, the loop would be held about as long as the render took.
    assert png.startswith(b"\x89PNG") and lag < took / 3, f"the loop was held {lag:.3f} s of {took:.3f} s"


def _renderers() -> list[int]:
    """This process's children that render chart images (not another test session's on the same machine)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else 0
            if parent == os.getpid() and b"agent.chart_images" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


async def test_a_chart_image_past_its_time_limit_is_killed() -> None:
    with pytest.raises(ChartRenderError, match=r"longer than 0\.5 s"):
        await render_png(_spec_with_labels(200, 30_000), timeout_s=0.5)
    assert _renderers() == [], "the renderer is killed, not left to finish"


async def test_chart_images_render_two_at_a_time_each_within_a_memory_limit() -> None:
    seen: list[set[int]] = []
    limits: set[str] = set()

    def renderers() -> set[int]:
        found = set(_renderers())
        for pid in found:
            with contextlib.suppress(OSError):
                limits.update(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "data" in line)
        return found

    async def watch() -> None:
        while True:
            seen.append(renderers())
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        # Short labels: what is counted is the renderers alive at once, whatever each draws (half the CPU).
        pngs = await asyncio.gather(*(render_png(_spec_with_labels(3, 20), timeout_s=60) for _ in range(5)))
    finally:
        watcher.cancel()
    assert all(png.startswith(b"\x89PNG") for png in pngs)
    assert max(len(pids) for pids in seen) == 2 and len(set().union(*seen)) == 5
    assert any(str(1 << 30) in line for line in limits), limits


# --- 5. CSV downloads stop at their byte cap, and a failure is not a complete-looking file ---


@pytest.fixture
async def web(make_app: Callable[..., AgentApp], tmp_path: Path):
    apps = WebApps(make_app, tmp_path)
    yield apps.start
    await apps.close()


async def _stored_query(client: httpx.AsyncClient, fake: FakeAnthropic, statement: str) -> str:
    fake.script(Reply(tool_calls=[sql(statement)]), Reply(text="Done [Q1]."))
    events = await chat(client, "a download")
    return f"{events[0].data['run_id']}-Q1"


@pytest.mark.parametrize("engine", ["embedded", "server"])
async def test_a_download_ends_at_the_last_whole_row_within_its_byte_cap(
    web, fake_anthropic: FakeAnthropic, server_db: Database, engine: str
) -> None:
    url, _ = await web(export_max_bytes=50_000, database=server_db if engine == "server" else None)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        key = await _stored_query(
            client, fake_anthropic, "SELECT number AS n, repeat('v', 300) AS pad FROM numbers(1000)"
        )
        response = await client.get(f"/api/queries/{key}.csv")
    assert response.status_code == 200 and response.headers["x-byte-cap"] == "50000"
    assert response.headers["cache-control"] == "no-store"
    body = response.content
    assert 50_000 - 320 < len(body) <= 50_000 and body.endswith(b"\r\n")
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == ["n", "pad"] and all(row[1] == "v" * 300 for row in rows[1:])
    assert [int(row[0]) for row in rows[1:]] == list(range(len(rows) - 1))


async def _stall(url: str, path: str) -> socket.socket:
    """A client that asks for a download, reads its status line, and stops reading."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    assert (await loop.sock_recv(sock, 12)).startswith(b"HTTP/1.1 200")
    return sock


async def _until_closed(sock: socket.socket) -> int:
    loop, received = asyncio.get_running_loop(), 0
    while chunk := await loop.sock_recv(sock, 1 << 16):
        received += len(chunk)
    return received


async def test_clients_that_stop_reading_do_not_hold_everyones_downloads(web, fake_anthropic: FakeAnthropic) -> None:
    # Every client here is 127.0.0.1: three downloads each, so the two stalled ones leave room for a third.
    url, _ = await web(export_send_timeout_s=1.0, export_max_rows=1_000_000, export_per_client=3)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        big = await _stored_query(
            client, fake_anthropic, "SELECT number, repeat('d', 2000) AS pad FROM numbers(100000)"
        )
        small = await _stored_query(client, fake_anthropic, "SELECT 1 AS one")
        stalled = [await _stall(url, f"/api/queries/{big}.csv") for _ in range(2)]  # both download slots
        try:
            response = await asyncio.wait_for(client.get(f"/api/queries/{small}.csv"), 20)
            assert response.status_code == 200 and response.text.splitlines() == ["one", "1"]
            await asyncio.sleep(3)  # each has now waited past its send timeout
            # Broken off: closed by the server (once what it had sent is read) long before the file's end.
            received = await asyncio.wait_for(asyncio.gather(*(_until_closed(sock) for sock in stalled)), 60)
            assert all(size < 50_000_000 for size in received)
        finally:
            for sock in stalled:
                sock.close()


async def test_one_client_runs_a_bounded_number_of_downloads_at_once(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(export_send_timeout_s=8.0, export_max_rows=1_000_000, export_per_client=2)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        big = await _stored_query(
            client, fake_anthropic, "SELECT number, repeat('d', 2000) AS pad FROM numbers(100000)"
        )
        small = await _stored_query(client, fake_anthropic, "SELECT 1 AS one")
        stalled = [await _stall(url, f"/api/queries/{big}.csv") for _ in range(2)]
        try:
            refused = await client.get(f"/api/queries/{small}.csv")
            assert refused.status_code == 429 and "downloads of yours are still running" in refused.json()["error"]
            # Their places come back once the server gives up on them (8 s without progress). Reading them
            # before that would be progress: they would run to their end, 200 MB later.
            while (again := await client.get(f"/api/queries/{small}.csv")).status_code == 429:
                await asyncio.sleep(0.5)
            assert again.status_code == 200
            await asyncio.wait_for(asyncio.gather(*(_until_closed(sock) for sock in stalled)), 120)
        finally:
            for sock in stalled:
                sock.close()


FAILS_MIDWAY = (
    "SELECT number, repeat('x', 100) AS pad, "
    "throwIf(number >= 100000 AND arraySum(arrayMap(x -> cityHash64(x, number), range(300))) > 0) AS boom "
    "FROM numbers(1000000)"
)


@pytest.mark.parametrize("engine", ["embedded", "server"])
async def test_a_download_that_fails_midway_is_broken_off_not_ended(
    web, fake_anthropic: FakeAnthropic, server_db: Database, engine: str
) -> None:
    url, _ = await web(export_max_rows=1_000_000, database=server_db if engine == "server" else None)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        key = await _stored_query(client, fake_anthropic, FAILS_MIDWAY)  # its first 51 rows are fine
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("GET", f"/api/queries/{key}.csv") as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    pass


@pytest.mark.parametrize("engine", ["embedded", "server"])
async def test_a_download_that_fails_at_once_is_a_clear_error(
    web, fake_anthropic: FakeAnthropic, server_db: Database, engine: str
) -> None:
    url, _ = await web(database=server_db if engine == "server" else None)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        key = await _stored_query(client, fake_anthropic, WHITESPACE_ERROR)
        plain_key = await _stored_query(client, fake_anthropic, "SELECT throwIf(1, 'plain')")
        response = await client.get(f"/api/queries/{key}.csv")
        plain = await fastest_wall_s(lambda: client.get(f"/api/queries/{plain_key}.csv"))
        took = await fastest_wall_s(lambda: client.get(f"/api/queries/{key}.csv"))
    assert took < AS_FAST * plain, f"{took:.3f} s against {plain:.3f} s for a plain error"
    assert response.status_code == 422 and response.headers["cache-control"] == "no-store"
    message = response.json()["error"]
    assert "Code: 395" in message and "APPLY" not in message and len(message) < 2_100


# --- 6. one question cannot starve another ---


async def test_a_question_with_many_heavy_queries_leaves_room_for_another(engine_db: Database) -> None:
    heavy = [asyncio.create_task(engine_db.execute(HEAVY, owner="greedy")) for _ in range(8)]
    try:
        await until_running(engine_db)
        trivial = await engine_db.execute("SELECT count() FROM nycflights13.airlines", owner="someone else")
        # It did not wait for a heavy one to end: each runs for seconds of a core, it for milliseconds.
        ended = [t.result().rows for t in heavy if t.done() and not t.exception() and t.result().ok]
        assert trivial.rows == [["16"]] and ended == []
        assert engine_db.share.in_use <= engine_db.share.total
    finally:
        for task in heavy:
            task.cancel()
        await asyncio.gather(*heavy, return_exceptions=True)


async def test_one_call_and_one_question_run_a_bounded_number_of_queries(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    quick = [f"SELECT {i} AS n" for i in range(8)]
    fake_anthropic.script(
        Reply(tool_calls=[sql(*quick)]),
        Reply(tool_calls=[sql(*[f"SELECT {i} + 100 AS n" for i in range(5)])]),
        Reply(text="Done [Q1]."),
    )
    result = await make_app(max_queries_per_call=5, max_queries_per_run=7).runner.run("many?", followups=False)
    assert [q.id for q in result.queries] == ["Q1", "Q2", "Q3", "Q4", "Q5", "Q6", "Q7"]
    first = next(b for b in fake_anthropic.requests[1]["messages"][-1]["content"] if b["type"] == "tool_result")
    assert "[3 queries were not run: one execute_sql call runs at most 5 queries" in first["content"]
    second = next(b for b in fake_anthropic.requests[2]["messages"][-1]["content"] if b["type"] == "tool_result")
    assert "this question has used its 7 queries" in second["content"]
    assert metrics.registry.get_sample_value("agent_guard_interventions_total", {"guard": "query_cap"}) == 2


async def test_calls_side_by_side_share_one_budget_and_number_their_queries_apart(
    make_app, fake_anthropic: FakeAnthropic, metrics
) -> None:
    # One model turn may hold many execute_sql calls; they run side by side.
    calls = [sql(*[f"SELECT {call * 10 + i} AS n" for i in range(5)]) for call in range(6)]
    fake_anthropic.script(Reply(tool_calls=calls), Reply(text="Done [Q1]."))
    app = make_app(max_queries_per_call=5, max_queries_per_run=12)
    result = await app.runner.run("many?", followups=False)
    assert [q.id for q in result.queries] == [f"Q{n}" for n in range(1, 13)]
    assert metrics.registry.get_sample_value("agent_sql_queries_total", {"status": "ok"}) == 12
    assert result.outcome.value == "answered", result.error


async def test_two_calls_side_by_side_are_stored_with_their_queries(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(Reply(tool_calls=[sql("SELECT 1 AS a"), sql("SELECT 2 AS b")]), Reply(text="1 [Q1], 2 [Q2]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        events = await chat(client, "two?")
        assert sorted(e.data["query_id"] for e in events if e.event == "executing") == ["Q1", "Q2"]
        assert [e.event for e in events if e.event == "error"] == []
        stored = (await client.get(f"/api/conversations/{events[0].data['conversation_id']}")).json()
    assert [q["label"] for q in stored["turns"][0]["queries"]] == ["Q1", "Q2"]


async def test_the_engine_share_is_fair_and_gives_back_cancelled_slots() -> None:
    from agent.db.share import EngineShare

    share = EngineShare(total=2, per_owner=2)
    order: list[str] = []
    release = asyncio.Event()

    async def hold(owner: str) -> None:
        async with share.slot(owner):
            order.append(owner)
            await release.wait()

    greedy = [asyncio.create_task(hold("a")) for _ in range(4)]
    await asyncio.sleep(0.01)
    late = asyncio.create_task(hold("b"))
    cancelled = asyncio.create_task(hold("c"))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert order == ["a", "a"] and share.waiting == 3
    release.set()
    await asyncio.gather(*greedy, late, return_exceptions=True)
    assert order[:3] == ["a", "a", "b"]  # the other owner comes before the greedy one's third query
    assert share.in_use == 0 and share.waiting == 0


# --- 8. a table name is a table the introspection found, nothing else ---


async def test_a_host_path_is_not_a_table_and_tells_nothing(db: Database) -> None:
    scoped = Database(db.backend, scope=Scope.of(["default", "nycflights13"]), functions=db.functions)
    errors = []
    for path in ("/etc/passwd", "/etc/shadow", "/no/such/file"):
        result = await scoped.execute(f"SELECT * FROM `{path}`")
        assert not result.ok and result.ran_sql is None
        errors.append(result.error.replace(path, "PATH") if result.error else "")
    assert len(set(errors)) == 1 and "is not available to this agent" in errors[0]


# --- 9. names the engine resolves from strings; host facts; caching ---


@pytest.mark.parametrize(
    ("statement", "refused"),
    [
        ("SELECT arrayReduce('hierarchicalKMeans(1)', [1.0, 2.0])", "hierarchicalKMeans"),
        ("SELECT arrayReduce('naiveBayesClassifier', [1])", "naiveBayesClassifier"),
        ("SELECT initializeAggregation('catboostEvaluateState', 1)", "catboostEvaluate"),
        ("SELECT arrayReduceInRanges('hierarchicalKMeans', [(1, 1)], [1.0])", "hierarchicalKMeans"),
        ("SELECT arrayReduce(concat('s', 'um'), [1])", "must be an aggregate function's name in quotes"),
        ("SELECT CAST('' AS AggregateFunction(hierarchicalKMeans(1), Float64))", "hierarchicalKMeans"),
        ("SELECT JSONExtract('{}', 'AggregateFunction( `hierarchicalKMeans`, Float64)')", "hierarchicalKMeans"),
        (
            "SELECT defaultValueOfTypeName(concat('Aggregate', 'Function(hierarchicalKMeans(1), Array(Float64))'))",
            "must be written as a literal string",
        ),
        ("SELECT CAST(1, unhex('55496E7438'))", "must be written as a literal string"),
        ("SELECT JSONExtract('{}', reverse(')46taolF ,)1(snaeMKlacihcrareih(noitcnuFetagerggA'))", "literal string"),
        ("SELECT accurateCastOrNull(1, toString('UInt8'))", "must be written as a literal string"),
        (
            "SELECT finalizeAggregation(defaultValueOfTypeName("
            "'AggregateFunction/**/(hierarchicalKMeans(1), Array(Float64))'))",
            "cannot read",
        ),
        ("SELECT defaultValueOfTypeName('AggregateFunction--\n(hierarchicalKMeans(1), Float64)')", "cannot read"),
        ("SELECT 'AggregateFunction is a word' AS s", "cannot read"),
        (
            "SELECT getTypeSerializationStreams(concat('AggregateFunction', '(hierarchicalKMeans(1), Float64)'))",
            "must be written as a literal string",
        ),
        (
            "SELECT JSONExtractCaseInsensitive('{}', 'a', "
            "concat('AggregateFunction', '(hierarchicalKMeans(1), Float64)'))",
            "must be written as a literal string",
        ),
        (
            "SELECT JSONExtractKeysAndValuesCaseInsensitive('{}', "
            "concat('Aggregate', 'Function(hierarchicalKMeans(1), Float64)'))",
            "must be written as a literal string",
        ),
        ("SELECT chdb()", "describes the host or server"),
        ("SELECT serverTimezone()", "describes the host or server"),
        ("SELECT serverTimeZone()", "describes the host or server"),
    ],
)
async def test_function_names_inside_strings_are_checked(db: Database, statement: str, refused: str) -> None:
    result = await db.execute(statement)
    assert not result.ok and refused in (result.error or ""), result.error


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT arrayReduce('sum', [1, 2])",
        "SELECT arrayReduce('quantile(0.5)', [1.0, 2.0])",
        "SELECT initializeAggregation('uniqState', 1) IS NOT NULL",
        "SELECT finalizeAggregation(CAST(arrayReduce('sumState', [1]) AS AggregateFunction(sum, UInt8)))",
        "SELECT CAST('42' AS UInt8) + '7'::UInt8 + accurateCastOrNull(300, 'UInt8') IS NULL",
        "SELECT JSONExtract('{\"a\": 1}', 'a', 'Int64'), JSONExtract('{\"a\": 1}', 'a', 'Nullable(Int64)')",
        "SELECT defaultValueOfTypeName('Array(String)') AS empty",
    ],
)
async def test_the_allowed_functions_named_in_strings_run(db: Database, statement: str) -> None:
    result = await db.execute(statement)
    assert result.ok, result.error


async def test_api_responses_are_never_cached(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        fake_anthropic.script(Reply(text="Hello."))
        async with client.stream("POST", "/api/chat", json={"message": "hi"}) as stream:
            assert stream.headers["cache-control"] == "no-store"
            await stream.aread()
        for path in ("/api/conversations", "/api/conversations/nope", "/api/runs/nope/events"):
            assert (await client.get(path)).headers["cache-control"] == "no-store", path


# --- the caps on what goes out and what is kept ---


async def test_every_event_and_the_stored_turn_stay_within_their_caps(
    web, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    wide = "SELECT " + ", ".join(f"repeat('w', 1000) AS c{i}" for i in range(40)) + " FROM numbers(60)"
    fake_anthropic.script(
        Reply(tool_calls=[sql(*[wide.replace("'w'", f"'{chr(97 + i)}'") for i in range(5)])]),
        Reply(tool_calls=[sql(*[wide.replace("'w'", f"'{chr(102 + i)}'") for i in range(5)])]),
        Reply(text="Done [Q1]."),
    )
    url, store = await web(max_event_bytes=200_000, max_turn_bytes=500_000)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        events = await chat(client, "wide?")
    assert events[-1].event == "done"
    assert max(json_size(e.data) for e in events) <= 200_000
    previews = [len(e.data["rows"]) for e in events if e.event == "result"]
    assert len(previews) == 10 and all(0 < rows < 20 for rows in previews)  # fewer rows, within the event's budget
    run_id = events[0].data["run_id"]
    stored = await store._file.run(
        lambda c: c.execute(
            "SELECT length(events) + length(transcript) + length(charts) FROM turns WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
    )
    previews = await store._file.run(
        lambda c: c.execute("SELECT sum(length(preview)) FROM queries WHERE run_id = ?", (run_id,)).fetchone()[0]
    )
    assert stored + previews <= 500_000


def test_a_stored_turn_gives_way_in_order() -> None:
    from chats.conversations import _StoredTurn

    query = QueryView("Q1", "q", "s" * 1500, columns=["n" * 500] * 4, rows=[["p" * 2000]])
    turn = _StoredTurn(
        events=[{"id": 1, "event": "result", "data": {"rows": [["x" * 1000]] * 10}}],
        transcript=[{"role": "user", "content": "t" * 5000}],
        charts=[{"spec": "c" * 3000}],
        queries=[query],
    )
    turn.fit(12_500)
    assert turn.events[0]["data"]["rows"] == [] and turn.transcript == []
    assert turn.charts == [{"spec": "c" * 3000}] and query.rows == [["p" * 2000]]
    turn.fit(3_000)
    assert query.rows == [] and turn.charts == [] and query.sql == "s" * 1500
    assert [len(name) for name in query.columns] == [40] * 4 and turn.size() <= 3_000
    turn.fit(500)
    assert query.sql == "" and turn.size() <= 500


def test_a_stored_turn_of_many_long_errors_still_fits() -> None:
    from chats.conversations import _StoredTurn

    failed = {"event": "result", "data": {"error": "e" * 3_000, "rows": []}}
    turn = _StoredTurn(
        events=[{"id": n, **failed} for n in range(200)],
        transcript=[],
        charts=[],
        queries=[
            QueryView(f"Q{n}", "q" * 3_000, "s" * 100, state="error", error="e" * 3_000, hint="h" * 500)
            for n in range(1, 201)
        ],
    )
    turn.fit(150_000)
    assert turn.size() <= 150_000 and turn.events == [] and len(turn.queries) == 200
    assert all(len(q.error or "") == 200 and len(q.question) == 200 for q in turn.queries)


async def test_reused_results_count_against_a_bound_too(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql("SELECT 1 AS one")]),
        Reply(tool_calls=[sql(*["SELECT 1 AS one"] * 5)]),
        Reply(text="One [Q1]."),
    )
    result = await make_app(max_queries_per_call=5, max_queries_per_run=2).runner.run("same?", followups=False)
    assert [q.reused_from for q in result.queries] == [None, "Q1", "Q1", "Q1"]  # 2 x the run's budget in all


async def test_a_turn_of_wide_names_is_stored_within_its_cap_query_rows_included(
    web, fake_anthropic: FakeAnthropic
) -> None:
    wide = "SELECT " + ", ".join(f"{i} AS `{str(i) * 200}`"[:220] for i in range(200))
    queries = [wide + f", {n} AS n" for n in range(10)]
    fake_anthropic.script(
        Reply(tool_calls=[sql(*queries[:5])]), Reply(tool_calls=[sql(*queries[5:])]), Reply(text="Done [Q1].")
    )
    url, store = await web(max_turn_bytes=500_000)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        events = await chat(client, "wide?")
    assert events[-1].event == "done"
    run_id = events[0].data["run_id"]
    stored = await store._file.run(
        lambda c: c.execute(
            "SELECT (SELECT length(events) + length(transcript) + length(charts) FROM turns WHERE run_id = ?1)"
            " + (SELECT sum(length(question) + length(sql) + length(columns) + length(preview)"
            "     + coalesce(length(error), 0) + coalesce(length(hint), 0)) FROM queries WHERE run_id = ?1)",
            (run_id,),
        ).fetchone()[0]
    )
    assert stored <= 500_000


def test_limits_come_from_settings() -> None:
    from tests.conftest import make_settings

    limits = Limits.of(make_settings(max_result_columns=7, chart_max_label_chars=12, export_max_bytes=5_000))
    assert (limits.max_result_columns, limits.chart_max_label_chars, limits.export_max_bytes) == (7, 12, 5_000)
