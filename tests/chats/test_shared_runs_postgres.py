"""The shared run log on PostgreSQL makes each kind of write and read for many runs at once
(chats/shared_runs_postgres.py): counted in round trips to the server (the state's calls, each one thread hop
and one statement), a host's hundred runs cost a few, not a hundred; what each run wrote or read is its own,
a durable run another host holds stays fenced out in a group, and one bad item fails alone. A write
transaction takes the kit's lock in the round trip of its BEGIN."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from chats import runs as runs_module
from chats.runs import RunRegistry
from chats.shared_runs import SharedRunLog
from chats.state import ChatState
from chats.state_file import write_transaction
from chats.state_postgres import PostgresFile
from tests.chats.test_shared_runs import SteppedRunner
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)
RUNS = 20


@pytest.fixture
def state(postgres_server: PostgresServer) -> Iterator[ChatState]:
    state = ChatState(postgres_server.new_database())
    yield state
    state.close()


def _count_calls(state: ChatState, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The state's calls (each a thread hop and at least one round trip) from now on."""
    file = state.file
    assert isinstance(file, PostgresFile)
    calls: list[object] = []
    run = file.run

    async def counted(fn: Any) -> Any:
        calls.append(fn)
        return await run(fn)

    monkeypatch.setattr(file, "run", counted)
    return calls


def _log(state: ChatState) -> SharedRunLog:
    assert state.shared_runs is not None
    return state.shared_runs


async def test_many_runs_copies_go_in_a_few_round_trips_each_run_its_own(
    state: ChatState, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(state)
    ids = [f"run-{n}" for n in range(RUNS)]
    for run_id in ids:
        await log.open(run_id, "conversation")
    calls = _count_calls(state, monkeypatch)
    copies = [
        log.add(run_id, [(1, "answer", {"text": run_id}), (2, "answer", {"n": n})], beat=True)
        for n, run_id in enumerate(ids)
    ]
    assert await asyncio.gather(*copies) == [True] * RUNS
    assert len(calls) <= 2, f"{RUNS} runs' copies and beats made {len(calls)} round trips"
    for n, run_id in enumerate(ids):
        assert await log.events_after(run_id, 0) == [(1, "answer", {"text": run_id}), (2, "answer", {"n": n})]


async def test_many_readers_reads_go_in_a_few_round_trips_each_its_own_events(
    state: ChatState, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(state)
    ids = [f"run-{n}" for n in range(RUNS)]
    for run_id in ids:
        await log.open(run_id, "conversation")
        await log.add(run_id, [(n, "answer", {"text": f"{run_id} {n}"}) for n in (1, 2, 3)], beat=False)
    calls = _count_calls(state, monkeypatch)
    reads = [log.events_after(run_id, 1) for run_id in ids] + [log.events_after(ids[0], 2), log.events_after("none", 0)]
    found = await asyncio.gather(*reads)
    assert len(calls) <= 2, f"{len(reads)} reads made {len(calls)} round trips"
    assert found[:RUNS] == [[(n, "answer", {"text": f"{run_id} {n}"}) for n in (2, 3)] for run_id in ids]
    assert found[RUNS:] == [[(3, "answer", {"text": "run-0 3"})], []]


async def test_a_run_another_host_holds_is_fenced_out_of_a_group_the_others_written(state: ChatState) -> None:
    log = _log(state)
    for run_id in ("mine", "taken"):
        await log.open(run_id, "conversation")
    await state.file.run(_held_by("taken", "host-b"))
    copies = [
        log.add(run_id, [(1, "answer", {"text": run_id})], beat=True, holder="host-a") for run_id in ("mine", "taken")
    ]
    assert await asyncio.gather(*copies) == [True, False]
    assert await log.events_after("mine", 0) == [(1, "answer", {"text": "mine"})]
    assert await log.events_after("taken", 0) == [], "nothing written into the log of the host that holds it"


def _held_by(run_id: str, host: str) -> Any:
    """`run_id` kept for a takeover (chats/durable.py), held by `host`."""

    def write(c: Any) -> None:
        c.execute(
            "INSERT INTO durable_runs (run_id, conversation_id, interface, platform, question, origin, delivery, "
            "followups, holder, lease_until, created_at) VALUES (?, 'c', 'web', 'web', 'q', '{}', '{}', 1, ?, 0, 0)",
            (run_id, host),
        )

    return write


async def test_a_copy_that_cannot_be_written_fails_alone(state: ChatState) -> None:
    log = _log(state)
    for run_id in ("good", "bad"):
        await log.open(run_id, "conversation")
    # a NUL in a text field: PostgreSQL has none, so no statement carrying it is sent (a lone surrogate in
    # the data, once the example here, is escaped: tests/chats/test_attacks_review_notify.py)
    good = log.add("good", [(1, "answer", {"text": "fine"})], beat=False)
    bad = log.add("bad", [(1, "ans\x00wer", {"text": "x"})], beat=False)
    results = await asyncio.gather(good, bad, return_exceptions=True)
    assert results[0] is True and isinstance(results[1], Exception)
    assert await log.events_after("good", 0) == [(1, "answer", {"text": "fine"})]


async def test_idle_runs_beat_together_on_the_hosts_ticks(state: ChatState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs nobody elsewhere follows, waiting on their model: their beats fall on the host's ticks, one round
    trip for all of them a tick, not one per run."""
    monkeypatch.setattr(runs_module, "BEAT_S", 0.2)
    runner = SteppedRunner(1)
    registry = RunRegistry(runner, state.conversations, shared=state.shared_runs)
    for _ in range(RUNS):
        conversation = await state.conversations.create_conversation("hi")
        registry.start(conversation, "hi", [], platform="web", interface="web")
    await asyncio.sleep(0.5)  # every run opened and its `started` copied
    calls = _count_calls(state, monkeypatch)
    await asyncio.sleep(1.0)  # some five beats of each run
    beats = len(calls)
    for _ in range(RUNS):
        runner.step.put_nowait(None)
    await registry.shutdown()
    assert 3 <= beats <= 10, f"{RUNS} idle runs made {beats} round trips in five beats"


async def test_a_write_transaction_takes_the_lock_in_the_round_trip_of_its_begin(state: ChatState) -> None:
    def write(c: Any) -> int:
        conn = c._conn
        waits = [0]
        wait = conn.wait

        def counted(*args: Any, **kwargs: Any) -> Any:
            waits[0] += 1
            return wait(*args, **kwargs)

        conn.wait = counted
        try:
            with write_transaction(c):
                c.execute("UPDATE live_runs SET beat_at = 0 WHERE run_id = 'none'")
        finally:
            del conn.wait
        return waits[0]

    assert state.file.now(write) == 3, "BEGIN and the lock, the statement, COMMIT"
