"""The server backend against a real clickhouse/clickhouse-server in a container."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from agent.db import QueryLimits
from agent.db.server import ServerDatabase


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
def clickhouse_url():
    from testcontainers.clickhouse import ClickHouseContainer

    with ClickHouseContainer("clickhouse/clickhouse-server:24.8", port=8123) as container:
        host, port = container.get_container_host_ip(), container.get_exposed_port(8123)
        yield f"http://{container.username}:{container.password}@{host}:{port}/{container.dbname}"


async def test_server_backend_behaves_like_the_embedded_one(clickhouse_url: str) -> None:
    db = ServerDatabase(clickhouse_url, QueryLimits(max_execution_time=5))
    try:
        result = await db.execute("SELECT number FROM numbers(1000)")
        assert result.row_count == 50 and result.has_more
        assert (await db.execute("SELECT getSetting('readonly')")).rows == [[1]]
        refused = await db.execute("SELECT * FROM file('/etc/passwd', 'LineAsString')")
        assert not refused.ok
        error = await db.execute("SELECT nope")
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
