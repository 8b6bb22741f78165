"""Durable runs' store (chats/durable.py) on both backends: a run held under a lease its host renews, taken
over by exactly one other host once the lease lapsed, its checkpoint kept as it goes, deleted at its end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agent.runner import Checkpoint
from chats.audit import Origin
from chats.durable import DurableRun, DurableRuns, ResumeLimits
from chats.state_file import StateFile
from tests.agent.pipeline.test_attacks_review_durable import ROUNDS, long_run

LEASE_S = 30.0  # long: a test lapses a lease by writing it, never by waiting


@pytest.fixture
def hosts(state_files: Callable[[], StateFile]) -> Callable[[str], DurableRuns]:
    """Each host's store over its own connection to the one state."""
    return lambda name: DurableRuns(state_files(), lease_s=LEASE_S, host=name)


def run(run_id: str = "r1", interface: str = "slack") -> DurableRun:
    return DurableRun(
        run_id=run_id,
        conversation_id="c1",
        interface=interface,
        platform=interface,
        question="Which airport?",
        policy="ops",
        origin=Origin("slack-channel:T1:C1", "slack", "C1", "ops"),
        delivery={"channel": "C1", "thread_ts": "1.0"},
    )


def lapse(store: DurableRuns, run_id: str) -> None:
    """The holder stopped renewing long enough ago (its host died)."""
    store._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", (run_id,)))


async def test_a_run_held_under_a_live_lease_is_not_taken_over_and_one_host_wins_a_lapsed_one(hosts) -> None:
    a, b, c = hosts("a"), hosts("b"), hosts("c")
    await a.begin(run())
    assert await b.claim_lapsed({"slack", "web"}) is None  # a renews it: nobody takes it
    assert await a.renew() == 1
    lapse(a, "r1")
    claims = await asyncio.gather(*(host.claim_lapsed({"slack"}) for host in (b, c, b, c)))
    won = [claim for claim in claims if claim is not None]
    assert len(won) == 1 and won[0].run_id == "r1" and won[0].takeovers == 1
    assert won[0].origin == Origin("slack-channel:T1:C1", "slack", "C1", "ops") and won[0].policy == "ops"
    assert won[0].delivery == {"channel": "C1", "thread_ts": "1.0"}
    assert await b.claim_lapsed({"slack"}) is None and await c.claim_lapsed({"slack"}) is None
    assert await a.renew() == 0  # the dead host, back, holds nothing


