"""Schedules on SQLite and on PostgreSQL: each belongs to its owner (anyone else finds none), is paused,
resumed, edited and deleted by them alone; due fires are claimed once however many workers ask, a missed
stretch becomes one late fire, a failed fire is retried by whichever worker is free, and web deliveries
land in the owner's inbox."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.access.policy import Asker
from chats.schedules import (
    INBOX,
    Alert,
    Cadence,
    CadenceError,
    Delivery,
    Draft,
    SavedQuery,
    ScheduleError,
    ScheduleStore,
    slack_destination,
)
from chats.state import ChatState
from tests.moved_clock import MovedClock

ANN, BOB = "person:email:ann@example.com", "person:email:bob@example.com"
DAILY_9_BERLIN = Cadence("daily", timezone="Europe/Berlin", at="09:00")


def _draft(**changes: object) -> Draft:
    base: dict[str, object] = {
        "title": "Flights from JFK",
        "question": "how many flights left JFK?",
        "cadence": DAILY_9_BERLIN,
        "queries": (SavedQuery("Q1", "SELECT count() AS n FROM flights WHERE origin = 'JFK'"),),
        "source_run_id": "run1",
    }
    return Draft(**{**base, **changes})  # type: ignore[arg-type]


def _stores(state_location: Path | str, clock: MovedClock, workers: int = 1) -> list[ChatState]:
    states = [ChatState(state_location, workers=2) for _ in range(workers)]
    for state in states:
        state.schedules = ScheduleStore(state.file, clock=clock)
    return states


async def test_a_schedule_is_its_owners_alone(state_location: Path | str) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        made = await store.create(ANN, _draft())
        assert made.next_at == datetime(2026, 3, 28, 8, tzinfo=UTC).timestamp()  # 09:00 CET
        assert [s.id for s in await store.list_for(ANN)] == [made.id]
        assert await store.list_for(BOB) == []
        assert await store.get(made.id, owner=BOB) is None
        assert not await store.pause(made.id, owner=BOB)
        assert not await store.delete(made.id, owner=BOB)
        assert await store.edit(made.id, owner=BOB, title="mine now") is None
        assert (await store.get(made.id, owner=ANN)) == made, "nothing Bob did changed it"

        assert await store.pause(made.id, owner=ANN)
        paused = await store.get(made.id, owner=ANN)
        assert paused is not None and (paused.state, paused.next_at) == ("paused", None)
        assert await store.claim_due("w1") == []
        clock.to(datetime(2026, 3, 30, 12, tzinfo=UTC))
        assert await store.resume(made.id, owner=ANN)
        resumed = await store.get(made.id, owner=ANN)
        assert resumed is not None and resumed.next_at == datetime(2026, 3, 31, 7, tzinfo=UTC).timestamp()  # CEST

        weekly = Cadence("weekly", timezone="America/New_York", at="08:30", weekday=0)
        edited = await store.edit(made.id, owner=ANN, cadence=weekly, destination=slack_destination("T1", "C1"))
        assert edited is not None and edited.draft.cadence == weekly
        assert edited.next_at == datetime(2026, 3, 30, 12, 30, tzinfo=UTC).timestamp()  # this Monday, 08:30 EDT
        assert edited.as_json()["when"] == "every Monday at 08:30 (America/New_York)"
        assert await store.delete(made.id, owner=ANN)
        assert await store.get(made.id, owner=ANN) is None
    finally:
        state.close()


def test_a_draft_that_cannot_run_is_refused_with_its_reason() -> None:
    with pytest.raises(CadenceError, match="time zone"):
        Cadence("daily", timezone="Mars/Olympus")
    with pytest.raises(CadenceError, match="five fields"):
        Cadence("cron", cron="* * *")
    with pytest.raises(CadenceError, match="HH:MM"):
        Cadence("daily", at="25:00")
    with pytest.raises(ScheduleError, match="no query"):
        _draft(queries=()).checked()
    with pytest.raises(ScheduleError, match="threshold"):
        Alert("above", column="n")
    with pytest.raises(ScheduleError, match="inbox or a Slack channel"):
        _draft(destination="email:ann").checked()
    assert _draft(queries=(), how="ask").checked().how == "ask"


async def test_two_workers_claim_a_due_fire_once_and_a_missed_stretch_fires_once_late(
    state_location: Path | str,
) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    first, second = _stores(state_location, clock, workers=2)
    try:
        made = await first.schedules.create(ANN, _draft())
        clock.to(datetime(2026, 3, 28, 8, 0, 5, tzinfo=UTC))
        claims = [await first.schedules.claim_due("w1"), await second.schedules.claim_due("w2")]
        assert sum(len(c) for c in claims) == 1
        (fire,) = claims[0]
        assert fire.late_by(60) == 0 and fire.attempt == 1

        clock.to(datetime(2026, 4, 2, 10, tzinfo=UTC))  # nothing ran for five days
        late = await second.schedules.claim_due("w2") + await first.schedules.claim_due("w1")
        assert len(late) == 1, "five missed fires run once"
        assert late[0].due_at == datetime(2026, 3, 29, 7, tzinfo=UTC).timestamp()
        assert late[0].late_by(60) > 4 * 24 * 3600
        assert await first.schedules.claim_due("w1") == []
        moved_on = await first.schedules.get(made.id, owner=ANN)
        assert moved_on is not None and moved_on.next_at == datetime(2026, 4, 3, 7, tzinfo=UTC).timestamp()
    finally:
        for state in (first, second):
            state.close()


async def test_a_failed_fire_is_retried_once_by_one_worker_and_a_dead_workers_lease_runs_out(
    state_location: Path | str,
) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    first, second = _stores(state_location, clock, workers=2)
    try:
        await first.schedules.create(ANN, _draft())
        clock.to(datetime(2026, 3, 28, 8, tzinfo=UTC))
        (fire,) = await first.schedules.claim_due("w1")
        await first.schedules.retry_at(fire, clock.now + 60, "Slack answered 500")
        assert await second.schedules.claim_retries("w2") == [], "not before its time"
        clock.forward(61)
        retries = await second.schedules.claim_retries("w2") + await first.schedules.claim_retries("w1")
        assert [(r.due_at, r.attempt) for r in retries] == [(fire.due_at, 2)]
        # The worker holding it dies: its lease runs out and another takes it over, once.
        clock.forward(10_000)
        taken = await first.schedules.claim_retries("w1") + await second.schedules.claim_retries("w2")
        assert [r.attempt for r in taken] == [3]
        await first.schedules.finish(taken[0], status="done")
        clock.forward(10_000)
        assert await second.schedules.claim_retries("w2") == []
    finally:
        for state in (first, second):
            state.close()


async def test_web_deliveries_land_in_their_owners_inbox_alone(state_location: Path | str) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        made = await store.create(ANN, _draft(destination=INBOX))
        item = await store.deliver_to_inbox(
            made,
            Delivery("1,203 flights left JFK [Q1].", changed="Up 3 since yesterday.", run_id="r2", queries=("r2:Q1",)),
        )
        assert await store.inbox(BOB) == [] and await store.unread(BOB) == 0
        assert not await store.mark_read(item.id, owner=BOB)
        (mine,) = await store.inbox(ANN)
        assert (mine.text, mine.changed, mine.queries, mine.read) == (
            "1,203 flights left JFK [Q1].",
            "Up 3 since yesterday.",
            ["r2:Q1"],
            False,
        )
        assert await store.unread(ANN) == 1
        assert await store.mark_read(item.id, owner=ANN)
        assert (await store.inbox(ANN))[0].read and await store.unread(ANN) == 0
        assert await store.inbox(ANN, unread_only=True) == []
    finally:
        state.close()


async def test_a_draft_from_an_answer_keeps_its_question_the_sql_that_ran_and_its_policy(
    state_location: Path | str,
) -> None:
    from agent.access.policy import Asker
    from agent.db.result import QueryResult
    from agent.runner import ExecutedQuery, RunResult

    def ran(label: str, sql: str, error: str | None = None) -> ExecutedQuery:
        result = QueryResult(query_id=label, sql=sql, columns=["n"], types=["UInt64"], rows=[["7"]], error=error)
        return ExecutedQuery(id=label, question=f"{label}?", sql=sql, result=result)

    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        conversation = await state.conversations.create_conversation("flights", owner=ANN)
        queries = [ran("Q1", "SELECT 1"), ran("Q2", "SELEC", error="syntax"), ran("Q3", "SELECT 3")]
        result = RunResult(question="how many?", answer="7 [Q1]", queries=queries, policy="jfk-desk")
        await state.conversations.save_turn(conversation, "run9", result, [])
        asker = Asker(email="ann@example.com", groups=frozenset({"ops"}))
        draft = await state.schedules.draft_from_answer("run9", cadence=DAILY_9_BERLIN, asker=asker)
        assert draft is not None
        assert (draft.question, draft.policy, draft.source_run_id) == ("how many?", "jfk-desk", "run9")
        assert [(q.label, q.sql) for q in draft.queries] == [("Q1", "SELECT 1"), ("Q3", "SELECT 3")]
        made = await state.schedules.create(ANN, draft)
        assert made.draft.asker == asker, "who the owner was is kept, to pick their policy at each fire"
        assert await state.schedules.draft_from_answer("nope", cadence=DAILY_9_BERLIN) is None
    finally:
        state.close()


async def test_retention_sweeps_old_deliveries_and_schedules_left_stopped_but_keeps_running_ones(
    state_location: Path | str,
) -> None:
    from chats.retention import DAY_S, Retention

    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        running = await store.create(ANN, _draft())
        stopped = await store.create(ANN, _draft(title="old"))
        await store.stop(stopped.id, "access lost")
        await store.deliver_to_inbox(running, Delivery("7 [Q1]."))
        swept = await Retention(state.file, 30, clock=lambda: clock.now + 40 * DAY_S).sweep()
        assert swept == {"schedule_inbox": 1, "schedules": 1}
        assert [s.id for s in await store.list_for(ANN)] == [running.id]
    finally:
        state.close()


async def test_a_schedule_whose_cadence_no_longer_reads_still_lists_and_stops_alone_when_due(
    state_location: Path | str,
) -> None:
    """A stored zone tzdata dropped: the schedule lists (to be edited or deleted), and claiming it stops it
    with its reason while every other due schedule is claimed."""
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        broken = await store.create(BOB, _draft())
        await store.create(ANN, _draft())
        await state.file.run(
            lambda c: c.execute(
                "UPDATE schedules SET cadence = ? WHERE id = ?",
                ('{"kind": "daily", "timezone": "Mars/Olympus_Mons", "at": "09:00"}', broken.id),
            )
        )
        (listed,) = await store.list_for(BOB)
        assert listed.as_json()["when"] == "every day at 09:00 (Mars/Olympus_Mons)"
        clock.to(datetime(2026, 3, 28, 8, tzinfo=UTC))
        (fire,) = await store.claim_due("w1")
        assert fire.schedule.owner == ANN
        stopped = await store.get(broken.id, owner=BOB)
        assert stopped is not None and stopped.state == "stopped" and "Mars/Olympus_Mons" in stopped.stopped_reason
        assert not await store.resume(broken.id, owner=BOB), "it resumes once its owner gives it a cadence that reads"
        assert await store.edit(broken.id, owner=BOB, cadence=DAILY_9_BERLIN) is not None
        assert await store.resume(broken.id, owner=BOB)
    finally:
        state.close()


async def test_who_an_owner_is_now_replaces_who_they_were_in_their_schedules_alone(
    state_location: Path | str,
) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        made = await store.create(
            ANN, _draft(asker=Asker(email="ann@example.com", groups=frozenset({"finance"}), slack_user="U1"))
        )
        bobs = await store.create(BOB, _draft(asker=Asker(email="bob@example.com", groups=frozenset({"finance"}))))
        await store.seen(ANN, email="ann@example.com", groups=frozenset())  # the web: no longer in finance
        now = await store.get(made.id, owner=ANN)
        assert now is not None and now.draft.asker.groups == frozenset() and now.draft.asker.slack_user == "U1"
        await store.seen(ANN, slack_user="U1", slack_usergroups=frozenset({"S1"}))  # Slack keeps the web's part
        now = await store.get(made.id, owner=ANN)
        assert now is not None and now.draft.asker.slack_usergroups == frozenset({"S1"})
        assert now.draft.asker.email == "ann@example.com" and now.draft.asker.groups == frozenset()
        kept = await store.get(bobs.id, owner=BOB)
        assert kept is not None and kept.draft.asker.groups == frozenset({"finance"})
    finally:
        state.close()


async def test_a_delivery_is_found_by_its_id_for_its_owner_alone(state_location: Path | str) -> None:
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        store = state.schedules
        made = await store.create(ANN, _draft())
        item = await store.deliver_to_inbox(made, Delivery("the rows"))
        found = await store.inbox_item(item.id, owner=ANN)
        assert found is not None and found.text == "the rows"
        assert await store.inbox_item(item.id, owner=BOB) is None
    finally:
        state.close()


async def test_a_cadence_firing_more_often_than_the_floor_is_refused_by_the_store(
    state_location: Path | str,
) -> None:
    assert Cadence("cron", cron="*/15 * * * *").shortest_gap(0) == 15 * 60
    clock = MovedClock(datetime(2026, 3, 27, 12, tzinfo=UTC))
    (state,) = _stores(state_location, clock)
    try:
        with pytest.raises(ScheduleError, match="cadence"):
            await state.schedules.create(ANN, _draft(cadence=Cadence("cron", cron="*/5 * * * *")))
        made = await state.schedules.create(ANN, _draft(cadence=Cadence("cron", cron="*/15 * * * *")))
        with pytest.raises(ScheduleError, match="cadence"):
            await state.schedules.edit(made.id, owner=ANN, cadence=Cadence("cron", cron="* 9 * * *"))
        assert [s.draft.cadence.cron for s in await state.schedules.list_for(ANN)] == ["*/15 * * * *"]
    finally:
        state.close()


def test_asked_in_the_second_pass_of_a_two_hour_repeat_the_next_fire_is_the_next_days_first() -> None:
    """Antarctica/Troll sets its clocks back two hours (03:00 +02 to 01:00 +00, 2026-10-25 01:00 UTC): at
    01:10 of the second pass every minute up to 02:59 fired on the first pass; the walk steps past them
    (it used to give up after 64 and call the cadence one that never fires)."""
    troll = Cadence("cron", timezone="Antarctica/Troll", cron="* 1-2 * * *")
    asked = datetime(2026, 10, 25, 1, 10, tzinfo=UTC).timestamp()
    assert troll.next_after(asked) == datetime(2026, 10, 26, 1, 0, tzinfo=UTC).timestamp()
