"""Schedules: questions asked again while nobody is asking, and alerts on a query's result.

A schedule belongs to the person who made it (chats/people.py owner strings); every call that names one
by id takes the owner too, and another owner's id is answered as one that does not exist (None/False,
which the adapters turn into 404). It keeps what it was made from (the answer's question, its verified
SQL and the policy it was asked under), when it fires (chats/schedule_times.py), where it delivers (the
owner's web inbox, or a Slack channel or DM), how (run the stored SQL again, or ask afresh), and for an
alert its condition and whether it is firing now.

Firing is the scheduler's (process/scheduler.py): `claim_due` turns each due schedule into one fire row (one
that no longer reads or steps, such as a zone tzdata dropped, is stopped with its reason, alone)
in `schedule_fires`, whose primary key (schedule, due time) is the lease: on SQLite or PostgreSQL, with
any number of workers and hosts, one insert wins and the others find it taken. A fire row also carries
its attempts and the time of its next try, so a failed delivery is retried by whichever worker is free,
and a worker that died mid-delivery leaves a lease that runs out and is taken over.

Web deliveries land in `schedule_inbox`, the owner's inbox, read by the web.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from agent.access.policy import Asker
from chats.schedule_times import MIN_INTERVAL_S, WEEKDAYS, Cadence, CadenceError
from chats.state_file import StateFile, write_transaction

__all__ = [
    "INBOX",
    "WEEKDAYS",
    "Alert",
    "Cadence",
    "CadenceError",
    "Delivery",
    "Draft",
    "Fire",
    "InboxItem",
    "SavedQuery",
    "Schedule",
    "ScheduleError",
    "ScheduleStore",
    "slack_destination",
    "slack_of",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Kind = Literal["question", "alert", "evals"]
How = Literal["rerun", "ask"]
State = Literal["active", "paused", "stopped"]
AlertKind = Literal["above", "below", "change", "rows"]
Repeat = Literal["until_clear", "every_check"]

INBOX = "inbox"  # the owner's web inbox; else "slack:<team>:<channel or DM id>"
SLACK_PREFIX = "slack:"
MAX_QUESTION_CHARS = 2_000
MAX_TITLE_CHARS = 200
MAX_QUERIES = 10
MAX_PER_OWNER = 100  # a person's schedules: each fires SQL on its own, so not without end
MAX_SEEN = 10_000  # owners whose latest sighting a process remembers, to skip writing it again
LEASE_S = 300.0  # a fire's claim: a worker that has not finished by then is taken to have died


class ScheduleError(ValueError):
    """A schedule that cannot be made as asked; the message is for the person who asked."""


def slack_destination(team: str, channel: str) -> str:
    return f"{SLACK_PREFIX}{team}:{channel}"


def slack_of(destination: str) -> tuple[str, str] | None:
    """(team, channel) of a Slack destination; None for the inbox."""
    if not destination.startswith(SLACK_PREFIX):
        return None
    team, _, channel = destination.removeprefix(SLACK_PREFIX).partition(":")
    return (team, channel) if team and channel else None


@dataclass(frozen=True)
class SavedQuery:
    label: str  # Q1, Q2, ... as in the answer it was made from
    sql: str
    question: str = ""  # the data question the model gave it


@dataclass(frozen=True)
class Alert:
    """A condition on the first query's result: `column`'s value in the first row is above or below
    `threshold`, or has changed by more than `share` (0.1 = 10%) since the last check, or the query
    returns any rows at all. `until_clear` posts once when it starts holding and not again until it has
    stopped holding; `every_check` posts at every check it holds."""

    kind: AlertKind
    column: str = ""
    threshold: float | None = None
    share: float | None = None
    repeat: Repeat = "until_clear"

    def __post_init__(self) -> None:
        if self.kind not in ("above", "below", "change", "rows"):
            raise ScheduleError("An alert is above, below, change or rows.")
        if self.kind in ("above", "below") and self.threshold is None:
            raise ScheduleError("An above or below alert needs a threshold.")
        if self.kind == "change" and (self.share is None or self.share <= 0):
            raise ScheduleError("A change alert needs a share above 0 (0.1 is 10%).")
        if self.kind != "rows" and not self.column:
            raise ScheduleError("Say which column the alert watches.")
        if self.repeat not in ("until_clear", "every_check"):
            raise ScheduleError("An alert repeats until_clear or every_check.")

    @classmethod
    def of(cls, data: dict[str, Any]) -> Alert:
        def number(key: str) -> float | None:
            value = data.get(key)
            if value is None or value == "":
                return None
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number):  # "nan" and "inf" read as floats, and no value is ever above nan
                raise ScheduleError(f"The alert's {key} is a number, not {value!r}.")
            return number

        return cls(
            kind=str(data.get("kind", "")),  # type: ignore[arg-type]
            column=str(data.get("column", "")),
            threshold=number("threshold"),
            share=number("share"),
            repeat=str(data.get("repeat", "until_clear")),  # type: ignore[arg-type]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "column": self.column,
            "threshold": self.threshold,
            "share": self.share,
            "repeat": self.repeat,
        }


@dataclass(frozen=True)
class Draft:
    """What a person asks for: a schedule made from one of their answers (or, kind "evals", none)."""

    title: str
    question: str
    cadence: Cadence
    destination: str = INBOX
    how: How = "rerun"
    kind: Kind = "question"
    queries: tuple[SavedQuery, ...] = ()
    source_run_id: str = ""
    policy: str = ""  # the policy the answer was asked under (RunResult.policy)
    alert: Alert | None = None
    # Who the owner is, as the policy file picks a policy by (their verified email, OIDC groups, Slack ids):
    # as they made it, then as `seen` last found them (each web request, each Slack question). Each fire picks
    # the owner's policy again with it, so a file, or groups, that no longer name them stop the schedule.
    asker: Asker = field(default_factory=Asker)

    def checked(self) -> Draft:
        """This draft, cut to size; ScheduleError for what cannot run."""
        title = " ".join((self.title or self.question).split())[:MAX_TITLE_CHARS]
        if self.kind not in ("question", "alert", "evals"):
            raise ScheduleError("A schedule is a question, an alert or evals.")
        if self.how not in ("rerun", "ask"):
            raise ScheduleError("A schedule runs its SQL again (rerun) or asks afresh (ask).")
        if self.kind == "question" and not self.question.strip():
            raise ScheduleError("A scheduled question needs its question.")
        if self.kind == "alert" and (self.alert is None or not self.queries):
            raise ScheduleError("An alert needs a condition and the query it watches.")
        if self.how == "rerun" and self.kind != "evals" and not self.queries:
            raise ScheduleError("That answer ran no query to run again; ask it afresh instead.")
        if len(self.queries) > MAX_QUERIES:
            raise ScheduleError(f"At most {MAX_QUERIES} queries run again.")
        if self.destination != INBOX and slack_of(self.destination) is None:
            raise ScheduleError("Deliver to the web inbox or a Slack channel.")
        return replace(self, title=title or "Schedule", question=self.question[:MAX_QUESTION_CHARS])


@dataclass(frozen=True)
class Schedule:
    id: str
    owner: str
    draft: Draft
    state: State
    stopped_reason: str  # why it stopped (access lost, deliveries kept failing), for its owner
    next_at: float | None  # Unix seconds; None while paused or stopped
    alert_firing: bool
    last_values: Any  # what the last delivery or check showed (figures, or the watched value)
    last_delivered_at: float | None
    created_at: float
    updated_at: float

    @property
    def title(self) -> str:
        return self.draft.title

    @property
    def kind(self) -> Kind:
        return self.draft.kind

    def as_json(self) -> dict[str, Any]:
        """For the web: everything but the stored SQL's text, which its query pages show."""
        d = self.draft
        return {
            "id": self.id,
            "title": d.title,
            "question": d.question,
            "kind": d.kind,
            "how": d.how,
            "cadence": d.cadence.as_dict(),
            "when": d.cadence.describe(),
            "destination": d.destination,
            "alert": d.alert.as_dict() if d.alert else None,
            "source_run_id": d.source_run_id,
            "queries": [q.label for q in d.queries],
            "state": self.state,
            "stopped_reason": self.stopped_reason,
            "next_at": self.next_at,
            "alert_firing": self.alert_firing,
            "last_delivered_at": self.last_delivered_at,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Fire:
    """One claimed fire: the schedule as it was when claimed, when it was due, and which try this is."""

    schedule: Schedule
    due_at: float
    attempt: int  # 1 for the first try
    claimed_at: float

    def late_by(self, grace_s: float) -> float:
        """Seconds past its due time beyond `grace_s`; 0 when on time."""
        late = self.claimed_at - self.due_at
        return late if late > grace_s else 0.0


@dataclass(frozen=True)
class InboxItem:
    id: str
    schedule_id: str
    title: str
    at: float
    text: str  # the answer, Markdown
    changed: str  # the line on what changed since the previous delivery
    late: str  # "" on time; else the line saying it ran late and why
    run_id: str  # the stored turn, whose queries /api/queries/{run_id}:{label} show
    queries: list[str]  # query ids of that turn
    read: bool
    details: dict[str, Any] = field(default_factory=dict)  # figures' check, receipt

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "schedule_id": self.schedule_id,
            "title": self.title,
            "at": self.at,
            "text": self.text,
            "changed": self.changed,
            "late": self.late,
            "run_id": self.run_id,
            "queries": self.queries,
            "read": self.read,
            **self.details,
        }


