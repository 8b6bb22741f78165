"""Reports that go on: Resume (a person asks a partial report to continue) and a restarted host (the reports
its runs were writing when it stopped). Both start a run in the registry from the report's latest checkpoint
(chats/reports.py keeps it; the durable runs' `Checkpoint`, agent/runner.py), so no query that succeeded
runs again: its result is in the checkpoint.

- Resume grants the report one more budget (`ReportRequest.grants`) and goes on from where it stopped.
- A restart goes on with the budget the run had: the report was `running` when its host stopped (a drain
  leaves it so; a crash cannot do otherwise), and exactly one claimant takes it (`ReportStore.claim`).

Each run is started with its delivery context (a durable run's: Slack's thread, the asker's budget hold), kept
with the report and with the durable run: whichever host goes on with it (a restart, a takeover) delivers it
where it was asked.

Who may resume is the adapter's to check first (`ReportStore.readable`); the policy is the adapter's to
find again by the name the report keeps (a checkpoint goes on only under its own policy).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any, cast

from agent.access.policy import Policy
from agent.reports.model import ReportRequest
from agent.runner import Checkpoint, Interface, Platform, RunResult
from chats.audit import Origin
from chats.reports import ReportStore, StoredReport
from chats.runs import RunHandle, RunRegistry

log = logging.getLogger(__name__)
PLATFORM_OF: dict[str, Platform] = {"slack": "slack", "web": "web", "cli": "cli", "eval": "cli"}


class NotResumable(Exception):
    """The report cannot go on: it is still running, ended complete, or has no checkpoint to go on from."""


REPORT_RATE_WEIGHT = 3  # a report counts as this many questions against the asker's per-minute rate
MAX_RESUMES = 5  # a report is given at most this many more budgets: past them it is asked again, anew
POLICY_CHANGED = (
    "This report was written under data access you no longer have as it was; it can only go on under that "
    "access. Ask it again as a new report."
)


class PolicyChanged(NotResumable):
    """The asker's policy now is not the one the report's checkpoint was taken under: a run can only fail."""


def policy_changed(stored_policy: str | None, policy: Policy | None) -> bool:
    """The policy a report was asked under (its stored name, '' or None for none) is not `policy`."""
    return (stored_policy or None) != (policy.name if policy is not None else None)


def too_many_running(limit: int) -> str:
    return (
        f"You have {limit} report{'s' if limit != 1 else ''} being written already; ask for another when one "
        "of them is done."
    )


async def running_of(reports: ReportStore, owner: str) -> int:
    """How many reports `owner` has being written now (checked when another is asked for or resumed)."""
    return sum(1 for stored in await reports.running() if stored.owner == owner)


class ReportRuns:
    def __init__(self, runs: RunRegistry, reports: ReportStore | None = None) -> None:
        self._runs = runs
        self._reports = reports or runs.reports

    async def resume(
        self,
        report_id: str,
        *,
        policy: Policy | None = None,
        origin: Origin | None = None,
        on_done: Callable[[RunResult], Awaitable[None]] | None = None,
        delivery: dict[str, Any] | None = None,
    ) -> RunHandle:
        """Resume: a new run of the report, from its latest checkpoint, with one more budget, delivered by
        `delivery` (the adapter's, as for `RunRegistry.start`: another host taking the run over delivers it
        there). Raises NotResumable for a report that is running, complete or cannot answer, or has no
        checkpoint."""
        stored = await self._reports.get(report_id)
        if stored is None or stored.state not in ("partial", "failed"):
            raise NotResumable(f"the report is {stored.state if stored else 'not there'}")
        checkpoint = await self._reports.checkpoint(report_id)
        if checkpoint is None or stored.request is None:
            raise NotResumable("the report has nothing to go on from")
        if policy_changed(checkpoint.policy, policy):  # refused before a run starts that could only fail
            raise PolicyChanged(POLICY_CHANGED)
        if stored.request.grants > MAX_RESUMES:
            raise NotResumable(f"the report was resumed {MAX_RESUMES} times already")
        earlier = stored.report.runs if stored.report is not None else [stored.run_id]
        request = stored.request.model_copy(update={"grants": stored.request.grants + 1, "runs": earlier})
        return self._start(
            stored, request, checkpoint, policy=policy, origin=origin, on_done=on_done, delivery=delivery
        )

    async def resume_unfinished(
        self,
        policy_named: Callable[[str | None], Policy | None],
        *,
        interfaces: Collection[str] = ("web", "slack", "cli", "eval"),
        quiet_for_s: float = 0.0,
        deliver: Callable[[RunHandle, dict[str, Any]], None] | None = None,
    ) -> list[RunHandle]:
        """After a restart of a host that alone keeps the state (a SQLite file; with PostgreSQL the durable
        runs' takeover carries reports on): every report of `interfaces` a run was writing when the host
        stopped (nothing heard of it for `quiet_for_s`), each claimed once and taken on from its checkpoint
        with the budget it had, and handed to `deliver` with the delivery context it kept (Slack's bot posts
        it in its thread)."""
        started = []
        for stored in await self._reports.running(quiet_for_s=quiet_for_s):
            if self._runs.get(stored.run_id) is not None or stored.interface not in interfaces:
                continue  # this process's own, running now; or another interface's to take on
            if stored.torn:  # what it was asked cannot be read here: it ends, rather than wait for ever
                await self._reports.fail(stored.id, run_id=stored.run_id)
                continue
            checkpoint = await self._reports.checkpoint(stored.id)
            run_id = uuid.uuid4().hex
            if stored.request is None or not await self._reports.claim(
                stored.id, from_run=stored.run_id, to_run=run_id
            ):
                continue
            request = stored.request.model_copy(update={"report_id": stored.id})
            policy = policy_named(stored.policy or None)
            log.info("going on with report %s after a restart", stored.id)
            handle = self._start(stored, request, checkpoint, policy=policy, run_id=run_id, delivery=stored.delivery)
            if deliver is not None:
                deliver(handle, stored.delivery)
            started.append(handle)
        return started

    def _start(
        self, stored: StoredReport, request: ReportRequest, checkpoint: Checkpoint | None, **kwargs: Any
    ) -> RunHandle:
        interface = cast(Interface, stored.interface)
        return self._runs.start(
            stored.conversation_id,
            stored.question,
            [],
            platform=PLATFORM_OF.get(stored.interface, "cli"),
            interface=interface,
            followups=False,
            report=request.model_copy(update={"report_id": stored.id}),
            resume=checkpoint,
            **kwargs,
        )