async def test_the_checkpoint_is_kept_as_it_goes_and_only_by_the_host_holding_the_run(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    await a.begin(run())
    saved = Checkpoint(question="Which airport?", policy="ops", rounds=2, query_ids_taken=3)
    assert await a.save("r1", saved)
    lapse(a, "r1")
    taken = await b.claim_lapsed({"slack"})
    assert taken is not None and taken.saved() == saved
    assert not await a.save("r1", saved.model_copy(update={"rounds": 3}))  # a lost it: refused
    assert await b.save("r1", saved.model_copy(update={"rounds": 3}))
    lapse(b, "r1")
    again = await a.claim_lapsed({"slack"})
    assert again is not None and again.takeovers == 2 and again.saved().rounds == 3


async def test_a_host_takes_over_only_the_interfaces_it_can_deliver(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    await a.begin(run("slack-run", "slack"))
    lapse(a, "slack-run")
    assert await b.claim_lapsed({"web"}) is None  # a host without the Slack bot leaves it
    assert (await b.claim_lapsed({"web", "slack"})).run_id == "slack-run"


async def test_a_finished_run_is_gone_and_a_released_one_is_taken_over_at_once(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    await a.begin(run("done"))
    await a.begin(run("handed", "web"))
    await a.finish("done")
    assert not await b.holds("done") and await b.holds("handed")
    await a.release(["handed"])
    taken = await b.claim_lapsed({"slack", "web"})
    assert taken is not None and taken.run_id == "handed" and taken.saved() is None


async def test_a_checkpoint_this_release_cannot_read_is_none_not_an_error(hosts) -> None:
    a = hosts("a")
    unreadable = run()
    unreadable.checkpoint = '{"version": 99, "question": "q"}'
    assert unreadable.saved() is None
    await a.begin(unreadable)


def test_a_run_may_be_resumed_so_many_times_and_so_young() -> None:
    limits = ResumeLimits(max_resumes=2, max_age_s=900)
    young = run()
    young.takeovers = 2
    assert limits.why_not(young, now=young.created_at + 899) is None
    young.takeovers = 3
    assert "stopped 3 times" in (limits.why_not(young) or "")
    young.takeovers = 1
    said = limits.why_not(young, now=young.created_at + 901) or ""
    assert "over 15 minutes" in said and "ask again" in said


def parts(store: DurableRuns, run_id: str = "r1") -> list[str]:
    rows = store._file.now(
        lambda c: c.execute("SELECT part FROM durable_run_parts WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    )
    return [part for (part,) in rows]


async def test_a_long_run_writes_each_round_once_and_its_taker_reads_back_exactly_its_last_checkpoint(
    hosts, make_app, fake_anthropic
) -> None:
    """The review's 8 rounds of 5,000-row results (tests/agent/pipeline/test_attacks_review_durable.py), kept by
    the store: it writes what each round added (its last wrap-up note and trimmed old results too), all of it
    within a small multiple of the last checkpoint, and another host folds it back to that checkpoint exactly."""
    a, b = hosts("a"), hosts("b")
    await a.begin(run())
    handed: list[Checkpoint] = []

    async def keep(checkpoint: Checkpoint) -> None:
        handed.append(checkpoint)
        assert await a.save("r1", checkpoint)

    await long_run(make_app, fake_anthropic, keep, agent_max_rounds=ROUNDS, agent_context_tokens=20_000)
    written = parts(a)
    assert len(written) == len(handed) == ROUNDS + 1
    last = len(handed[-1].model_dump_json().encode())
    assert sum(len(part.encode()) for part in written) <= 1.5 * last
    assert "characters trimmed" in str(handed[-1].messages)  # old results were cut in place, and kept so
    lapse(a, "r1")
    taken = await b.claim_lapsed({"slack"})
    assert taken is not None and taken.saved() == handed[-1]


async def test_a_host_that_lost_the_run_writes_no_part_and_its_taker_goes_on_from_the_parts(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    await a.begin(run())
    first = Checkpoint(question="Which airport?", policy="ops", rounds=1, thinking=["one"])
    assert await a.save("r1", first)
    lapse(a, "r1")
    taken = await b.claim_lapsed({"slack"})
    assert taken is not None and taken.saved() == first
    assert not await a.save("r1", first.model_copy(update={"rounds": 2, "thinking": ["one", "frozen"]}))
    assert len(parts(a)) == 1  # the frozen host, awake, wrote nothing into the run it lost
    later = first.model_copy(update={"rounds": 2, "thinking": ["one", "two"]})
    assert await b.save("r1", later)
    assert len(parts(b)) == 2 and '"one"' not in parts(b)[1]  # b appended only its round's news
    lapse(b, "r1")
    again = await a.claim_lapsed({"slack"})
    assert again is not None and again.saved() == later


async def test_a_host_unsure_what_it_wrote_writes_the_whole_checkpoint_and_the_parts_before_it_go(hosts) -> None:
    a = hosts("a")
    await a.begin(run())
    for rounds in range(3):
        assert await a.save("r1", Checkpoint(question="Which airport?", rounds=rounds, thinking=["t"] * rounds))
    assert len(parts(a)) == 3
    restarted = hosts("a")  # the same host, without its memory of what it wrote (a write that failed, say)
    whole = Checkpoint(question="Which airport?", rounds=3, thinking=["t"] * 3)
    assert await restarted.save("r1", whole)
    assert len(parts(a)) == 1
    lapse(a, "r1")
    taken = await hosts("b").claim_lapsed({"slack"})
    assert taken is not None and taken.saved() == whole


async def test_a_finished_run_leaves_no_part_and_a_torn_one_ends_the_run_not_the_host(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    await a.begin(run("done"))
    assert await a.save("done", Checkpoint(question="Which airport?", rounds=1))
    await a.finish("done")
    assert parts(a, "done") == []
    await a.begin(run("torn"))
    assert await a.save("torn", Checkpoint(question="Which airport?", rounds=1))
    a._file.now(lambda c: c.execute("UPDATE durable_run_parts SET part = '{\"header\": 1' WHERE run_id = 'torn'"))
    lapse(a, "torn")
    taken = await b.claim_lapsed({"slack"})
    assert taken is not None and taken.saved() is None  # the registry ends it with a message


async def test_a_run_an_earlier_release_kept_whole_is_still_resumed(hosts) -> None:
    a, b = hosts("a"), hosts("b")
    earlier = run()
    saved = Checkpoint(question="Which airport?", policy="ops", rounds=2, query_ids_taken=3)
    earlier.checkpoint = saved.model_dump_json().replace('"version":2', '"version":1')
    await a.begin(earlier)
    lapse(a, "r1")
    taken = await b.claim_lapsed({"slack"})
    assert taken is not None and taken.saved() == saved.model_copy(update={"version": 1})
    assert await b.save("r1", saved.model_copy(update={"rounds": 3}))  # from here on, in parts
    assert len(parts(b)) == 1
    assert b._file.now(lambda c: c.execute("SELECT checkpoint FROM durable_runs").fetchone()[0]) is None


async def test_a_takeover_that_fails_does_not_stop_the_watcher_taking_the_other_lapsed_runs(hosts) -> None:
    """One run whose takeover raises every time (the review's finding 1): the watcher takes the other lapsed run
    in the same look, and the failed one is held by nobody, lapsing a lease later, not claimed again at once."""
    a, b = hosts("a"), hosts("b")
    for run_id in ("bad", "good"):
        await a.begin(run(run_id))
    lapse(a, "bad")
    a._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 2 WHERE run_id = 'good'"))  # after bad
    tried: list[str] = []

    async def take_over(kept: DurableRun) -> None:
        tried.append(kept.run_id)
        if kept.run_id == "bad":
            raise RuntimeError("cannot take this one over")

    watcher = asyncio.create_task(b.watch(take_over, {"slack"}))
    try:
        for _ in range(60):  # 3 s: well within one look (a look is a third of the 30 s lease apart)
            if "good" in tried:
                break
            await asyncio.sleep(0.05)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert tried == ["bad", "good"], "a failed takeover stopped the watcher, or it claimed the same run again"
    assert not await b.held_here("bad") and "bad" not in b._driving
    assert await hosts("c").claim_lapsed({"slack"}) is None, "the failed run lapses a lease later, not at once"
