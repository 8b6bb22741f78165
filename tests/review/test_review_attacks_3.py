"""Review 3: reproductions of what the outside review broke. Each test states the claim it breaks and
fails while the fault is there."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import threading
from pathlib import Path

import pytest

from agent.llm import (
    BadUsage,
    openai_chat,
)
from agent.llm import anthropic as anthropic_llm
from agent.receipts import Receipt
from chats.daily_budgets import RESERVATION_TTL_S, SCHEMA, DailyBudget, Reservation
from chats.state_file import SqliteFile
from tests.conftest import Recorder
from tests.end_to_end.test_budget_attacks import DAILY_TOKENS, FREE, Web, ask, done, tokens
from tests.fakes.anthropic_api import FakeAnthropic, Reply

# --- 1. daily budgets: spending past the budget plus one question's worth ---


BUDGET, QUESTION = 20_000, 10_000
NOON = dt.datetime(2026, 11, 26, 12, 30, tzinfo=dt.UTC).timestamp()
BEFORE_MIDNIGHT = dt.datetime(2026, 11, 26, 23, 59, 50, tzinfo=dt.UTC).timestamp()


def _shared(tmp_path: Path) -> SqliteFile:
    file = SqliteFile(tmp_path / "state.sqlite3")
    file.now(lambda c: c.executescript(SCHEMA))
    return file


async def _spent_today(budget: DailyBudget, key: str) -> int:
    return (await budget._read(budget._day(), key)).tokens


@pytest.mark.parametrize("where", ["memory", "shared file"])
async def test_a_question_that_runs_across_midnight_is_not_held_on_the_day_it_spends(
    where: str, tmp_path: Path
) -> None:
    """A reservation is held on the day it started (`day = ?` in every read), but its receipt is counted
    on the day it settles. Questions started at 23:59:50 hold nothing on the next day; questions started
    at 00:00:00 then take the whole new budget too, and all of them settle onto the new day."""
    now = [BEFORE_MIDNIGHT]
    file = _shared(tmp_path) if where == "shared file" else None
    try:
        budget = DailyBudget(
            max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, file=file, clock=lambda: now[0]
        )
        late = await asyncio.gather(*(budget.reserve("web:1.2.3.4") for _ in range(8)))
        now[0] += 15  # 00:00:05 the next day
        early = await asyncio.gather(*(budget.reserve("web:1.2.3.4") for _ in range(8)))
        ran = [b for b in (*late, *early) if isinstance(b, Reservation)]
        await asyncio.gather(*(budget.settle(b, Receipt(input_tokens=QUESTION)) for b in ran))
        spent = await _spent_today(budget, "web:1.2.3.4")
    finally:
        if file is not None:
            file.close()
    assert spent <= BUDGET + QUESTION, f"{len(ran)} questions ran, {spent:,} tokens counted on one day"


async def test_a_question_running_past_the_reservation_ttl_lets_the_next_ones_overspend() -> None:
    """RESERVATION_TTL_S (1 h) is shorter than a question may run: AGENT_MAX_ROUNDS (10) model calls of
    AGENT_LLM_TIMEOUT_S (120 s) each with AGENT_LLM_MAX_RETRIES (4) retries is 100 minutes of model time
    alone, and nothing ends a run sooner. Once the hold of a running question lapses, the asker's next
    questions reserve the same budget again."""
    now = [NOON]
    budget = DailyBudget(max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, clock=lambda: now[0])
    first = [await budget.reserve("u") for _ in range(2)]
    assert all(isinstance(b, Reservation) for b in first)
    now[0] += RESERVATION_TTL_S + 1  # the first two are still running (a slow model)
    second = [await budget.reserve("u") for _ in range(2)]
    ran = [b for b in (*first, *second) if isinstance(b, Reservation)]
    for booked in ran:
        await budget.settle(booked, Receipt(input_tokens=QUESTION))
    spent = await _spent_today(budget, "u")
    assert spent <= BUDGET + QUESTION, f"{len(ran)} questions ran at once, {spent:,} tokens spent"


async def test_the_per_question_budget_does_not_bound_what_a_reservation_holds() -> None:
    """A question reserves AGENT_QUESTION_MAX_TOKENS, but that budget is checked only after a round of tool
    calls (agent/pipeline/loop.py `_loop`), and past it the loop still makes the synthesis call and the
    follow-up call: a question's first model call alone may report any count up to MAX_USAGE_TOKENS.
    Two questions at once, each of whose first reply reports 60,000 tokens (a long schema in the prompt),
    both start under a 20,000 budget with a 10,000 question budget: 120,000 spent, 4x the claim."""
    budget = DailyBudget(max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, clock=lambda: NOON)
    booked = await asyncio.gather(*(budget.reserve("u") for _ in range(8)))
    ran = [b for b in booked if isinstance(b, Reservation)]
    await asyncio.gather(*(budget.settle(b, Receipt(input_tokens=60_000)) for b in ran))
    spent = await _spent_today(budget, "u")
    assert spent <= BUDGET + QUESTION, f"{len(ran)} questions ran at once, {spent:,} tokens spent"


# --- 4. the CLI asking a running server: moved to tests/process/test_running_server_attacks.py ---


# --- 1b. provider usage checked where it enters: shapes that come out as zero tokens ---


_MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": "end_turn", "stop_sequence": None,
}  # fmt: skip
_COMPLETION = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
}  # fmt: skip


@pytest.mark.parametrize("usage", ["90000", 90000, [90000, 1000], "lots"])
def test_a_messages_api_usage_that_is_not_an_object_is_refused_not_counted_as_zero(usage: object) -> None:
    """The SDK builds its models without validating (construct_type): `"usage": "90000"` arrives as a
    str, every getattr of it is None, and None is read as "not reported", 0. A gateway that sends usage
    in any shape but an object answers for free under every daily budget."""
    from anthropic._models import construct_type
    from anthropic.types import Message, RawMessageStreamEvent

    message = construct_type(type_=Message, value={**_MESSAGE, "usage": usage})
    with pytest.raises(BadUsage):
        anthropic_llm._usage(message.usage)
    builder = anthropic_llm._TurnBuilder()
    start = {"type": "message_start", "message": {**_MESSAGE, "usage": usage}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}
    with pytest.raises(BadUsage):
        for event in (start, delta):
            builder.add(construct_type(type_=RawMessageStreamEvent, value=event))


@pytest.mark.parametrize(
    "usage",
    [
        "90000",
        90000,
        {"prompt_tokens": None, "completion_tokens": None, "total_tokens": 10**12},  # only the total, absurd
        {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": -(10**9)},
    ],
)
def test_a_chat_completions_usage_of_odd_shape_or_absurd_total_is_refused(usage: object) -> None:
    from openai._models import construct_type
    from openai.types.chat import ChatCompletion

    completion = construct_type(type_=ChatCompletion, value={**_COMPLETION, "usage": usage})
    with pytest.raises(BadUsage):
        openai_chat._usage(completion.usage)


# --- 1c. a question cancelled mid-answer: what the provider already billed is not counted ---


async def test_a_question_cancelled_mid_stream_counts_the_input_the_provider_reported(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """message_start already reported 90,000 input tokens (billed by the provider) when the asker goes
    away (a closed tab past the reattach grace, Ctrl-C in `agent ask`): the turn never completes, so
    `record_model_call` never runs and the receipt, hence the daily budget, counts 0. Asking and leaving
    just before each answer ends spends the provider's tokens at no cost to the asker's budget."""
    gate = threading.Event()
    text = "EWR had the most departures of the three airports in the year"
    fake_anthropic.script(Reply(text=text, pauses={3: gate}, usage={"input_tokens": 90_000}))
    app = make_app()
    recorder = Recorder()
    task = asyncio.create_task(app.runner.run("Which airport?", on_event=recorder, followups=False))
    try:
        for _ in range(500):
            if recorder.answer_text():
                break
            await asyncio.sleep(0.02)
        assert recorder.answer_text(), recorder.kinds
        task.cancel()
        result = await task
    finally:
        gate.set()
    assert result.receipt is not None
    spent = result.receipt.input_tokens + result.receipt.cache_read_tokens + result.receipt.cache_creation_tokens
    assert spent >= 90_000, f"the receipt counts {spent} input tokens of the 90,000 reported"


async def test_a_busy_state_file_does_not_turn_the_daily_budget_off(tmp_path: Path) -> None:
    """`reserve` catches sqlite3.OperationalError and lets the question through with no hold (`id` None),
    and `spend` then drops the receipt the same way: while the shared file is busy past its 10 s timeout
    (another worker's long write, a backup holding a lock) — and for every other OperationalError: disk
    full, a read-only file, a missing table — every question of every asker runs, none is counted."""
    import sqlite3

    file = _shared(tmp_path)
    blocker = sqlite3.connect(tmp_path / "state.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        budget = DailyBudget(
            max_tokens=QUESTION, max_cost_usd=None, question_tokens=QUESTION, file=file, clock=lambda: NOON
        )
        booked = await asyncio.gather(*(budget.reserve("u") for _ in range(2)))  # each waits 10 s
    finally:
        blocker.rollback()
        blocker.close()
        file.close()
    ran = [b for b in booked if isinstance(b, Reservation)]
    assert len(ran) <= 1, f"{len(ran)} of 2 questions ran at once under a budget that fits one"


# --- 1d. the same over HTTP: a real `agent web`, one client, questions sent at once ---


async def test_over_http_questions_at_once_spend_at_most_the_budget_and_one_question(tmp_path: Path) -> None:
    """AGENT_DAILY_USER_TOKENS 20,000 and AGENT_QUESTION_MAX_TOKENS 10,000; each answer's one model call
    reports 25,000 input tokens (a schema-heavy prompt; the question budget is only checked after a
    round of tools). Two questions hold 10,000 each and both run: 50,000 spent, the claim is 30,000."""
    import subprocess as sp

    heavy = {**FREE, "input_tokens": 25_000, "output_tokens": 100}

    def script(body: dict[str, object]) -> Reply:
        if not body.get("tools"):
            return Reply(text='["Which carrier flew the most?"]', usage=FREE)
        return Reply(text="Hello! Ask me about NYC flights in 2013.", usage=heavy)

    data = tmp_path / "data"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    loaded = sp.run(
        [sys.executable, "-m", "process.cli", "demo", "load"],
        env={**env, "AGENT_DATA_DIR": str(data)}, cwd=data.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    fake = FakeAnthropic(latency_s=1.0).start()
    fake.always(script)
    web = Web(
        tmp_path, data / "clickhouse", {"ANTHROPIC_BASE_URL": fake.base_url, "AGENT_QUESTION_MAX_TOKENS": "10000"}
    )
    try:
        await web.ready()
        at_once = await asyncio.gather(*(ask(web.url, f"Hello ({n})") for n in range(8)))
    finally:
        report = web.finish()
        fake.stop()
    spent = sum(tokens(done(events)) for status, events, _ in at_once if status == 200)
    assert spent <= DAILY_TOKENS + 10_000, f"{spent:,} tokens spent by one client in one day\n{report[-500:]}"


def test_a_stream_whose_cumulative_counts_go_down_is_refused() -> None:
    """message_delta's counts are cumulative (the code says so), so one lower than message_start's is as
    impossible as a negative one; it is taken instead: 90,000 input tokens reported at the start are
    counted as 0 when the last delta says `input_tokens: 0`."""
    from anthropic._models import construct_type
    from anthropic.types import RawMessageStreamEvent

    builder = anthropic_llm._TurnBuilder()
    start = {"type": "message_start", "message": {**_MESSAGE, "usage": {"input_tokens": 90_000, "output_tokens": 1}}}
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 0, "output_tokens": 5, "cache_read_input_tokens": 0},
    }
    try:
        for event in (start, delta):
            builder.add(construct_type(type_=RawMessageStreamEvent, value=event))
    except BadUsage:
        return
    assert builder.turn(0).usage.input_tokens >= 90_000, builder.turn(0).usage
