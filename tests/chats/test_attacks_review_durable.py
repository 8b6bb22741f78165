"""An outside review's attacks on durable runs' store (chats/durable.py), on both backends: rows another
release wrote, hosts whose clocks disagree. Each test asserts the safe behaviour; those that fail name a
finding of the review."""

from __future__ import annotations

import json
import time
import types
from collections.abc import Callable

import pytest

from chats.audit import Origin
from chats.durable import DurableRun, DurableRuns
from chats.state_file import StateFile

LEASE_S = 30.0


@pytest.fixture
def hosts(state_files: Callable[[], StateFile]) -> Callable[[str], DurableRuns]:
    return lambda name: DurableRuns(state_files(), lease_s=LEASE_S, host=name)


def kept(run_id: str = "r1") -> DurableRun:
    return DurableRun(
        run_id=run_id,
        conversation_id="c1",
        interface="slack",
        platform="slack",
        question="Which airport?",
        policy="ops",
        origin=Origin("slack-channel:T1:C1", "slack", "C1", "ops"),
        delivery={"channel": "C1", "thread_ts": "1.0"},
    )


def rewrite(store: DurableRuns, sql: str, *args: object) -> None:
    store._file.now(lambda c: c.execute(sql, args))


@pytest.mark.parametrize(
    "column, value",
    [
        # A newer release added a field to the audit origin: this release's Origin(**...) has no such argument.
        ("origin", json.dumps({**Origin("p", "slack", "C1", "ops").__dict__, "tenant": "t1"})),
        ("delivery", "{not json"),  # a row torn or tampered with
    ],
    ids=["origin-of-a-newer-release", "delivery-torn"],
)
async def test_a_kept_run_this_release_cannot_read_is_not_held_and_renewed_forever(hosts, column, value) -> None:
    """Finding: `claim_lapsed` marks the row held by this host, then fails to parse it and raises; `watch`
    logs that and goes on renewing every lease this host holds, that one too. Nobody resumes or ends the
    run ever again, and its readers (web, the Slack thread) wait forever. Safe: the claim hands back a run to
    end with a message (or leaves the row to nobody's lease)."""
    a, b, c = hosts("a"), hosts("b"), hosts("c")
    await a.begin(kept())
    rewrite(a, f"UPDATE durable_runs SET {column} = ?, lease_until = 1 WHERE run_id = ?", value, "r1")
    try:
        claimed = await b.claim_lapsed({"slack"})
    except Exception:
        claimed = None
    await b.renew()  # the watcher's next pass
    stuck = claimed is None and await b.held_here("r1")
    assert not stuck, "the run is held and renewed by a host that cannot resume or end it"
    assert claimed is not None or await c.claim_lapsed({"slack"}) is not None or not await c.holds("r1")


async def test_a_host_whose_clock_runs_ahead_does_not_take_a_live_run_over(hosts, monkeypatch) -> None:
    """Finding: each host stamps and judges a lease by its own wall clock (`time.time()`), so a host whose
    clock is more than a lease ahead finds every other host's live lease lapsed and takes its runs over at
    once: two hosts run one run (split brain) and the live one's round in flight is lost. Safe: a lease is
    judged by one clock (the database's), or with a margin for skew."""
    a, b = hosts("a"), hosts("b")
    await a.begin(kept())
    assert await a.renew() == 1  # a is alive and renewing
    ahead = time.time() + 2 * LEASE_S
    monkeypatch.setattr("chats.durable.time", types.SimpleNamespace(time=lambda: ahead))
    assert await b.claim_lapsed({"slack"}) is None


async def test_a_run_held_under_a_live_lease_is_not_taken_and_its_row_is_renewed_only_by_its_holder(hosts) -> None:
    """Held: a live lease is not claimed, and a host that lost a run renews nothing of it."""
    a, b = hosts("a"), hosts("b")
    await a.begin(kept())
    assert await b.claim_lapsed({"slack"}) is None
    rewrite(a, "UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", "r1")
    assert (await b.claim_lapsed({"slack"})) is not None
    assert await a.renew() == 0 and not await a.held_here("r1")
    await a.update_delivery("r1", {"channel": "C-EVIL", "thread_ts": "9.9"})  # the old holder cannot redirect it
    rewrite(b, "UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", "r1")
    again = await a.claim_lapsed({"slack"})
    assert again is not None and again.delivery == {"channel": "C1", "thread_ts": "1.0"}
