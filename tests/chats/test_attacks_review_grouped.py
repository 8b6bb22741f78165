"""An outside review's attacks on the shared run log's grouped statements on PostgreSQL
(chats/shared_runs_postgres.py, chats/state_postgres.py `GroupCalls`): fencing a frozen host out of a run
another host took, and one item's trouble staying its own. Against the real server tests/postgres.py starts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from chats.state import ChatState
from chats.state_postgres import LOCKED
from tests.chats.test_attacks_review_durable_takeover import SlowResume, WakingRunner
from tests.chats.test_runs_takeover import OPS, StoppingRunner, _started_and_stopped, hosts, lapse
from tests.chats.test_shared_runs_postgres import _held_by, _log
from tests.postgres import PostgresServer

__all__ = ["hosts"]  # the fixture, shared with the takeover tests

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    return postgres_server.new_database()


@pytest.fixture
def state(url: str) -> Iterator[ChatState]:
    state = ChatState(url)
    yield state
    state.close()


def _claim(url: str, run_id: str, host: str) -> bool:
    """Another host's claim of the run, as chats/durable.py `claim_lapsed` makes it (under the write lock);
    False when it had to wait on a lock (the copy it races went first)."""
    with psycopg.connect(url, autocommit=True) as taker:
        taker.execute("SET lock_timeout = '3s'")
        try:
            with taker.transaction():
                taker.execute(LOCKED)
                taker.execute("UPDATE durable_runs SET holder = %s WHERE run_id = %s", (host, run_id))
        except psycopg.errors.LockNotAvailable:
            return False
    return True


async def _until_waiting_on_a_lock(url: str) -> None:
    """Until some statement of the server waits on a row lock (the frozen host's copy, stalled)."""
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            waiting = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if waiting is not None and waiting[0] > 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the copy never waited on the lock")


async def test_a_copy_stalled_past_a_takeover_is_written_into_the_run_the_taker_holds(url: str) -> None:
    """Finding (high): the grouped copy reads its fence (durable_runs.holder) in the statement's snapshot and
    takes no lock, where the single-run copy took the kit's write lock, which the takeover's claim
    (chats/durable.py `claim_lapsed`) also takes. A copy whose statement started before another host's claim
    committed, and commits after it (a stall on the server: here a row lock on the run's live_runs row, as a
    reader's touch or the taker's open holds), is written although the run is no longer its host's.
    Impact: the frozen host's event lands in the log of the run the taker holds after the taker read that log
    to go on from it; the taker's own event of that number is silently dropped (ON CONFLICT DO NOTHING), and
    the frozen host is told its copy was written, so it goes on as if it still held the run (its beat is
    written too). Readers see the stale host's answer in place of the taker's.
    Safe: the copy is fenced against any claim that committed before it does (lock the durable row with
    FOR SHARE in the fence, or take the write lock as before): False for the frozen host, the taker's event kept."""
    host_a, host_b = ChatState(url), ChatState(url)
    try:
        log_a, log_b = _log(host_a), _log(host_b)
        await log_a.open("r", "conversation")
        await host_a.file.run(_held_by("r", "host-a"))
        assert await log_a.add("r", [(1, "answer", {"from": "a"})], beat=True, holder="host-a")
        with psycopg.connect(url) as blocker:  # a transaction holding the run's live_runs row a while
            blocker.execute("SELECT 1 FROM live_runs WHERE run_id = 'r' FOR UPDATE")
            stale = asyncio.ensure_future(log_a.add("r", [(2, "answer", {"from": "a"})], beat=True, holder="host-a"))
            await _until_waiting_on_a_lock(url)
            claimed = await asyncio.to_thread(_claim, url, "r", "host-b")  # a fixed fence may make it wait
            so_far = await log_b.events_after("r", 0) if claimed else []  # the taker reads the log it goes on from
            blocker.rollback()
        written = await stale
        if not claimed:  # the copy went first, then the claim: also safe
            assert await asyncio.to_thread(_claim, url, "r", "host-b")
            so_far = await log_b.events_after("r", 0)
        mine = (so_far[-1][0] + 1, "answer", {"from": "b"})
        assert await log_b.add("r", [mine], beat=True, holder="host-b")
        found = await log_b.events_after("r", 0)
        assert found == [*so_far, mine], "the frozen host's copy was written into the run the taker holds"
        assert written == ((2, "answer", {"from": "a"}) in so_far), "the frozen host was told it still holds the run"
    finally:
        host_a.close()
        host_b.close()


async def test_a_frozen_host_whose_copy_fails_takes_the_run_the_taker_holds_out_of_the_log(hosts) -> None:
    """Finding (high): a host's sharing task (chats/runs.py `_share`) treats any failed copy as the end of its
    share and then closes the run in the shared log, unless the copy said it was fenced out. The close is not
    fenced at all (chats/shared_runs_postgres.py `_CLOSE`, SQLite's `_delete`: no holder). A host that froze
    past its lease wakes with its connections gone (the server dropped them meanwhile): its first copy raises
    instead of returning False, and it deletes the live_runs row and every event of the run the taker now
    drives. Impact: the taker's readers on other hosts find no run and no stored turn, and are ended with an
    error while the answer is still being written; the taker's later copies land in a log with no run row
    (nothing ever sweeps those events). Safe: a close, like a copy, is fenced: a host that does not hold a
    durable run never takes it out of the log (or a failed copy checks the lease before closing)."""
    runner_a, runner_b = StoppingRunner(), SlowResume()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert a._shared is not None and b._shared is not None and b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.task is not None
    await asyncio.sleep(0.3)  # the taker has opened the run in the shared log again

    tried = asyncio.Event()

    async def gone(*args: Any, **kwargs: Any) -> bool:  # the frozen host wakes: its pooled connections are gone
        tried.set()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    a._shared.add = gone  # type: ignore[method-assign]
    await asyncio.wait_for(tried.wait(), 10)  # its sharing task's next beat (every BEAT_S) fails
    await asyncio.sleep(0.5)  # and what it does then
    live = await b._shared.find(first.run_id)
    events = await b._shared.events_after(first.run_id, 0)
    runner_b.go.set()
    await asyncio.wait_for(asyncio.gather(taken.task, return_exceptions=True), 10)
    first.task.cancel() if first.task is not None else None
    await asyncio.gather(*([first.task] if first.task is not None else []), return_exceptions=True)
    assert live is not None and events, "the frozen host took the run the taker drives out of the shared log"


async def test_a_host_whose_clock_runs_ahead_sweeps_another_hosts_live_run_at_its_start(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding (medium): the shared log's heartbeats are stamped by the writing host's clock (`time.time()` in
    chats/shared_runs.py `add`, the grouped `beat_at`) and judged by another host's (`_forget_dead_owners` at
    every start, `LiveRun.owner_alive` for each reader), where leases use the database's clock precisely so
    that "a host whose own clock runs ahead takes nothing early" (docs/operations.md). A host whose clock is
    DEAD_AFTER_S (10 s) ahead, starting (a deploy, a restart of one worker), deletes every live run of the
    other hosts that is not durable, with their events, though their owners beat a moment ago.
    Impact: every reader following those runs from another host finds no run, and with no stored turn yet is
    ended with an error mid-answer; the owners go on copying into a log with no run row.
    Safe: beats stamped and judged by the database's clock (POSTGRES_NOW), as leases are."""
    owner = ChatState(url)
    try:
        log = _log(owner)
        await log.open("r", "conversation")
        assert await log.add("r", [(1, "answer", {"text": "so far"})], beat=True)
        ahead = time.time() + 15.0
        monkeypatch.setattr(time, "time", lambda: ahead)  # the starting host's clock
        ChatState(url).close()  # another host starts
        monkeypatch.undo()
        assert await log.find("r") is not None, "a live run whose owner beat a moment ago was swept"
        assert await log.events_after("r", 0) == [(1, "answer", {"text": "so far"})]
    finally:
        owner.close()


async def test_a_frozen_host_that_wakes_after_the_taker_finished_writes_orphan_events(hosts) -> None:
    """Finding (low): the fence only keeps a copy out while the run's durable row names another holder. Once
    the taker has finished the run (its row deleted, chats/durable.py `finish`) and closed its shared log, a
    host that froze past its lease and wakes copies its late events with no fence at all: they are written
    (the copy says True, so the frozen host goes on with the model, its queries and its spending, until its
    next checkpoint), under the run id of an answer already stored, in a log with no live_runs row, which
    nothing ever sweeps (`_forget_dead_owners` and the closes go by live_runs or by the closing host).
    Impact: rows that live forever in live_events, and a frozen host's wasted model work; a reader that
    reattaches meanwhile is woken by their notice for nothing.
    Safe: a host that does not hold a durable run (no longer any row for it, and it was not the one that
    finished it) writes nothing into its log and stops."""
    runner_a, runner_b = WakingRunner(), SlowResume()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert a._shared is not None and b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.task is not None
    runner_b.go.set()
    await asyncio.wait_for(asyncio.gather(taken.task), 10)  # the taker answered, stored, and closed the log
    await asyncio.sleep(0.5)
    copied = asyncio.Event()
    add = a._shared.add

    async def watched_add(*args: Any, **kwargs: Any) -> bool:
        if args[1]:  # a copy with events
            copied.set()
        return await add(*args, **kwargs)

    a._shared.add = watched_add  # type: ignore[method-assign]
    runner_a.more.set()  # the first host wakes, its round going on
    for _ in range(200):  # its sharing task copies its late events, or a beat already found it fenced out
        if copied.is_set() or first.superseded:
            break
        await asyncio.sleep(0.05)
    assert copied.is_set() or first.superseded, "the frozen host neither copied nor stopped"
    await asyncio.sleep(0.5)
    left = await a._shared.events_after(first.run_id, 0)
    if first.task is not None:
        first.task.cancel()
        await asyncio.gather(first.task, return_exceptions=True)
    assert left == [], "a frozen host wrote into the log of a run another host had finished"


async def test_a_cancelled_copy_still_in_a_group_is_written_after_its_runs_close(state: ChatState, url: str) -> None:
    """Finding (low): a copy whose caller is cancelled (chats/runs.py `_checkpointed` awaits `_flush_shared`
    inside the run's task, which a person's stop, an abandon or a lost lease cancels) stays in its group and is
    written whenever that group gets through; `handle.sharing` is released at once, so the run's last copy and
    its close (a group call of another kind, in lanes of their own) may commit first. The group held up by
    another run (here a row lock on that run's live_runs row) then writes the cancelled copy's events after
    the close: rows under a finished run with no live_runs row, never swept, and a notice for a run that ended.
    Safe: a run's close is not overtaken by its own earlier copies (a cancelled copy not yet written is dropped,
    or the close waits for the run's copies on their way)."""
    log = _log(state)
    for run_id in ("slow", "r"):
        await log.open(run_id, "conversation")
    with psycopg.connect(url) as blocker:
        blocker.execute("SELECT 1 FROM live_runs WHERE run_id = 'slow' FOR UPDATE")
        held_up = asyncio.ensure_future(log.add("slow", [(1, "answer", {"text": "slow"})], beat=True))
        checkpoint = asyncio.ensure_future(log.add("r", [(1, "answer", {"text": "one"})], beat=True))
        await _until_waiting_on_a_lock(url)  # both in one group, held up by the other run's row
        checkpoint.cancel()  # the run is stopped
        last = [(1, "answer", {"text": "one"}), (2, "done", {})]
        assert await asyncio.wait_for(log.add("r", last, beat=False), 15)
        await asyncio.wait_for(log.close("r"), 15)  # the run ended: its log is taken out
        blocker.rollback()
    await held_up
    await asyncio.sleep(0.2)
    with psycopg.connect(url, autocommit=True) as c:
        left = c.execute("SELECT count(*) FROM live_events WHERE run_id = 'r'").fetchone()
    assert left == (0,), "a cancelled copy was written after its run's close"


async def test_reads_whose_readers_left_still_queue_and_run_while_postgres_is_slow(state: ChatState, url: str) -> None:
    """Finding (medium): `GroupCalls` keeps every call in its queue until a group takes it, its caller cancelled
    or not, and takes the whole queue as one group. While PostgreSQL is slow (here a table lock holds every
    lane's read), a reader that connects and leaves again (a flaky client's reconnect loop, or a signed-in
    person opening and closing event streams on purpose) adds a read each time that is never dropped: the
    queue grows without bound, and once the server answers, all of them are sent in one statement, the work
    done for nobody, ahead of the readers still there.
    Safe: a call whose caller was cancelled before its group left is dropped (and the queue bounded), so the
    work stays in proportion to the readers actually waiting."""
    log = _log(state)
    await log.open("r", "conversation")
    assert await log.add("r", [(1, "answer", {"text": "one"})], beat=False)
    assert log._grouped is not None
    reads = log._grouped.reads
    sent: list[int] = []
    grouped = reads._fn

    def counted(c: Any, items: list[Any]) -> Any:
        sent.append(len(items))
        return grouped(c, items)

    reads._fn = counted  # type: ignore[method-assign]
    with psycopg.connect(url) as blocker:
        blocker.execute("LOCK TABLE live_events IN ACCESS EXCLUSIVE MODE")  # the server slow for a while
        staying = []
        for _ in range(4):  # a lane each, all held up
            staying.append(asyncio.ensure_future(log.events_after("r", 0)))
            await asyncio.sleep(0.05)
        await _until_waiting_on_a_lock(url)
        for _ in range(10):  # readers come and go
            leaving = [asyncio.ensure_future(log.events_after("r", 0)) for _ in range(100)]
            await asyncio.sleep(0)
            for read in leaving:
                read.cancel()
            await asyncio.gather(*leaving, return_exceptions=True)
        blocker.rollback()
    found = await asyncio.gather(*staying)
    assert found == [[(1, "answer", {"text": "one"})]] * 4
    assert await log.events_after("r", 0) == [(1, "answer", {"text": "one"})]
    assert sum(sent) <= 50, f"{sum(sent)} reads sent for 5 readers still there (in groups of {sent})"
