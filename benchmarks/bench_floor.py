"""The CPU a chat costs in the libraries alone, beside what `agent serve` spends on one.

A web chat of benchmarks/bench_workers.py (200 at once, server path) is, in library calls: two
streamed model calls and one plain one (the anthropic SDK over aiohttp), three ClickHouse HTTP
requests for its one query (clickhouse-connect: the parse, DESCRIBE, and the capped select), and one
POST answered with that chat's SSE events (uvicorn, Starlette, sse-starlette). Each is measured here
with nothing of ours around it but the thinnest caller, 200 at once, against the same fakes in
processes of their own:

- model calls: benchmarks/bench_llm's calls through `LLMClient` (the SDK's raw event stream);
- ClickHouse: `raw_query` of the app's three statements on clickhouse-connect's async client;
- web: a bare Starlette app under uvicorn, in its own process, streaming as many events of the same
  size as a real chat carried.

Their sum is the floor one chat costs before any of the agent's own work; `agent serve` is measured
in the same run by benchmarks/bench_workers (one round, server path).

    python -m benchmarks.bench_floor
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import clickhouse_connect
import httpx

from agent.config import DEFAULT_MODEL
from agent.db.rendering import capped_select, describe
from agent.db.statement import parse_request
from benchmarks import bench_llm, bench_workers
from benchmarks.bench_web import _free_port, _process
from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes.clickhouse_http import FakeClickHouse

CHATS = 200
REPEATS = 2  # batches of CHATS after the warm-up
GOAL_MS = 10.0  # issue 16's goal for `agent serve`'s CPU per chat

BARE_APP = textwrap.dedent(
    """
    import json
    from starlette.applications import Starlette
    from starlette.routing import Route
    from sse_starlette import EventSourceResponse

    async def chat(request):
        asked = await request.json()
        async def events():
            for number in range(1, asked["events"] + 1):
                yield {"id": str(number), "event": "e", "data": json.dumps({"text": "x" * asked["bytes"]})}
        return EventSourceResponse(events())

    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"])])
    """
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / bench_workers.CLOCK_TICKS


async def _batches(call, count: int = CHATS, repeats: int = REPEATS) -> None:  # type: ignore[no-untyped-def]
    for _ in range(repeats):
        await asyncio.gather(*(call(number) for number in range(count)))


async def model_calls_ms(base_url: str) -> float:
    """Two streamed calls and one plain call, as a chat makes them: this process's CPU per chat."""
    llm = bench_llm._clients(base_url)["aiohttp"]

    async def chat(_: int) -> None:
        for _round in range(2):
            await llm.stream_turn(on_text=bench_llm._ignore, on_restart=bench_llm._ignore, **bench_llm.REQUEST)
        await llm.complete(model=DEFAULT_MODEL, system="Suggest follow-ups.", prompt="Airlines?", max_tokens=200)

    try:
        await _batches(chat, repeats=1)  # warm: connections open
        started = time.process_time()
        await _batches(chat)
        return (time.process_time() - started) / (CHATS * REPEATS) * 1000
    finally:
        await llm.close()


async def clickhouse_ms(url: str) -> float:
    """The app's three requests for one query, on clickhouse-connect alone: this process's CPU per chat."""
    client = await clickhouse_connect.get_async_client(dsn=url)

    async def chat(number: int) -> None:
        sql = f"SELECT count() AS airlines, {number} AS chat FROM nycflights13.airlines"
        for statement, fmt in (
            (parse_request(sql), "JSONCompactEachRow"),
            (describe(sql), "JSONCompactEachRow"),
            (capped_select(sql, limit=51, max_cell_chars=200), "TabSeparated"),
        ):
            await client.raw_query(statement, fmt=fmt)

    try:
        await _batches(chat, repeats=1)
        started = time.process_time()
        await _batches(chat)
        return (time.process_time() - started) / (CHATS * REPEATS) * 1000
    finally:
        await client.close()


async def web_ms(events: int, event_bytes: int, scratch: Path) -> float:
    """A bare Starlette app's CPU per POST answered with `events` SSE events (its own process)."""
    (scratch / "bare_app.py").write_text(BARE_APP)
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(scratch), "bare_app:app", "--port", str(port)]
    server = subprocess.Popen([*command, "--log-level", "warning"])
    limits = httpx.Limits(max_connections=CHATS * 2)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as client:

            async def chat(_: int) -> None:
                asked = {"events": events, "bytes": event_bytes}
                async with client.stream("POST", "/api/chat", json=asked) as response:
                    async for _chunk in response.aiter_bytes():
                        pass

            for _ in range(100):
                try:
                    await client.get("/")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            await _batches(chat, repeats=1)
            before = _cpu_s(server.pid)
            await _batches(chat)
            return (_cpu_s(server.pid) - before) / (CHATS * REPEATS) * 1000
    finally:
        server.terminate()
        server.wait(30)


def run() -> dict[str, float]:
    served = bench_workers.run(1, CHATS, (("server", 1),))["server x1"]
    events = statistics.median(chat.events for chat in served.ok)
    figures = {"agent serve": served.cpu_per_chat * 1000, "events per chat": events}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        load_demo_elsewhere(root)
        command = [sys.executable, "-m", "benchmarks.bench_llm", "fake"]
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        with FakeClickHouse(root / "clickhouse").start() as clickhouse, _process(command, env) as fake:
            model_url = fake.stdout.readline().strip()  # type: ignore[union-attr]
            figures["model calls"] = asyncio.run(model_calls_ms(model_url))
            figures["ClickHouse requests"] = asyncio.run(clickhouse_ms(clickhouse.url("agent", "nycflights13")))
        figures["web: POST and SSE"] = asyncio.run(web_ms(int(events), 400, root))
    return figures


def report(figures: dict[str, float]) -> None:
    floor = figures["model calls"] + figures["ClickHouse requests"] + figures["web: POST and SSE"]
    print()
    print(f"CPU per chat, {CHATS} chats at once: the libraries alone against `agent serve` (server path)")
    print(f"  model calls (anthropic SDK, 2 streamed + 1 plain)      {figures['model calls']:6.2f} ms")
    print(f"  ClickHouse requests (clickhouse-connect, 3)            {figures['ClickHouse requests']:6.2f} ms")
    web = f"web: POST and {figures['events per chat']:.0f} SSE events (uvicorn, sse-starlette)"
    print(f"  {web:54} {figures['web: POST and SSE']:6.2f} ms")
    print(f"  the floor: their sum                                   {floor:6.2f} ms")
    print(f"  agent serve, the whole chat                            {figures['agent serve']:6.2f} ms")
    print(f"  agent serve over the floor                             {figures['agent serve'] / floor:6.2f}x")
    print(f"  the goal ({GOAL_MS:.0f} ms) over the floor                        {GOAL_MS / floor:6.2f}x")


if __name__ == "__main__":
    report(run())
