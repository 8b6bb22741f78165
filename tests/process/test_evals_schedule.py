"""Evals on a schedule in the real Service, on a clock the tests move: an eval schedule fires the eval job
on the serving process's own engine and model client (never a second engine), its results are recorded
and served at /metrics, its line says the pass rate, cases, cost and the change from the previous run; a
knowledge-change schedule runs once after the knowledge files change and not again until they change;
a long eval run holds up no other schedule's fire, and keeps its lease while it runs."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from agent.config import DEMO_KNOWLEDGE_DIR
from chats.schedules import LEASE_S, Cadence, Draft, SavedQuery, Schedule, ScheduleStore
from chats.state import ChatState
from process.evals_schedule import EvalSpec
from process.service import Service
from tests.evals_helpers import HALF_WRONG, RIGHT, SUITE, answer_cases, write_suite
from tests.fakes.anthropic_api import FakeAnthropic
from tests.moved_clock import MovedClock
from tests.postgres import PostgresServer
from tests.web_helpers import LiveServer

ANN = "person:email:ann@example.com"
MONDAY_6_BERLIN = Cadence("cron", timezone="Europe/Berlin", cron="0 6 * * 1")
EVERY_15_MIN = Cadence("cron", cron="*/15 * * * *")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.fixture(autouse=True)
def _no_second_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job must run on the service's engine: opening the suites' own would be a second embedded engine."""

    async def refuse(*args: Any) -> None:
        raise AssertionError("the eval job opened a database of its own")

    monkeypatch.setattr("process.evals_job.open_dataset", refuse)


def _service(make_app: Callable[..., AgentApp], tmp_path: Path, clock: MovedClock, **settings: Any) -> Service:
    """The real Service, its schedules on the moved clock; its own ticks a real hour apart (the test ticks)."""
    agent = make_app(agent_data_dir=tmp_path, anthropic_api_key="test-key", agent_schedule_tick_s=3600, **settings)
    service = Service.build(agent.settings, web=True, slack=False, agent=agent)
    service.state.schedules = ScheduleStore(service.state.file, clock=clock)
    return service


async def _finished_fires(store: ScheduleStore, schedule: Schedule, count: int) -> list[dict[str, Any]]:
    """The schedule's fires once `count` of them have ended (the service's first tick runs as it starts)."""
    for _ in range(1200):
        fires = [f for f in await store.fires(schedule.id) if f["status"] not in ("running", None)]
        if len(fires) >= count:
            return fires
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} fire(s) of {schedule.id} did not finish")


async def _tick(service: Service) -> None:
    assert service.scheduler is not None
    await service.scheduler.tick()
    await service.scheduler.settled()


