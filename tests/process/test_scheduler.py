"""The scheduler on a clock the tests move (no sleeping on real time): scheduled questions fire at their
wall time across daylight-saving changes, once however many schedulers share the state (SQLite and
PostgreSQL), once and late after downtime; an alert posts once, then again only after clearing, with no
model call; a failed delivery is retried with a doubling wait, then its owner is told; a schedule whose
owner lost access stops and tells them. Deliveries are normal answers: figures checked, receipt, queries
stored, a line on what changed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.access.policy import Asker
from agent.app import AgentApp
from agent.metrics import Metrics
from agent.prompts import prompt_library
from chats.conversations import ConversationStore
from chats.schedule_deliveries import Delivered, InboxOutlet, OutletName
from chats.schedule_runs import FireMaker
from chats.schedules import INBOX, Alert, Cadence, Draft, SavedQuery, Schedule, ScheduleStore
from chats.state import ChatState
from process.scheduler import Scheduler, Timing
from tests.fakes.anthropic_api import FakeAnthropic
from tests.moved_clock import MovedClock
from tests.postgres import PostgresServer
from tests.slack_helpers import carriers_script

ANN = "person:email:ann@example.com"
JFK_SQL = "SELECT count() AS flights FROM nycflights13.flights WHERE origin = 'JFK'"
JFK_FLIGHTS = "111279"
BERLIN_9 = Cadence("daily", timezone="Europe/Berlin", at="09:00")
RETRYING = Timing(retries=2, retry_s=60)  # a failed delivery: tried again after 60 s, then 120 s, then given up


def _draft(cadence: Cadence = BERLIN_9, **changes: Any) -> Draft:
    base: dict[str, Any] = {
        "title": "JFK departures",
        "question": "How many flights left JFK?",
        "cadence": cadence,
        "queries": (SavedQuery("Q1", JFK_SQL, "Flights from JFK"),),
        "source_run_id": "run0",
    }
    return Draft(**{**base, **changes})


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


class World:
    """One state (one or more processes' views of it), an agent, the moved clock and each view's scheduler."""

    def __init__(self, app: AgentApp, location: Path | str, clock: MovedClock, views: int = 1) -> None:
        self.app, self.clock = app, clock
        self.states = [ChatState(location, workers=2) for _ in range(views)]
        self.metrics = [Metrics(CollectorRegistry()) for _ in range(views)]
        self.schedulers = [self.scheduler(i) for i in range(views)]

    def scheduler(self, i: int, outlet: Any = None, timing: Timing = RETRYING) -> Scheduler:
        state = self.states[i]
        state.schedules = ScheduleStore(state.file, clock=self.clock)
        outlets = {INBOX: InboxOutlet(state.schedules), **({"slack": outlet} if outlet else {})}
        maker = FireMaker(self.app, prompt_library(self.app.settings.agent_prompts_dir))
        return Scheduler(
            state.schedules,
            state.conversations,
            maker,
            outlets,
            self.metrics[i],
            policies=lambda: self.app.policies,
            clock=self.clock,
            timing=timing,
            audit=state.audit,
        )

    @property
    def store(self) -> ScheduleStore:
        return self.states[0].schedules

    @property
    def conversations(self) -> ConversationStore:
        return self.states[0].conversations

    async def tick_at(self, when: datetime) -> int:
        self.clock.to(when)
        return sum([await scheduler.tick() for scheduler in self.schedulers])

    def count(self, name: str, **labels: str) -> float:
        return sum(m.registry.get_sample_value(name, labels) or 0.0 for m in self.metrics)

    def close(self) -> None:
        for state in self.states:
            state.close()


@pytest.fixture
def world(make_app: Callable[..., AgentApp], tmp_path: Path) -> Iterator[Callable[..., World]]:
    made: list[World] = []

    def build(location: Path | str | None = None, *, views: int = 1, app: AgentApp | None = None) -> World:
        clock = MovedClock(utc(2026, 3, 27, 12))
        made.append(World(app or make_app(), location or tmp_path / "state.sqlite3", clock, views))
        return made[-1]

    yield build
    for w in made:
        w.close()


async def test_a_daily_schedule_fires_at_nine_in_berlin_on_both_sides_of_the_clock_change(
    world: Callable[..., World], fake_anthropic: FakeAnthropic
) -> None:
    w = world()
    made = await w.store.create(ANN, _draft())
    assert await w.tick_at(utc(2026, 3, 28, 7, 59)) == 0
    assert await w.tick_at(utc(2026, 3, 28, 8, 0)) == 1  # 09:00 CET
    assert await w.tick_at(utc(2026, 3, 29, 6, 59)) == 0
    assert await w.tick_at(utc(2026, 3, 29, 7, 0)) == 1  # 09:00 CEST, the morning after the change
    assert await w.tick_at(utc(2026, 3, 29, 8, 0)) == 0, "not again at 08:00 UTC, where winter's 09:00 was"

    second, first = await w.store.inbox(ANN)
    assert f"Flights from JFK: flights {JFK_FLIGHTS} [Q1]." in first.text
    assert first.changed == "The first delivery of this schedule."
    assert second.changed == "No change since the previous delivery (2026-03-28 09:00)."
    assert first.late == "" and second.late == ""
    # A normal answer: its figures checked (all verified), a receipt, its query stored with a page.
    figures = first.details["figures"]
    assert figures["figures"] and all(f["verified"] for f in figures["figures"])
    assert first.details["receipt"]["queries"] == 1
    (query,) = first.queries
    stored = await w.conversations.get_query(query)
    assert stored is not None and stored["sql"] == JFK_SQL
    assert await w.conversations.query_owner(query) == ANN, "the query's page opens to the owner alone"
    assert fake_anthropic.requests == [], "running the stored SQL again asks no model"
    (audited, _) = await w.states[0].audit.entries()
    assert (audited.person, audited.interface, audited.question) == (ANN, "web", "How many flights left JFK?")
    assert [q.sql for q in audited.queries] == [JFK_SQL], "each delivery is audited as any question is"
    assert w.count("agent_schedule_fires_total", kind="question", timing="on_time") == 2
    assert w.count("agent_schedule_deliveries_total", destination="inbox") == 2
    assert (await w.store.get(made.id, owner=ANN)).next_at == utc(2026, 3, 30, 7).timestamp()  # type: ignore[union-attr]


async def test_a_weekly_schedule_keeps_monday_eight_in_new_york_when_the_clocks_go_back(
    world: Callable[..., World],
) -> None:
    w = world()
    w.clock.to(utc(2026, 10, 20, 12))
    await w.store.create(ANN, _draft(Cadence("weekly", timezone="America/New_York", at="08:00", weekday=0)))
    assert await w.tick_at(utc(2026, 10, 26, 11, 59)) == 0
    assert await w.tick_at(utc(2026, 10, 26, 12, 0)) == 1  # 08:00 EDT
    assert await w.tick_at(utc(2026, 11, 2, 12, 0)) == 0, "after Nov 1 08:00 is 13:00 UTC"
    assert await w.tick_at(utc(2026, 11, 2, 13, 0)) == 1  # 08:00 EST
    assert len(await w.store.inbox(ANN)) == 2


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_workers_on_one_state_fire_a_schedule_once(
    world: Callable[..., World], backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    location: Path | str = tmp_path / "shared.sqlite3"
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        location = server.new_database()
    w = world(location, views=2)
    await w.store.create(ANN, _draft())
    assert await w.tick_at(utc(2026, 3, 28, 8, 0, 1)) == 1
    assert await w.tick_at(utc(2026, 3, 28, 8, 5)) == 0
    assert len(await w.states[1].schedules.inbox(ANN)) == 1
    assert w.count("agent_schedule_fires_total", kind="question", timing="on_time") == 1
    assert w.count("agent_schedule_deliveries_total", destination="inbox") == 1


async def test_after_downtime_the_missed_fires_run_once_late_and_say_so(world: Callable[..., World]) -> None:
    w = world()
    made = await w.store.create(ANN, _draft())
    assert await w.tick_at(utc(2026, 4, 2, 10)) == 1, "six missed mornings fire once"
    assert await w.tick_at(utc(2026, 4, 2, 10, 1)) == 0
    (item,) = await w.store.inbox(ANN)
    assert item.late.startswith("Late: this was due Sat 28 Mar 09:00 (Europe/Berlin) and runs 5 days late")
    assert w.count("agent_schedule_fires_total", kind="question", timing="late") == 1
    assert (await w.store.get(made.id, owner=ANN)).next_at == utc(2026, 4, 3, 7).timestamp()  # type: ignore[union-attr]


async def test_an_alert_posts_once_then_again_only_after_it_clears_with_no_model_call(
    world: Callable[..., World], fake_anthropic: FakeAnthropic
) -> None:
    w = world()
    above = Alert("above", column="flights", threshold=100_000)
    made = await w.store.create(ANN, _draft(kind="alert", alert=above))
    # Each morning one check; the threshold moves so that the condition holds, holds, clears, holds again.
    steps = ((None, 1), (None, 1), (200_000, 1), (200_000, 1), (100_000, 2), (None, 2))
    for day, (threshold, posts) in enumerate(steps):
        if threshold is not None:
            await w.store.edit(made.id, owner=ANN, alert=Alert("above", column="flights", threshold=threshold))
        assert await w.tick_at(utc(2026, 3, 28, 8) + timedelta(days=day)) == 1
        assert len(await w.store.inbox(ANN)) == posts, f"check {day + 1}"
    latest = (await w.store.inbox(ANN))[0]
    assert f"flights is {JFK_FLIGHTS} [Q1], above the threshold of 100,000." in latest.text
    assert all(f["verified"] for f in latest.details["figures"]["figures"])
    assert fake_anthropic.requests == [], "checking and posting an alert asks no model"
    assert w.count("agent_schedule_skips_total", reason="condition") == 4


class FailingSlack:
    """A delivery channel that is down: every post fails (its Slack counterpart is tested against the fake)."""

    name: OutletName = "slack"
    interface = "slack"

    def __init__(self) -> None:
        self.tries = 0

    async def refusal(self, schedule: Schedule) -> str | None:
        return None

    async def deliver(self, delivered: Delivered) -> None:
        self.tries += 1
        raise ConnectionError("Slack did not answer")

    async def tell(self, schedule: Schedule, text: str) -> bool:
        return False  # down for that too: the owner's inbox has it


async def test_a_failing_delivery_is_retried_with_a_doubling_wait_then_its_owner_is_told(
    world: Callable[..., World],
) -> None:
    w = world()
    slack = FailingSlack()
    w.schedulers = [w.scheduler(0, outlet=slack)]
    await w.store.create(ANN, _draft(destination="slack:T1:C1"))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    assert await w.tick_at(utc(2026, 3, 28, 8, 0, 59)) == 0
    assert await w.tick_at(utc(2026, 3, 28, 8, 1)) == 1  # 60 s later
    assert await w.tick_at(utc(2026, 3, 28, 8, 2, 59)) == 0
    assert await w.tick_at(utc(2026, 3, 28, 8, 3)) == 1  # 120 s after that: the last try
    assert await w.tick_at(utc(2026, 3, 28, 12)) == 0
    assert slack.tries == 3
    (notice,) = await w.store.inbox(ANN)
    assert "did not arrive after 3 tries" in notice.text and notice.details.get("notice")
    assert w.count("agent_schedule_failures_total", stage="delivery") == 3
    assert w.count("agent_schedule_failures_total", stage="gave_up") == 1


POLICIES = """
contact: "#data-help"
policies:
  - name: jfk
    members:
      - email: {member}
    tables:
      nycflights13.flights: origin = 'JFK'
"""


async def test_a_schedule_whose_owner_lost_access_stops_and_tells_them(
    world: Callable[..., World], make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    access = tmp_path / "access.yaml"
    access.write_text(POLICIES.format(member="ann@example.com"), encoding="utf-8")
    w = world(app=make_app(agent_access_file=str(access)))
    asker = Asker(email="ann@example.com")
    made = await w.store.create(ANN, _draft(policy="jfk", asker=asker))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    assert f"flights {JFK_FLIGHTS} [Q1]" in (await w.store.inbox(ANN))[0].text

    access.write_text(POLICIES.format(member="someone-else@example.com"), encoding="utf-8")
    w.app = make_app(agent_access_file=str(access))  # the server restarted with the edited file
    w.schedulers = [w.scheduler(0)]
    assert await w.tick_at(utc(2026, 3, 29, 7)) == 1
    notice, delivered = await w.store.inbox(ANN)
    assert JFK_FLIGHTS in delivered.text, "the day before, while Ann held the policy"
    assert notice.text.startswith("Your schedule \u201cJFK departures\u201d stopped: Your access no longer covers")
    assert JFK_FLIGHTS not in notice.text
    stopped = await w.store.get(made.id, owner=ANN)
    assert stopped is not None and stopped.state == "stopped" and stopped.next_at is None
    assert await w.tick_at(utc(2026, 3, 30, 7)) == 0
    assert w.count("agent_schedule_skips_total", reason="access") == 1


async def test_asked_afresh_a_schedule_runs_the_question_through_the_runner_under_the_owners_policy(
    world: Callable[..., World], fake_anthropic: FakeAnthropic
) -> None:
    from tests.slack_helpers import carriers_script

    w = world()
    fake_anthropic.script(*carriers_script()[:2])
    await w.store.create(ANN, _draft(how="ask", question="Which carrier flew the most?"))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    (item,) = await w.store.inbox(ANN)
    assert item.text == "UA flew the most flights: 58,665 [Q1]."
    assert [f["verified"] for f in item.details["figures"]["figures"]] == [True]
    assert len(fake_anthropic.requests) == 2, "asked afresh: the model answers it, with no follow-ups"


async def test_an_eval_run_on_a_schedule_calls_the_wired_job_and_is_skipped_without_one(
    world: Callable[..., World],
) -> None:
    w = world()
    runs: list[str] = []

    async def evals(schedule: Schedule) -> str | None:
        runs.append(schedule.id)
        return "Evals: 18 of 20 passed (90%)."

    made = await w.store.create(ANN, Draft(title="Nightly evals", question="", cadence=BERLIN_9, kind="evals"))
    assert await w.tick_at(utc(2026, 3, 28, 8)) == 1
    assert runs == [] and await w.store.inbox(ANN) == []
    assert w.count("agent_schedule_skips_total", reason="no_job") == 1

    w.schedulers = [
        Scheduler(
            w.store,
            w.conversations,
            FireMaker(w.app, prompt_library(w.app.settings.agent_prompts_dir)),
            {INBOX: InboxOutlet(w.store)},
            w.metrics[0],
            policies=lambda: w.app.policies,
            clock=w.clock,
            jobs={"evals": evals},
        )
    ]
    assert await w.tick_at(utc(2026, 3, 29, 7)) == 1
    assert runs == [made.id]
    assert [i.text for i in await w.store.inbox(ANN)] == ["Evals: 18 of 20 passed (90%)."]


async def test_a_fire_asked_afresh_over_its_owners_spent_budget_is_skipped_and_they_are_told(
    world: Callable[..., World], make_app: Callable[..., AgentApp], fake_anthropic: FakeAnthropic
) -> None:
    """The fire that crosses the budget is answered (as a question is); the next asks no model, ends
    skipped, is counted under reason "budget", and its owner finds a notice saying when the budget resets."""
    w = world(app=make_app(agent_daily_user_tokens=1))
    fake_anthropic.script(*carriers_script()[:2])
    hourly = Cadence("cron", timezone="UTC", cron="0 * * * *")
    made = await w.store.create(ANN, _draft(cadence=hourly, how="ask", question="Which carrier flew the most?"))
    await w.tick_at(utc(2026, 3, 28, 8))
    await w.tick_at(utc(2026, 3, 28, 9))
    assert len(fake_anthropic.requests) == 2
    assert [f["status"] for f in await w.store.fires(made.id)] == ["done", "skipped"]
    notice, answered = await w.store.inbox(ANN)
    assert notice.details.get("notice") and "was not asked this time" in notice.text
    assert not answered.details.get("notice")
    assert w.metrics[0].registry.get_sample_value("agent_schedule_skips_total", {"reason": "budget"}) == 1
