"""A second outside review's attacks on durable runs' store (chats/durable.py), on both backends: a host that
lost its run still ending it, and a checkpoint whose parts are not all there. Each test asserts the safe
behaviour; those that fail name a finding of the review."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from agent.reports.model import ReportRequest
from agent.runner import (
    AnswerEvent,
    Checkpoint,
    CheckpointSink,
    EventSink,
    ExecutingEvent,
    ResultEvent,
    RunResult,
    ignore_events,
)
from chats.audit import Origin
from chats.durable import DurableRun, DurableRuns, ResumeLimits
from chats.state_file import StateFile
from tests.chats.test_runs_takeover import OPS, StoppingRunner, _started_and_stopped, hosts, lapse

__all__ = ["hosts"]  # two hosts as two run registries over one state (tests/chats/test_runs_takeover.py)

LEASE_S = 30.0  # long: a test lapses a lease by writing it, never by waiting
QUESTION = "Which airport?"


@pytest.fixture
def stores(state_files: Callable[[], StateFile]) -> Callable[[str], DurableRuns]:
    """Each host's store over its own connection to the one state."""
    return lambda name: DurableRuns(state_files(), lease_s=LEASE_S, host=name)


def kept(run_id: str = "r1") -> DurableRun:
    return DurableRun(
        run_id=run_id,
        conversation_id="c1",
        interface="web",
        platform="web",
        question=QUESTION,
        policy="ops",
        origin=Origin("web:alice", "web", "", "ops"),
    )


def lapse_store(store: DurableRuns, run_id: str = "r1") -> None:
    """The holder stopped renewing long enough ago (its host froze or died)."""
    store._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", (run_id,)))


def parts(store: DurableRuns, run_id: str = "r1") -> list[tuple[int, str]]:
    rows = store._file.now(
        lambda c: c.execute(
            "SELECT seq, part FROM durable_run_parts WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    )
    return [(seq, part) for (seq, part) in rows]


def tool_result(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}]}


async def test_a_host_that_lost_the_run_cannot_forget_it_under_the_host_that_took_it(stores) -> None:
    """Finding (fencing, medium): `DurableRuns.finish` deletes the run's row and parts by run id alone, not
    `AND holder = ?` as `save`, `renew`, `release` and `update_delivery` do. The registry's `_end` checks
    `_still_held` and only then stores the turn and calls `finish`, in separate transactions: a host that
    freezes between the check and the delete (the threat model's freeze-and-wake) wakes and deletes the row and
    every part of the run another host has since taken over and is resuming. The taker's next checkpoint then
    finds no row (`save` returns False), so it believes it lost the lease and stops silently; its asker's
    budget hold is never settled, and, should it die, no host can take the run over again (its row is gone).
    Safe: `finish` deletes only while this host holds the run (`WHERE run_id = ? AND holder = ?`, in one
    transaction with the turn's store, or fenced by the same check)."""
    a, b = stores("a"), stores("b")
    await a.begin(kept())
    assert await a.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=1, thinking=["one"]))
    lapse_store(a)
    taken = await b.claim_lapsed({"web"})
    assert taken is not None and await b.held_here("r1")
    await a.finish("r1")  # the frozen host wakes past its `_still_held` check and ends the run it lost
    assert await b.held_here("r1"), "the host that lost the run deleted the row of the host that took it"
    assert parts(b), "the taker's checkpoint went with it"
    assert await b.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=2, thinking=["one", "two"]))


