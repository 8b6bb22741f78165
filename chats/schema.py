"""Every table of the kit's state file, in one place, and the state's schema version (SQLite's
`PRAGMA user_version`, PostgreSQL's `schema_version` table), so state made by any release is brought up
to this one at start-up, on either backend.

A step is applied once, under the write lock, and records its version in the same transaction: workers
starting together apply it once between them. A file newer than this release is refused rather than
half understood.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from agent.config import ConfigError
from chats.state_file import has_table, write_transaction

TABLES = (
    # Conversations and their answers (chats/conversations.py).
    """CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        interface TEXT NOT NULL DEFAULT 'web',
        adapter_key TEXT UNIQUE,
        owner TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE TABLE IF NOT EXISTS handled_events (event_key TEXT PRIMARY KEY, seen_at REAL NOT NULL)",
    """CREATE TABLE IF NOT EXISTS turns (
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        question TEXT NOT NULL,
        answer TEXT NOT NULL,
        outcome TEXT NOT NULL,
        followups TEXT NOT NULL,
        metrics TEXT NOT NULL,
        transcript TEXT NOT NULL,
        events TEXT NOT NULL,
        created_at REAL NOT NULL,
        feedback TEXT,
        charts TEXT NOT NULL DEFAULT '[]',
        figures TEXT NOT NULL DEFAULT 'null',
        receipt TEXT NOT NULL DEFAULT 'null'
    )""",
    "CREATE INDEX IF NOT EXISTS turns_by_conversation ON turns(conversation_id, position)",
    """CREATE TABLE IF NOT EXISTS queries (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES turns(run_id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        question TEXT NOT NULL,
        sql TEXT NOT NULL,
        columns TEXT NOT NULL,
        preview TEXT NOT NULL,
        row_count INTEGER NOT NULL,
        has_more INTEGER NOT NULL,
        error TEXT,
        hint TEXT,
        elapsed_ms INTEGER NOT NULL
    )""",
    # What thumbs propose, and what the reviewer decided (chats/proposals.py).
    """CREATE TABLE IF NOT EXISTS feedback_reviews (
        run_id TEXT PRIMARY KEY,
        reason TEXT,
        decision TEXT,
        decided_at REAL
    )""",
    # Runs in progress, for the other workers (chats/shared_runs.py).
    """CREATE TABLE IF NOT EXISTS live_runs (
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        beat_at REAL NOT NULL,
        watched_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS live_events (
        run_id TEXT NOT NULL,
        id INTEGER NOT NULL,
        event TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, id)
    )""",
    # Rate limits across workers (chats/rate_limits.py).
    "CREATE TABLE IF NOT EXISTS pace_takes (scope TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pace_takes_by_key ON pace_takes (scope, key, at)",
    "CREATE INDEX IF NOT EXISTS pace_takes_by_time ON pace_takes (scope, at)",
    # Daily budgets across workers: what answers spent, and what running questions hold (chats/daily_budgets.py).
    """CREATE TABLE IF NOT EXISTS budget_spend (
        day TEXT NOT NULL,
        key TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        PRIMARY KEY (day, key)
    )""",
    """CREATE TABLE IF NOT EXISTS budget_reserved (
        id TEXT PRIMARY KEY,
        day TEXT NOT NULL,
        key TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        expires REAL NOT NULL
    )""",
    # One answer at a time per conversation across workers (chats/turns.py).
    """CREATE TABLE IF NOT EXISTS thread_turns (
        token TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        position INTEGER NOT NULL,
        beat_at REAL NOT NULL,
        holding INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS thread_turns_by_key ON thread_turns (key, position)",
)

# Columns releases before the schema had a version added to tables an earlier release had created.
_ADDED_COLUMNS = {
    "conversations": {"interface": "TEXT NOT NULL DEFAULT 'web'", "adapter_key": "TEXT"},
    "turns": {
        "feedback": "TEXT",
        "charts": "TEXT NOT NULL DEFAULT '[]'",
        "figures": "TEXT NOT NULL DEFAULT 'null'",
        "receipt": "TEXT NOT NULL DEFAULT 'null'",
    },
}


class NewerSchema(ConfigError):
    """The file was written by a later release; this one would misread it (one line, as a setting's error)."""


def _version_1(conn: sqlite3.Connection) -> None:
    """Every table, in a new file or one from a release that kept no version."""
    for table, columns in _ADDED_COLUMNS.items():
        existing = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, definition in columns.items():
            if existing and name not in existing:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
    if {row[1] for row in conn.execute("PRAGMA table_info(conversations)")}:
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS conversations_by_key ON conversations(adapter_key)")
    for statement in TABLES:
        conn.execute(statement)


def _version_2(conn: sqlite3.Connection) -> None:
    """Everything belongs to someone (chats/people.py): conversations gain their owner. What a release
    without sign-in made on the web or the command line was the one local person's; Slack's are claimed
    by their audience when next asked in."""
    if "owner" not in {row[1] for row in conn.execute("PRAGMA table_info(conversations)")}:
        conn.execute("ALTER TABLE conversations ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
        conn.execute("UPDATE conversations SET owner = 'person:local' WHERE interface IN ('web', 'cli')")
    conn.execute("CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations(owner, updated_at)")


def _audit_tables(conn: sqlite3.Connection) -> None:
    """Every question's audit entry (chats/audit.py): who asked, where, under which policy, how it ended,
    and each query's SQL with what ClickHouse read for it."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS audit_entries (
            run_id TEXT PRIMARY KEY,
            at REAL NOT NULL,
            person TEXT NOT NULL,
            interface TEXT NOT NULL,
            channel TEXT NOT NULL DEFAULT '',
            policy TEXT NOT NULL DEFAULT '',
            conversation_id TEXT NOT NULL,
            question TEXT NOT NULL,
            outcome TEXT NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS audit_queries (
            run_id TEXT NOT NULL REFERENCES audit_entries(run_id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            label TEXT NOT NULL,
            sql TEXT NOT NULL,
            rows_read INTEGER,
            bytes_read INTEGER,
            error TEXT,
            reused_from TEXT,
            PRIMARY KEY (run_id, position)
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS audit_entries_by_time ON audit_entries(at)")
    conn.execute("CREATE INDEX IF NOT EXISTS audit_entries_by_person ON audit_entries(person, at)")


def _web_sessions(conn: sqlite3.Connection) -> None:
    """People sign in to the web chat: their sessions (chats/sessions.py), so sign-out ends one server-side."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS web_sessions (
            id_hash TEXT PRIMARY KEY,
            person TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS web_sessions_by_expiry ON web_sessions(expires_at)")


def _turn_policy(conn: sqlite3.Connection) -> None:
    """A turn names the access policy it was asked under (RunResult.policy), so a stored query's CSV runs
    again under it. '' for a turn asked without one, or stored before this step: under a policy file
    it runs under the default (web/views/queries.py), which reads nothing."""
    if "policy" not in {row[1] for row in conn.execute("PRAGMA table_info(turns)")}:
        conn.execute("ALTER TABLE turns ADD COLUMN policy TEXT NOT NULL DEFAULT ''")


def _reports(conn: sqlite3.Connection) -> None:
    """Reports (chats/reports.py): each with its owner, where it was asked, the run writing it and how it
    stands; the report itself, the request its run was given and the run's latest checkpoint (the durable
    runs' `Checkpoint`, from which Resume and a restarted host go on) as JSON. The same on both backends."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS reports (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            interface TEXT NOT NULL,
            conversation_id TEXT NOT NULL DEFAULT '',
            question TEXT NOT NULL,
            state TEXT NOT NULL,
            run_id TEXT NOT NULL,
            policy TEXT NOT NULL DEFAULT '',
            report TEXT NOT NULL DEFAULT 'null',
            request TEXT NOT NULL DEFAULT 'null',
            checkpoint TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS reports_by_owner ON reports(owner, updated_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS reports_by_state ON reports(state, updated_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS reports_by_run ON reports(run_id)")


def _report_delivery(conn: sqlite3.Connection) -> None:
    """A report keeps what its adapter needs to deliver it (Slack's thread and the asker's budget hold: a
    durable run's delivery context, chats/durable.py), so a host restarted on SQLite, which keeps no durable
    runs, still posts a report it goes on with where it was asked. '{}' for one stored before this step."""
    if "delivery" not in {row[1] for row in conn.execute("PRAGMA table_info(reports)")}:
        conn.execute("ALTER TABLE reports ADD COLUMN delivery TEXT NOT NULL DEFAULT '{}'")


def _postgres_report_delivery(conn: sqlite3.Connection) -> None:
    """As `_report_delivery`."""
    conn.execute("ALTER TABLE reports ADD COLUMN IF NOT EXISTS delivery TEXT NOT NULL DEFAULT '{}'")


def _postgres_tables(conn: sqlite3.Connection) -> None:
    """Version 1 on PostgreSQL, which never held a release without versions: every table as it is now.
    SQLite's implicit rowid orders a conversation's queries and a line's tickets by insertion; here an
    identity column of the same name does."""
    for statement in TABLES:
        conn.execute(statement)
    for table in ("queries", "thread_turns"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY")


def _postgres_owners(conn: sqlite3.Connection) -> None:
    """Version 2 on PostgreSQL: the owner column came with version 1's tables."""
    conn.execute("CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations(owner, updated_at)")


def _postgres_turn_policy(conn: sqlite3.Connection) -> None:
    """Version 5 on PostgreSQL: as `_turn_policy`."""
    conn.execute("ALTER TABLE turns ADD COLUMN IF NOT EXISTS policy TEXT NOT NULL DEFAULT ''")


def _eval_runs(conn: sqlite3.Connection) -> None:
    """Eval runs and each case's result (chats/eval_runs.py): the metrics of the latest run per suite, the
    trend, and the knowledge's content hash a run saw (a change triggers one). No question text: a case is
    its suite file's id and tags. And the turns' classification, for the review (chats/proposals.py)."""
    _eval_tables(conn)
    # A turn names its classification, so a clarification nobody answered is gathered for review
    # (chats/proposals.py); '' for a turn stored before this step.
    if "classification" not in {row[1] for row in conn.execute("PRAGMA table_info(turns)")}:
        conn.execute("ALTER TABLE turns ADD COLUMN classification TEXT NOT NULL DEFAULT ''")


def _eval_tables(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS eval_runs (
            id TEXT PRIMARY KEY,
            started_at REAL NOT NULL,
            finished_at REAL NOT NULL,
            trigger TEXT NOT NULL,
            knowledge_hash TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            passed INTEGER NOT NULL,
            total INTEGER NOT NULL,
            cost_usd REAL
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS eval_case_results (
            run_id TEXT NOT NULL REFERENCES eval_runs(id) ON DELETE CASCADE,
            suite TEXT NOT NULL,
            case_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            tags TEXT NOT NULL,
            passed INTEGER NOT NULL,
            latency_ms INTEGER NOT NULL,
            cost_usd REAL,
            PRIMARY KEY (run_id, suite, case_id, attempt)
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS eval_runs_by_time ON eval_runs(finished_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS eval_case_results_by_suite ON eval_case_results(suite, run_id)")


def _postgres_eval_runs(conn: sqlite3.Connection) -> None:
    """As `_eval_runs`, on PostgreSQL (no PRAGMA: the column is added if it is not there)."""
    _eval_tables(conn)
    conn.execute("ALTER TABLE turns ADD COLUMN IF NOT EXISTS classification TEXT NOT NULL DEFAULT ''")


def _schedules(conn: sqlite3.Connection) -> None:
    """Schedules and alerts (chats/schedules.py), the fires the
    scheduler claimed (one row per schedule and due time: its primary key is the lease that lets one
    worker of many fire it), and the web inbox of deliveries. The same SQL on both backends."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schedules (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            kind TEXT NOT NULL,
            how TEXT NOT NULL,
            title TEXT NOT NULL,
            question TEXT NOT NULL,
            source_run_id TEXT NOT NULL DEFAULT '',
            queries TEXT NOT NULL DEFAULT '[]',
            policy TEXT NOT NULL DEFAULT '',
            asker TEXT NOT NULL DEFAULT '{}',
            cadence TEXT NOT NULL,
            destination TEXT NOT NULL,
            alert TEXT NOT NULL DEFAULT 'null',
            state TEXT NOT NULL,
            stopped_reason TEXT NOT NULL DEFAULT '',
            next_at REAL,
            alert_firing INTEGER NOT NULL DEFAULT 0,
            last_values TEXT NOT NULL DEFAULT 'null',
            last_delivered_at REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS schedules_by_owner ON schedules(owner, created_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS schedules_due ON schedules(state, next_at)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schedule_fires (
            schedule_id TEXT NOT NULL,
            due_at REAL NOT NULL,
            worker TEXT NOT NULL,
            claimed_at REAL NOT NULL,
            lease_until REAL NOT NULL,
            attempts INTEGER NOT NULL,
            status TEXT NOT NULL,
            next_try_at REAL,
            error TEXT,
            finished_at REAL,
            PRIMARY KEY (schedule_id, due_at)
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS schedule_fires_waiting ON schedule_fires(status, next_try_at)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schedule_inbox (
            id TEXT PRIMARY KEY,
            schedule_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            at REAL NOT NULL,
            title TEXT NOT NULL,
            text TEXT NOT NULL,
            run_id TEXT NOT NULL DEFAULT '',
            details TEXT NOT NULL DEFAULT '{}',
            read_at REAL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS schedule_inbox_by_owner ON schedule_inbox(owner, at)")


def _durable_runs(conn: sqlite3.Connection) -> None:
    """Runs kept while they last, so another host takes one over when its host dies (chats/durable.py):
    what each needs to go on, its latest checkpoint, and the lease of the host holding it. The same on
    both backends."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS durable_runs (
            run_id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            interface TEXT NOT NULL,
            platform TEXT NOT NULL,
            question TEXT NOT NULL,
            policy TEXT NOT NULL DEFAULT '',
            origin TEXT NOT NULL,
            delivery TEXT NOT NULL,
            followups INTEGER NOT NULL,
            abandon_after_s REAL,
            checkpoint TEXT,
            holder TEXT NOT NULL,
            lease_until REAL NOT NULL,
            takeovers INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS durable_runs_by_lease ON durable_runs (lease_until)")
    conn.execute("CREATE INDEX IF NOT EXISTS durable_runs_by_holder ON durable_runs (holder)")


def _live_run_policy(conn: sqlite3.Connection) -> None:
    """A run live on a host keeps the name of its policy, so a reader on another host gets its rows only where
    their policy covers it (web/views/run_events.py). The same on both backends; a file migrated again from an
    earlier version (one from before versions) may have it already."""
    if not isinstance(conn, sqlite3.Connection):
        conn.execute("ALTER TABLE live_runs ADD COLUMN IF NOT EXISTS policy TEXT NOT NULL DEFAULT ''")
    elif "policy" not in {row[1] for row in conn.execute("PRAGMA table_info(live_runs)")}:
        conn.execute("ALTER TABLE live_runs ADD COLUMN policy TEXT NOT NULL DEFAULT ''")


def _durable_run_parts(conn: sqlite3.Connection) -> None:
    """A durable run's checkpoint as its rounds wrote it: each round appends the part it added (agent/
    checkpoint_form.py), so a run writes each message and result once, not its whole progress every round
    (chats/durable.py). The same on both backends; `durable_runs.checkpoint` stays for rows of the release
    before."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS durable_run_parts (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            part TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )"""
    )


Step = Callable[[sqlite3.Connection], None]

# Step n brings a file at version n - 1 to version n. A release that changes a table appends a step,
# to both lists: the same version means the same tables on either backend.
STEPS: tuple[Step, ...] = (
    _version_1,
    _version_2,
    _audit_tables,
    _web_sessions,
    _turn_policy,
    _schedules,
    _eval_runs,
    _durable_runs,
    _reports,
    _report_delivery,
    _live_run_policy,
    _durable_run_parts,
)
POSTGRES_STEPS: tuple[Step, ...] = (
    _postgres_tables,
    _postgres_owners,
    _audit_tables,
    _web_sessions,
    _postgres_turn_policy,
    _schedules,
    _postgres_eval_runs,
    _durable_runs,
    _reports,
    _postgres_report_delivery,
    _live_run_policy,
    _durable_run_parts,
)
VERSION = len(STEPS)


class _Versions:
    """Where a backend keeps its schema version: SQLite in the file's header, PostgreSQL in a table."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.sqlite = isinstance(conn, sqlite3.Connection)
        self.steps = STEPS if self.sqlite else POSTGRES_STEPS

    def read(self, conn: sqlite3.Connection) -> int:
        if self.sqlite:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        if not has_table(conn, "schema_version"):
            return 0
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        return 0 if row is None else int(row[0])

    def write(self, conn: sqlite3.Connection, number: int) -> None:
        if self.sqlite:
            conn.execute(f"PRAGMA user_version = {number}")
            return
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version VALUES (?)", (number,))


def version(conn: sqlite3.Connection) -> int:
    return _Versions(conn).read(conn)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the state to `VERSION`: the steps it lacks, in one write transaction. A small runner rather
    than Alembic: the stores speak SQL through the DB-API with no SQLAlchemy, SQLite files from releases
    before versions need their own first step, and the write lock both backends already have (SQLite's
    file lock, PostgreSQL's advisory lock) is what makes hosts starting together migrate once."""
    versions = _Versions(conn)
    if versions.read(conn) == VERSION:
        return
    with write_transaction(conn):  # under the write lock: another worker or host may have just done it
        found = versions.read(conn)
        if found > VERSION:
            raise NewerSchema(
                f"The state file is at schema version {found}; this release knows up to {VERSION}. "
                "Run the newer release, or restore a backup."
            )
        for number in range(found + 1, VERSION + 1):
            versions.steps[number - 1](conn)
        versions.write(conn, VERSION)
