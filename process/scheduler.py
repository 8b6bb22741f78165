"""The scheduler: fires scheduled questions, alerts and eval runs at their time, from every worker of
`agent serve` and every host sharing the state, each fire once (chats/schedules.py claims it with a
lease row in the state store: one atomic winner).

Each tick claims what is due and what waits for a retry, then fires each: picks the policy it runs under
(chats/schedule_runs.py `fire_policy`; a schedule whose owner lost access stops and tells them), makes
the answer or checks the alert (SQL only, no model, unless it asks afresh), stores it as a turn, and
delivers it through its outlet (the web inbox, Slack). A fire that runs well after its time (the server
was down) runs once and says so. A failed fire is tried again later with a wait that doubles, by whichever
worker is free then: its state is in the store, not in this process; in the end its owner is told.

Time comes from `clock`, so tests move it across a daylight-saving change or a day of downtime and call
`tick` themselves; only `keep_firing` sleeps, on the event loop, between ticks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from agent.access.policy import Policies, Policy
from agent.config import Settings
from agent.metrics import Metrics
from chats.audit import AuditLog
from chats.conversations import ConversationStore
from chats.people import channel_of
from chats.schedule_deliveries import Delivered, Outlet, store_turn
from chats.schedule_runs import AccessLost, FireMaker, Made, OverBudget, fire_policy
from chats.schedules import INBOX, Fire, Schedule, ScheduleStore, slack_of

log = logging.getLogger(__name__)

# An eval run on a schedule (kind "evals"): given the schedule, runs the suite and returns the line to
# deliver (its pass rate and where its metrics are), or None to deliver nothing. `agent serve` wires
# process/evals_schedule.py's (`Scheduler(jobs={"evals": ...})`); without one such a fire is skipped and counted.
Job = Callable[[Schedule], Awaitable[str | None]]


@dataclass(frozen=True)
class Timing:
    tick_s: float = 30.0
    late_after_s: float = 300.0
    retries: int = 4
    retry_s: float = 60.0

    @classmethod
    def of(cls, settings: Settings) -> Timing:
        return cls(
            tick_s=settings.agent_schedule_tick_s,
            late_after_s=settings.agent_schedule_late_after_s,
            retries=settings.agent_schedule_retries,
            retry_s=settings.agent_schedule_retry_s,
        )

    def backoff(self, attempt: int) -> float:
        """The wait after the `attempt`th try failed. The try itself is a row in the store, claimed by any
        worker when its time comes; an in-process retry library would lose it with the process."""
        return self.retry_s * 2 ** (attempt - 1)


class Scheduler:
    def __init__(
        self,
        store: ScheduleStore,
        conversations: ConversationStore,
        maker: FireMaker,
        outlets: Mapping[str, Outlet],
        metrics: Metrics,
        *,
        policies: Callable[[], Policies | None],
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.time,
        jobs: Mapping[str, Job] | None = None,
        worker: str | None = None,
        audit: AuditLog | None = None,
        beside: Collection[str] = (),
    ) -> None:
        self._store, self._conversations, self._maker = store, conversations, maker
        self._outlets, self._metrics, self._policies = outlets, metrics, policies
        self._timing, self._clock, self._jobs = timing, clock, dict(jobs or {})
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._audit = audit  # every delivered answer's entry, as every question's
        # Kinds whose fires run beside the ticks rather than in them (an eval run takes minutes; the other
        # schedules' fires must not wait for it). `settled` waits for them.
        self._beside, self._running = frozenset(beside), dict[asyncio.Task[None], Fire]()

    async def tick(self) -> int:
        """Fire what is due now and what waits for a retry; the number of fires this worker ran."""
        if self._running:  # still ours: their leases must not run out while each tick comes
            await self._store.hold(list(self._running.values()), self.worker)
        fires = await self._store.claim_due(self.worker) + await self._store.claim_retries(self.worker)
        for fire in (f for f in fires if f.schedule.kind in self._beside):
            task = asyncio.get_running_loop().create_task(self._fire(fire), name=f"fire {fire.schedule.kind}")
            self._running[task] = fire
            task.add_done_callback(self._running.pop)
        await asyncio.gather(*(self._fire(fire) for fire in fires if fire.schedule.kind not in self._beside))
        return len(fires)

    async def settled(self) -> None:
        """Wait for the fires running beside the ticks."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    async def keep_firing(self) -> None:
        """Tick every `tick_s` until cancelled; a failed tick is logged and the next one goes on."""
        try:
            while True:
                try:
                    await self.tick()
                except Exception:
                    log.exception("scheduler: a tick failed; the next one is in %.0f s", self._timing.tick_s)
                await asyncio.sleep(self._timing.tick_s)
        finally:  # a fire cut short keeps its lease row: another worker takes it over when the lease runs out
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    async def _fire(self, fire: Fire) -> None:
        schedule = fire.schedule
        if fire.attempt == 1:
            timing = "late" if fire.late_by(self._timing.late_after_s) else "on_time"
            self._metrics.schedule_fires.labels(schedule.kind, timing).inc()
        outlet = self._outlet(schedule)
        try:
            if schedule.kind == "evals":
                await self._eval_run(fire, outlet)
                return
            policy = fire_policy(self._policies(), schedule.draft)
            if refused := await outlet.refusal(schedule) or await self._source_refusal(schedule):
                self._metrics.schedule_skips.labels("destination").inc()
                await self._stop(fire, outlet, refused)
                return
        except AccessLost as lost:
            self._metrics.schedule_skips.labels("access").inc()
            await self._stop(fire, outlet, str(lost))
            return
        except Exception as exc:
            await self._failed(fire, outlet, "run", exc)
            return
        await self._answer(fire, outlet, policy)

    async def _source_refusal(self, schedule: Schedule) -> str | None:
        """A Slack channel's answer taken elsewhere (one's inbox, a DM) goes on only while its owner is still
        in that channel, as its page does (chats/audiences.py); posted into the channel, the outlet checks."""
        source = channel_of(await self._conversations.run_owner(schedule.draft.source_run_id) or "")
        if source is None or slack_of(schedule.draft.destination) == source:
            return None
        reads = getattr(self._outlets.get("slack"), "reads", None)  # SlackOutlet's; none without the bot
        if reads is not None and await reads(schedule, *source):
            return None
        return "You are no longer in the Slack channel its answer was asked in (or Slack could not say), so it stopped."

    async def _answer(self, fire: Fire, outlet: Outlet, policy: Policy | None) -> None:
        schedule = fire.schedule
        try:
            made = await self._maker.make(schedule, policy, interface=outlet.interface)
        except OverBudget as spent:  # this fire only: the next one asks again, once the budget has reset
            self._metrics.schedule_skips.labels("budget").inc()
            await self._store.finish(fire, status="skipped", note="its owner's daily budget is spent")
            await self._tell(
                schedule, outlet, f"Your schedule \u201c{schedule.title}\u201d was not asked this time: {spent}"
            )
            return
        except Exception as exc:
            await self._failed(fire, outlet, "run", exc)
            return
        if made.result is None:  # an alert that does not hold, or holds still
            await self._store.record_check(schedule.id, made.values, alert_firing=bool(made.alert_firing))
            self._metrics.schedule_skips.labels("condition").inc()
            await self._store.finish(fire, status="skipped", note="the condition did not call for a post")
            return
        try:
            delivered = await self._delivered(fire, outlet, made)
            await outlet.deliver(delivered)
        except Exception as exc:
            await self._failed(fire, outlet, "delivery", exc)
            return
        await self._store.record_delivery(schedule.id, made.values, alert_firing=made.alert_firing)
        self._metrics.schedule_deliveries.labels(outlet.name).inc()
        await self._store.finish(fire, status="done")

    async def _delivered(self, fire: Fire, outlet: Outlet, made: Made) -> Delivered:
        assert made.result is not None
        run_id = uuid.uuid4().hex
        queries = await store_turn(self._conversations, self._audit, outlet, fire.schedule, run_id, made.result)
        return Delivered(
            fire.schedule,
            made.result.answer,
            made.result,
            run_id,
            queries,
            changed=made.changed,
            late=self._late_line(fire),
        )

    async def _eval_run(self, fire: Fire, outlet: Outlet) -> None:
        job = self._jobs.get("evals")
        if job is None:
            self._metrics.schedule_skips.labels("no_job").inc()
            await self._store.finish(fire, status="skipped", note="no eval job is wired into this server")
            return
        line = await job(fire.schedule)
        if line:
            await outlet.deliver(Delivered(fire.schedule, line, late=self._late_line(fire)))
            self._metrics.schedule_deliveries.labels(outlet.name).inc()
        await self._store.finish(fire, status="done")

    async def _failed(self, fire: Fire, outlet: Outlet, stage: str, exc: Exception) -> None:
        """Another try later, with a doubled wait; after the last, the owner is told."""
        self._metrics.schedule_failures.labels(stage).inc()
        error = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("scheduler: a fire failed at %s (try %d): %s", stage, fire.attempt, type(exc).__name__)
        if fire.attempt <= self._timing.retries:
            await self._store.retry_at(fire, self._clock() + self._timing.backoff(fire.attempt), error)
            return
        self._metrics.schedule_failures.labels("gave_up").inc()
        await self._store.finish(fire, status="failed", note=error)
        due = self._local(fire.schedule, fire.due_at)
        await self._tell(
            fire.schedule,
            outlet,
            f"Your schedule \u201c{fire.schedule.title}\u201d due {due} did not arrive after {fire.attempt} "
            "tries; it fires again at its next time.",
        )

    async def _stop(self, fire: Fire, outlet: Outlet, reason: str) -> None:
        await self._store.stop(fire.schedule.id, reason)
        await self._store.finish(fire, status="skipped", note=reason)
        await self._tell(fire.schedule, outlet, f"Your schedule \u201c{fire.schedule.title}\u201d stopped: {reason}")

    async def _tell(self, schedule: Schedule, outlet: Outlet, text: str) -> None:
        """Through the schedule's outlet (a Slack DM), else the owner's inbox."""
        try:
            if await outlet.tell(schedule, text):
                return
        except Exception:
            log.warning("scheduler: could not tell a schedule's owner through %s; the inbox has it", outlet.name)
        await self._outlets[INBOX].tell(schedule, text)

    def _outlet(self, schedule: Schedule) -> Outlet:
        if slack_of(schedule.draft.destination) is not None and "slack" in self._outlets:
            return self._outlets["slack"]
        return self._outlets[INBOX]

    def _late_line(self, fire: Fire) -> str:
        late_s = fire.late_by(self._timing.late_after_s)
        if not late_s:
            return ""
        due = self._local(fire.schedule, fire.due_at)
        return (
            f"Late: this was due {due} and runs {_duration(late_s)} late (the service was not running); "
            "the times missed meanwhile are this one delivery."
        )

    @staticmethod
    def _local(schedule: Schedule, at: float) -> str:
        zone = schedule.draft.cadence.zone()
        return datetime.fromtimestamp(at, zone).strftime(f"%a %d %b %H:%M ({schedule.draft.cadence.timezone})")


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{max(1, round(seconds / 60))} minutes"
