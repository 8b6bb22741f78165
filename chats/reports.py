"""The kit's store of reports (agent/reports/model.py): each report with who it belongs to, where it was
asked, which run is building it and how it stands, so a Slack thread, the web's `/reports/<id>` page and
`agent report --resume` find it again, and a host that restarts finds the reports it was writing.

A report belongs to someone as a conversation does (chats/people.py owner strings): a person, or the
Slack channel it was asked in. A lookup that names no audience is the kit's own (the run registry, a
process resuming its reports); an adapter asks `readable`, which answers anyone outside the audience as
it answers an id never seen: None.

Its state: `running` from the moment a run starts writing it (a restart finds it there), then the report's
own outcome (`complete`, `partial`, `cannot_answer`) once a run ends, or `failed` when a run ended without
one. A Resume starts another run of the same report: `running` again, the latest run named.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.reports.model import Report, ReportRequest
from agent.runner import Checkpoint
from chats.audiences import Audiences
from chats.people import Person
from chats.state_file import StateFile

log = logging.getLogger(__name__)

RUNNING = "running"
FAILED = "failed"  # a run ended without a report (it raised, or was cancelled before it had one)
ReportState = Literal["running", "complete", "partial", "cannot_answer", "failed"]
_IN_INTERFACE = "(CAST(:interface AS TEXT) IS NULL OR interface = :interface)"
# Every column but the checkpoint, which only a resume reads (it holds every result the run had).
_COLUMNS = (
    "id, owner, interface, conversation_id, question, state, run_id, policy, report, request, delivery, created_at, "
    "updated_at"
)


@dataclass(frozen=True)
class StoredReport:
    id: str
    owner: str  # chats/people.py: "person:<id>" or "slack-channel:<team>:<channel>"
    interface: str  # where it was asked: web, slack, cli, eval
    conversation_id: str  # the conversation (web chat, Slack thread) it was asked in; '' for none
    question: str
    state: str  # ReportState
    run_id: str  # the run writing it now, or the last that did
    policy: str  # the access policy its queries run under ('' for none)
    report: Report | None  # None until a run has written it
    request: ReportRequest | None  # what its latest run was asked (its budget, how many it was granted)
    created_at: float
    updated_at: float
    # Where its adapter delivers it (a durable run's delivery context: Slack's thread, the asker's budget hold),
    # for a host that goes on with it after a restart; {} for none.
    delivery: dict[str, Any] = field(default_factory=dict)
    torn: bool = False  # a column this release could not read is left out (`_stored`)

    @property
    def running(self) -> bool:
        return self.state == RUNNING


class ReportStore:
    def __init__(self, file: StateFile, *, clock: Callable[[], float] = time.time) -> None:
        self._file = file  # the kit's state (chats/state.py), which makes the table
        self._clock = clock

    async def begin(
        self,
        report_id: str,
        *,
        run_id: str,
        owner: str,
        interface: str,
        question: str,
        request: ReportRequest,
        conversation_id: str = "",
        policy: str = "",
        delivery: dict[str, Any] | None = None,
    ) -> None:
        """A run starts writing the report (a new one, or a Resume of `report_id`): it is `running`, by
        `run_id`, asked `request`, delivered by `delivery` (the run's delivery context). A Resume keeps its
        owner, question, checkpoint and what was written; its delivery is the Resume's when it has one."""
        now = self._clock()
        row = {"id": report_id, "owner": owner, "interface": interface, "conversation_id": conversation_id,
               "question": question, "state": RUNNING, "run_id": run_id, "policy": policy,
               "request": request.model_dump_json(), "delivery": json.dumps(delivery or {}), "now": now}  # fmt: skip

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO reports (id, owner, interface, conversation_id, question, state, run_id, policy, "
                "request, delivery, created_at, updated_at) VALUES (:id, :owner, :interface, :conversation_id, "
                ":question, :state, :run_id, :policy, :request, :delivery, :now, :now) "
                "ON CONFLICT (id) DO UPDATE SET state = excluded.state, run_id = excluded.run_id, "
                "request = excluded.request, updated_at = excluded.updated_at, delivery = CASE "
                "WHEN excluded.delivery = '{}' THEN reports.delivery ELSE excluded.delivery END",
                row,
            )

        await self._file.run(write)

    async def keep_checkpoint(
        self, report_id: str, run_id: str, checkpoint: Checkpoint, *, holder: str | None = None
    ) -> None:
        """The latest checkpoint of the run writing the report (a sink for `Runner.run(checkpoint=)`): what a
        Resume, or a host restarted meanwhile, goes on from. Another run's (one taken over) is not kept; nor,
        for a durable run (`holder`: the host driving it), one from a host that no longer holds the run (a
        takeover keeps the run id, so only the holder tells the frozen host from the one that took over)."""
        saved, now = checkpoint.model_dump_json(), self._clock()
        fence, held = _held_by(run_id, holder)
        await self._file.run(
            lambda c: c.execute(
                f"UPDATE reports SET checkpoint = ?, updated_at = ? WHERE id = ? AND run_id = ?{fence}",
                (saved, now, report_id, run_id, *held),
            )
        )

    async def keep_delivery(
        self, report_id: str, run_id: str, delivery: dict[str, Any], *, holder: str | None = None
    ) -> None:
        """What the adapter knows now of where the report goes (the messages it posted, say), while `run_id`
        writes it (and, for a durable run, `holder` holds it): a host restarted meanwhile takes those messages
        back and posts the report once."""
        sent = json.dumps(delivery)
        fence, held = _held_by(run_id, holder)
        await self._file.run(
            lambda c: c.execute(
                f"UPDATE reports SET delivery = ? WHERE id = ? AND run_id = ?{fence}", (sent, report_id, run_id, *held)
            )
        )

    async def id_of_run(self, run_id: str) -> str | None:
        """The id of the report the run `run_id` is writing, read alone (its other columns may be torn)."""
        row = await self._file.run(
            lambda c: c.execute("SELECT id FROM reports WHERE run_id = ? AND state = ?", (run_id, RUNNING)).fetchone()
        )
        return str(row["id"]) if row else None

    async def checkpoint(self, report_id: str) -> Checkpoint | None:
        """The report's latest checkpoint; None when it has none this release can read."""
        row = await self._file.run(
            lambda c: c.execute("SELECT checkpoint FROM reports WHERE id = ?", (report_id,)).fetchone()
        )
        if row is None or not row["checkpoint"]:
            return None
        try:
            return Checkpoint.model_validate_json(row["checkpoint"])
        except ValueError:
            return None

    async def claim(self, report_id: str, *, from_run: str, to_run: str) -> bool:
        """Take a `running` report over from the run that was writing it (gone with its host): True for the
        one caller whose claim lands, False when another took it first or it is no longer that run's."""
        now = self._clock()
        cursor = await self._file.run(
            lambda c: c.execute(
                "UPDATE reports SET run_id = ?, updated_at = ? WHERE id = ? AND run_id = ? AND state = ?",
                (to_run, now, report_id, from_run, RUNNING),
            )
        )
        return cursor.rowcount > 0

    async def save(self, report: Report, *, run_id: str) -> bool:
        """A run's report, as it ended (its outcome becomes the state). False when no run began it."""
        now = self._clock()
        cursor = await self._file.run(
            lambda c: c.execute(
                "UPDATE reports SET state = ?, run_id = ?, report = ?, updated_at = ? WHERE id = ?",
                (report.outcome.value, run_id, report.model_dump_json(), now, report.id),
            )
        )
        return cursor.rowcount > 0

    async def fail(self, report_id: str, *, run_id: str) -> None:
        """The run `run_id` ended without a report: what an earlier run wrote (a Resume's) stays."""
        now = self._clock()
        await self._file.run(
            lambda c: c.execute(
                "UPDATE reports SET state = ?, updated_at = ? WHERE id = ? AND run_id = ? AND state = ?",
                (FAILED, now, report_id, run_id, RUNNING),
            )
        )

    async def get(self, report_id: str, *, interface: str | None = None) -> StoredReport | None:
        """The report under `report_id` (in `interface`), whoever owns it: for the kit's own use."""
        row = await self._file.run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reports WHERE id = :id AND {_IN_INTERFACE}",
                {"id": report_id, "interface": interface},
            ).fetchone()
        )
        return _stored(row) if row else None

    async def of_run(self, run_id: str) -> StoredReport | None:
        """The report the run `run_id` is writing (a run another host takes over, say); None for an answer's."""
        row = await self._file.run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reports WHERE run_id = ? AND state = ?", (run_id, RUNNING)
            ).fetchone()
        )
        return _stored(row) if row else None

    async def owner_of(self, report_id: str, *, interface: str | None = None) -> str | None:
        """Who the report belongs to; None when there is none (in `interface`)."""
        found = await self.get(report_id, interface=interface)
        return found.owner if found else None

    async def readable(
        self, report_id: str, person: Person, audiences: Audiences, *, interface: str | None = None
    ) -> StoredReport | None:
        """The report when `person` is in its audience; None otherwise, exactly as for an id never seen."""
        found = await self.get(report_id, interface=interface)
        if found is None or not await audiences.includes(person, found.owner):
            return None
        return found

    async def of_owner(self, owner: str, *, limit: int = 100) -> list[StoredReport]:
        """`owner`'s reports, newest first."""
        rows = await self._file.run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reports WHERE owner = ? ORDER BY updated_at DESC LIMIT ?", (owner, limit)
            ).fetchall()
        )
        return [_stored(row) for row in rows]

    async def in_conversation(self, conversation_id: str) -> list[StoredReport]:
        """The reports asked in a conversation (a reopened chat shows each turn's link to its report)."""
        rows = await self._file.run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reports WHERE conversation_id = ? ORDER BY created_at", (conversation_id,)
            ).fetchall()
        )
        return [_stored(row) for row in rows]

    async def running(self, *, quiet_for_s: float = 0.0) -> list[StoredReport]:
        """Reports a run was writing when it last said, and nothing since `quiet_for_s`: after a restart, the
        ones to resume."""
        before = self._clock() - quiet_for_s
        rows = await self._file.run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reports WHERE state = ? AND updated_at <= ? ORDER BY updated_at",
                (RUNNING, before),
            ).fetchall()
        )
        return [_stored(row) for row in rows]

    async def delete(self, report_id: str, *, owner: str) -> bool:
        cursor = await self._file.run(
            lambda c: c.execute("DELETE FROM reports WHERE id = ? AND owner = ?", (report_id, owner))
        )
        return cursor.rowcount > 0


