"""Sign-in sessions kept server-side: found while they last, ended by sign-out or their lifetime, and kept
in the file only as a hash of their id."""

from __future__ import annotations

from pathlib import Path

from chats.people import Person
from chats.state import ChatState

ALICE = Person("email:alice@example.com", "Alice", "alice@example.com", frozenset({"finance", "ops"}))


async def test_a_session_is_its_person_until_it_ends(state_location: Path | str) -> None:
    state = ChatState(state_location)
    try:
        sessions = state.sessions
        session_id = await sessions.start(ALICE, 3600)
        other = await sessions.start(ALICE, 3600)
        assert session_id != other and len(session_id) >= 43
        assert await sessions.person(session_id) == ALICE
        assert await sessions.end(session_id) is True
        assert await sessions.person(session_id) is None and await sessions.person(other) == ALICE
        assert await sessions.end(session_id) is False
        assert await sessions.person("never-made") is None
    finally:
        state.close()


async def test_an_expired_session_is_nobody_and_is_forgotten(state_location: Path | str) -> None:
    state = ChatState(state_location)
    try:
        expired = await state.sessions.start(ALICE, 0)
        assert await state.sessions.person(expired) is None
        await state.sessions.start(ALICE, 3600)  # a new sign-in sweeps the ended ones
        rows = await state.file.run(lambda c: c.execute("SELECT id_hash FROM web_sessions").fetchall())
        assert len(rows) == 1
    finally:
        state.close()


async def test_the_file_keeps_no_session_id(tmp_path: Path) -> None:
    state = ChatState(tmp_path / "state.sqlite3")
    try:
        session_id = await state.sessions.start(ALICE, 3600)
    finally:
        state.close()
    assert session_id.encode() not in (tmp_path / "state.sqlite3").read_bytes() + _wal(tmp_path)


def _wal(folder: Path) -> bytes:
    wal = folder / "state.sqlite3-wal"
    return wal.read_bytes() if wal.exists() else b""
