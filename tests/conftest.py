"""Shared fixtures: one demo database per test session, loaded by the code `make demo` runs.

chdb allows one data directory per process, so every test that touches ClickHouse uses this one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent.config import Settings
from agent.db import Database, open_database
from agent.demo import load_demo

DEMO_COUNTS = {"airlines": 16, "airports": 1458, "planes": 3322, "weather": 26115, "flights": 336776}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agent-data")
    load_demo(path / "clickhouse")
    return path


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    return Settings(agent_data_dir=data_dir, anthropic_api_key="test-key")  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _isolated_environment(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings read by code under test come from the test data dir, never the developer's shell."""
    for name in list(os.environ):
        if name.startswith(("CLICKHOUSE_", "ANTHROPIC_", "AGENT_", "SLACK_", "MAX_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENT_DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)  # so no developer .env is read
    yield


@pytest.fixture(scope="session")
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = open_database(settings)
    yield database
    await database.close()