def _held_by(run_id: str, holder: str | None) -> tuple[str, tuple[str, ...]]:
    """The condition (and its values) that a durable run is still held by `holder` (chats/durable.py); none
    for a run not kept there."""
    if holder is None:
        return "", ()
    return " AND EXISTS (SELECT 1 FROM durable_runs WHERE run_id = ? AND holder = ?)", (run_id, holder)


def _stored(row: sqlite3.Row) -> StoredReport:
    """The row as a report. A column this release cannot read (torn, tampered with, another release's
    shape) is left out rather than raised: one such row broke its owner's whole list, its page, and every
    restart's resume. A finished report that lost its text reads as failed; a running one is its run's to end."""
    report = _readable(row, "report", Report.model_validate_json)
    request = _readable(row, "request", ReportRequest.model_validate_json)
    delivery = _readable(row, "delivery", json.loads)
    torn = (report is _TORN) or (request is _TORN) or (delivery is _TORN) or not isinstance(delivery, dict | None)
    state = FAILED if report is _TORN and row["state"] != RUNNING else row["state"]
    if torn:
        log.warning("report %s has a column this release cannot read; it is shown without it", row["id"])
    return StoredReport(
        id=row["id"],
        owner=row["owner"],
        interface=row["interface"],
        conversation_id=row["conversation_id"],
        question=row["question"],
        state=state,
        run_id=row["run_id"],
        policy=row["policy"],
        report=report if isinstance(report, Report) else None,
        request=request if isinstance(request, ReportRequest) else None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        delivery=delivery if isinstance(delivery, dict) else {},
        torn=torn,
    )


_TORN = object()  # a column that did not parse


def _readable(row: sqlite3.Row, column: str, parse: Callable[[str], Any]) -> Any:
    text = row[column]
    if text in (None, "", "null"):
        return None
    try:
        return parse(text)
    except ValueError:  # pydantic's ValidationError and json's JSONDecodeError are both ValueErrors
        return _TORN
