"""Retention (`AGENT_RETENTION_DAYS`, off by default): what people asked and what was answered them is
deleted from every table of the kit's state file once it is older than the period: answers (turns, with
their queries, event logs and thumbs), the proposals those thumbs made, conversations left empty, runs
in progress another worker copied and never took out, audit entries, handled Slack event keys, rate-limit
and daily-budget counts (keyed by person), expired sign-in sessions, and schedules' web deliveries and fire records.

`SWEEPS` is the one list of what is swept, in order (a row before what it references); a store that
keeps something about a person adds its table here. A table this file does not have yet (a session
table from a later step) is skipped. Each sweep is its own short write transaction, so the workers'
writes wait for one table at a time, not the whole sweep.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from chats.state_file import StateFile, has_table, write_transaction

log = logging.getLogger(__name__)
DAY_S = 24 * 3600.0
EVERY_S = 3600.0  # how often a serving process sweeps (and once as it starts)


@dataclass(frozen=True)
class Cutoff:
    before: float  # Unix seconds: what is older goes
    now: float

    @property
    def day(self) -> str:
        """The UTC day of `before`, as daily budgets key their rows."""
        return datetime.fromtimestamp(self.before, UTC).strftime("%Y-%m-%d")


# One sweep: the rows of its table it deleted.
Sweep = Callable[[sqlite3.Connection, Cutoff], int]


def _older(statement: str) -> Sweep:
    return lambda c, cut: c.execute(statement, (cut.before,)).rowcount


def _orphan_proposals(c: sqlite3.Connection, cut: Cutoff) -> int:
    return c.execute("DELETE FROM feedback_reviews WHERE run_id NOT IN (SELECT run_id FROM turns)").rowcount


def _old_budget_days(c: sqlite3.Connection, cut: Cutoff) -> int:
    return c.execute("DELETE FROM budget_spend WHERE day < ?", (cut.day,)).rowcount


def _expired_sessions(c: sqlite3.Connection, cut: Cutoff) -> int:
    """Sign-in sessions past their own expiry (chats/sessions.py): sign-out already ends one, this keeps
    the table from holding every session ever started."""
    return c.execute("DELETE FROM web_sessions WHERE expires_at < ?", (cut.now,)).rowcount


SWEEPS: tuple[tuple[str, Sweep], ...] = (
    ("queries", _older("DELETE FROM queries WHERE run_id IN (SELECT run_id FROM turns WHERE created_at < ?)")),
    ("turns", _older("DELETE FROM turns WHERE created_at < ?")),
    ("feedback_reviews", _orphan_proposals),
    (
        "conversations",
        _older(
            "DELETE FROM conversations WHERE updated_at < ? "
            "AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.conversation_id = conversations.id)"
        ),
    ),
    ("live_events", _older("DELETE FROM live_events WHERE run_id IN (SELECT run_id FROM live_runs WHERE beat_at < ?)")),
    ("live_runs", _older("DELETE FROM live_runs WHERE beat_at < ?")),
    (
        "audit_queries",
        _older("DELETE FROM audit_queries WHERE run_id IN (SELECT run_id FROM audit_entries WHERE at < ?)"),
    ),
    ("audit_entries", _older("DELETE FROM audit_entries WHERE at < ?")),
    ("reports", _older("DELETE FROM reports WHERE updated_at < ? AND state <> 'running'")),
    ("handled_events", _older("DELETE FROM handled_events WHERE seen_at < ?")),
    ("pace_takes", _older("DELETE FROM pace_takes WHERE at < ?")),
    ("budget_spend", _old_budget_days),
    ("web_sessions", _expired_sessions),
    # A schedule is kept while its owner keeps it running; one stopped or paused and left so for the period
    # goes. What schedules delivered to the web inbox, and their fires' records, go as answers do.
    ("schedule_inbox", _older("DELETE FROM schedule_inbox WHERE at < ?")),
    ("schedule_fires", _older("DELETE FROM schedule_fires WHERE status != 'running' AND due_at < ?")),
    ("schedules", _older("DELETE FROM schedules WHERE state != 'active' AND updated_at < ?")),
    # A run kept for a takeover that no host took over (every host gone, or none that can deliver it), its
    # checkpoint's parts first (and any part whose run is gone).
    (
        "durable_run_parts",
        _older(
            "DELETE FROM durable_run_parts WHERE run_id IN (SELECT run_id FROM durable_runs WHERE created_at < ?) "
            "OR run_id NOT IN (SELECT run_id FROM durable_runs)"
        ),
    ),
    ("durable_runs", _older("DELETE FROM durable_runs WHERE created_at < ?")),
)
TABLES = tuple(table for table, _ in SWEEPS)  # the metric's label values


class Retention:
    """Deletes what is older than `days` from the state file; `on_deleted(table, rows)` counts it."""

    def __init__(
        self,
        file: StateFile,
        days: float,
        *,
        clock: Callable[[], float] = time.time,
        on_deleted: Callable[[str, int], None] | None = None,
    ) -> None:
        self._file, self._period_s, self._clock, self._on_deleted = file, days * DAY_S, clock, on_deleted

    async def sweep(self) -> dict[str, int]:
        """One pass over every table; the rows deleted, by table (those with none left out)."""
        now = self._clock()
        cut = Cutoff(before=now - self._period_s, now=now)
        deleted: dict[str, int] = {}
        for table, sweep in SWEEPS:
            rows = await self._file.run(lambda c, sweep=sweep, table=table: _apply(c, table, sweep, cut))  # type: ignore[misc]
            if rows:
                deleted[table] = rows
                if self._on_deleted is not None:
                    self._on_deleted(table, rows)
        if deleted:
            log.info("retention: deleted %s", ", ".join(f"{rows} from {table}" for table, rows in deleted.items()))
        return deleted

    async def keep_sweeping(self, every_s: float = EVERY_S) -> None:
        """Sweep now, then every `every_s`, until cancelled; a failed sweep is logged and tried again."""
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("retention: the sweep failed; it is tried again in %.0f s", every_s)
            await asyncio.sleep(every_s)


def _apply(c: sqlite3.Connection, table: str, sweep: Sweep, cut: Cutoff) -> int:
    if not has_table(c, table):
        return 0
    with write_transaction(c):
        return max(0, sweep(c, cut))
