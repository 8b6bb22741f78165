"""The kit's state: one object that opens the one state file once, brings its schema to this release
(`chats/schema.py`), and hands every store the same connection: conversations, proposals, web sessions,
schedules, reports, the run log other workers read, rate limits, daily budgets, each conversation's turn
and, on PostgreSQL, the runs other hosts take over when theirs dies (chats/durable.py).

`AGENT_STATE_URL` says where: unset, the file `$AGENT_DATA_DIR/state.sqlite3`; a path, that SQLite
file; `postgresql://...`, a PostgreSQL database (chats/state_postgres.py), which several hosts can
share. The default file holds far more than conversations, so it is named for all of it. A data folder
from an earlier release has `conversations.sqlite3`, which is taken over (renamed) on start-up, its
history whole.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from agent.config import Settings, redacted_url
from agent.limits import Limits
from chats import schema
from chats.audit import AuditLog
from chats.conversations import ConversationStore
from chats.durable import DurableRuns
from chats.eval_runs import EvalRunStore
from chats.pacing import Pacing
from chats.proposals import ProposalStore
from chats.reports import ReportStore
from chats.schedules import ScheduleStore
from chats.sessions import SessionStore
from chats.shared_runs import SharedRunLog
from chats.state_file import SqliteFile, StateFile
from chats.state_postgres import PostgresFile, is_postgres_url

STATE_FILE = "state.sqlite3"
EARLIER_NAME = "conversations.sqlite3"  # what releases before the schema had a version called it


class ChatState:
    """Every store of the kit, over one connection to the file at `path` (or a pool of them to the
    PostgreSQL database a `postgresql://` URL names). With `workers` > 1 the process is one of several
    sharing the state: rate limits, budgets and turns are counted in it, and runs in progress are copied
    to it; alone, those live in memory. PostgreSQL is always shared: other hosts may open it."""

    def __init__(
        self, path: Path | str, *, limits: Limits | None = None, workers: int = 1, lease_s: float = 15.0
    ) -> None:
        self.path, self.workers = redacted_url(path) if isinstance(path, str) else path, workers
        self.file: StateFile = PostgresFile(path) if is_postgres_url(path) else SqliteFile(Path(path))
        try:
            self.file.now(schema.migrate)
        except BaseException:
            self.file.close()
            raise
        self.conversations = ConversationStore(self.file, limits)
        self.proposals = ProposalStore(self.file)
        self.audit = AuditLog(self.file)
        self.reports = ReportStore(self.file)  # reports and the runs writing them (agent/reports)
        self.sessions = SessionStore(self.file)  # who signed in to the web chat
        self.eval_runs = EvalRunStore(self.file)  # `agent evals` runs a schedule made (process/evals_job.py)
        self.schedules = ScheduleStore(self.file)  # scheduled questions, alerts, the web inbox
        shared = self.file if workers > 1 or isinstance(self.file, PostgresFile) else None
        self.shared_runs = SharedRunLog(shared) if shared is not None else None
        self.pacing = Pacing(shared, workers=workers)
        # On PostgreSQL other hosts may take over a run whose host died (chats/durable.py), under leases of lease_s.
        self.durable = DurableRuns(self.file, lease_s=lease_s) if isinstance(self.file, PostgresFile) else None

    @classmethod
    def of(cls, settings: Settings, *, workers: int = 1) -> ChatState:
        """The state at the settings' `AGENT_STATE_URL`, by default in their data folder."""
        where = settings.agent_state_url or state_path(settings.agent_data_dir)
        state = cls(where, limits=Limits.of(settings), workers=workers, lease_s=settings.agent_run_lease_s)
        state.schedules.min_interval_s = settings.agent_schedule_min_interval_s
        return state

    def close(self) -> None:
        if self.shared_runs is not None:
            self.shared_runs.stop_listening()
        self.file.close()


def state_path(data_dir: Path) -> Path:
    """The state file in `data_dir`, taking over one an earlier release left under its old name."""
    path, earlier = data_dir / STATE_FILE, data_dir / EARLIER_NAME
    if not path.exists() and earlier.exists():
        _take_over(earlier, path)
    return path


def _take_over(earlier: Path, path: Path) -> None:
    # Its last commits may still be in its write-ahead log, which SQLite finds by the file's name: fold
    # them into the file first (the last connection to close removes the log), then move the file alone.
    with contextlib.closing(sqlite3.connect(earlier, timeout=10)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        os.link(earlier, path)  # fails if another worker starting beside this one took it over first
    except FileExistsError:
        return
    except OSError:  # a file system without hard links
        os.rename(earlier, path)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(earlier)