async def test_a_scheduled_eval_run_is_recorded_served_at_metrics_and_delivered_with_its_change(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    clock = MovedClock(utc(2026, 3, 30, 3))  # Monday; 06:00 in Berlin (summer time since Sunday) is 04:00 UTC
    service = _service(make_app, tmp_path, clock, agent_knowledge_dir="none")
    store = service.state.schedules
    made = await store.create(ANN, EvalSpec((str(write_suite(tmp_path)),)).draft(MONDAY_6_BERLIN))
    clock.to(utc(2026, 3, 30, 4, 0, 10))
    answer_cases(fake_anthropic, HALF_WRONG)
    async with LiveServer(service.app) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        [fire] = await _finished_fires(store, made, 1)
        assert fire["status"] == "done"
        [run] = await service.state.eval_runs.runs()
        assert (run.trigger, run.passed, run.total) == ("schedule", 1, 2)
        assert f'agent_eval_pass_rate{{suite="{SUITE}"}} 0.5' in (await client.get("/metrics")).text
        [first] = await store.inbox(ANN)
        assert first.text.startswith("Evals: pass rate 50.0% (1 of 2 cases), $") and "first recorded run" in first.text

        answer_cases(fake_anthropic, RIGHT)
        clock.to(utc(2026, 4, 6, 4, 0, 10))  # the next Monday
        await _tick(service)
        latest = (await store.inbox(ANN))[0]
        assert "pass rate 100.0% (2 of 2 cases)" in latest.text and "up 50.0 points from 50.0%" in latest.text
        assert f'agent_eval_pass_rate{{suite="{SUITE}"}} 1.0' in (await client.get("/metrics")).text
        assert (
            service.agent.metrics.registry.get_sample_value("agent_schedule_deliveries_total", {"destination": "inbox"})
            == 2
        )


async def test_a_knowledge_change_schedule_runs_once_after_each_change_and_delivers_nothing_between(
    make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    knowledge = Path(shutil.copytree(DEMO_KNOWLEDGE_DIR, tmp_path / "knowledge"))
    clock = MovedClock(utc(2026, 3, 30, 8))
    service = _service(make_app, tmp_path, clock, agent_knowledge_dir=str(knowledge))
    store = service.state.schedules
    made = await store.create(ANN, EvalSpec((str(write_suite(tmp_path)),), True).draft(EVERY_15_MIN))
    assert made.draft.question.endswith("--when-knowledge-changes")
    answer_cases(fake_anthropic, HALF_WRONG)
    clock.forward(15 * 60)
    await service.start()
    try:
        await _finished_fires(store, made, 1)
        assert [r.trigger for r in await service.state.eval_runs.runs()] == ["knowledge"], "no run before: it runs"
        asked = len(fake_anthropic.requests)

        clock.forward(15 * 60)
        await _tick(service)
        assert len(await _finished_fires(store, made, 2)) == 2
        assert len(await service.state.eval_runs.runs()) == 1 and len(fake_anthropic.requests) == asked
        assert len(await store.inbox(ANN)) == 1, "nothing ran, so nothing is delivered"

        edited = sorted(knowledge.glob("*.yaml"))[0]
        edited.write_text(edited.read_text() + "\n# a teammate's edit\n")
        for _ in range(2):  # once after the edit, and not again until the next one
            clock.forward(15 * 60)
            await _tick(service)
        assert len(await _finished_fires(store, made, 4)) == 4
        assert [r.trigger for r in await service.state.eval_runs.runs()] == ["knowledge", "knowledge"]
        assert len(await store.inbox(ANN)) == 2
    finally:
        await service.close()


async def test_a_long_eval_run_does_not_hold_up_another_schedules_fire(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    clock = MovedClock(utc(2026, 3, 30, 8))
    service = _service(make_app, tmp_path, clock, agent_knowledge_dir="none")
    store = service.state.schedules
    release, started = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def slow_evals(schedule: Schedule) -> str | None:
        calls.append(schedule.id)
        started.set()
        await release.wait()
        return "Evals: done."

    service.jobs["evals"] = slow_evals
    evals = await store.create(ANN, EvalSpec().draft(EVERY_15_MIN))
    jfk = SavedQuery("Q1", "SELECT count() AS flights FROM nycflights13.flights WHERE origin = 'JFK'")
    question = Draft(title="JFK", question="JFK flights?", cadence=EVERY_15_MIN, queries=(jfk,))
    await service.start()
    try:
        assert service.scheduler is not None
        await service.scheduler.tick()  # whatever the first tick of the service did, nothing was due
        await store.create(ANN, question)
        clock.forward(15 * 60)
        assert await asyncio.wait_for(service.scheduler.tick(), 60) == 2, "the tick returns; the eval run goes on"
        await asyncio.wait_for(started.wait(), 60)
        assert [i.title for i in await store.inbox(ANN)] == ["JFK"]

        clock.forward(15 * 60)  # past the lease (LEASE_S) of the eval run still running: each tick holds it
        assert LEASE_S < 15 * 60
        await service.scheduler.tick()
        first = (await store.fires(evals.id))[0]
        assert (first["status"], first["attempts"], first["worker"]) == ("running", 1, service.scheduler.worker)
        release.set()
        await service.scheduler.settled()
        assert [(f["status"], f["attempts"]) for f in await store.fires(evals.id)] == [("done", 1), ("done", 1)]
        assert len(calls) == 2, "the next due time fired; the running one was not taken for dead and run again"
        assert sorted(i.title for i in await store.inbox(ANN)) == ["Evals (all suites)"] * 2 + ["JFK"] * 2
    finally:
        release.set()
        await service.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_held_lease_is_not_taken_for_dead_and_only_its_worker_holds_it(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    location: Path | str = tmp_path / "shared.sqlite3"
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        location = server.new_database()
    clock = MovedClock(utc(2026, 3, 30, 8))
    state = ChatState(location, workers=2)
    try:
        store = ScheduleStore(state.file, clock=clock)
        await store.create(ANN, EvalSpec().draft(EVERY_15_MIN))
        clock.forward(15 * 60)
        [fire] = await store.claim_due("w1")
        clock.forward(LEASE_S - 1)
        await store.hold([fire], "w1")
        clock.forward(2)
        assert await store.claim_retries("w2") == [], "w1 renewed its lease"
        clock.forward(LEASE_S - 3)
        await store.hold([fire], "w2")  # not w2's fire: nothing is renewed
        clock.forward(2)
        [taken] = await store.claim_retries("w2")
        assert (taken.due_at, taken.attempt) == (fire.due_at, 2), "a lease nobody holds runs out and is taken over"
    finally:
        state.close()
