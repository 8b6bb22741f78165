"""Durable runs: nothing lost when a host dies.

Several hosts share one PostgreSQL. Each run a host starts is kept here as it goes: what the run needs to
go on (the question, its conversation, interface, platform, policy and audit origin), the adapter's
delivery context (for Slack, the thread to post in), and the library's latest `Checkpoint` (agent/runner.py,
taken when the run starts and after every completed round). The host holds the run under a lease it
renews; a host that dies stops renewing, and once the lease lapses every other host's watcher may claim
the run, one winner (`claim_lapsed`, under the state's write lock), and resume it through the Runner under
the same run id (chats/runs.py `RunRegistry.take_over`). A normal end deletes the row and its parts.

A checkpoint holds the whole run so far; rewritten whole each round, a run of n rounds would write n²/2
rounds' worth. So each round appends only the part it added (`durable_run_parts`, agent/checkpoint_form.py:
its new messages and queries, and its counters), in the transaction that checks the host still holds the
run; a takeover folds the parts back. What a host last wrote is kept in memory to take the next part from;
when that is unknown (a write that failed, a run it did not write), the next part is whole and the parts
before it go.

A lease, not the shared log's heartbeat, decides: a host slow for a moment keeps its runs until its lease
lapses, and the lease is what bounds the time a takeover takes (AGENT_RUN_LEASE_S, plus at most a third
of it for the watcher's next look).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from typing import Any

from agent.checkpoint_form import CheckpointPart, fold, part_between
from agent.runner import Checkpoint
from chats.audit import Origin
from chats.state_file import SQLITE_NOW, StateFile, write_transaction
from chats.state_postgres import POSTGRES_NOW, GroupCalls, PostgresFile

log = logging.getLogger(__name__)
RENEWALS_PER_LEASE = 3  # a lease is renewed (and lapsed ones looked for) this many times per lease


@dataclass
class DurableRun:
    """One run kept for a takeover, as its row holds it."""

    run_id: str
    conversation_id: str
    interface: str
    platform: str
    question: str
    policy: str = ""  # the name of the policy it runs under ("": none)
    origin: Origin = field(default_factory=Origin)
    delivery: dict[str, Any] = field(default_factory=dict)  # the adapter's, e.g. Slack's thread
    followups: bool = True
    abandon_after_s: float | None = None
    parts: list[str] = field(default_factory=list)  # its checkpoint, as the parts its rounds wrote (JSON)
    checkpoint: str | None = None  # a whole Checkpoint's JSON: what the release before kept (it wrote no parts)
    created_at: float = field(default_factory=time.time)
    takeovers: int = 0  # times another host claimed it
    unreadable: bool = False  # its row is torn, or another release's this one cannot read: it ends, not resumes

    def saved(self) -> Checkpoint | None:
        """The checkpoint to resume from; None when there is none, or this release cannot read it (parts
        with one missing, torn or tampered ones: whatever fails, the run ends with a message, and a takeover
        never fails on it)."""
        if self.unreadable:
            return None
        try:
            if self.parts:
                return Checkpoint.model_validate(self.parts_form())
            return None if self.checkpoint is None else Checkpoint.model_validate_json(self.checkpoint)
        except Exception:  # ValueError (pydantic's too), and a TypeError a torn part's odd types raise
            log.warning("run %s has a checkpoint this release cannot read", self.run_id)
            return None

    def parts_form(self) -> dict[str, Any] | None:
        """The stored form its parts make (None: none). ValueError when they make none."""
        return fold(CheckpointPart.model_validate_json(part) for part in self.parts)


@dataclass(frozen=True)
class ResumeLimits:
    """How far a run taken over may go on: at most `max_resumes` takeovers, started at most `max_age_s`
    ago. Past either, its lost step (a model call) is not made again: the run ends with a message."""

    max_resumes: int
    max_age_s: float

    def why_not(self, run: DurableRun, now: float | None = None) -> str | None:
        """What its reader is told when `run` may not be resumed; None when it may."""
        if run.unreadable:
            return lost_message("this server's release cannot read what was kept of it")
        if run.takeovers > self.max_resumes:
            return lost_message(f"its servers stopped {run.takeovers} times")
        if (now if now is not None else time.time()) - run.created_at > self.max_age_s:
            return lost_message(f"it had been running for over {round(self.max_age_s / 60)} minutes")
        return None


def numbered_past(checkpoint: Checkpoint, shown: list[dict[str, Any]]) -> Checkpoint:
    """The checkpoint a takeover resumes, numbering its next query past every query id its log already shows
    (`shown`: the events' data): the round its host lost showed queries the checkpoint does not hold, and one
    id names one query."""
    numbers = [int(qid[1:]) for data in shown if isinstance(qid := data.get("query_id"), str) and _is_query_id(qid)]
    taken = max([checkpoint.query_ids_taken, *numbers])
    return (
        checkpoint if taken == checkpoint.query_ids_taken else checkpoint.model_copy(update={"query_ids_taken": taken})
    )


def _is_query_id(text: str) -> bool:
    return (
        text.startswith("Q") and text[1:].isascii() and text[1:].isdigit()
    )  # agent/pipeline/state.py `take_query_id`: Q1, Q2, ...


def lost_message(why: str) -> str:
    """What a reader is told of a run whose host died and that is not resumed (`why`: what stopped it)."""
    return f"The server answering this stopped and the answer could not be picked up again ({why}); please ask again."


def host_id() -> str:
    """This process, among the hosts: its name and pid, and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DurableRuns:
    def __init__(self, file: StateFile, *, lease_s: float, host: str | None = None) -> None:
        self._file, self.lease_s = file, lease_s
        self.host = host or host_id()
        # Leases are stamped and judged by the database's clock, whatever the hosts' own clocks say (one
        # running ahead would find every other host's live lease lapsed).
        self._now = POSTGRES_NOW if isinstance(file, PostgresFile) else SQLITE_NOW
        self._driving: set[str] = set()  # the runs this host drives: the only leases it renews
        self._written: dict[str, dict[str, Any]] = {}  # by run, the stored form of its parts so far
        # On PostgreSQL the begins, saves and "still mine?" of the host's runs that come at once go together.
        shared = file if isinstance(file, PostgresFile) else None
        self._begins = GroupCalls.each(shared, self._insert) if shared else None
        self._saves = GroupCalls(shared, self._save_each) if shared else None
        self._asking = GroupCalls(shared, self._held_of) if shared else None

    async def begin(self, run: DurableRun) -> None:
        """Keep `run`, held by this host."""
        row = (
            run.run_id, run.conversation_id, run.interface, run.platform, run.question, run.policy,
            json.dumps(asdict(run.origin)), json.dumps(run.delivery), int(run.followups), run.abandon_after_s,
            run.checkpoint, self.host, self.lease_s, run.takeovers, run.created_at,
        )  # fmt: skip
        if self._begins is not None:
            await self._begins(row)
        else:
            await self._file.run(partial(self._insert, row=row))
        self._driving.add(run.run_id)

    def _insert(self, c: sqlite3.Connection, row: tuple[Any, ...]) -> None:
        # One statement, atomic alone: a new row, with a lease from now on, that no claim can take, so it
        # needs no write lock (on PostgreSQL one round trip, not three).
        marks = ", ".join([*"?" * 12, f"{self._now} + ?", "?", "?"])
        c.execute(f"INSERT INTO durable_runs ({_COLUMNS}) VALUES ({marks})", row)

    async def save(self, run_id: str, checkpoint: Checkpoint) -> bool:
        """The run's latest checkpoint, its lease renewed: the part it adds to what this host wrote of it
        (all of it when that is unknown: the parts before go), written only while this host holds the run,
        in the same transaction. False: it no longer does (its lease lapsed and another host took it over),
        and nothing was written. On PostgreSQL the saves of the host's runs that come at once are made
        together (`GroupCalls`): one transaction and three round trips for all of them."""
        form = checkpoint.model_dump(mode="json")
        before = self._written.pop(run_id, None)  # unknown until this write lands
        saving = _Saving(run_id, part_between(before, form).model_dump_json(), whole=before is None)
        if self._saves is not None:
            held = await self._saves(saving)
        else:
            held = (await self._file.run(partial(self._save_each, items=[saving])))[0]
        if held:
            self._written[run_id] = form
        else:
            self.stop_driving(run_id)
        return held

    def _save_each(self, c: sqlite3.Connection, items: list[_Saving]) -> list[bool]:
        """`save` for each item, in one write transaction; whether each run was held (and written)."""
        with write_transaction(c):
            if isinstance(c, sqlite3.Connection):
                return [self._save_one(c, item) for item in items]
            ids = [item.run_id for item in items]
            if any(item.whole for item in items):  # a whole part: nothing before it is read again
                c.execute(_CLEARED, ([item.run_id for item in items if item.whole], self.host))
            found = c.execute(_SAVED, (ids, [item.part for item in items], self.lease_s, self.host)).fetchall()
            return [bool(held) for (_n, held) in found]

    def _save_one(self, c: sqlite3.Connection, item: _Saving) -> bool:
        held = c.execute(
            f"UPDATE durable_runs SET lease_until = {self._now} + ? WHERE run_id = ? AND holder = ?",
            (self.lease_s, item.run_id, self.host),
        ).rowcount
        if not held:
            return False
        if item.whole:  # a whole part: nothing before it is read again
            c.execute("DELETE FROM durable_run_parts WHERE run_id = ?", (item.run_id,))
            c.execute("UPDATE durable_runs SET checkpoint = NULL WHERE run_id = ?", (item.run_id,))
        c.execute(
            "INSERT INTO durable_run_parts (run_id, seq, part) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 "
            "FROM durable_run_parts WHERE run_id = ?), ?)",
            (item.run_id, item.run_id, item.part),
        )
        return True

    async def update_delivery(self, run_id: str, delivery: dict[str, Any]) -> None:
        """What the adapter knows now of where the answer goes (say, the message it streams into)."""
        data = json.dumps(delivery)

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.execute(
                    "UPDATE durable_runs SET delivery = ? WHERE run_id = ? AND holder = ?", (data, run_id, self.host)
                )

        await self._file.run(write)

    async def finish(self, run_id: str) -> bool:
        """The run ended (its turn is stored): nothing to take over. Only while this host holds it: False
        when another host took it over (this one froze past its lease), and nothing was deleted."""

        def write(c: sqlite3.Connection) -> bool:
            with write_transaction(c):
                return self.finish_in(c, run_id)

        held = bool(await self._file.run(write))
        self.stop_driving(run_id)
        return held

    def finish_in(self, c: sqlite3.Connection, run_id: str) -> bool:
        """`finish` inside a write transaction the caller holds (the turn's store: both land or neither)."""
        if not isinstance(c, sqlite3.Connection):  # PostgreSQL: the row and its parts in one round trip
            return bool(c.execute(_FINISHED, (run_id, self.host)).fetchone()[0])
        held = c.execute("DELETE FROM durable_runs WHERE run_id = ? AND holder = ?", (run_id, self.host)).rowcount
        if held:
            c.execute("DELETE FROM durable_run_parts WHERE run_id = ?", (run_id,))
        return bool(held)

    def stop_driving(self, run_id: str) -> None:
        """This host no longer drives the run (it ended, or another host holds it now): never renewed again."""
        self._driving.discard(run_id)
        self._written.pop(run_id, None)

    async def let_lapse(self, run_id: str) -> None:
        """A run this host claimed and could not take over: held by nobody, its lease lapsing a lease from now
        (not at once: the watcher goes on to the other lapsed runs, never the same one again and again), when
        another host (or this one) tries again; its `takeovers` counts this try, so it is refused past the
        limit."""

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.execute(
                    f"UPDATE durable_runs SET holder = '', lease_until = {self._now} + ? "
                    "WHERE run_id = ? AND holder = ?",
                    (self.lease_s, run_id, self.host),
                )

        self.stop_driving(run_id)  # first: should the write fail, the lease still lapses
        await self._file.run(write)

    async def renew(self) -> int:
        """The lease of every run this host holds and drives, renewed; how many. A run it holds but does not
        drive (a takeover that failed to start, a row it could not read) is not renewed: it lapses, and
        another host takes it."""
        driving = sorted(self._driving)
        if not driving:
            return 0
        marks = ", ".join("?" * len(driving))

        def write(c: sqlite3.Connection) -> int:
            with write_transaction(c):
                return c.execute(
                    f"UPDATE durable_runs SET lease_until = {self._now} + ? WHERE holder = ? AND run_id IN ({marks})",
                    (self.lease_s, self.host, *driving),
                ).rowcount

        return int(await self._file.run(write))

    async def release(self, run_ids: Collection[str]) -> None:
        """Let other hosts take these runs over at once (this host stops without finishing them): held by
        nobody, their leases lapsed."""
        ids = list(run_ids)

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.executemany(
                    "UPDATE durable_runs SET lease_until = 0, holder = '' WHERE run_id = ? AND holder = ?",
                    [(run_id, self.host) for run_id in ids],
                )

        self._driving.difference_update(ids)  # first: should the write fail, the lease still lapses
        for run_id in ids:
            self._written.pop(run_id, None)  # another host goes on writing it
        await self._file.run(write)

    async def claim_lapsed(self, interfaces: Collection[str]) -> DurableRun | None:
        """One run of these interfaces whose lease lapsed, now held by this host; None when there is none.
        Under the state's write lock: of the hosts that look at once, one wins each run."""
        kinds = sorted(interfaces)
        marks = ", ".join("?" * len(kinds))

        def claim(c: sqlite3.Connection) -> Any:
            with write_transaction(c):
                row = c.execute(
                    f"SELECT {_COLUMNS} FROM durable_runs WHERE lease_until < {self._now} AND interface IN ({marks}) "
                    "ORDER BY lease_until LIMIT 1",
                    kinds,
                ).fetchone()
                if row is None:
                    return None
                c.execute(
                    f"UPDATE durable_runs SET holder = ?, lease_until = {self._now} + ?, takeovers = takeovers + 1 "
                    "WHERE run_id = ?",
                    (self.host, self.lease_s, row[0]),
                )
                parts = c.execute("SELECT seq, part FROM durable_run_parts WHERE run_id = ? ORDER BY seq", (row[0],))
                return tuple(row), [(seq, part) for (seq, part) in parts.fetchall()]

        claimed = await self._file.run(claim) if kinds else None
        if claimed is None:
            return None
        run = _run_of(*claimed)
        run.takeovers += 1
        self._driving.add(run.run_id)  # the caller takes it over, or releases it (RunRegistry.take_over)
        self._go_on_from(run)
        return run

    def _go_on_from(self, run: DurableRun) -> None:
        """What the run's parts make is what this host, now holding it, writes its next part against."""
        try:
            if run.parts and (form := run.parts_form()) is not None:
                self._written[run.run_id] = form
        except Exception:
            pass  # torn: the run is not resumed (`saved` says so), and a whole part would replace them

    async def held_here(self, run_id: str) -> bool:
        """Whether this host holds the run (another may have taken it over after this one froze); when it
        does not, it stops driving it (never renews it again). On PostgreSQL the host's runs ask together."""
        if self._asking is not None:
            held = await self._asking(run_id)
        else:
            held = (await self._file.run(partial(self._held_of, items=[run_id])))[0]
        if not held:
            self.stop_driving(run_id)
        return held

    def _held_of(self, c: sqlite3.Connection, items: list[str]) -> list[bool]:
        if isinstance(c, sqlite3.Connection):
            found = {
                run_id
                for run_id in items
                if c.execute(
                    "SELECT 1 FROM durable_runs WHERE run_id = ? AND holder = ?", (run_id, self.host)
                ).fetchone()
            }
        else:
            found = {row[0] for row in c.execute(_HELD, (items, self.host)).fetchall()}
        return [run_id in found for run_id in items]

    async def holds(self, run_id: str) -> bool:
        """Whether some host holds the run (it is kept, and will be taken over if its host died)."""
        row = await self._file.run(
            lambda c: c.execute("SELECT 1 FROM durable_runs WHERE run_id = ?", (run_id,)).fetchone()
        )
        return row is not None

    async def watch(
        self,
        take_over: Callable[[DurableRun], Awaitable[None]],
        interfaces: Collection[str],
        *,
        taking: Callable[[], bool] = lambda: True,
    ) -> None:
        """Until cancelled: renew this host's leases, and take over each run whose lease lapsed (while
        `taking` says so: not once this host drains), a third of a lease apart. A failure (the database away
        for a moment) is logged and tried again."""
        while True:
            try:
                await self.renew()
                while taking() and (run := await self.claim_lapsed(interfaces)) is not None:
                    log.info("taking over run %s (its host stopped renewing its lease)", run.run_id)
                    await self._take_over_one(take_over, run)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not renew leases or take over runs")
            await asyncio.sleep(self.lease_s / RENEWALS_PER_LEASE)

    async def _take_over_one(self, take_over: Callable[[DurableRun], Awaitable[None]], run: DurableRun) -> None:
        """One claimed run taken over; one that fails is left to lapse (counted among its takeovers), and the
        watcher goes on with the other lapsed runs."""
        try:
            await take_over(run)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not take over run %s; its lease lapses for another try", run.run_id)
            try:
                await self.let_lapse(run.run_id)
            except Exception:
                log.exception("could not let run %s lapse; it lapses unrenewed", run.run_id)


@dataclass(frozen=True)
class _Saving:
    """One run's part to append (`whole`: all of its checkpoint, replacing the parts before)."""

    run_id: str
    part: str
    whole: bool


# PostgreSQL's statements for many runs' saves at once, under the write lock the caller holds. A run's whole
# part clears what came before (its own statement: the parts it deletes are the table the next one adds to).
_CLEARED = """WITH held AS (
    SELECT run_id FROM durable_runs WHERE run_id = ANY(CAST(? AS TEXT[])) AND holder = ?
), parts AS (DELETE FROM durable_run_parts WHERE run_id IN (SELECT run_id FROM held))
UPDATE durable_runs SET checkpoint = NULL WHERE run_id IN (SELECT run_id FROM held)"""
# Each held run's lease renewed and its part appended after its last; one row per item: whether it was held.
_SAVED = f"""WITH batch AS (
    SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[])) WITH ORDINALITY AS b(run_id, part, n)
), held AS (
    UPDATE durable_runs d SET lease_until = {POSTGRES_NOW} + CAST(? AS DOUBLE PRECISION)
    WHERE d.run_id IN (SELECT run_id FROM batch) AND d.holder = ?
    RETURNING d.run_id
), added AS (
    INSERT INTO durable_run_parts (run_id, seq, part)
    SELECT b.run_id, COALESCE((SELECT max(p.seq) FROM durable_run_parts p WHERE p.run_id = b.run_id), 0) + 1, b.part
    FROM batch b WHERE b.run_id IN (SELECT run_id FROM held)
)
SELECT b.n, b.run_id IN (SELECT run_id FROM held) FROM batch b ORDER BY b.n"""
_FINISHED = """WITH gone AS (DELETE FROM durable_runs WHERE run_id = ? AND holder = ? RETURNING run_id),
parts AS (DELETE FROM durable_run_parts WHERE run_id IN (SELECT run_id FROM gone))
SELECT count(*) FROM gone"""
_HELD = "SELECT run_id FROM durable_runs WHERE run_id = ANY(CAST(? AS TEXT[])) AND holder = ?"

_COLUMNS = (
    "run_id, conversation_id, interface, platform, question, policy, origin, delivery, followups, "
    "abandon_after_s, checkpoint, holder, lease_until, takeovers, created_at"
)


def _run_of(row: tuple[Any, ...], numbered: list[tuple[int, str]]) -> DurableRun:
    """The run as its row holds it. A row this release cannot read whole (a torn delivery, another release's
    origin, a part missing: `save` numbers them 1, 2, ... from the last whole one) is still a run,
    `unreadable`: it is ended with a message, never held by a host that cannot."""
    parts = [part for (_seq, part) in numbered]
    (run_id, conversation_id, interface, platform, question, policy, origin, delivery, followups, abandon, saved,
     _holder, _until, takeovers, created_at) = row  # fmt: skip
    run = DurableRun(
        run_id=run_id,
        conversation_id=conversation_id,
        interface=interface,
        platform=platform,
        question=question,
        policy=policy,
        followups=bool(followups),
        abandon_after_s=abandon,
        checkpoint=saved,
        parts=parts,
        created_at=created_at,
        takeovers=takeovers,
    )
    if [seq for (seq, _part) in numbered] != list(range(1, len(numbered) + 1)):
        log.warning("run %s has a checkpoint part missing; it is ended, not resumed", run_id)
        run.unreadable = True
    try:
        run.origin, run.delivery = _origin_of(json.loads(origin)), json.loads(delivery)
        if not isinstance(run.delivery, dict):
            raise TypeError("a delivery context is an object")
    except (ValueError, TypeError, AttributeError):
        log.warning("run %s has a row this release cannot read; it is ended, not resumed", run_id)
        run.unreadable = True
    return run


def _origin_of(stored: dict[str, Any]) -> Origin:
    """The audit origin as a row keeps it; fields a newer release added are left out (this one has none)."""
    known = {f.name for f in fields(Origin)}
    return Origin(**{name: value for name, value in stored.items() if name in known})
