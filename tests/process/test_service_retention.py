"""A serving process sweeps by AGENT_RETENTION_DAYS as it starts (and hourly), counting the rows it
deleted by table; without the setting, nothing is swept."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from chats.audit import AuditEntry
from chats.retention import DAY_S
from chats.state import ChatState, state_path
from process.service import Service

SAMPLE = ("agent_retention_deleted_rows_total", {"table": "audit_entries"})


async def _aged_entries(folder: Path) -> None:
    state = ChatState(state_path(folder))
    try:
        for run_id, age_days in (("old", 40), ("young", 1)):
            at = time.time() - age_days * DAY_S
            await state.audit.record(AuditEntry(run_id, at, "person:local", "cli", "", "", "c", "?", "answered"))
    finally:
        state.close()


async def _serve_once(make_app, metrics, folder: Path, **settings: object) -> list[str]:
    agent = make_app(agent_data_dir=folder, **settings)
    service = await Service.open(agent.settings, web=True, slack=False, agent=agent)
    try:
        for _ in range(100):  # the first sweep runs as the service starts: wait for it, not for a time
            if metrics.registry.get_sample_value(*SAMPLE) or service._retention is None:
                break
            await asyncio.sleep(0.05)
        return [e.run_id for e in await service.state.audit.entries()]
    finally:
        await service.close()
        assert service._retention is None or service._retention.done()


async def test_the_service_sweeps_as_it_starts_and_counts_by_table(make_app, metrics, tmp_path: Path) -> None:
    await _aged_entries(tmp_path)
    assert await _serve_once(make_app, metrics, tmp_path) == ["old", "young"], "off by default"
    assert await _serve_once(make_app, metrics, tmp_path, agent_retention_days=30) == ["young"]
    assert metrics.registry.get_sample_value(*SAMPLE) == 1
