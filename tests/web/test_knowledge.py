"""GET /api/knowledge: the entries an answer's citations open, with the file and line that keep them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from tests.web_helpers import WebApps


@pytest.fixture
async def web(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    apps = WebApps(make_app, tmp_path)
    yield apps.start
    await apps.close()


async def test_the_demo_knowledge_is_served_by_tag(web) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        entries = {e["tag"]: e for e in (await client.get("/api/knowledge")).json()["entries"]}
    metric = entries["[metric: on-time rate]"]
    assert metric["source"] == "metrics.yaml:2" and metric["kind"] == "metrics"
    assert metric["text"].startswith("on-time rate: Share of flights that arrived less than 15 minutes late")
    assert metric["text"].endswith("\nSQL:\nround(countIf(arr_delay < 15) / countIf(arr_delay IS NOT NULL), 4)")
    assert "/" not in metric["source"]  # the server's folders are not shown


async def test_without_knowledge_there_are_no_entries_and_a_token_is_still_needed(web) -> None:
    url, _ = await web(agent_knowledge_dir="none", agent_web_token="s3cret")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        assert (await client.get("/api/knowledge")).status_code == 401
        response = await client.get("/api/knowledge", headers={"Authorization": "Bearer s3cret"})
        assert response.json() == {"entries": []}
