"""The kit's state: one connection to one file, every table declared in one place, a schema version in
the file, and an earlier release's `conversations.sqlite3` taken over with its history."""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.runner import RunResult
from chats import schema
from chats.state import EARLIER_NAME, STATE_FILE, ChatState, state_path

TABLES = {
    "conversations",
    "handled_events",
    "turns",
    "queries",
    "feedback_reviews",
    "live_runs",
    "live_events",
    "pace_takes",
    "budget_spend",
    "budget_reserved",
    "thread_turns",
    "audit_entries",
    "reports",
    "audit_queries",
    "web_sessions",
    "eval_runs",
    "eval_case_results",
    "schedules",
    "schedule_fires",
    "schedule_inbox",
    "durable_runs",
    "durable_run_parts",
}


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file of every SQLite connection opened from now on (the OS boundary: sqlite3.connect)."""
    opened: list[str] = []
    connect: Callable[..., sqlite3.Connection] = sqlite3.connect

    def counting(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(Path(database).name)
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", counting)
    return opened


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


async def test_every_store_of_a_worker_uses_one_connection(tmp_path: Path, connects: list[str]) -> None:
    state = ChatState(tmp_path / STATE_FILE, workers=2)
    try:
        store, pacing = state.conversations, state.pacing
        conversation = await store.create_conversation("how many flights?")
        await store.save_turn(conversation, "run1", RunResult(question="how many flights?", answer="Many."), [])
        assert await store.record_feedback("run1", "down")
        await state.proposals.note_reason("run1", "wrong year")
        assert [p.reason for p in await state.proposals.pending()] == ["wrong year"]
        assert state.shared_runs is not None
        await state.shared_runs.open("run2", conversation)
        assert await state.shared_runs.find("run2") is not None
        assert await pacing.rate_limit("web:questions", 5).take("client") is None
        budget = pacing.daily_budget(max_tokens=10, max_cost_usd=None)
        assert await budget.refusal("client") is None
        async with pacing.turn("thread"):
            pass
    finally:
        state.close()
    assert connects == [STATE_FILE], "one connection, to the state file, for every store"


def test_a_new_file_has_every_table_and_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "new" / STATE_FILE
    ChatState(path).close()
    assert tables(path) == TABLES
    assert user_version(path) == schema.VERSION >= 1


def test_workers_opening_a_new_file_together_make_it_once(tmp_path: Path) -> None:
    # Switching a new file to WAL answers "database is locked" at once, without SQLite's busy handler,
    # when another opener holds it for that moment: a rare race, so it is run many times (it failed
    # about one round in forty before the switch waited).
    for round_ in range(60):
        path, errors, states = tmp_path / str(round_) / STATE_FILE, [], []
        start = threading.Barrier(8)

        def open_state(
            path: Path = path, errors: list = errors, states: list = states, start: threading.Barrier = start
        ) -> None:
            start.wait()
            try:
                states.append(ChatState(path, workers=8))
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_state) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for state in states:
            state.close()
        assert errors == [] and len(states) == 8, f"round {round_}"
        assert tables(path) == TABLES and user_version(path) == schema.VERSION


def test_a_file_from_a_newer_release_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    ChatState(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    said = f"schema version {schema.VERSION + 1}; this release knows up to {schema.VERSION}"
    with pytest.raises(schema.NewerSchema, match=re.escape(said)) as refused:
        ChatState(path)
    assert "\n" not in str(refused.value)
    assert user_version(path) == schema.VERSION + 1, "the newer file is left as it was"


async def test_an_earlier_releases_file_is_taken_over_with_its_last_commits(tmp_path: Path) -> None:
    """A data folder from before the rename: `conversations.sqlite3`, its last commit still in the
    write-ahead log (as a process that was killed leaves it), at no schema version."""
    made, data_dir = tmp_path / "made", tmp_path / "data"
    made.mkdir()
    data_dir.mkdir()
    state = ChatState(made / EARLIER_NAME)
    kept = await state.conversations.create_conversation("kept since last year")
    state.close()
    writer = sqlite3.connect(made / EARLIER_NAME, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("PRAGMA user_version = 0")  # as releases before the schema's version left it
    writer.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES ('last', 'x', 1, 1)")
    for name in (EARLIER_NAME, EARLIER_NAME + "-wal"):  # the folder as the killed process left it
        shutil.copy(made / name, data_dir / name)
    writer.close()

    path = state_path(data_dir)
    taken = ChatState(path)
    try:
        assert path.name == STATE_FILE and not (data_dir / EARLIER_NAME).exists()
        assert await taken.conversations.exists(kept) and await taken.conversations.exists("last")
    finally:
        taken.close()
    assert user_version(path) == schema.VERSION and tables(path) == TABLES
    assert sorted(p.name for p in data_dir.iterdir() if p.name.startswith(EARLIER_NAME)) == []


def test_a_folder_with_the_new_name_keeps_it(tmp_path: Path) -> None:
    ChatState(tmp_path / STATE_FILE).close()
    (tmp_path / EARLIER_NAME).write_bytes(b"")  # a stray file of an older name is never taken over a newer one
    assert state_path(tmp_path) == tmp_path / STATE_FILE
    assert (tmp_path / EARLIER_NAME).exists() and tables(tmp_path / STATE_FILE) == TABLES


def test_a_version_1_file_gains_owners_web_and_cli_for_the_local_person(tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    with sqlite3.connect(path) as conn:
        conn.execute(  # conversations as the release before owners made them
            "CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created_at REAL NOT NULL, "
            "updated_at REAL NOT NULL, interface TEXT NOT NULL DEFAULT 'web', adapter_key TEXT UNIQUE)"
        )
        schema.STEPS[0](conn)
        conn.execute("PRAGMA user_version = 1")
        for id_, interface in (("w", "web"), ("c", "cli"), ("s", "slack")):
            conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, interface) VALUES (?, 't', 1, 1, ?)",
                (id_, interface),
            )
    ChatState(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        owners = dict(conn.execute("SELECT id, owner FROM conversations").fetchall())
    assert owners == {"w": "person:local", "c": "person:local", "s": ""}
    assert user_version(path) == schema.VERSION and tables(path) == TABLES
