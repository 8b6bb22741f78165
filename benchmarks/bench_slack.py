"""The Slack bot's latency: from an event's POST to Slack's acknowledgement, and to the first progress
(the progress message) reaching Slack.

The real `agent slack` (uvicorn, HTTP mode) runs in its own process over the demo data. This process
holds the fake Slack Web API (which timestamps each call as it arrives) and the fake model (answering
after a fixed latency), and posts signed `app_mention` events as Slack would. Events go one at a time
(latency), then a burst of the same number at once (Slack's 3 s acknowledgement under load).

    python -m benchmarks.bench_slack
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

from benchmarks.bench_web import _free_port, _process, _wait_healthy
from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import BOT_USER_ID, GENERAL_ID, FakeSlack

EVENTS = 40
MODEL_LATENCY_S = 0.3


class TimedSlack(FakeSlack):
    """The fake Slack, noting when each call arrives and the thread it is for."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[float, str, str]] = []  # (perf_counter, method, thread_ts)

    def handle(self, method: str, headers: Any, query: str, body: bytes) -> Any:
        arrived = time.perf_counter()
        self.arrivals.append((arrived, method, _thread_ts(headers, query, body)))
        return super().handle(method, headers, query, body)

    def first_progress(self, thread_ts: str) -> float | None:
        found = [t for t, method, ts in self.arrivals if ts == thread_ts and method == "chat.postMessage"]
        return min(found) if found else None


def _thread_ts(headers: Any, query: str, body: bytes) -> str:
    args: dict[str, Any] = dict(parse_qsl(query))
    try:
        if (headers.get("content-type") or "").startswith("application/json"):
            args.update(json.loads(body or b"{}"))
        elif body:
            args.update(parse_qsl(body.decode()))
    except ValueError:
        pass
    return str(args.get("thread_ts") or args.get("ts") or "")


def model(body: dict[str, Any]) -> Reply:
    if not body.get("tools"):
        return Reply(text="[]")
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="There are 16 airlines [Q1].")
    sql = {"question": "Airlines", "sql": "SELECT count() FROM nycflights13.airlines"}
    return Reply(tool_calls=[("execute_sql", {"queries": [sql]})])


async def one_event(client: httpx.AsyncClient, slack: TimedSlack, n: int) -> tuple[float, float | None]:
    """POST one mention; returns (seconds to the acknowledgement, seconds to the first progress)."""
    ts = slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how many airlines? ({n})")
    request = events.events_request(events.event_callback(events.app_mention(f"how many airlines? ({n})", ts=ts)))
    sent = time.perf_counter()
    response = await client.post("/slack/events", content=request.body, headers=request.headers)
    acknowledged = time.perf_counter() - sent
    if response.status_code != 200:
        return acknowledged, None
    deadline = time.monotonic() + 10
    while (first := slack.first_progress(ts)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    return acknowledged, None if first is None else first - sent


async def measure(env: dict[str, str], slack: TimedSlack) -> dict[str, Any]:
    port = _free_port()
    with _process([sys.executable, "-m", "process.cli", "slack", "--port", str(port)], env):
        url = f"http://127.0.0.1:{port}"
        await _wait_healthy(url)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            await one_event(client, slack, -1)  # warm up
            one_by_one = [await one_event(client, slack, n) for n in range(EVENTS)]
            await asyncio.sleep(2)  # let their answers finish
            burst = await asyncio.gather(*(one_event(client, slack, EVENTS + n) for n in range(EVENTS)))
    return {"one at a time": _summary(one_by_one), f"burst of {EVENTS}": _summary(list(burst))}


def _summary(results: list[tuple[float, float | None]]) -> dict[str, Any]:
    acks = sorted(a for a, _ in results)
    firsts = sorted(f for _, f in results if f is not None)
    return {
        "events": len(results),
        "no_progress": len(results) - len(firsts),
        "ack_p50_ms": statistics.median(acks) * 1000,
        "ack_p95_ms": _p95(acks) * 1000,
        "first_progress_p50_ms": statistics.median(firsts) * 1000 if firsts else float("nan"),
        "first_progress_p95_ms": _p95(firsts) * 1000 if firsts else float("nan"),
    }


def _p95(values: list[float]) -> float:
    return values[max(0, int(len(values) * 0.95) - 1)]


def run() -> dict[str, Any]:
    slack = TimedSlack().start()
    fake_model = FakeAnthropic(latency_s=MODEL_LATENCY_S).start()
    fake_model.always(model)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            data = Path(scratch)
            load_demo_elsewhere(data)
            env = {
                "PATH": os.environ.get("PATH", ""),
                "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
                "AGENT_DATA_DIR": str(data),
                "ANTHROPIC_API_KEY": "test-key",
                "ANTHROPIC_BASE_URL": fake_model.base_url,
                "SLACK_BOT_TOKEN": slack.bot_token,
                "SLACK_SIGNING_SECRET": events.SIGNING_SECRET,
                "SLACK_API_URL": slack.base_url,
                "SLACK_RATE_PER_MINUTE": "100000",
                "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
                "LOG_LEVEL": "WARNING",
            }
            return asyncio.run(measure(env, slack))
    finally:
        fake_model.stop()
        slack.stop()


def report(figures: dict[str, Any]) -> None:
    print()
    print("Slack: event POST to acknowledgement, and to the first progress reaching Slack")
    for label, f in figures.items():
        print(f"  {label} ({f['events']} events, {f['no_progress']} without progress):")
        print(f"    acknowledged   p50 {f['ack_p50_ms']:6.1f} ms   p95 {f['ack_p95_ms']:6.1f} ms")
        print(f"    first progress p50 {f['first_progress_p50_ms']:6.1f} ms   p95 {f['first_progress_p95_ms']:6.1f} ms")


if __name__ == "__main__":
    report(run())
