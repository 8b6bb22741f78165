"""The server backend against a real clickhouse/clickhouse-server in a container."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from agent.db import DatabaseUnavailable, open_database
from tests.conftest import make_settings

IMAGE = "clickhouse/clickhouse-server:26.8"  # the statement check needs parseQueryToJSON (26.6+)
AGENT_USER_SQL = [
    "CREATE DATABASE IF NOT EXISTS demo",
    "CREATE TABLE IF NOT EXISTS demo.t (n UInt64) ENGINE = MergeTree ORDER BY n AS SELECT number FROM numbers(1000)",
    "CREATE SETTINGS PROFILE IF NOT EXISTS agent_readonly SETTINGS readonly = 1, max_execution_time = 5, "
    "max_rows_to_read = 500000000, max_bytes_to_read = 20000000000, max_result_rows = 100000, "
    "max_result_bytes = 200000000, max_memory_usage = 4000000000",
    "CREATE USER IF NOT EXISTS agent IDENTIFIED BY 'agent-password' SETTINGS PROFILE agent_readonly",
    "GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON demo.* TO agent",
]


def _docker_reason() -> str | None:
    """Why no Docker engine can be used here, or None when one answers on its socket."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None  # a remote engine: let testcontainers try it
    path = host.removeprefix("unix://")
    if not os.path.exists(path):
        return f"no Docker engine ({path} does not exist)"
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError as exc:
            return f"no Docker engine answering on {path} ({exc.strerror})"
    return None


NO_DOCKER = _docker_reason()
pytestmark = pytest.mark.skipif(NO_DOCKER is not None, reason=f"server backend needs Docker: {NO_DOCKER}")


@pytest.fixture(scope="module")
def server():
    import clickhouse_connect
    from testcontainers.clickhouse import ClickHouseContainer

    with ClickHouseContainer(IMAGE, port=8123) as container:
        host, port = container.get_container_host_ip(), int(container.get_exposed_port(8123))
        admin = clickhouse_connect.get_client(
            host=host, port=port, username=container.username, password=container.password
        )
        for statement in AGENT_USER_SQL:
            admin.command(statement)
        yield host, port, f"http://{container.username}:{container.password}@{host}:{port}/default"


async def test_server_backend_behaves_like_the_embedded_one(server) -> None:
    host, port, _ = server
    settings = make_settings(
        clickhouse_url=f"http://agent:agent-password@{host}:{port}/demo",
        clickhouse_databases=["demo"],
        max_execution_time=5,
    )
    db = open_database(settings)
    try:
        result = await db.execute("SELECT n FROM t")
        assert result.row_count == 50 and result.has_more and result.rows[0] == ["0"]
        refused = await db.execute("SELECT * FROM file('/etc/passwd', 'LineAsString')")
        assert not refused.ok
        error = await db.execute("SELECT nope FROM t")
        assert error.error_code == 47 and error.hint
        task = asyncio.create_task(db.execute("SELECT count() FROM numbers(10000000000) WHERE sipHash64(number) = 1"))
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)
        assert await db.running_queries() == []
    finally:
        await db.close()


async def test_a_user_with_more_than_read_access_is_refused(server) -> None:
    _, _, admin_url = server
    db = open_database(make_settings(clickhouse_url=admin_url, clickhouse_databases=["default"]))
    try:
        with pytest.raises(DatabaseUnavailable, match="more access than the agent may use"):
            await db.execute("SELECT 1")
    finally:
        await db.close()
