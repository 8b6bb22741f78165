"""`agent serve` fires schedules: its Service starts the scheduler (AGENT_SCHEDULER, on by default), whose
first tick runs as it starts, so a schedule already due is delivered; with the setting off nothing fires,
and the schedule waits for a server that fires it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from chats.schedules import Cadence, Draft, SavedQuery, ScheduleStore
from chats.state import ChatState, state_path
from process.service import Service

ANN = "person:email:ann@example.com"


async def _due_schedule(folder: Path) -> None:
    """A daily schedule made a day ago (its clock then), so its first fire is already due."""
    state = ChatState(state_path(folder))
    try:
        store = ScheduleStore(state.file, clock=lambda: time.time() - 86_400)
        query = SavedQuery("Q1", "SELECT count() AS flights FROM nycflights13.flights WHERE origin = 'JFK'")
        cadence = Cadence("cron", cron="*/15 * * * *")  # the shortest AGENT_SCHEDULE_MIN_INTERVAL_S allows
        await store.create(ANN, Draft(title="JFK", question="JFK flights?", cadence=cadence, queries=(query,)))
    finally:
        state.close()


async def _serve_once(make_app, folder: Path, **settings: object) -> int:
    agent = make_app(agent_data_dir=folder, **settings)
    service = await Service.open(agent.settings, web=True, slack=False, agent=agent)
    try:
        for _ in range(400):  # the first tick runs as the service starts: wait for it, not for a time
            if service._scheduler is None or await service.state.schedules.inbox(ANN):
                break
            await asyncio.sleep(0.05)
        return len(await service.state.schedules.inbox(ANN))
    finally:
        await service.close()
        assert service._scheduler is None or service._scheduler.done()


async def test_the_service_fires_a_due_schedule_as_it_starts_unless_the_scheduler_is_off(
    make_app, tmp_path: Path
) -> None:
    await _due_schedule(tmp_path)
    assert await _serve_once(make_app, tmp_path, agent_scheduler=False) == 0
    assert await _serve_once(make_app, tmp_path) == 1
