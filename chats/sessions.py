"""Signed-in web sessions, kept server-side so that signing out or their lifetime ends them wherever the
cookie went. The cookie (signed by Starlette's SessionMiddleware) carries only a random session id; the
file keeps its SHA-256, never the id itself, with the person it signed in and when it ends."""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time

from chats.people import Person
from chats.state_file import StateFile, write_transaction


class SessionStore:
    def __init__(self, file: StateFile) -> None:
        self._file = file  # the kit's state file (chats/state.py), which makes the table

    async def start(self, person: Person, lifetime_s: float) -> str:
        """A new session for `person`, ending in `lifetime_s`; its id, for the cookie. Ended ones are forgotten."""
        session_id = secrets.token_urlsafe(32)
        now = time.time()

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.execute("DELETE FROM web_sessions WHERE expires_at <= ?", (now,))
                c.execute(
                    "INSERT INTO web_sessions (id_hash, person, created_at, expires_at) VALUES (?, ?, ?, ?)",
                    (_hashed(session_id), _dumps(person), now, now + lifetime_s),
                )

        await self._file.run(write)
        return session_id

    async def person(self, session_id: str) -> Person | None:
        """Who the session signed in, while it lasts; None once it ended, expired or never was."""
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT person FROM web_sessions WHERE id_hash = ? AND expires_at > ?",
                (_hashed(session_id), time.time()),
            ).fetchone()
        )
        return _loads(row["person"]) if row else None

    async def end(self, session_id: str) -> bool:
        """Sign out: the session ends now, for every copy of its cookie."""
        cursor = await self._file.run(
            lambda c: c.execute("DELETE FROM web_sessions WHERE id_hash = ?", (_hashed(session_id),))
        )
        return cursor.rowcount > 0


def _hashed(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _dumps(person: Person) -> str:
    return json.dumps(
        {"id": person.id, "name": person.name, "email": person.email, "groups": sorted(person.groups)},
        ensure_ascii=False,
    )


def _loads(text: str) -> Person:
    data = json.loads(text)
    return Person(id=data["id"], name=data["name"], email=data["email"], groups=frozenset(data["groups"]))
