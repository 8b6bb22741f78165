"""The real `agent serve` process: SIGTERM drains and exits 0, several workers share the port on the server
path (metrics summed over them, a run followed from any worker), and the embedded engine stays one process
and says so. Each test starts the command as a person or an orchestrator would, in a process of its own."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.demo_data import copy_demo
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse, default_users
from tests.fakes.sse_client import sse_events

ROOT = Path(__file__).resolve().parents[2]
MODEL_LATENCY_S = 1.0  # each model call: long enough for a signal to land mid-answer
GRACE_S = 60  # what a stop gives a running answer: the answer, a few seconds, must not wait it out


def model(body: dict[str, Any]) -> Reply:
    """Round 1: run a query; round 2: answer; a request without tools: follow-ups."""
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text="There are 16 airlines [Q1].")
    sql = "SELECT count() FROM nycflights13.airlines"
    return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": sql}]})])


@pytest.fixture(scope="module")
def slow_model() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(latency_s=MODEL_LATENCY_S).start()
    fake.always(model)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def engine_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data copied, never opened by this process, so the `agent serve`
    (or fake ClickHouse server) process under test claims it, one at a time."""
    return copy_demo(tmp_path_factory, tmp_path_factory.mktemp("serve-data") / "clickhouse")


@pytest.fixture
def clickhouse_server(engine_data: Path) -> Iterator[FakeClickHouse]:
    with FakeClickHouse(engine_data, default_users("pw")).start() as server:
        yield server


