"""The budgets and the model API's failures, attacked over HTTP: a real `agent web` process, in a process
of its own, with the model fakes scripted as the attacker (a hostile server or a buggy gateway reporting
impossible usage; one asker sending questions at once) or gone (a closed port).

Each question the fake answers honestly costs exactly QUESTION_TOKENS (its reported usage), so the
tokens a client spent are summed from the receipts in the `done` events."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.demo_data import copy_demo
from tests.fakes import openai_api
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.sse_client import Sse, sse_events

ROOT = Path(__file__).resolve().parents[2]
DAILY_TOKENS = 20_000
QUESTION_TOKENS = 10_000  # what an honest answer costs: the budget fits two
HONEST = {"input_tokens": 9_000, "output_tokens": 1_000, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
FREE = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
HOSTILE = -100_000_000  # what the review's gateway reported as output_tokens
MODEL_LATENCY_S = 1.0  # each answer takes this long: questions sent together are all in flight at once


def attacker(body: dict[str, Any]) -> Reply:
    """The Messages API as the attacker scripts it: a question saying "hostile" gets a reply whose usage
    is impossible; others cost QUESTION_TOKENS; follow-up suggestions (no tools) cost nothing."""
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?"]', usage=FREE)
    first = body["messages"][-1]["content"]
    text = first if isinstance(first, str) else " ".join(b.get("text", "") for b in first)
    if "hostile" in text:
        return Reply(text="There are 16 airlines.", usage={**HONEST, "output_tokens": HOSTILE})
    return Reply(text="Hello! Ask me about NYC flights in 2013.", usage=HONEST)


def chat_attacker(body: dict[str, Any]) -> openai_api.Reply:
    """The same attacker behind Chat Completions (CompletionUsage's completion_tokens)."""
    return openai_api.Reply(text="There are 16 airlines.", usage={"completion_tokens": HOSTILE})


@pytest.fixture(scope="module")
def model() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(latency_s=MODEL_LATENCY_S).start()
    fake.always(attacker)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def engine_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data this process never opens, so the `agent web` under test claims it."""
    return copy_demo(tmp_path_factory, tmp_path_factory.mktemp("budget-data") / "clickhouse")


class Web:
    """`agent web` in a process of its own, on a free port, with JSON logs."""

    def __init__(self, tmp_path: Path, engine_data: Path, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "AGENT_DATA_DIR": str(tmp_path / "app"),
            "CLICKHOUSE_URL": f"chdb://{engine_data}",
            "ANTHROPIC_API_KEY": "test-key",
            "AGENT_LOG_FORMAT": "json",
            "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
            "AGENT_WEB_RATE_PER_MINUTE": "1000",
            "AGENT_DAILY_USER_TOKENS": str(DAILY_TOKENS),
        }
        command = [sys.executable, "-m", "process.cli", "web", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, env={**base, **env}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.log = ""

    async def ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.finish()
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"not serving in {timeout_s} s: {self.finish()}")

    def finish(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        out, err = self.process.communicate(timeout=60)
        self.log = out + err
        return f"exit {self.process.returncode}\n{self.log[-4000:]}"


async def ask(url: str, question: str) -> tuple[int, list[Sse], str]:
    """POST /api/chat: the status, the events of an accepted question, the body of a refused one."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        client.stream("POST", "/api/chat", json={"message": question}) as response,
    ):
        if response.status_code != 200:
            return response.status_code, [], (await response.aread()).decode()
        return 200, [event async for event in sse_events(response)], ""


def done(events: list[Sse]) -> dict[str, Any]:
    assert events and events[-1].event == "done", [e.event for e in events]
    return dict(events[-1].data["result"])


