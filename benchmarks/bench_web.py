"""The web chat under load: time to first event, and 100 concurrent chats.

Three processes on this machine, talking over loopback, as in production: the real `agent web`
(uvicorn), the fake Messages API answering each model call after a fixed latency, and this
process's httpx clients reading the SSE streams. Each chat is two model rounds (a query, then the answer) plus the
follow-up call, so with 300 ms per call the ideal chat takes 0.9 s; overhead is measured time
over that ideal.

    python -m benchmarks.bench_web
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.sse_client import sse_events

CHATS = 100
LATENCY_S = 0.3
MODEL_CALLS_PER_CHAT = 3


def model(body: dict[str, Any]) -> Reply:
    """Round 1: run a query; round 2: answer; a request without tools: follow-ups."""
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?", "How did delays vary by month?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="There are 16 airlines [Q1].")
    return Reply(
        tool_calls=[
            ("execute_sql", {"queries": [{"question": "Airlines", "sql": "SELECT count() FROM nycflights13.airlines"}]})
        ]
    )


async def one_chat(client: httpx.AsyncClient, question: str) -> dict[str, float | str]:
    started = time.perf_counter()
    first = None
    last = ""
    async with client.stream("POST", "/api/chat", json={"message": question}) as response:
        if response.status_code != 200:
            return {"status": f"http {response.status_code}", "total": time.perf_counter() - started}
        async for event in sse_events(response):
            first = first or time.perf_counter() - started
            last = event.event
            if event.event == "done":
                outcome = event.data["result"]["outcome"]
                return {"status": outcome, "first": first, "total": time.perf_counter() - started}
    return {"status": f"stream ended after {last or 'nothing'}", "total": time.perf_counter() - started}


async def measure(base: dict[str, str], latency_s: float, chats: int) -> dict[str, Any]:
    """One scenario: a fresh fake model process and a fresh `agent web` process."""
    with _process([sys.executable, "-m", "benchmarks.bench_web", "fake", str(latency_s)], base) as fake:
        fake_url = fake.stdout.readline().strip()  # type: ignore[union-attr]
        port = _free_port()
        env = {**base, "ANTHROPIC_BASE_URL": fake_url}
        with _process([sys.executable, "-m", "process.cli", "web", "--port", str(port)], env):
            url = f"http://127.0.0.1:{port}"
            await _wait_healthy(url)
            limits = httpx.Limits(max_connections=chats + 10, max_keepalive_connections=chats + 10)
            async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
                await one_chat(client, "warm up")
                started = time.perf_counter()
                results = await asyncio.gather(*(one_chat(client, f"How many airlines? ({i})") for i in range(chats)))
                wall = time.perf_counter() - started
    ok = [r for r in results if r["status"] == "answered"]
    totals = sorted(float(r["total"]) for r in ok) or [float("nan")]
    firsts = sorted(float(r["first"]) for r in ok) or [float("nan")]
    return {
        "chats": chats,
        "failures": len(results) - len(ok),
        "failure_kinds": sorted({str(r["status"]) for r in results if r["status"] != "answered"}),
        "wall_s": wall,
        "p50_s": statistics.median(totals),
        "p95_s": totals[max(0, int(len(totals) * 0.95) - 1)],
        "first_event_p50_ms": statistics.median(firsts) * 1000,
        "ideal_s": MODEL_CALLS_PER_CHAT * latency_s,
    }


@contextmanager
def _process(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_healthy(url: str) -> None:
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(300):
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"agent web did not become healthy at {url}")


def serve_fake(latency_s: float) -> None:
    fake = FakeAnthropic(latency_s=latency_s).start()
    fake.always(model)
    print(fake.base_url, flush=True)
    threading.Event().wait()


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)
        load_demo_elsewhere(data)
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
            "AGENT_DATA_DIR": str(data),
            "ANTHROPIC_API_KEY": "test-key",
            "AGENT_WEB_RATE_PER_MINUTE": "100000",
            "LOG_LEVEL": "WARNING",
        }
        return asyncio.run(_all(base))


async def _all(base: dict[str, str]) -> dict[str, Any]:
    return {
        "first event, zero-latency model (1 chat)": await measure(base, 0.0, 1),
        "first event, 300 ms model (1 chat)": await measure(base, LATENCY_S, 1),
        f"{CHATS} concurrent chats, 300 ms model": await measure(base, LATENCY_S, CHATS),
    }


def report(figures: dict[str, Any]) -> None:
    print()
    for label, f in figures.items():
        print(f"{label}:")
        print(f"  failures {f['failures']}/{f['chats']} {f['failure_kinds'] or ''}")
        print(
            f"  first event p50 {f['first_event_p50_ms']:.0f} ms; chat p50 {f['p50_s']:.2f} s, p95 {f['p95_s']:.2f} s;"
            f" wall {f['wall_s']:.2f} s"
        )
        if f["ideal_s"]:
            print(
                f"  over the ideal {f['ideal_s']:.1f} s: p50 {f['p50_s'] / f['ideal_s']:.2f}x, "
                f"p95 {f['p95_s'] / f['ideal_s']:.2f}x, wall {f['wall_s'] / f['ideal_s']:.2f}x"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["fake"]:
        serve_fake(float(sys.argv[2]))
    else:
        report(run())