class Served:
    """`agent serve` in a process of its own, on a free port, with JSON logs."""

    def __init__(self, tmp_path: Path, env: dict[str, str], *arguments: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "AGENT_DATA_DIR": str(tmp_path / "app"),
            "ANTHROPIC_API_KEY": "test-key",
            "AGENT_LOG_FORMAT": "json",
            "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
        }
        command = [sys.executable, "-m", "process.cli", "serve", "--port", str(self.port), *arguments]
        self.process = subprocess.Popen(
            command,
            env={**base, **env},
            cwd=tmp_path,  # no .env here
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout = self.stderr = ""

    async def ready(self, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.finish()
                try:
                    response = await client.get("/readyz")
                    if response.status_code == 200:
                        return dict(response.json())
                    last = response.text
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"not ready in {timeout_s} s ({last}): {self.finish()}")

    async def all_listening(self, workers: int, timeout_s: float = 60) -> None:
        """Until `workers` sockets listen on the port. `ready` is the first worker's answer; connections made
        before the others listen all reach it (SO_REUSEPORT spreads them over the sockets listening then)."""
        for _ in range(int(timeout_s / 0.1)):  # a limit on waiting, counted in polls
            if _listening(self.port) >= workers:
                return
            assert self.process.poll() is None, self.finish()
            await asyncio.sleep(0.1)
        raise AssertionError(f"{_listening(self.port)} of {workers} workers listen: {self.finish()}")

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def finish(self, timeout_s: float = 60) -> str:
        if self.process.poll() is None:
            self.terminate()
        self.stdout, self.stderr = self.process.communicate(timeout=timeout_s)
        return f"exit {self.process.returncode}\n{self.stdout}\n{self.stderr[-4000:]}"

    def log_lines(self) -> list[dict[str, Any]]:
        """Every line the server wrote, on either stream: in JSON mode each one must be a JSON object."""
        lines = [line for line in (self.stdout + "\n" + self.stderr).splitlines() if line.strip()]
        not_json = [line for line in lines if not line.startswith("{")]
        assert not not_json, f"lines that are not JSON: {not_json[:3]}"
        return [json.loads(line) for line in lines]

    def said(self) -> list[str]:
        return [line["message"] for line in self.log_lines()]


def _listening(port: int) -> int:
    """Sockets listening on the IPv4 `port` (the kernel's table: state 0A is LISTEN)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A")


async def _chat(url: str, question: str) -> list[Any]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        return [event async for event in sse_events(response)]


def _fastest_round_trip_s(url: str, *, kept_alive: bool, requests: int = 10) -> float:
    """The fastest of `requests` asks of /healthz, on one kept-alive connection or each on a new one."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    timings = []
    try:
        for _ in range(requests):
            started = time.perf_counter()
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            assert response.status == 200
            timings.append(time.perf_counter() - started)
            if not kept_alive:
                connection.close()
    finally:
        connection.close()
    return min(timings)


def _kept_alive_against_new_connections(url: str) -> float:
    """How many times longer /healthz takes on a kept-alive connection than on a new one (the fastest of ten
    each, so a busy machine hardly counts). A server socket without TCP_NODELAY holds each response's body
    behind the client's delayed ACK: 40 ms or more every time, where a new connection takes a millisecond
    (the kernel acknowledges a new connection's first segments at once)."""
    return _fastest_round_trip_s(url, kept_alive=True) / _fastest_round_trip_s(url, kept_alive=False)


async def _model_asked(model: FakeAnthropic, before: int) -> None:
    """Until the model has been asked once more than `before`: the run is past the server's door."""
    for _ in range(1200):
        if len(model.requests) > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the model was never asked")


def _stored_outcomes(data_dir: Path) -> list[str]:
    with sqlite3.connect(data_dir / "state.sqlite3") as conn:
        return [row[0] for row in conn.execute("SELECT outcome FROM turns ORDER BY created_at")]


async def test_sigterm_lets_the_running_answer_finish_stores_it_and_exits_0(
    slow_model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    env = {
        "ANTHROPIC_BASE_URL": slow_model.base_url,
        "CLICKHOUSE_URL": f"chdb://{engine_data}",
        "AGENT_SHUTDOWN_GRACE_S": str(GRACE_S),
    }
    served = Served(tmp_path, env)
    try:
        await served.ready()
        asked = len(slow_model.requests)
        answering = asyncio.create_task(_chat(served.url, "How many airlines are there?"))
        await _model_asked(slow_model, asked)  # the first model call is under way (it takes MODEL_LATENCY_S)
        stopped_at = time.monotonic()
        served.terminate()
        await asyncio.sleep(0.3)
        with pytest.raises(httpx.TransportError):  # the listener is closed: a balancer sends it elsewhere
            await _chat(served.url, "And how many airports?")
        events = await answering
    finally:
        report = served.finish()
    took_s = time.monotonic() - stopped_at
    assert served.process.returncode == 0, report
    assert events[-1].event == "done" and events[-1].data["result"]["outcome"] == "answered", report
    assert "answer" in [e.event for e in events]
    assert _stored_outcomes(tmp_path / "app") == ["answered"]
    assert took_s < GRACE_S / 2, "it waited for the answer, not for the whole grace period"
    said = [line["message"] for line in served.log_lines()]
    draining = f"shutting down: 1 answer(s) running get up to {GRACE_S} s to finish; new questions are refused"
    assert draining in said and said.index(draining) < said.index("run answered"), report


async def test_sigterm_cancels_what_outlasts_the_grace_stores_it_and_exits_0(
    slow_model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    env = {
        "ANTHROPIC_BASE_URL": slow_model.base_url,
        "CLICKHOUSE_URL": f"chdb://{engine_data}",
        "AGENT_SHUTDOWN_GRACE_S": "1",
    }
    served = Served(tmp_path, env)
    try:
        await served.ready()
        asked = len(slow_model.requests)
        answering = asyncio.create_task(_chat(served.url, "How many airlines are there?"))
        await _model_asked(slow_model, asked)  # the answer's first model call is under way
        served.terminate()
        events = await answering
    finally:
        report = served.finish()
    assert served.process.returncode == 0, report
    assert events[-1].event == "done" and events[-1].data["result"]["outcome"] == "cancelled", report
    assert _stored_outcomes(tmp_path / "app") == ["cancelled"]


async def test_several_workers_share_the_port_the_runs_and_the_metrics(
    slow_model: FakeAnthropic, clickhouse_server: FakeClickHouse, tmp_path: Path
) -> None:
    env = {
        "ANTHROPIC_BASE_URL": slow_model.base_url,
        "CLICKHOUSE_URL": clickhouse_server.url("agent", "nycflights13"),
        "AGENT_WEB_RATE_PER_MINUTE": "24",  # for all the workers together
    }
    served = Served(tmp_path, env, "--workers", "2")
    chats = 24
    try:
        assert (await served.ready())["database"] == "ok"
        await served.all_listening(2)
        results = await asyncio.gather(*(_chat_and_reattach(served.url, f"Airlines? ({i})") for i in range(chats)))
        over_budget = await asyncio.gather(*(_refused(served.url) for _ in range(6)))
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            scrapes = [(await client.get("/metrics")).text for _ in range(6)]
    finally:
        report = served.finish()
    assert served.process.returncode == 0, report
    for live, replayed in results:
        assert live[-1].event == "done" and live[-1].data["result"]["outcome"] == "answered", report
        assert [e.event for e in replayed] == [e.event for e in live], "a reattach from any worker sees it all"
    answered = 'agent_runs_total{classification="data_analysis",interface="web",outcome="answered"} '
    for text in scrapes:  # whichever worker answers the scrape, it counts every worker's runs
        assert f"{answered}{float(chats)}" in text, report
    pids = {line["pid"] for line in served.log_lines() if line.get("outcome") == "answered"}
    assert len(pids) == 2, f"both workers answered: {pids}"
    assert over_budget == [429] * 6, "the budget is the client's, not each worker's"
    assert any("with 2 workers" in message for message in served.said())


async def _refused(url: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:  # a connection of its own: any worker
        return (await client.post("/api/chat", json={"message": "One more?"})).status_code


async def _chat_and_reattach(url: str, question: str) -> tuple[list[Any], list[Any]]:
    """Ask, drop the stream after `started`, then follow the run from new connections (which may reach
    the other worker) to its end; then replay it whole once more."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        started = await anext(aiter(sse_events(response)))
    run_id = started.data["run_id"]
    live = [started]
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        headers = {"Last-Event-ID": "1"}
        async with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response:
            assert response.status_code == 200
            live += [event async for event in sse_events(response)]
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("GET", f"/api/runs/{run_id}/events") as response,
    ):
        replayed = [event async for event in sse_events(response)]
    return live, replayed


async def test_the_embedded_engine_serves_one_process_and_says_so(
    slow_model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    env = {"ANTHROPIC_BASE_URL": slow_model.base_url, "CLICKHOUSE_URL": f"chdb://{engine_data}"}
    served = Served(tmp_path, env, "--workers", "3")
    try:
        await served.ready()
        kept_alive = await asyncio.to_thread(_kept_alive_against_new_connections, served.url)
    finally:
        report = served.finish()
    assert served.process.returncode == 0, report
    assert served.said()[0].startswith(
        "Serving one process, not 3: the embedded engine allows one process per data directory."
    ), report
    assert any(message.startswith("Serving the chat on http://127.0.0.1:") for message in served.said())
    assert kept_alive < 5, f"a kept-alive request took {kept_alive:.0f}x a new connection's: is TCP_NODELAY set?"


async def test_a_sigint_to_the_supervisor_alone_stops_every_worker(
    slow_model: FakeAnthropic, clickhouse_server: FakeClickHouse, tmp_path: Path
) -> None:
    """`kill -INT` (or an orchestrator's stop signal) reaches the supervisor only: it passes it on."""
    env = {"ANTHROPIC_BASE_URL": slow_model.base_url, "CLICKHOUSE_URL": clickhouse_server.url("agent", "nycflights13")}
    served = Served(tmp_path, env, "--workers", "2")
    try:
        await served.ready()
        kept_alive = await asyncio.to_thread(_kept_alive_against_new_connections, served.url)
        served.process.send_signal(signal.SIGINT)
        served.process.wait(30)
    finally:
        report = served.finish()
    assert served.process.returncode == 130, report  # Ctrl-C: what ran was cancelled (SIGTERM exits 0)
    assert served.stderr.splitlines()[-1] == "interrupted", report
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", served.port)) != 0, "no worker is left serving the port"
    assert kept_alive < 5, f"a kept-alive request to a worker took {kept_alive:.0f}x a new connection's: TCP_NODELAY?"