@dataclass(frozen=True)
class Delivery:
    """What a fire delivers to the web inbox (the scheduler writes it with `deliver_to_inbox`)."""

    text: str
    changed: str = ""
    late: str = ""
    run_id: str = ""
    queries: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


class ScheduleStore:
    def __init__(
        self, file: StateFile, *, clock: Callable[[], float] = time.time, min_interval_s: float = MIN_INTERVAL_S
    ) -> None:
        self._file, self._clock = file, clock
        self.min_interval_s = min_interval_s  # AGENT_SCHEDULE_MIN_INTERVAL_S: the web, Slack and the CLI all make here
        self._last_seen: dict[str, tuple[Any, ...]] = {}  # each owner's latest sighting this process wrote

    def _next_fire(self, cadence: Cadence) -> float:
        """The cadence's next fire after now; ScheduleError (naming the cadence) when it fires too often."""
        now = self._clock()
        if cadence.shortest_gap(now) < self.min_interval_s:
            raise ScheduleError(
                f"The cadence {cadence.describe()} fires too often: at most once every "
                f"{self.min_interval_s / 60:.0f} minutes."
            )
        return cadence.next_after(now)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    # --- what people do with their own schedules ---------------------------------------------------

    async def create(self, owner: str, draft: Draft) -> Schedule:
        """A new active schedule of `owner`'s; ScheduleError when the draft cannot run or they have too many."""
        checked, now = draft.checked(), self._clock()
        key = uuid.uuid4().hex
        next_at = self._next_fire(checked.cadence)

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                held = c.execute("SELECT count(*) FROM schedules WHERE owner = ?", (owner,)).fetchone()[0]
                if held >= MAX_PER_OWNER:
                    raise ScheduleError(f"You have {held} schedules; delete one first.")
                c.execute(
                    "INSERT INTO schedules (id, owner, kind, how, title, question, source_run_id, queries, policy, "
                    "cadence, destination, alert, asker, state, next_at, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
                    (key, owner, *_draft_columns(checked), next_at, now, now),
                )

        await self._run(write)
        found = await self.get(key, owner=owner)
        assert found is not None
        return found

    async def draft_from_answer(
        self,
        run_id: str,
        *,
        cadence: Cadence,
        destination: str = INBOX,
        how: How = "rerun",
        title: str = "",
        alert: Alert | None = None,
        asker: Asker | None = None,
    ) -> Draft | None:
        """A draft from a stored answer: its question, the SQL of its queries that ran, the policy it was
        asked under. None when no such answer is stored. Whose answer it is, is the caller's to check
        (`ConversationStore.run_owner`) before it offers this."""

        def read(c: sqlite3.Connection) -> tuple[Any, list[Any]] | None:
            turn = c.execute("SELECT question, policy FROM turns WHERE run_id = ?", (run_id,)).fetchone()
            if turn is None:
                return None
            queries = c.execute(
                "SELECT label, question, sql FROM queries WHERE run_id = ? AND error IS NULL AND sql != '' "
                "ORDER BY rowid",
                (run_id,),
            ).fetchall()
            return turn, queries

        found = await self._run(read)
        if found is None:
            return None
        turn, queries = found
        return Draft(
            title=title or turn["question"],
            question=turn["question"],
            cadence=cadence,
            destination=destination,
            how=how,
            kind="alert" if alert else "question",
            queries=tuple(SavedQuery(q["label"], q["sql"], q["question"]) for q in queries[:MAX_QUERIES]),
            source_run_id=run_id,
            policy=turn["policy"],
            alert=alert,
            asker=asker or Asker(),
        )

    async def list_for(self, owner: str) -> list[Schedule]:
        """`owner`'s schedules, newest first; nobody else's."""
        rows = await self._run(
            lambda c: c.execute(
                "SELECT * FROM schedules WHERE owner = ? ORDER BY created_at DESC, id", (owner,)
            ).fetchall()
        )
        return [_schedule(row) for row in rows]

    async def get(self, schedule_id: str, *, owner: str) -> Schedule | None:
        """The schedule, when it is `owner`'s; None when it does not exist or is someone else's."""
        row = await self._run(
            lambda c: c.execute("SELECT * FROM schedules WHERE id = ? AND owner = ?", (schedule_id, owner)).fetchone()
        )
        return _schedule(row) if row else None

    async def pause(self, schedule_id: str, *, owner: str) -> bool:
        return await self._set_state(schedule_id, owner, "paused", None, "")

    async def resume(self, schedule_id: str, *, owner: str) -> bool:
        """Active again, from its next fire after now (fires it missed while paused are not made up);
        a stopped schedule resumes too, once its owner has put right why it stopped."""
        found = await self.get(schedule_id, owner=owner)
        if found is None:
            return False
        try:
            next_at = found.draft.cadence.next_after(self._clock())
        except CadenceError:  # it no longer reads (its zone dropped): it stays stopped, with why, until edited
            return False
        return await self._set_state(schedule_id, owner, "active", next_at, "")

    async def edit(
        self,
        schedule_id: str,
        *,
        owner: str,
        title: str | None = None,
        cadence: Cadence | None = None,
        destination: str | None = None,
        how: How | None = None,
        alert: Alert | None = None,
    ) -> Schedule | None:
        """What the owner changed (None leaves a field); its next fire follows a new cadence at once."""
        found = await self.get(schedule_id, owner=owner)
        if found is None:
            return None
        changes: dict[str, Any] = {
            "title": title,
            "cadence": cadence,
            "destination": destination,
            "how": how,
            "alert": alert,
        }
        draft = replace(found.draft, **{k: v for k, v in changes.items() if v is not None}).checked()
        following = self._next_fire(draft.cadence)  # checked whatever its state: it fires once resumed
        next_at = following if found.state == "active" else None

        def write(c: sqlite3.Connection) -> int:
            return c.execute(
                "UPDATE schedules SET kind = ?, how = ?, title = ?, question = ?, source_run_id = ?, queries = ?, "
                "policy = ?, cadence = ?, destination = ?, alert = ?, asker = ?, next_at = ?, updated_at = ? "
                "WHERE id = ? AND owner = ?",
                (*_draft_columns(draft), next_at, self._clock(), schedule_id, owner),
            ).rowcount

        if not await self._run(write):
            return None
        return await self.get(schedule_id, owner=owner)

    async def delete(self, schedule_id: str, *, owner: str) -> bool:
        def write(c: sqlite3.Connection) -> int:
            with write_transaction(c):
                gone = c.execute("DELETE FROM schedules WHERE id = ? AND owner = ?", (schedule_id, owner)).rowcount
                if gone:
                    c.execute("DELETE FROM schedule_fires WHERE schedule_id = ?", (schedule_id,))
                return int(gone)

        return bool(await self._run(write))

    async def _set_state(self, schedule_id: str, owner: str, state: State, next_at: float | None, reason: str) -> bool:
        def write(c: sqlite3.Connection) -> int:
            return c.execute(
                "UPDATE schedules SET state = ?, next_at = ?, stopped_reason = ?, updated_at = ? "
                "WHERE id = ? AND owner = ?",
                (state, next_at, reason, self._clock(), schedule_id, owner),
            ).rowcount

        return bool(await self._run(write))

    async def seen(
        self,
        owner: str,
        *,
        email: str | None = None,
        groups: frozenset[str] | None = None,
        slack_user: str | None = None,
        slack_usergroups: frozenset[str] | None = None,
    ) -> None:
        """Who `owner` is now, as a sign-in or request (the web: email, OIDC groups) or a question (Slack:
        its user and user groups) shows them: their schedules' `asker` takes it, so each fire picks their
        policy from who they are now, not from who they were when they made it. None leaves a part as
        last seen (the web cannot see Slack's user groups, nor Slack the identity provider's)."""
        given = (email, groups, slack_user, slack_usergroups)
        if self._last_seen.get(owner) == given:  # unchanged since this process last wrote it
            return

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                for row in c.execute("SELECT id, asker FROM schedules WHERE owner = ?", (owner,)).fetchall():
                    was = json.loads(row["asker"])
                    now = {
                        **was,
                        **({"email": email} if email is not None else {}),
                        **({"groups": sorted(groups)} if groups is not None else {}),
                        **({"slack_user": slack_user} if slack_user is not None else {}),
                        **({"slack_usergroups": sorted(slack_usergroups)} if slack_usergroups is not None else {}),
                    }
                    if now != was:
                        c.execute("UPDATE schedules SET asker = ? WHERE id = ?", (json.dumps(now), row["id"]))

        await self._run(write)
        if len(self._last_seen) >= MAX_SEEN:
            self._last_seen.clear()
        self._last_seen[owner] = given

    # --- the web inbox ---------------------------------------------------------------------------

    async def inbox(self, owner: str, *, limit: int = 50, unread_only: bool = False) -> list[InboxItem]:
        """`owner`'s web deliveries, newest first."""
        where = "owner = ?" + (" AND read_at IS NULL" if unread_only else "")
        rows = await self._run(
            lambda c: c.execute(
                f"SELECT * FROM schedule_inbox WHERE {where} ORDER BY at DESC, id LIMIT ?", (owner, limit)
            ).fetchall()
        )
        return [_inbox_item(row) for row in rows]

    async def inbox_item(self, item_id: str, *, owner: str) -> InboxItem | None:
        """One of `owner`'s deliveries by id (its primary key); None when it is not theirs or not there."""
        row = await self._run(
            lambda c: c.execute("SELECT * FROM schedule_inbox WHERE id = ? AND owner = ?", (item_id, owner)).fetchone()
        )
        return _inbox_item(row) if row else None

    async def unread(self, owner: str) -> int:
        row = await self._run(
            lambda c: c.execute(
                "SELECT count(*) FROM schedule_inbox WHERE owner = ? AND read_at IS NULL", (owner,)
            ).fetchone()
        )
        return int(row[0])

    async def mark_read(self, item_id: str, *, owner: str) -> bool:
        def write(c: sqlite3.Connection) -> int:
            return c.execute(
                "UPDATE schedule_inbox SET read_at = ? WHERE id = ? AND owner = ? AND read_at IS NULL",
                (self._clock(), item_id, owner),
            ).rowcount

        return bool(await self._run(write))

    async def delete_inbox_item(self, item_id: str, *, owner: str) -> bool:
        def write(c: sqlite3.Connection) -> int:
            return c.execute("DELETE FROM schedule_inbox WHERE id = ? AND owner = ?", (item_id, owner)).rowcount

        return bool(await self._run(write))

    async def deliver_to_inbox(self, schedule: Schedule, delivery: Delivery) -> InboxItem:
        """One delivery into the schedule owner's inbox."""
        key, now = uuid.uuid4().hex, self._clock()
        details = json.dumps(
            {"changed": delivery.changed, "late": delivery.late, "queries": list(delivery.queries), **delivery.details}
        )

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO schedule_inbox (id, schedule_id, owner, at, title, text, run_id, details) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, schedule.id, schedule.owner, now, schedule.title, delivery.text, delivery.run_id, details),
            )

        await self._run(write)
        found = await self._run(lambda c: c.execute("SELECT * FROM schedule_inbox WHERE id = ?", (key,)).fetchone())
        return _inbox_item(found)

    # --- the scheduler's side --------------------------------------------------------------------

    async def claim_due(self, worker: str, *, limit: int = 20) -> list[Fire]:
        """Each active schedule whose time has come, claimed by this worker: at most one claim per
        (schedule, due time) across every worker and host. The schedule moves on to its next fire after
        now, so fires missed while nothing ran become one, late."""
        now = self._clock()
        due = await self._run(
            lambda c: c.execute(
                "SELECT id, next_at FROM schedules WHERE state = 'active' AND next_at <= ? ORDER BY next_at LIMIT ?",
                (now, limit),
            ).fetchall()
        )
        fires = []
        for row in due:
            try:
                fire = await self._run(lambda c, row=row: _claim(c, row["id"], row["next_at"], worker, now))  # type: ignore[misc]
            except ValueError as exc:  # it no longer reads (a zone tzdata dropped) or never fires: it alone stops
                log.warning("schedules: a schedule could not be claimed and stops: %s", type(exc).__name__)
                await self.stop(row["id"], f"This schedule can no longer be worked out ({exc}); edit it to resume.")
                continue
            if fire is not None:
                fires.append(fire)
        return fires

    async def claim_retries(self, worker: str, *, limit: int = 20) -> list[Fire]:
        """Fires whose retry time has come, and fires whose worker's lease ran out (it died): each taken
        by one worker, which compares and sets the lease."""
        now = self._clock()
        rows = await self._run(
            lambda c: c.execute(
                "SELECT schedule_id, due_at, lease_until FROM schedule_fires WHERE "
                "(status = 'retry' AND next_try_at <= ?) OR (status = 'running' AND lease_until <= ?) "
                "ORDER BY due_at LIMIT ?",
                (now, now, limit),
            ).fetchall()
        )
        fires = []
        for row in rows:
            fire = await self._run(lambda c, row=row: _retake(c, row, worker, now))  # type: ignore[misc]
            if fire is not None:
                fires.append(fire)
        return fires

    async def hold(self, fires: list[Fire], worker: str) -> None:
        """Renew the leases of fires `worker` still runs (an eval run can outlast LEASE_S), so no worker,
        this one included, takes them for dead."""
        until = self._clock() + LEASE_S

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                for fire in fires:
                    c.execute(
                        "UPDATE schedule_fires SET lease_until = ? "
                        "WHERE schedule_id = ? AND due_at = ? AND worker = ? AND status = 'running'",
                        (until, fire.schedule.id, fire.due_at, worker),
                    )

        await self._run(write)

    async def finish(self, fire: Fire, *, status: Literal["done", "skipped", "failed"], note: str = "") -> None:
        await self._end_fire(fire, status, note, None)

    async def retry_at(self, fire: Fire, when: float, error: str) -> None:
        """The fire failed; another try at `when` (whichever worker is free then)."""
        await self._end_fire(fire, "retry", error, when)

    async def _end_fire(self, fire: Fire, status: str, note: str, next_try_at: float | None) -> None:
        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE schedule_fires SET status = ?, error = ?, next_try_at = ?, finished_at = ? "
                "WHERE schedule_id = ? AND due_at = ?",
                (status, note[:500], next_try_at, self._clock(), fire.schedule.id, fire.due_at),
            )

        await self._run(write)

    async def record_delivery(self, schedule_id: str, values: Any, *, alert_firing: bool | None = None) -> None:
        """What this delivery (or alert check) showed, for the next one's "what changed"."""

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE schedules SET last_values = ?, last_delivered_at = ?, "
                "alert_firing = COALESCE(?, alert_firing) WHERE id = ?",
                (
                    json.dumps(values, default=str),
                    self._clock(),
                    None if alert_firing is None else int(alert_firing),
                    schedule_id,
                ),
            )

        await self._run(write)

    async def record_check(self, schedule_id: str, values: Any, *, alert_firing: bool) -> None:
        """An alert's check that posted nothing: its value (for a change alert's next check) and state."""

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE schedules SET last_values = ?, alert_firing = ? WHERE id = ?",
                (json.dumps(values, default=str), int(alert_firing), schedule_id),
            )

        await self._run(write)

    async def stop(self, schedule_id: str, reason: str) -> None:
        """The scheduler stops a schedule that cannot go on (its owner lost access; deliveries keep
        failing): it fires no more until its owner resumes it."""

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE schedules SET state = 'stopped', next_at = NULL, stopped_reason = ?, updated_at = ? "
                "WHERE id = ?",
                (reason[:500], self._clock(), schedule_id),
            )

        await self._run(write)

    async def fires(self, schedule_id: str) -> list[dict[str, Any]]:
        """The schedule's fire rows, oldest first (for tests and `agent schedules`)."""
        rows = await self._run(
            lambda c: c.execute(
                "SELECT * FROM schedule_fires WHERE schedule_id = ? ORDER BY due_at", (schedule_id,)
            ).fetchall()
        )
        return [dict(zip(row.keys(), tuple(row), strict=True)) for row in rows]