async def test_a_part_missing_from_the_middle_ends_the_run_instead_of_folding_a_checkpoint_it_never_had(stores) -> None:
    """Finding (torn store, low): `fold` (agent/checkpoint_form.py) detects a missing part only when a later
    part keeps more items than the parts before it hold. A part that rewrote from an earlier message (a result
    trimmed to save context) followed by one that rewrites from a later message folds without it into a
    checkpoint the run never had: here the tool result the model was sent trimmed is resumed whole (and a
    result it was shown only as a placeholder would be shown again), with nothing telling the reader or the
    log. The parts carry no sequence the fold checks (`seq` is read only to order them). Safe: each part
    names the part it follows (its seq, or the rounds of the checkpoint before it) and a gap makes the run
    unreadable, so it ends with a message."""
    a, b = stores("a"), stores("b")
    await a.begin(kept())
    whole, trimmed = "Q1: " + "| JFK | 1 |\n" * 40, "Q1: | JFK | 1 |\n…[452 characters trimmed]…\n"
    question = {"role": "user", "content": QUESTION}
    rounds = [
        [question, tool_result(whole), {"role": "assistant", "content": "Looking."}],
        [question, tool_result(trimmed), {"role": "assistant", "content": "Looking."}],  # rewrites from 1
        [question, tool_result(trimmed), {"role": "assistant", "content": "Looking again."}],  # from 2
    ]
    for number, messages in enumerate(rounds, 1):
        assert await a.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=number, messages=messages))
    written = parts(a)
    assert len(written) == 3
    middle = written[1][0]
    a._file.now(lambda c: c.execute("DELETE FROM durable_run_parts WHERE run_id = 'r1' AND seq = ?", (middle,)))
    lapse_store(a)
    taken = await b.claim_lapsed({"web"})
    assert taken is not None
    saved = taken.saved()
    assert saved is None, f"a run with a part missing resumed, its model now sent {str(saved.messages[1])[:90]}"


def executing(query_id: str, sql: str) -> ExecutingEvent:
    return ExecutingEvent(query_id=query_id, question="Departures by airport", sql=sql)


def result(query_id: str, origin: str) -> ResultEvent:
    return ResultEvent(
        query_id=query_id, columns=["origin"], rows=[[origin]], row_count=1, has_more=False, error=None, hint=None,
        elapsed_ms=1,
    )  # fmt: skip


class LostRound(StoppingRunner):
    """The first host's run: round one (Q1) and its checkpoint; then round two runs Q2, which readers are
    shown (its events reach the shared log), and the host dies before round two's checkpoint. Resumed (on the
    taker), round two is made again as the pipeline makes it: its first query numbered from the checkpoint's
    `query_ids_taken` (agent/pipeline/state.py `take_query_id`), so Q2 again, with other SQL this time."""

    async def run(self, question: str, **kwargs: Any) -> RunResult:
        on_event: EventSink = kwargs.get("on_event", ignore_events)
        checkpoint: CheckpointSink = kwargs["checkpoint"]
        resume: Checkpoint | None = kwargs.get("resume")
        if resume is not None:
            query_id = f"Q{resume.query_ids_taken + 1}"
            await on_event(executing(query_id, "SELECT origin FROM nycflights13.flights WHERE dep_delay > 60"))
            await on_event(result(query_id, "EWR"))
            await on_event(AnswerEvent(text=f"EWR [{query_id}]."))
            return RunResult(question=question, answer=f"EWR [{query_id}].", resumed=resume.resumed + 1)
        await on_event(executing("Q1", "SELECT count() FROM nycflights13.flights"))
        await on_event(result("Q1", "336776"))
        await checkpoint(Checkpoint(question=question, policy="ops", rounds=1, query_ids_taken=1))
        await on_event(executing("Q2", "SELECT origin FROM nycflights13.flights WHERE carrier = 'UA'"))
        await on_event(result("Q2", "JFK"))
        self.checkpointed.set()
        await asyncio.Event().wait()  # the host died
        raise AssertionError("unreachable")


async def test_a_resumed_run_does_not_reuse_the_query_ids_its_lost_round_already_showed(hosts) -> None:
    """Finding (a resumed run shows results it did not use, medium): the taker's log is the shared log, which
    holds the events of the round the first host lost (they are copied as they happen, not only at a
    checkpoint). The takeover discards only the lost round's answer text (an `answer` restart); its
    `executing` and `result` events stay, and the resumed round numbers its queries from the checkpoint's
    counter again, so the one log, and the turn stored from it, holds two different Q2s: the lost round's
    (SQL and rows the answer never used) and the resumed round's. A reader, live or replaying the stored
    turn, is shown the lost Q2's table under the answer's [Q2] citation. Safe: the taker starts numbering
    past every query id its log already shows (or the log marks the lost round's query events as discarded),
    so one id names one query."""
    runner_a, runner_b = LostRound(), LostRound()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.task is not None
    await asyncio.wait_for(asyncio.gather(taken.task), 10)
    stored = await b._store.run_events(first.run_id)
    assert stored is not None
    sql_by_id: dict[str, set[str]] = {}
    for row in stored[1]:
        if row["event"] == "executing":
            sql_by_id.setdefault(row["data"]["query_id"], set()).add(row["data"]["sql"])
    assert all(len(sqls) == 1 for sqls in sql_by_id.values()), f"one query id names two queries: {sql_by_id}"


