"""The kit's state on both backends: `state_location` is a new SQLite file or a new PostgreSQL database
(tests/postgres.py, the `postgres_server` fixture of tests/conftest.py), so a test that takes it runs on each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chats.schema import migrate
from chats.state import STATE_FILE
from chats.state_file import SqliteFile, StateFile
from chats.state_postgres import PostgresFile, is_postgres_url
from tests.postgres import PostgresServer

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def state_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's state lives: a file of its own, or a database of its own."""
    if request.param == "sqlite":
        return tmp_path / STATE_FILE
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def state_files(state_location: Path | str) -> Iterator[Callable[[], StateFile]]:
    """Opens the test's state as a process would, at this release's schema; closes all at the end."""
    opened: list[StateFile] = []

    def open_file() -> StateFile:
        location = state_location
        file: StateFile = PostgresFile(location) if is_postgres_url(location) else SqliteFile(Path(location))
        file.now(migrate)
        opened.append(file)
        return file

    yield open_file
    for file in opened:
        file.close()