def _claim(c: sqlite3.Connection, schedule_id: str, due_at: float, worker: str, now: float) -> Fire | None:
    with write_transaction(c):
        row = c.execute("SELECT * FROM schedules WHERE id = ? AND state = 'active'", (schedule_id,)).fetchone()
        if row is None or row["next_at"] != due_at:  # another worker moved it on, or its owner paused it
            return None
        taken = c.execute(
            "INSERT INTO schedule_fires (schedule_id, due_at, worker, claimed_at, lease_until, attempts, status) "
            "VALUES (?, ?, ?, ?, ?, 1, 'running') ON CONFLICT (schedule_id, due_at) DO NOTHING",
            (schedule_id, due_at, worker, now, now + LEASE_S),
        ).rowcount
        schedule = _schedule(row)
        c.execute(
            "UPDATE schedules SET next_at = ? WHERE id = ?", (schedule.draft.cadence.next_after(now), schedule_id)
        )
    return Fire(schedule, due_at, 1, now) if taken == 1 else None


def _retake(c: sqlite3.Connection, fire: sqlite3.Row, worker: str, now: float) -> Fire | None:
    with write_transaction(c):
        taken = c.execute(
            "UPDATE schedule_fires SET worker = ?, status = 'running', lease_until = ?, attempts = attempts + 1 "
            "WHERE schedule_id = ? AND due_at = ? AND lease_until = ? AND status IN ('retry', 'running')",
            (worker, now + LEASE_S, fire["schedule_id"], fire["due_at"], fire["lease_until"]),
        ).rowcount
        if taken != 1:
            return None
        attempts = c.execute(
            "SELECT attempts, claimed_at FROM schedule_fires WHERE schedule_id = ? AND due_at = ?",
            (fire["schedule_id"], fire["due_at"]),
        ).fetchone()
        row = c.execute("SELECT * FROM schedules WHERE id = ? AND state = 'active'", (fire["schedule_id"],)).fetchone()
        if row is None:  # paused, stopped or deleted since: its retries end
            c.execute(
                "UPDATE schedule_fires SET status = 'skipped', finished_at = ? WHERE schedule_id = ? AND due_at = ?",
                (now, fire["schedule_id"], fire["due_at"]),
            )
            return None
    return Fire(_schedule(row), fire["due_at"], int(attempts["attempts"]), float(attempts["claimed_at"]))


