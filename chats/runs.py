"""Runs in progress, for every adapter: each run's event log, its readers, and its lifetime.

A run belongs to no connection: its events go into a log that any number of readers follow (a web
page reload reattaches with Last-Event-ID and loses nothing; Slack follows the log to post
progress). An adapter may ask for a run to be cancelled when its last reader goes away and nobody
comes back within a grace period (the web does; a Slack thread has no reader to lose): that stops
the model call and kills its ClickHouse queries. The Runner's events are progress only; what `run()`
returns is written to the conversation store, then published as `done` (built in `done_event`, the one
place a `done` is made). The log always opens with `started` and ends with `done`.

With several worker processes, a `SharedRunLog` lets a reader in one process follow a run another
process owns. On shutdown, `drain` refuses new runs and gives running ones a bounded time to finish.

Every adapter's runs share the registry (`agent serve` runs the web and Slack in one process), so an
adapter that finds runs by an id its clients send names its interface: another interface's run is
not there for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError

from agent.access.policy import Policy
from agent.limits import Limits, json_size
from agent.logs import log_context
from agent.runner import (
    WIRE_EVENT,
    ErrorEvent,
    Event,
    FinalAnswer,
    FinishedEvent,
    Interface,
    Outcome,
    Platform,
    Runner,
    RunResult,
    StartedEvent,
    Turn,
    WireEvent,
)
from chats.audit import AuditLog, Origin, entry_of
from chats.conversations import ConversationStore
from chats.shared_runs import BEAT_S, LiveRun, SharedRunLog

log = logging.getLogger(__name__)
SHARED_FLUSH_S = 0.15  # how often a run's new events are copied for readers in other processes
SHARED_POLL_S = 0.25  # how often a reader in another process looks for them (SQLite)
PUSH_COALESCE_S = 0.005  # on PostgreSQL, events that come this close together are copied in one write
PUSHED_CHECK_S = 1.0  # on PostgreSQL, how often a reader woken by nothing checks on the run's owner
SHARED_APPEARS_S = 1.0  # how long a reader waits for a run started a moment ago to be shared
STREAM_MARGIN_S = 2.0  # on shutdown, after the grace period: for cancelled runs' last events to reach readers


class ShuttingDown(Exception):
    """The process is shutting down and takes no new questions."""

    message = "The server is restarting; ask again in a moment."


@dataclass(frozen=True)
class RunEvent:
    """One event of a run's log, typed for the adapters of this process. `as_dict` is its one wire
    shape: what the store keeps, other workers read back (`from_dict`) and the web sends."""

    id: int
    run_id: str
    conversation_id: str
    body: WireEvent

    @property
    def name(self) -> str:
        return self.body.type

    @property
    def data(self) -> dict[str, Any]:
        """Built when asked (once per reader), not kept: a finished run keeps only its typed events."""
        return {"run_id": self.run_id, "conversation_id": self.conversation_id, **self.body.wire()}

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.name, "data": self.data}

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> RunEvent | None:
        """The event as another worker or the store wrote it; None for one this release cannot read
        (another release wrote it: workers of two releases share a file during an upgrade). A `done`
        that cannot be read is still the end of the run."""
        data = stored["data"]
        ids = (stored["id"], str(data.get("run_id") or ""), str(data.get("conversation_id") or ""))
        try:
            return cls(*ids, WIRE_EVENT.validate_python({**data, "type": stored["event"]}))
        except ValidationError:
            log.warning("skipped a %r event this release cannot read", stored["event"], exc_info=True)
            return cls(*ids, done_event(None)) if stored["event"] == "done" else None


@dataclass
class RunHandle:
    run_id: str
    conversation_id: str
    interface: Interface
    events: list[RunEvent] = field(default_factory=list)
    done: bool = False
    abandon_after_s: float | None = None  # cancel when unwatched this long; None: never
    readers: int = 0
    task: asyncio.Task[Any] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    grace_timer: asyncio.TimerHandle | None = None
    shared_upto: int = 0  # events copied to the shared log so far
    origin: Origin = field(default_factory=Origin)  # who asked, where, under which policy: for the audit
    policy: str = ""  # the name of the policy it runs under (its rows go again only to a reader covering it)


class RunRegistry:
    def __init__(
        self,
        runner: Runner,
        store: ConversationStore,
        *,
        keep_finished: int = 500,
        shared: SharedRunLog | None = None,
        max_event_bytes: int = Limits.max_event_bytes,
        audit: AuditLog | None = None,
    ):
        self._runner = runner
        self._store = store
        self._audit = audit or AuditLog(store.file)  # every run leaves an entry, whoever built the registry
        self._max_event_bytes = max_event_bytes
        self._keep_finished = keep_finished
        self._shared = shared
        self._runs: OrderedDict[str, RunHandle] = OrderedDict()
        self._checks: set[asyncio.Task[None]] = set()
        self.accepting = True

    @property
    def audit(self) -> AuditLog:
        """Where every question's entry goes: an adapter records its refusals here (audit.record_refusal)."""
        return self._audit

    @property
    def running(self) -> int:
        return sum(1 for handle in self._runs.values() if not handle.done)

    def get(self, run_id: str, *, interface: Interface | None = None) -> RunHandle | None:
        """The run of this process with this id; with `interface`, only if that interface started it."""
        handle = self._runs.get(run_id)
        return handle if handle is not None and interface in (None, handle.interface) else None

    def start(
        self,
        conversation_id: str,
        question: str,
        history: list[Turn],
        *,
        platform: Platform,
        interface: Interface,
        abandon_after_s: float | None = None,
        followups: bool = True,
        on_done: Callable[[RunResult], Awaitable[None]] | None = None,
        policy: Policy | None = None,
        origin: Origin | None = None,
    ) -> RunHandle:
        """Register the run with its first event, `started`, already in its log (so a reader sees
        something before the model's first reply, and a replay shows the same), then drive it.
        `origin` is who asked and where, for the audit (without it: the conversation's owner).
        Raises ShuttingDown once `drain` has begun."""
        if not self.accepting:
            raise ShuttingDown(ShuttingDown.message)
        origin = origin or Origin(interface=interface)
        handle = RunHandle(
            uuid.uuid4().hex,
            conversation_id,
            interface,
            abandon_after_s=abandon_after_s,
            origin=origin,
            policy=policy.name if policy is not None else "",
        )
        handle.events.append(RunEvent(1, handle.run_id, conversation_id, StartedEvent(question=question)))
        self._runs[handle.run_id] = handle
        run = self._drive(handle, question, history, platform, interface, followups, on_done, policy)
        with log_context(run_id=handle.run_id, interface=interface):  # the task copies the context
            handle.task = asyncio.create_task(run, name=f"run-{handle.run_id}")
        return handle

    async def _drive(
        self,
        handle: RunHandle,
        question: str,
        history: list[Turn],
        platform: Platform,
        interface: Interface,
        followups: bool,
        on_done: Callable[[RunResult], Awaitable[None]] | None = None,
        policy: Policy | None = None,
    ) -> None:
        async def publish(event: Event) -> None:
            await self._publish(handle, event)

        sharing = asyncio.create_task(self._share(handle)) if self._shared is not None else None
        result: RunResult | None = None
        try:
            try:
                result = await self._runner.run(
                    question,
                    history=history,
                    platform=platform,
                    interface=interface,
                    on_event=publish,
                    followups=followups,
                    policy=policy,
                )
            except Exception:  # the runner turns its failures into a result; this is the rest (a bug)
                log.exception("run %s failed", handle.run_id)
                await self._publish(handle, ErrorEvent(message="Something went wrong on the server; try again."))
            finally:  # on every path, a cancelled one too: the turn stored, then `done`, once
                await _unstoppable(self._end(handle, question, result, on_done))
        finally:
            async with handle.changed:
                handle.done = True
                handle.changed.notify_all()
            if sharing is not None:
                await asyncio.shield(sharing)
            self._forget_old_runs()

    async def _publish(self, handle: RunHandle, body: WireEvent) -> None:
        """One event of the run's log, within the event cap (one past it is replaced by an error)."""
        event = self._next(handle, body)
        if (size := json_size(event.data)) > self._max_event_bytes:  # every event is built within the cap
            log.error("a %s event of %d bytes was not sent (the cap is %d)", body.type, size, self._max_event_bytes)
            event = self._next(handle, ErrorEvent(message="Part of this answer was too large to show."))
        await self._append(handle, event)

    async def _end(
        self,
        handle: RunHandle,
        question: str,
        result: RunResult | None,
        on_done: Callable[[RunResult], Awaitable[None]] | None,
    ) -> None:
        """The run's end: its turn stored (with the log as it will be), `on_done` told once whatever happened
        (a daily budget's hold ends with it), then `done` published. No result (the runner raised): nothing
        to store, and `done` says so."""
        done = [self._next(handle, done_event(result))]
        if (size := json_size(done[0].data)) > self._max_event_bytes:
            log.error("a done event of %d bytes was not sent (the cap is %d)", size, self._max_event_bytes)
            done = self._failed_end(handle, "Part of this answer was too large to show.")
        try:
            if result is not None:
                record = [e.as_dict() for e in [*handle.events, *done]]
                await self._store.save_turn(handle.conversation_id, handle.run_id, result, record)
        except Exception:
            log.exception("could not store run %s", handle.run_id)
            done = self._failed_end(handle, "Something went wrong on the server; try again.")
        if on_done is not None:  # e.g. the asker's daily budget settles to the answer's receipt
            try:
                await on_done(result or RunResult(question=question))
            except Exception:
                log.exception("could not finish run %s", handle.run_id)
        await self._record_audit(handle, question, result)
        for event in done:
            await self._append(handle, event)

    async def _record_audit(self, handle: RunHandle, question: str, result: RunResult | None) -> None:
        """The run's audit entry, once, however it ended; a run cancelled before the runner could make
        its result is recorded as cancelled."""
        if result is None and handle.task is not None and handle.task.cancelling():
            result = RunResult(question=question, outcome=Outcome.CANCELLED, cancelled=True)
        entry = entry_of(handle.run_id, handle.conversation_id, handle.origin, question, result, self._audit.clock())
        try:
            await self._audit.record(entry)
        except Exception:
            log.exception("could not write the audit entry of run %s", handle.run_id)

    def _failed_end(self, handle: RunHandle, message: str) -> list[RunEvent]:
        error = self._next(handle, ErrorEvent(message=message))
        return [error, RunEvent(error.id + 1, handle.run_id, handle.conversation_id, done_event(None))]

    async def _share(self, handle: RunHandle) -> None:
        """Copy the run's events to the shared log until it is done, beating meanwhile; then take them out
        again (by then the stored turn has them all). Whatever fails, the shared copy does not outlive
        the run, so no reader waits on it."""
        assert self._shared is not None
        try:
            await self._shared.open(handle.run_id, handle.conversation_id)
            beaten = time.monotonic()
            while True:
                ended = handle.done
                fresh = handle.events[handle.shared_upto :]
                beat = time.monotonic() - beaten >= BEAT_S
                if fresh or beat:
                    await self._shared.add(handle.run_id, [(e.id, e.name, e.data) for e in fresh], beat=beat)
                    handle.shared_upto += len(fresh)
                    beaten = time.monotonic() if beat else beaten
                if ended:
                    break
                await self._until_fresh(handle)
        except Exception:  # the run goes on; readers in other processes fall back to the stored turn
            log.exception("could not share run %s with other workers", handle.run_id)
        finally:
            try:
                await asyncio.shield(self._shared.close(handle.run_id))
            except Exception:
                log.exception("could not take run %s out of the shared log", handle.run_id)

    async def _until_fresh(self, handle: RunHandle) -> None:
        """Until the next copy: a fixed interval on SQLite, and on PostgreSQL while no reader on another host
        follows the run; once one does (it is pushed to), as soon as there is something new (a few
        milliseconds later, so a burst goes in one write), or a beat."""
        assert self._shared is not None
        watched = self._shared.watched(handle.run_id)
        if watched is None or not watched.is_set():
            pause = min(SHARED_FLUSH_S, BEAT_S)  # a beat is due every BEAT_S whatever the cadence
            await (asyncio.sleep(pause) if watched is None else _woken_or_after(watched, pause))
            return
        async with handle.changed:
            await _wait_for(handle.changed, partial(_fresh_or_done, handle), BEAT_S)
        await asyncio.sleep(PUSH_COALESCE_S)

    @staticmethod
    def _next(handle: RunHandle, body: WireEvent) -> RunEvent:
        return RunEvent(len(handle.events) + 1, handle.run_id, handle.conversation_id, body)

    async def _append(self, handle: RunHandle, event: RunEvent) -> None:
        async with handle.changed:
            handle.events.append(event)
            handle.changed.notify_all()

    async def follow(self, handle: RunHandle, after: int = 0) -> AsyncIterator[RunEvent]:
        """Events after id `after`, then new ones as they come, until the run is done."""
        async for batch in self.follow_batches(handle, after):
            for event in batch:
                yield event

    async def follow_batches(self, handle: RunHandle, after: int = 0) -> AsyncIterator[list[RunEvent]]:
        """As `follow`, but every event already there comes at once: a reader that writes them to a
        socket writes once per batch, not once per event."""
        handle.readers += 1
        if handle.grace_timer is not None:
            handle.grace_timer.cancel()
            handle.grace_timer = None
        try:
            position = after

            def ready(seen: int) -> bool:
                return len(handle.events) > seen or handle.done

            while True:
                async with handle.changed:
                    await handle.changed.wait_for(partial(ready, position))
                    fresh = handle.events[position:]
                    finished = handle.done
                if fresh:
                    yield fresh
                position += len(fresh)
                if finished and position >= len(handle.events):
                    return
        finally:
            handle.readers -= 1
            if handle.readers == 0 and not handle.done and handle.abandon_after_s is not None:
                handle.grace_timer = asyncio.get_running_loop().call_later(
                    handle.abandon_after_s, self._cancel_unwatched, handle
                )

    def cancel(self, handle: RunHandle, why: str) -> None:
        """Stop a run at its reader's request: the model call ends, its queries are killed, and the turn
        is stored as cancelled. A run that already finished (its reader learns of a Stop only when it
        next writes) has its stored turn marked cancelled."""
        if handle.done or (handle.events and handle.events[-1].name == "done"):  # too late: its turn is stored
            log.info("run %s stopped after it finished: %s", handle.run_id, why)
            self._store_as_stopped(handle.run_id)
        elif handle.task is not None and not handle.task.done():
            log.info("run %s cancelled: %s", handle.run_id, why)
            handle.task.cancel()
            # Cancelled once its answer was written (say, during follow-ups), the run keeps that outcome;
            # its reader stopped it, so the stored turn says so.
            handle.task.add_done_callback(lambda _: self._store_as_stopped(handle.run_id))

    def _store_as_stopped(self, run_id: str) -> None:
        stored = asyncio.create_task(self._mark_stopped(run_id))
        self._checks.add(stored)
        stored.add_done_callback(self._checks.discard)

    async def _mark_stopped(self, run_id: str) -> None:
        try:
            await self._store.mark_stopped(run_id)
        except Exception:
            log.exception("could not store run %s as stopped", run_id)

    def _cancel_unwatched(self, handle: RunHandle) -> None:
        handle.grace_timer = None
        if handle.readers == 0 and not handle.done and handle.task is not None:
            if self._shared is not None:
                check = asyncio.create_task(self._cancel_unless_watched_elsewhere(handle))
                self._checks.add(check)
                check.add_done_callback(self._checks.discard)
                return
            log.info("run %s cancelled: its client went away", handle.run_id)
            handle.task.cancel()

    async def _cancel_unless_watched_elsewhere(self, handle: RunHandle) -> None:
        assert self._shared is not None and handle.abandon_after_s is not None
        live = await self._shared.find(handle.run_id)
        if handle.readers or handle.done or handle.task is None:
            return
        if live is not None and time.time() - live.watched_at < handle.abandon_after_s:
            handle.grace_timer = asyncio.get_running_loop().call_later(
                handle.abandon_after_s, self._cancel_unwatched, handle
            )
            return
        log.info("run %s cancelled: its client went away", handle.run_id)
        handle.task.cancel()

    async def follow_elsewhere(
        self,
        run_id: str,
        after: int = 0,
        *,
        interface: Interface | None = None,
        may_read: Callable[[str], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[RunEvent] | None:
        """A run another worker process owns, followed through the shared log; None if there is none
        (or, with `interface`, if its conversation is another interface's, or, with `may_read`, if that
        says no of its conversation's id). A run started a moment ago may not be shared yet: it is looked
        for a little while."""
        if self._shared is None:
            return None
        deadline = time.monotonic() + SHARED_APPEARS_S
        with self._shared.waiting(run_id) as woken:  # its owner's first write wakes it on PostgreSQL
            while (live := await self._shared.find(run_id)) is None:
                if time.monotonic() >= deadline:
                    return None
                await _woken_or_after(woken, min(SHARED_POLL_S, deadline - time.monotonic()))
        readable = interface is None or await self._store.exists(live.conversation_id, interface=interface)
        if not readable or (may_read is not None and not await may_read(live.conversation_id)):
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))  # not told apart from a run never seen
            return None
        return self._poll_shared(run_id, after)

    async def _poll_shared(self, run_id: str, after: int) -> AsyncIterator[RunEvent]:
        assert self._shared is not None
        with self._shared.waiting(run_id) as woken:
            async for event in self._read_shared(run_id, after, woken):
                yield event

    async def _read_shared(self, run_id: str, after: int, woken: asyncio.Event) -> AsyncIterator[RunEvent]:
        """The run's events from the shared log, read again whenever `woken` (PostgreSQL's push) or, unwoken,
        every SHARED_POLL_S on SQLite (PUSHED_CHECK_S on PostgreSQL, to check on the owner)."""
        assert self._shared is not None
        position, patience = after, PUSHED_CHECK_S if self._shared.pushes else SHARED_POLL_S
        touched = float("-inf")
        while True:
            woken.clear()  # before the read: news during it wakes the next wait at once
            fresh = await self._shared.events_after(run_id, position)
            for number, name, data in fresh:
                if (event := RunEvent.from_dict({"id": number, "event": name, "data": data})) is not None:
                    yield event
                position = number
                if name == "done":
                    return
            if not fresh:  # while the run's owner is alive its shared log is whole: no need of the stored turn
                live = await self._shared.find(run_id)
                if live is None or not live.owner_alive:  # done and taken out of the shared log, or its owner died
                    async for event in self._rest_of(run_id, position, live):
                        yield event
                    return
            if time.monotonic() - touched >= patience:  # the owner must not cancel it as abandoned
                await self._shared.touch(run_id)
                touched = time.monotonic()
            await _woken_or_after(woken, patience)

    async def _rest_of(self, run_id: str, position: int, live: LiveRun | None) -> AsyncIterator[RunEvent]:
        """A run no longer followed in the shared log: the rest of its stored turn, or an error and `done`."""
        stored = await self._store.run_events(run_id)
        if stored is not None:
            for row in stored[1]:
                if row["id"] > position and (event := RunEvent.from_dict(row)) is not None:
                    yield event
            return
        lost = "This answer was lost on the server" if live is None else "The server process answering this stopped"
        for offset, body in enumerate(_lost(f"{lost}; ask again."), 1):
            yield RunEvent(position + offset, run_id, live.conversation_id if live else "", body)

    def _forget_old_runs(self) -> None:
        finished = [run_id for run_id, h in self._runs.items() if h.done]
        for run_id in finished[: max(0, len(finished) - self._keep_finished)]:
            del self._runs[run_id]

    async def drain(self, timeout_s: float) -> tuple[int, int]:
        """Take no new runs; wait up to `timeout_s` for the running ones to finish (each is stored as it
        ends), then cancel the rest, which are stored as cancelled. Returns (finished, cancelled)."""
        self.accepting = False
        tasks = [h.task for h in self._runs.values() if h.task is not None and not h.task.done()]
        if not tasks:
            return 0, 0
        log.info("waiting up to %.0f s for %d answer(s) still running", timeout_s, len(tasks))
        _, pending = await asyncio.wait(tasks, timeout=timeout_s) if timeout_s > 0 else (set(), set(tasks))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        finished, cancelled = len(tasks) - len(pending), len(pending)
        log.info("shutdown: %d answer(s) finished, %d cancelled", finished, cancelled)
        return finished, cancelled

    async def shutdown(self) -> None:
        await self.drain(0)


def _fresh_or_done(handle: RunHandle) -> bool:
    return len(handle.events) > handle.shared_upto or handle.done


async def _wait_for(changed: asyncio.Condition, ready: Callable[[], bool], timeout_s: float) -> None:
    """`changed.wait_for(ready)` (the condition held), giving up after `timeout_s`."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(changed.wait_for(ready), timeout_s)


async def _woken_or_after(woken: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(woken.wait(), max(0.0, timeout_s))


def _lost(message: str) -> tuple[WireEvent, WireEvent]:
    """How a run followed from another worker ends when its events cannot be had."""
    return ErrorEvent(message=message), done_event(None)


def done_event(result: RunResult | None) -> FinishedEvent:
    """The `done` event: the one place it is built. What a person sees of how the run ended (None: the run
    failed on the server before it had a result, or its `done` cannot be read)."""
    return FinishedEvent(result=FinalAnswer.of(result) if result is not None else None)


async def _unstoppable(work: Awaitable[None]) -> None:
    """Finish `work` even when the awaiting task is cancelled meanwhile (then the cancellation goes on)."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
