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
import sqlite3
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from pydantic import ValidationError

from agent.access.policy import Policy
from agent.limits import Limits, json_size
from agent.logs import log_context
from agent.reports.model import ReportRequest
from agent.runner import (
    WIRE_EVENT,
    AnswerEvent,
    Checkpoint,
    ErrorEvent,
    Event,
    EventSink,
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
from chats.durable import DurableRun, DurableRuns, lost_message, numbered_past
from chats.reports import ReportStore
from chats.shared_runs import BEAT_S, LiveRun, SharedRunLog
from chats.state_postgres import Woken

log = logging.getLogger(__name__)
SHARED_FLUSH_S = 0.15  # how often a run's new events are copied for readers in other processes
SHARED_POLL_S = 0.25  # how often a reader in another process looks for them (SQLite)
PUSHED_CHECK_S = 1.0  # on PostgreSQL, how often a reader woken by nothing checks on the run's owner
SHARED_APPEARS_S = 1.0  # how long a reader waits for a run started a moment ago to be shared
DURABLE_INTERFACES = ("web", "slack")  # the runs kept for a takeover: a CLI or eval run has nobody to deliver to
STORED_CHECK_S = 1.0  # how often a reader of a quiet shared log looks for the stored turn (a copy left behind)
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
    sharing: asyncio.Lock = field(default_factory=asyncio.Lock)  # one copy to the shared log at a time
    durable: bool = False  # kept for a takeover (chats/durable.py) while it runs
    superseded: bool = False  # another host took it over (this one lost its lease): this copy ends silently
    report_id: str = ""  # a report run's report (chats/reports.py): its own id, or the one a Resume continues


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
        durable: DurableRuns | None = None,
        reports: ReportStore | None = None,
    ):
        """`durable`: runs of the web and Slack are kept there as they go, so another host takes one over
        when this one dies (`take_over`)."""
        self._runner = runner
        self._durable = durable
        self._store = store
        self._audit = audit or AuditLog(store.file)  # every run leaves an entry, whoever built the registry
        self._reports = reports or ReportStore(store.file)  # a report run's report, stored before `done`
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
    def reports(self) -> ReportStore:
        """Where report runs keep their reports (an adapter reads one by `RunHandle.report_id` after `done`)."""
        return self._reports

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
        delivery: dict[str, Any] | None = None,
        report: ReportRequest | None = None,
        resume: Checkpoint | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Register the run with its first event, `started`, already in its log (so a reader sees
        something before the model's first reply, and a replay shows the same), then drive it.
        `origin` is who asked and where, for the audit (without it: the conversation's owner).
        `delivery`: what the adapter of another host needs to deliver the answer should it take the run
        over (Slack's thread); kept with the run when the registry keeps runs durable.
        With `report`, the run writes a report: under `report.report_id` when it resumes one, else under
        the run's own id (`RunHandle.report_id`, known at once); it is stored as running before the runner
        starts and as it ended before `done` (chats/reports.py), its checkpoints kept with it; `resume` goes
        on from one (chats/report_runs.py). Raises ShuttingDown once `drain` has begun."""
        if not self.accepting:
            raise ShuttingDown(ShuttingDown.message)
        origin = origin or Origin(interface=interface)
        handle = RunHandle(
            run_id or uuid.uuid4().hex,  # a caller names it when it claimed the run's work first
            conversation_id,
            interface,
            abandon_after_s=abandon_after_s,
            origin=origin,
            policy=policy.name if policy is not None else "",
        )
        if report is not None:
            handle.report_id = report.report_id or handle.run_id
            report = report.model_copy(update={"report_id": handle.report_id})
        handle.events.append(RunEvent(1, handle.run_id, conversation_id, StartedEvent(question=question)))
        self._runs[handle.run_id] = handle
        kept = None
        if self._durable is not None and interface in DURABLE_INTERFACES:
            kept = DurableRun(
                run_id=handle.run_id,
                conversation_id=conversation_id,
                interface=interface,
                platform=platform,
                question=question,
                policy=handle.policy,
                origin=origin,
                delivery=delivery or {},
                followups=followups,
                abandon_after_s=abandon_after_s,
            )
        run = self._run_of(
            handle, question, history, platform, followups, policy, kept=kept, report=report, resume=resume,
            delivery=delivery,
        )  # fmt: skip
        self._launch(handle, self._drive(handle, question, run, on_done))
        return handle

    def _launch(self, handle: RunHandle, drive: Awaitable[None]) -> None:
        with log_context(run_id=handle.run_id, interface=handle.interface):  # the task copies the context
            handle.task = asyncio.create_task(drive, name=f"run-{handle.run_id}")  # type: ignore[arg-type]

    def _run_of(
        self,
        handle: RunHandle,
        question: str,
        history: list[Turn],
        platform: Platform,
        followups: bool,
        policy: Policy | None,
        *,
        kept: DurableRun | None = None,
        resume: Checkpoint | None = None,
        report: ReportRequest | None = None,
        delivery: dict[str, Any] | None = None,
    ) -> Callable[[EventSink], Awaitable[RunResult]]:
        """The Runner's call for this run; a durable one (`kept`, new; `resume`, taken over) checkpoints, and
        a report run (`report`) keeps its checkpoints with its report too (Resume goes on from them), and its
        `delivery` (a host restarted without durable runs delivers it from there)."""

        async def run(publish: EventSink) -> RunResult:
            durable: dict[str, Any] = {}
            if kept is not None or resume is not None:
                if kept is not None:
                    await self._keep(handle, kept)
                if handle.durable or resume is not None:
                    durable = {"checkpoint": partial(self._checkpointed, handle), "resume": resume}
            if report is not None:  # only for a report: Runners that write none work on unchanged
                await self._begin_report(handle, question, report, delivery)
                sinks = [partial(self._checkpointed, handle)] if handle.durable else []  # the takeover's first
                sinks.append(
                    partial(self._reports.keep_checkpoint, handle.report_id, handle.run_id, holder=self._holder(handle))
                )  # a host that lost the run writes no checkpoint into the report either
                durable = {"checkpoint": partial(_each, sinks), "resume": resume, "report": report}
            return await self._runner.run(
                question,
                history=history,
                platform=platform,
                interface=handle.interface,
                on_event=publish,
                followups=followups,
                policy=policy,
                **durable,
            )

        return run

    async def take_over(
        self,
        kept: DurableRun,
        policy: Policy | None,
        *,
        refused: str | None = None,
        on_done: Callable[[RunResult], Awaitable[None]] | None = None,
    ) -> RunHandle | None:
        """Go on with a run another host started and stopped holding (it died): under the same id, its event
        log continued from the shared log (event numbers go on, so a reader following it gets the rest), its
        queries and rounds resumed from its checkpoint under the policy it ran under. With `refused` (why it
        may not be resumed), or with no checkpoint to resume from, it ends with that message instead, stored
        as failed: never silence. None when it had in fact ended (its turn is stored; `on_done` is told of its
        stored receipt, which its host died before it could). A takeover that fails to start (it raises)
        is left to lapse for another host (its `takeovers` counted: past the limit it is refused)."""
        assert self._durable is not None
        try:
            if await self._store.run_events(kept.run_id) is not None:  # stored, then its host died
                await self._settle_stored(kept, on_done)
                return None
            return await self._resume(kept, policy, refused, on_done)
        except Exception:
            self._runs.pop(kept.run_id, None)
            await self._durable.let_lapse(kept.run_id)  # held by nobody: another host (or this one) tries again
            raise

    async def _settle_stored(self, kept: DurableRun, on_done: Callable[[RunResult], Awaitable[None]] | None) -> None:
        """A run found stored (its host died between storing it and forgetting it): its asker's hold settled
        to the stored receipt, once (the row is forgotten right after)."""
        assert self._durable is not None
        if on_done is not None:
            receipt = await self._store.run_receipt(kept.run_id)
            try:
                await on_done(RunResult(question=kept.question, receipt=receipt))
            except Exception:
                log.exception("could not finish run %s", kept.run_id)
        await self._durable.finish(kept.run_id)

    async def _resume(
        self,
        kept: DurableRun,
        policy: Policy | None,
        refused: str | None,
        on_done: Callable[[RunResult], Awaitable[None]] | None,
    ) -> RunHandle:
        """`take_over`'s run, not yet stored: resumed, or ended with a message."""
        if kept.unreadable and refused is None:
            refused = lost_message("this server's release cannot read what was kept of it")
        handle = RunHandle(
            kept.run_id,
            kept.conversation_id,
            cast(Interface, kept.interface),
            abandon_after_s=kept.abandon_after_s,
            origin=kept.origin,
            policy=kept.policy,
            durable=True,
        )
        await self._events_so_far(handle, kept.question)
        if _answer_shown(handle.events):  # the lost round's words: readers discard them
            handle.events.append(self._next(handle, AnswerEvent(text="", restart=True)))
        self._runs[handle.run_id] = handle
        report, unreadable = await self._report_of(handle)  # a report run goes on writing its report
        saved = kept.saved()
        message = refused or unreadable or (None if saved is not None else lost_message("it had not begun"))
        if message is not None or saved is None:
            log.warning("run %s is not resumed: %s", handle.run_id, message)
            run = _ended_with(kept.question, message or "")
        else:
            platform = cast(Platform, kept.platform)
            saved = numbered_past(saved, [e.data for e in handle.events])  # the lost round's query ids too
            run = self._run_of(
                handle, kept.question, [], platform, kept.followups, policy, resume=saved, report=report,
                delivery=kept.delivery,
            )  # fmt: skip
        self._launch(handle, self._drive(handle, kept.question, run, on_done))
        return handle

    async def _events_so_far(self, handle: RunHandle, question: str) -> None:
        """The log of a run taken over, as the shared log has it (every event up to its last checkpoint at
        least); just `started` where there is none."""
        rows = await self._shared.events_after(handle.run_id, 0) if self._shared is not None else []
        events = [e for row in rows if (e := RunEvent.from_dict({"id": row[0], "event": row[1], "data": row[2]}))]
        handle.events = [e for e in events if e.name != "done"]
        handle.shared_upto = len(handle.events)
        if not handle.events:
            handle.events = [RunEvent(1, handle.run_id, handle.conversation_id, StartedEvent(question=question))]

    async def update_delivery(self, handle: RunHandle, delivery: dict[str, Any]) -> None:
        """What the adapter knows now of where its answer goes (say, the messages it posted), for a host
        that takes the run over (a report's, with the report too: a restart on SQLite keeps no runs). Nothing
        for a run not kept; a failure is logged."""
        try:
            if handle.report_id:
                await self._reports.keep_delivery(
                    handle.report_id, handle.run_id, delivery, holder=self._holder(handle)
                )
            if self._durable is not None and handle.durable:
                await self._durable.update_delivery(handle.run_id, delivery)
        except Exception:
            log.exception("could not keep the delivery of run %s", handle.run_id)

    async def _keep(self, handle: RunHandle, kept: DurableRun) -> None:
        assert self._durable is not None
        try:
            await self._durable.begin(kept)
            handle.durable = True
        except Exception:  # the run goes on; only a takeover is lost
            log.exception("could not keep run %s for a takeover", handle.run_id)

    async def _checkpointed(self, handle: RunHandle, checkpoint: Checkpoint) -> None:
        """The run's progress kept, after its events so far are in the shared log: a host taking it over
        goes on from both."""
        assert self._durable is not None
        await self._flush_shared(handle)
        if not await self._durable.save(handle.run_id, checkpoint):
            self._lost_lease(handle)

    @staticmethod
    def _lost_lease(handle: RunHandle) -> None:
        """Another host took the run over (this one froze past its lease): this copy stops, silently."""
        if not handle.superseded:
            log.error("run %s lost its lease to another host; this copy stops", handle.run_id)
        handle.superseded = True
        if handle.task is not None and not handle.task.done():
            handle.task.cancel()

    async def _drive(
        self,
        handle: RunHandle,
        question: str,
        run: Callable[[EventSink], Awaitable[RunResult]],
        on_done: Callable[[RunResult], Awaitable[None]] | None = None,
    ) -> None:
        async def publish(event: Event) -> None:
            if not handle.superseded:
                await self._publish(handle, event)

        sharing = asyncio.create_task(self._share(handle)) if self._shared is not None else None
        result: RunResult | None = None
        try:
            try:
                result = await run(publish)
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
        to store, and `done` says so. A copy superseded by another host's takeover ends here, silently (a host
        that froze past its lease finds so here if no checkpoint told it before)."""
        if handle.superseded or not await self._still_held(handle):
            self._superseded_at_end(handle)
            return
        done = [self._next(handle, done_event(result))]
        if (size := json_size(done[0].data)) > self._max_event_bytes:
            log.error("a done event of %d bytes was not sent (the cap is %d)", size, self._max_event_bytes)
            done = self._failed_end(handle, "Part of this answer was too large to show.")
        stored: bool | None = None
        try:
            if result is not None:
                record = [e.as_dict() for e in [*handle.events, *done]]
                stored = await self._store.save_turn(
                    handle.conversation_id, handle.run_id, result, record, self._fence(handle)
                )
        except Exception:
            log.exception("could not store run %s", handle.run_id)
            done = self._failed_end(handle, "Something went wrong on the server; try again.")
        if not await self._ended_here(handle, stored):
            self._superseded_at_end(handle)  # another host took the run over after the check: it ends it
            return
        if on_done is not None:  # e.g. the asker's daily budget settles to the answer's receipt
            try:
                await on_done(result or RunResult(question=question))
            except Exception:
                log.exception("could not finish run %s", handle.run_id)
        if handle.report_id:
            await self._end_report(handle, result)
        await self._record_audit(handle, question, result)
        for event in done:
            await self._append(handle, event)

    async def _report_of(self, handle: RunHandle) -> tuple[ReportRequest | None, str | None]:
        """The report a run taken over was writing (its request, naming the report), if it was one; and why
        it may not be resumed when that report's row cannot be read (the run ends with that message, and the
        report is failed)."""
        try:
            stored = await self._reports.of_run(handle.run_id)
        except (ValueError, TypeError):  # a row this release cannot read at all
            stored = None
            torn = True
        else:
            torn = stored is not None and stored.torn  # a torn column, or another release's request
        if torn:
            log.warning("run %s writes a report this release cannot read; it is ended", handle.run_id)
            handle.report_id = await self._reports.id_of_run(handle.run_id) or ""
            return None, lost_message("this server's release cannot read the report it was writing")
        if stored is None or stored.request is None:
            return None, None
        handle.report_id = stored.id
        return stored.request.model_copy(update={"report_id": stored.id}), None

    async def _begin_report(
        self, handle: RunHandle, question: str, request: ReportRequest, delivery: dict[str, Any] | None
    ) -> None:
        """The report is `running` by this run before the runner starts: a restart finds it to resume."""
        # Its audience is the chat's (a Slack channel's thread belongs to the channel), else who asked.
        owner = await self._store.owner_of(handle.conversation_id) or handle.origin.person
        await self._reports.begin(
            handle.report_id,
            run_id=handle.run_id,
            owner=owner,
            interface=handle.interface,
            question=question,
            request=request,
            conversation_id=handle.conversation_id,
            policy=handle.policy,
            delivery=delivery,
        )

    async def _end_report(self, handle: RunHandle, result: RunResult | None) -> None:
        """The run's report as it ended, stored before `done` so a reader of `done` finds it; a run that
        ended without one (it raised, or was cancelled first) leaves the report `failed`."""
        try:
            if not self.accepting and result is not None and result.outcome is Outcome.CANCELLED:
                return  # the host is going down: the report stays running, and goes on from its checkpoint after
            if result is not None and result.report is not None:
                await self._reports.save(result.report, run_id=handle.run_id)
            else:
                await self._reports.fail(handle.report_id, run_id=handle.run_id)
        except Exception:
            log.exception("could not store the report of run %s", handle.run_id)

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

    async def _still_held(self, handle: RunHandle) -> bool:
        """Whether this host still holds the run it is about to end (True when it is not kept, or cannot tell:
        an answer is not dropped for a database away for a moment)."""
        if self._durable is None or not handle.durable:
            return True
        try:
            return await self._durable.held_here(handle.run_id)
        except Exception:
            log.exception("could not tell whether this host still holds run %s", handle.run_id)
            return True

    async def _forget_durable(self, handle: RunHandle) -> bool:
        """The run ended and is stored: no host is to take it over. False when another host holds it now."""
        if self._durable is None or not handle.durable:
            return True
        try:
            return await self._durable.finish(handle.run_id)
        except Exception:
            log.exception("could not forget durable run %s", handle.run_id)
            return True

    def _fence(self, handle: RunHandle) -> Callable[[sqlite3.Connection], bool] | None:
        """For a durable run, the check its turn's store makes in its own transaction: this host still holds
        the run, and forgets it there (a host that froze past its lease stores nothing)."""
        if self._durable is None or not handle.durable:
            return None
        return partial(self._durable.finish_in, run_id=handle.run_id)

    def _holder(self, handle: RunHandle) -> str | None:
        """The host a durable run's writes are fenced by (None for a run not kept)."""
        return self._durable.host if self._durable is not None and handle.durable else None

    async def _ended_here(self, handle: RunHandle, stored: bool | None) -> bool:
        """Whether this host ended the run, its durable row gone: with its turn's store (`stored`, fenced), or
        now (no turn stored). False: another host holds the run now, and nothing of this copy was kept."""
        if stored is False:
            return False
        if stored and self._fence(handle) is not None:
            self._stop_driving(handle)
            return True
        return await self._forget_durable(handle)

    def _stop_driving(self, handle: RunHandle) -> None:
        if self._durable is not None:
            self._durable.stop_driving(handle.run_id)

    def _superseded_at_end(self, handle: RunHandle) -> None:
        handle.superseded = True
        self._stop_driving(handle)  # never renewed again: its lease is the other host's now

    def _failed_end(self, handle: RunHandle, message: str) -> list[RunEvent]:
        error = self._next(handle, ErrorEvent(message=message))
        return [error, RunEvent(error.id + 1, handle.run_id, handle.conversation_id, done_event(None))]

    async def _share(self, handle: RunHandle) -> None:
        """Copy the run's events to the shared log until it is done, beating meanwhile; then take them out
        again (by then the stored turn has them all). Whatever fails, the shared copy does not outlive
        the run, so no reader waits on it; a copy superseded by another host's takeover leaves the log to it."""
        assert self._shared is not None
        try:
            await self._shared.open(handle.run_id, handle.conversation_id, handle.policy)
            beat_at = _next_tick(BEAT_S, after=time.monotonic() + BEAT_S)  # as its opening was one
            while not handle.superseded:
                ended = handle.done
                beat = time.monotonic() >= beat_at
                await self._flush_shared(handle, beat=beat)
                beat_at = _next_tick(BEAT_S) if beat else beat_at
                if ended:
                    break
                await self._until_fresh(handle, beat_at)
        except Exception:  # the run goes on; readers in other processes fall back to the stored turn
            log.exception("could not share run %s with other workers", handle.run_id)
        finally:
            try:
                if not handle.superseded:
                    await asyncio.shield(self._shared.close(handle.run_id, holder=self._holder(handle)))
            except Exception:
                log.exception("could not take run %s out of the shared log", handle.run_id)

    async def _flush_shared(self, handle: RunHandle, *, beat: bool = False) -> None:
        """The run's events not yet in the shared log, copied (with `beat`, a heartbeat too)."""
        if self._shared is None:
            return
        async with handle.sharing:
            fresh = handle.events[handle.shared_upto :]
            if fresh or beat:
                rows = [(e.id, e.name, e.data) for e in fresh]
                if not await self._shared.add(handle.run_id, rows, beat=beat, holder=self._holder(handle)):
                    self._lost_lease(handle)  # another host took the run over: its log is that host's now
                    return
                handle.shared_upto += len(fresh)

    async def _until_fresh(self, handle: RunHandle, beat_at: float) -> None:
        """Until the next copy (at the latest `beat_at`, the next beat): every SHARED_FLUSH_S on SQLite, and on
        PostgreSQL while no reader on another host follows the run; once one does (it is pushed to), as soon as
        there is something new: what comes while a copy is on its way goes in the next, with other runs' copies
        (chats/shared_runs_postgres.py), so no wait to gather a burst is needed. The intervals fall on the host's
        ticks, the same for all its runs, so on PostgreSQL their copies go in one statement too."""
        assert self._shared is not None
        watched = self._shared.watched(handle.run_id)
        if watched is None or not watched.is_set():
            until = min(_next_tick(SHARED_FLUSH_S), beat_at) - time.monotonic()
            await (asyncio.sleep(until) if watched is None else _woken_or_after(watched, until))
            return
        async with handle.changed:
            await _wait_for(handle.changed, partial(_fresh_or_done, handle), beat_at - time.monotonic())

    @staticmethod
    def _next(handle: RunHandle, body: WireEvent) -> RunEvent:
        number = handle.events[-1].id + 1 if handle.events else 1  # a log taken over may skip one it could not read
        return RunEvent(number, handle.run_id, handle.conversation_id, body)

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
        may_read: Callable[[LiveRun], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[RunEvent] | None:
        """A run another worker process owns, followed through the shared log; None if there is none
        (or, with `interface`, if its conversation is another interface's, or, with `may_read`, if that
        says no of it: its conversation, its policy). A run started a moment ago may not be shared yet: it is
        looked for a little while."""
        if self._shared is None:
            return None
        deadline = time.monotonic() + SHARED_APPEARS_S
        with self._shared.waiting(run_id) as woken:  # its owner's first write wakes it on PostgreSQL
            while (live := await self._shared.find(run_id)) is None:
                if time.monotonic() >= deadline:
                    return None
                await _woken_or_after(woken, min(SHARED_POLL_S, deadline - time.monotonic()))
        readable = interface is None or await self._store.exists(live.conversation_id, interface=interface)
        if not readable or (may_read is not None and not await may_read(live)):
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))  # not told apart from a run never seen
            return None
        return self._poll_shared(run_id, after)

    async def _poll_shared(self, run_id: str, after: int) -> AsyncIterator[RunEvent]:
        assert self._shared is not None
        with self._shared.waiting(run_id) as woken:
            async for event in self._read_shared(run_id, after, woken):
                yield event

    async def _read_shared(self, run_id: str, after: int, woken: Woken) -> AsyncIterator[RunEvent]:
        """The run's events from the shared log, read again whenever `woken` (PostgreSQL's push) or, unwoken,
        every SHARED_POLL_S on SQLite (PUSHED_CHECK_S on PostgreSQL, to check on the owner). On PostgreSQL the
        notices mostly carry the events themselves (chats/shared_runs.py `carried`): the table is read only
        at first and after a gap or a bare notice, and unwoken there is nothing new to read (a lost connection
        wakes every reader), so a quiet check on the owner is its heartbeat alone, one round trip."""
        assert self._shared is not None
        position, patience = after, PUSHED_CHECK_S if self._shared.pushes else SHARED_POLL_S
        # On PostgreSQL the first read goes with the first heartbeat: the owner copies as events come from then on.
        touched = time.monotonic() if self._shared.pushes else float("-inf")
        stored_checked, first = float("-inf"), True
        while True:
            fresh, heard = await self._fresh_shared(run_id, position, woken, first)
            first = False
            for number, name, data in fresh:
                if (event := RunEvent.from_dict({"id": number, "event": name, "data": data})) is not None:
                    yield event
                position = number
                if name == "done":
                    return
            if not fresh and not heard:  # (a notice with events only this reader had: its owner is there)
                due = time.monotonic() - touched >= patience  # the reader's heartbeat reads the run's row too
                live = await (self._shared.touch(run_id) if due else self._shared.find(run_id))
                touched = time.monotonic() if due else touched
                look_for_stored = time.monotonic() - stored_checked >= STORED_CHECK_S
                stored_checked = time.monotonic() if look_for_stored else stored_checked
                if await self._over_elsewhere(run_id, live, look_for_stored):
                    async for event in self._rest_of(run_id, position, live):
                        yield event
                    return
            if time.monotonic() - touched >= patience:  # the owner must not cancel it as abandoned
                await self._shared.touch(run_id)
                touched = time.monotonic()
            await _woken_or_after(woken, patience)

    async def _fresh_shared(
        self, run_id: str, position: int, woken: Woken, first: bool
    ) -> tuple[list[tuple[int, str, dict[str, Any]]], bool]:
        """The run's events past `position`, and whether a notice carried events (its owner is there): read from
        the table on SQLite, on the first pass (with the first heartbeat, on PostgreSQL), and when the notices
        that woke the reader leave a gap or say nothing of the events; taken from the notices otherwise."""
        assert self._shared is not None
        woken.clear()  # before the read: news during it wakes the next wait at once
        if first and self._shared.pushes:
            _, fresh = await asyncio.gather(self._shared.touch(run_id), self._shared.events_after(run_id, position))
            return fresh, False
        carried = self._shared.carried(woken, position) if self._shared.pushes and not first else None
        return carried if carried is not None else (await self._shared.events_after(run_id, position), False)

    async def _over_elsewhere(self, run_id: str, live: LiveRun | None, look_for_stored: bool) -> bool:
        """Whether a quiet run in the shared log is over for its readers: done and taken out of the log, or its
        owner dead with no host to take it over; or, with `look_for_stored` (now and then: its owner is alive
        but its copy may have been left behind by a failed close), its turn stored, which ends the run for
        its readers whatever the copy says."""
        if live is None or (not live.owner_alive and not await self._taken_over_soon(run_id)):
            return True
        return look_for_stored and await self._store.run_events(run_id) is not None

    async def _taken_over_soon(self, run_id: str) -> bool:
        """A run whose host died but that another host will take over (chats/durable.py): its reader waits."""
        if self._durable is None:
            return False
        try:
            return await self._durable.holds(run_id)
        except Exception:
            log.exception("could not tell whether run %s will be taken over", run_id)
            return False

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

    async def drain(self, timeout_s: float, *, hand_over: bool = False) -> tuple[int, int]:
        """Take no new runs; wait up to `timeout_s` for the running ones to finish (each is stored as it
        ends), then cancel the rest, which are stored as cancelled. With `hand_over` (the host is going away,
        SIGTERM), a durable run left is handed to another host instead: its lease released, this copy ends
        silently, and another host resumes it from its checkpoint at once. Returns (finished, cancelled or
        handed over)."""
        self.accepting = False
        tasks = [h.task for h in self._runs.values() if h.task is not None and not h.task.done()]
        if not tasks:
            return 0, 0
        log.info("waiting up to %.0f s for %d answer(s) still running", timeout_s, len(tasks))
        _, pending = await asyncio.wait(tasks, timeout=timeout_s) if timeout_s > 0 else (set(), set(tasks))
        handed = await self._hand_over([h for h in self._runs.values() if h.task in pending]) if hand_over else 0
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        finished, cancelled = len(tasks) - len(pending), len(pending) - handed
        log.info("shutdown: %d answer(s) finished, %d handed over, %d cancelled", finished, handed, cancelled)
        return finished, len(pending)

    async def _hand_over(self, handles: list[RunHandle]) -> int:
        """The durable runs among `handles` released for another host to take over at once (their events so
        far in the shared log first); how many. Those that cannot be are cancelled as usual."""
        durable = [h for h in handles if h.durable and not h.done]
        if self._durable is None or not durable:
            return 0
        try:
            for handle in durable:
                await self._flush_shared(handle)
            await self._durable.release([h.run_id for h in durable])
        except Exception:
            log.exception("could not hand %d answer(s) over to another host; cancelling them", len(durable))
            return 0
        for handle in durable:
            handle.superseded = True
        return len(durable)

    async def shutdown(self) -> None:
        await self.drain(0)