def _draft_columns(d: Draft) -> tuple[Any, ...]:
    return (
        d.kind,
        d.how,
        d.title,
        d.question,
        d.source_run_id,
        json.dumps([{"label": q.label, "sql": q.sql, "question": q.question} for q in d.queries]),
        d.policy,
        json.dumps(d.cadence.as_dict()),
        d.destination,
        json.dumps(d.alert.as_dict() if d.alert else None),
        json.dumps(_asker_dict(d.asker)),
    )


def _asker_dict(asker: Asker) -> dict[str, Any]:
    return {
        "email": asker.email,
        "groups": sorted(asker.groups),
        "slack_user": asker.slack_user,
        "slack_usergroups": sorted(asker.slack_usergroups),
    }


def _asker(data: dict[str, Any]) -> Asker:
    return Asker(
        email=data.get("email"),
        groups=frozenset(data.get("groups", ())),
        slack_user=data.get("slack_user"),
        slack_usergroups=frozenset(data.get("slack_usergroups", ())),
    )


def _schedule(row: sqlite3.Row) -> Schedule:
    alert = json.loads(row["alert"])
    draft = Draft(
        title=row["title"],
        question=row["question"],
        cadence=_cadence(json.loads(row["cadence"])),
        destination=row["destination"],
        how=row["how"],
        kind=row["kind"],
        queries=tuple(SavedQuery(q["label"], q["sql"], q.get("question", "")) for q in json.loads(row["queries"])),
        source_run_id=row["source_run_id"],
        policy=row["policy"],
        alert=Alert.of(alert) if alert else None,
        asker=_asker(json.loads(row["asker"])),
    )
    return Schedule(
        id=row["id"],
        owner=row["owner"],
        draft=draft,
        state=row["state"],
        stopped_reason=row["stopped_reason"],
        next_at=row["next_at"],
        alert_firing=bool(row["alert_firing"]),
        last_values=json.loads(row["last_values"]),
        last_delivered_at=row["last_delivered_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _cadence(data: dict[str, Any]) -> Cadence:
    """A stored cadence; one that no longer reads (its zone dropped from tzdata) is kept as stored, so the
    schedule still lists and can be edited or deleted, while working out its fires raises CadenceError."""
    try:
        return Cadence.of(data)
    except CadenceError:
        kept = object.__new__(Cadence)
        fields = {"kind": "daily", "timezone": "UTC", "at": "09:00", "weekday": 0, "cron": ""}
        for name, default in fields.items():
            object.__setattr__(kept, name, data.get(name, default))
        return kept


def _inbox_item(row: sqlite3.Row) -> InboxItem:
    details = json.loads(row["details"])
    changed, late, queries = details.pop("changed", ""), details.pop("late", ""), details.pop("queries", [])
    return InboxItem(
        id=row["id"],
        schedule_id=row["schedule_id"],
        title=row["title"],
        at=row["at"],
        text=row["text"],
        changed=changed,
        late=late,
        run_id=row["run_id"],
        queries=list(queries),
        read=row["read_at"] is not None,
        details=details,
    )