def tokens(result: dict[str, Any]) -> int:
    receipt = result["receipt"]
    return sum(receipt[k] for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"))


async def metrics(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        return (await client.get("/metrics")).text


async def test_impossible_usage_is_refused_and_spends_nothing_below_zero(
    model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    """A reply reporting output_tokens -100,000,000 made the day's spend negative (12 more questions ran
    under a 20,000-token budget) and crashed the token counter ("run failed unexpectedly")."""
    web = Web(tmp_path, engine_data, {"ANTHROPIC_BASE_URL": model.base_url})
    try:
        await web.ready()
        status, events, _ = await ask(web.url, "A hostile question: how many airlines?")
        answered = [await ask(web.url, f"Hello ({n})") for n in range(4)]
        scrape = await metrics(web.url)
    finally:
        report = web.finish()
    assert status == 200, report
    result = done(events)
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert result["outcome"] == "error" and len(errors) == 1, report
    assert errors[0].startswith(f"The model API reported an impossible token count (output_tokens = {HOSTILE})")
    assert "no answer (ended after" in result["receipt"]["text"] and tokens(result) == 0
    statuses = [status for status, _, _ in answered]
    assert statuses == [200, 200, 429, 429], "the budget still fits exactly two honest questions"
    assert "today's budget" in answered[2][2]
    assert "run failed unexpectedly" not in web.log and "impossible token count" in web.log, report
    counted = [line for line in scrape.splitlines() if line.startswith("agent_llm_tokens_total{")]
    assert counted and all(float(line.rsplit(" ", 1)[1]) >= 0 for line in counted), counted


async def test_impossible_usage_from_a_chat_completions_server_is_refused(engine_data: Path, tmp_path: Path) -> None:
    fake = FakeOpenAI().start()
    fake.always(chat_attacker)
    env = {"AGENT_MODEL": "openai:m", "AGENT_FOLLOWUP_MODEL": "openai:m", "OPENAI_BASE_URL": fake.base_url}
    env["OPENAI_API_KEY"] = fake.api_key
    web = Web(tmp_path, engine_data, env)
    try:
        await web.ready()
        status, events, _ = await ask(web.url, "How many airlines?")
    finally:
        report = web.finish()
        fake.stop()
    assert status == 200, report
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert done(events)["outcome"] == "error" and "(completion_tokens = -100000000)" in errors[0], report
    assert "run failed unexpectedly" not in web.log


async def test_questions_sent_at_once_spend_at_most_the_budget_and_one_question(
    model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    """Eight questions at once from one client whose budget fits two: all eight ran (3.6x spent), since
    spending was counted only when an answer finished. Each now holds a question's worth from its start:
    its budget plus one call (a 9,000 token window and 1,000 output), 11,000, so two run."""
    env = {
        "ANTHROPIC_BASE_URL": model.base_url,
        "AGENT_QUESTION_MAX_TOKENS": "1000",
        "AGENT_CONTEXT_TOKENS": "9000",
        "AGENT_MAX_TOKENS": "1000",
    }
    web = Web(tmp_path, engine_data, env)
    try:
        await web.ready()
        at_once = await asyncio.gather(*(ask(web.url, f"Hello ({n})") for n in range(8)))
        after = await ask(web.url, "Hello again")
    finally:
        report = web.finish()
    ran = [events for status, events, _ in at_once if status == 200]
    refused = [body for status, _, body in at_once if status == 429]
    spent = sum(tokens(done(events)) for events in ran)
    assert len(ran) == 2 and len(refused) == 6, report
    assert spent <= DAILY_TOKENS + QUESTION_TOKENS, spent
    assert all("still being answered" in body for body in refused), refused[0]
    assert after[0] == 429 and "today's budget" in after[2]


async def test_over_http_questions_at_once_spend_at_most_the_budget_and_one_question(
    engine_data: Path, tmp_path: Path
) -> None:
    """Review 3: AGENT_DAILY_USER_TOKENS 20,000 and AGENT_QUESTION_MAX_TOKENS 10,000; each answer's one
    model call reports 25,000 input tokens (a schema-heavy prompt; the question budget was only checked
    after a round of tools). Two questions held 10,000 each and both ran: 50,000 spent, the claim is
    30,000. A question's worth now covers one call past its budget (the default 200,000 window), so
    they run one at a time."""
    heavy = {**FREE, "input_tokens": 25_000, "output_tokens": 100}

    def script(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text='["Which carrier flew the most?"]', usage=FREE)
        return Reply(text="Hello! Ask me about NYC flights in 2013.", usage=heavy)

    fake = FakeAnthropic(latency_s=MODEL_LATENCY_S).start()
    fake.always(script)
    web = Web(tmp_path, engine_data, {"ANTHROPIC_BASE_URL": fake.base_url, "AGENT_QUESTION_MAX_TOKENS": "10000"})
    try:
        await web.ready()
        at_once = await asyncio.gather(*(ask(web.url, f"Hello ({n})") for n in range(8)))
    finally:
        report = web.finish()
        fake.stop()
    spent = sum(tokens(done(events)) for status, events, _ in at_once if status == 200)
    assert spent <= DAILY_TOKENS + 10_000, f"{spent:,} tokens spent by one client in one day\n{report[-500:]}"
    assert sorted(status for status, _, _ in at_once) == [200] + [429] * 7, report


async def test_without_a_question_budget_one_question_runs_at_a_time(
    model: FakeAnthropic, engine_data: Path, tmp_path: Path
) -> None:
    web = Web(tmp_path, engine_data, {"ANTHROPIC_BASE_URL": model.base_url})
    try:
        await web.ready()
        at_once = await asyncio.gather(*(ask(web.url, f"Hello ({n})") for n in range(8)))
    finally:
        report = web.finish()
    assert sorted(status for status, _, _ in at_once) == [200] + [429] * 7, report


async def test_a_dead_model_api_fails_fast_and_the_receipt_says_there_was_no_answer(
    engine_data: Path, tmp_path: Path
) -> None:
    """Connection refused showed a spinner for 37 s (retries at every layer) before "Could not reach the
    model API". The SDK logs each of its retries ("Retrying request to /v1/messages ..."): one, so two
    attempts (counted at the socket in tests/agent/llm/test_reach.py); and what the person sees."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    web = Web(tmp_path, engine_data, {"ANTHROPIC_BASE_URL": closed})
    try:
        await web.ready()
        status, events, _ = await ask(web.url, "How many airlines?")
    finally:
        report = web.finish()
    assert status == 200, report
    result = done(events)
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert errors == ["Could not reach the model API (connection refused); check its address and the network."]
    assert result["outcome"] == "error" and "no answer (ended after" in result["receipt"]["text"]
    assert " answer " not in result["receipt"]["text"].replace("no answer", "")
    assert web.log.count("Retrying request to /v1/messages") == 1, report