def _ended_with(question: str, message: str) -> Callable[[EventSink], Awaitable[RunResult]]:
    """A run that ends at once with `message` as its error: a run taken over that may not be resumed."""

    async def run(publish: EventSink) -> RunResult:
        await publish(ErrorEvent(message=message))
        return RunResult(question=question, outcome=Outcome.ERROR, error=message)

    return run


def _answer_shown(events: list[RunEvent]) -> bool:
    """Whether readers of this log hold answer text (since its last restart)."""
    for event in reversed(events):
        if isinstance(event.body, AnswerEvent):
            if event.body.restart:
                return False
            if event.body.text:
                return True
    return False


def _next_tick(period_s: float, *, after: float | None = None) -> float:
    """The first multiple of `period_s` on the monotonic clock past `after` (now): every run of the host beats
    and copies on the same ticks."""
    return ((time.monotonic() if after is None else after) // period_s + 1) * period_s


def _fresh_or_done(handle: RunHandle) -> bool:
    return len(handle.events) > handle.shared_upto or handle.done


async def _wait_for(changed: asyncio.Condition, ready: Callable[[], bool], timeout_s: float) -> None:
    """`changed.wait_for(ready)` (the condition held), giving up after `timeout_s`."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):  # not wait_for: that makes a task of each wait
            await changed.wait_for(ready)


async def _woken_or_after(woken: asyncio.Event, timeout_s: float) -> None:
    if woken.is_set():
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):
            await woken.wait()


async def _each(sinks: Sequence[Callable[[Checkpoint], Awaitable[None]]], checkpoint: Checkpoint) -> None:
    """A checkpoint handed to every sink that keeps it (the report's row, the durable run's)."""
    for sink in sinks:
        await sink(checkpoint)


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