class Resumes(StoppingRunner):
    """The taker's run: resumed, it thinks a while (`go`) before it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def run(self, question: str, **kwargs: Any) -> RunResult:
        resume = kwargs["resume"]
        assert resume is not None
        await self.go.wait()
        await kwargs["on_event"](AnswerEvent(text="EWR [Q1]."))
        return RunResult(question=question, answer="EWR [Q1].", resumed=resume.resumed + 1)


async def test_a_host_that_freezes_after_its_hold_check_does_not_store_over_the_run_another_host_took(
    hosts, monkeypatch
) -> None:
    """Finding (fencing, medium): a run's end (chats/runs.py `_end`) checks `_still_held`, then stores the
    turn, then forgets the durable row (`finish`), each its own transaction, none fenced by the holder. A host
    that freezes right after the check (its answer ready) wakes after another host took the run over: it
    stores its answer as the run's turn, and its `finish` deletes the taker's row and parts. The taker, the
    rightful holder, then finds the run no longer held and ends silently: the person gets the frozen host's
    answer, the taker's work is thrown away, the taker's `on_done` (the asker's budget settlement) is never
    called, and a crash of the taker meanwhile would leave nothing to take over. Safe: the turn is stored and
    the row deleted in one transaction that checks `holder = this host` (as `save` does), so a host that lost
    the run writes nothing."""
    runner_a, runner_b = StoppingRunner(answers_when_released=True), Resumes()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    frozen, woken = asyncio.Event(), asyncio.Event()
    real_save = a._store.save_turn

    async def freezes_first(*args: Any) -> None:  # the host froze between its hold check and its store
        frozen.set()
        await woken.wait()
        await real_save(*args)

    monkeypatch.setattr(a._store, "save_turn", freezes_first)
    runner_a.more.set()  # the first host's answer is ready; it checks it still holds the run (it does)
    await asyncio.wait_for(frozen.wait(), 10)
    lapse(a)  # frozen past its lease
    assert b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.task is not None
    woken.set()  # the first host wakes
    assert first.task is not None
    await asyncio.wait_for(asyncio.gather(first.task), 10)
    runner_b.go.set()
    await asyncio.wait_for(asyncio.gather(taken.task), 10)
    stored = await b._store.run_events(first.run_id)
    assert stored is not None
    assert "A late answer." not in str(stored[1]), "the host that lost the run stored its answer as the turn"
    assert not taken.superseded, "the host holding the run was made to drop it"


class ReportRounds(StoppingRunner):
    """A report run. First host: round one's checkpoint, then frozen (`more`); woken, its round two's
    checkpoint (thinking "frozen"). The taker: its own round two's checkpoint (thinking "taker"), then it
    thinks on (`go`) and finishes."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.woke_and_checkpointed = asyncio.Event()

    async def run(self, question: str, **kwargs: Any) -> RunResult:
        checkpoint: CheckpointSink = kwargs["checkpoint"]
        resume: Checkpoint | None = kwargs.get("resume")
        assert kwargs.get("report") is not None
        if resume is not None:
            await checkpoint(resume.model_copy(update={"rounds": 2, "thinking": ["taker"]}))
            self.checkpointed.set()
            await self.go.wait()
            return RunResult(question=question, answer="The report.", resumed=resume.resumed + 1)
        first = Checkpoint(question=question, policy="ops", rounds=1, thinking=["one"])
        await checkpoint(first)
        self.checkpointed.set()
        await self.more.wait()
        try:
            await checkpoint(first.model_copy(update={"rounds": 2, "thinking": ["frozen"]}))
        finally:
            self.woke_and_checkpointed.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_frozen_host_writes_no_report_checkpoint_into_the_report_run_another_host_took(hosts) -> None:
    """Finding (fencing, medium): a report run's checkpoints go to two sinks (chats/runs.py `_each`): the
    durable run's (fenced by holder) and the report's row (chats/reports.py `keep_checkpoint`, fenced only by
    `run_id`). A takeover keeps the run id, so the report's fence cannot tell the frozen first host from the
    taker: the first host, woken, finds its lease gone at the durable sink, but its `_lost_lease` only asks
    for a cancel, and the report sink's write (a thread already handed the UPDATE) lands anyway, over the
    taker's checkpoint. The report's stored checkpoint, what a Resume and a restarted host go on from, is
    then the lost copy's, forked from what the taker has done and shown. Safe: a host that lost the run
    writes nothing to the report either (its sink checks the durable hold, or runs only after a successful
    durable save, or the report row is fenced by the holder)."""
    runner_a, runner_b = ReportRounds(), ReportRounds()
    a, b = hosts(runner_a), hosts(runner_b)
    conversation = await a._store.create_conversation(QUESTION, owner="person:ann")
    first = a.start(
        conversation, QUESTION, [], platform="web", interface="web", origin=Origin("person:ann", "web", "", ""),
        policy=OPS, report=ReportRequest(),
    )  # fmt: skip
    await asyncio.wait_for(runner_a.checkpointed.wait(), 10)
    lapse(a)
    assert b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.report_id == first.report_id
    await asyncio.wait_for(runner_b.checkpointed.wait(), 10)
    stored = await b.reports.checkpoint(first.report_id)
    assert stored is not None and stored.thinking == ["taker"]
    runner_a.more.set()  # the first host wakes and checkpoints its round two
    await asyncio.wait_for(runner_a.woke_and_checkpointed.wait(), 10)
    await asyncio.sleep(0.5)  # its writes, handed to a thread, land
    stored = await b.reports.checkpoint(first.report_id)
    assert stored is not None and stored.thinking == ["taker"], f"the report now goes on from {stored.thinking}"
    runner_b.go.set()
    await asyncio.wait_for(asyncio.gather(taken.task, return_exceptions=True), 10)


class ReportThenDies(StoppingRunner):
    """A report run: its first checkpoint, then its host dies."""

    async def run(self, question: str, **kwargs: Any) -> RunResult:
        await kwargs["checkpoint"](Checkpoint(question=question, policy="ops", rounds=1))
        self.checkpointed.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_one_torn_report_row_does_not_stop_every_host_taking_over_every_other_run(hosts) -> None:
    """Finding (availability, high): a takeover reads the report a run was writing (chats/runs.py `_report_of`,
    chats/reports.py `_stored`) before it looks at whether the run may be resumed, and a report row this
    release cannot read (a torn `request` or `delivery`, another release's request) raises there. `take_over`
    then releases the run (`lease_until = 0`), and `claim_lapsed` takes the lapsed run of the smallest lease
    first: every host's watcher, every third of a lease, claims that same run, fails, and leaves its loop
    (`watch`), so no run of any dead host behind it is ever taken over again, and the torn run itself never
    ends (its reader waits: `holds` stays true), its `takeovers` counting up for ever past AGENT_RUN_MAX_RESUMES.
    Safe: a run whose report cannot be read ends with a message like any unreadable run (`_stored` failures
    made `unreadable`, or the takeover's failure counted so the run is refused after its resumes), and one
    failed takeover does not stop the watcher taking the others."""
    runner_a, runner_b, runner_c = ReportThenDies(), StoppingRunner(), StoppingRunner()
    a, b, c = hosts(runner_a), hosts(runner_b), hosts(runner_c)
    assert a._durable is not None and b._durable is not None and c._durable is not None
    conversation = await a._store.create_conversation(QUESTION, owner="person:ann")
    report = a.start(
        conversation, QUESTION, [], platform="web", interface="web", origin=Origin("person:ann", "web", "", ""),
        policy=OPS, report=ReportRequest(),
    )  # fmt: skip
    await asyncio.wait_for(runner_a.checkpointed.wait(), 10)
    a._store.file.now(
        lambda conn: conn.execute("UPDATE reports SET request = '{\"budget\": ' WHERE id = ?", (report.report_id,))
    )
    lapse(a)  # the report's host died, its report row torn

    async def take_over(kept: DurableRun) -> None:  # as process/service.py does
        await b.take_over(kept, OPS, refused=ResumeLimits(2, 900).why_not(kept))

    b._durable.lease_s = 0.6  # its watcher looks every 0.2 s
    watcher = asyncio.create_task(b._durable.watch(take_over, {"web"}))
    try:
        await asyncio.sleep(1.0)  # the torn run's takeover has failed, more than once
        healthy = await _started_and_stopped(c, runner_c)  # another host's run; that host dies too
        c._durable._file.now(
            lambda conn: conn.execute("UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", (healthy.run_id,))
        )
        await asyncio.sleep(2.0)  # ten looks of the watcher
        taken = b.get(healthy.run_id)
        assert taken is not None, "the run of a dead host was never taken over: a torn report row blocks them all"
        assert not await b._durable.holds(report.run_id), "the torn run was neither resumed nor ended"
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


@pytest.mark.parametrize(
    "torn",
    [
        {"type": "tool_result", "tool_use_id": "t1", "content": {"$pieces": ["Q1: ", {"$result": ["Q1"]}]}},
        {"type": "tool_result", "tool_use_id": "t1", "content": {"$pieces": ["Q1: ", {"$result": {"id": "Q1"}}]}},
    ],
    ids=["reference-a-list", "reference-an-object"],
)
async def test_a_part_whose_reference_is_not_a_name_makes_the_run_unreadable_not_the_takeover_fail(
    stores, torn
) -> None:
    """Finding (torn store, low alone; with the finding above, every takeover stops): `DurableRun.saved` turns
    a checkpoint this release cannot read into None (the run ends with a message) by catching ValueError, which
    a pydantic ValidationError is. A reference that is not a string (a torn or tampered part) makes
    `_block_without_references` look an unhashable value up in a dict: a TypeError, which pydantic does not wrap,
    so `saved()` raises, `take_over` fails and releases the run, and it is claimed and fails again for ever (a
    `reused_from` or query `id` that is not a string does the same in `reused_restored`). Safe: any failure to
    read the parts makes the run unreadable: `saved()` is None."""
    a, b = stores("a"), stores("b")
    await a.begin(kept())
    assert await a.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=1))
    part = {
        "header": {"question": QUESTION, "policy": "ops", "rounds": 1, "result_chars": 8000},
        "lists": {"messages": {"keep": 0, "items": [{"role": "user", "content": [torn]}]}},
    }
    a._file.now(lambda c: c.execute("UPDATE durable_run_parts SET part = ? WHERE run_id = 'r1'", (json.dumps(part),)))
    lapse_store(a)
    taken = await b.claim_lapsed({"web"})
    assert taken is not None
    try:
        saved = taken.saved()
    except TypeError as exc:
        pytest.fail(f"reading the torn part raised {exc!r} instead of making the run unreadable")
    assert saved is None


async def test_a_host_that_lost_a_run_stops_renewing_it(hosts) -> None:
    """Finding (unbounded growth, low): a copy superseded by another host's takeover ends in `_end` without
    `_forget_durable`, and its failed `save` drops it from `_written` only: the run id stays in the host's
    `_driving` set for the life of the process. Every renewal (each third of a lease) sends it again in the
    `IN (...)` list, and each run a host ever loses to a takeover (a host that freezes under load loses many)
    adds one for good. Safe: a host that finds it no longer holds a run stops driving it (`save` returning
    False, or `_end` finding it superseded, discards it)."""
    runner_a, runner_b = StoppingRunner(answers_when_released=True), StoppingRunner()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert a._durable is not None and b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None and taken.task is not None
    await asyncio.wait_for(asyncio.gather(taken.task), 10)
    runner_a.more.set()  # the first host wakes, answers, and finds the run is not its own any more
    assert first.task is not None
    await asyncio.wait_for(asyncio.gather(first.task), 10)
    assert first.superseded
    assert first.run_id not in a._durable._driving, "the host renews a run it lost for the rest of its life"
