"""A second outside review's attacks on durable runs' store (chats/durable.py), on both backends: a host that
lost its run still ending it, and a checkpoint whose parts are not all there. Each test asserts the safe
behaviour; those that fail name a finding of the review."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent.runner import Checkpoint
from chats.audit import Origin
from chats.durable import DurableRun, DurableRuns
from chats.state_file import StateFile

LEASE_S = 30.0  # long: a test lapses a lease by writing it, never by waiting
QUESTION = "Which airport?"


@pytest.fixture
def hosts(state_files: Callable[[], StateFile]) -> Callable[[str], DurableRuns]:
    """Each host's store over its own connection to the one state."""
    return lambda name: DurableRuns(state_files(), lease_s=LEASE_S, host=name)


def kept(run_id: str = "r1") -> DurableRun:
    return DurableRun(
        run_id=run_id,
        conversation_id="c1",
        interface="web",
        platform="web",
        question=QUESTION,
        policy="ops",
        origin=Origin("web:alice", "web", "", "ops"),
    )


def lapse(store: DurableRuns, run_id: str = "r1") -> None:
    """The holder stopped renewing long enough ago (its host froze or died)."""
    store._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1 WHERE run_id = ?", (run_id,)))


def parts(store: DurableRuns, run_id: str = "r1") -> list[tuple[int, str]]:
    rows = store._file.now(
        lambda c: c.execute("SELECT seq, part FROM durable_run_parts WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    )
    return [(seq, part) for (seq, part) in rows]


def tool_result(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}]}


async def test_a_host_that_lost_the_run_cannot_forget_it_under_the_host_that_took_it(hosts) -> None:
    """Finding (fencing, medium): `DurableRuns.finish` deletes the run's row and parts by run id alone, not
    `AND holder = ?` as `save`, `renew`, `release` and `update_delivery` do. The registry's `_end` checks
    `_still_held` and only then stores the turn and calls `finish`, in separate transactions: a host that
    freezes between the check and the delete (the threat model's freeze-and-wake) wakes and deletes the row and
    every part of the run another host has since taken over and is resuming. The taker's next checkpoint then
    finds no row (`save` returns False), so it believes it lost the lease and stops silently; its asker's
    budget hold is never settled, and, should it die, no host can take the run over again (its row is gone).
    Safe: `finish` deletes only while this host holds the run (`WHERE run_id = ? AND holder = ?`, in one
    transaction with the turn's store, or fenced by the same check)."""
    a, b = hosts("a"), hosts("b")
    await a.begin(kept())
    assert await a.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=1, thinking=["one"]))
    lapse(a)
    taken = await b.claim_lapsed({"web"})
    assert taken is not None and await b.held_here("r1")
    await a.finish("r1")  # the frozen host wakes past its `_still_held` check and ends the run it lost
    assert await b.held_here("r1"), "the host that lost the run deleted the row of the host that took it"
    assert parts(b), "the taker's checkpoint went with it"
    assert await b.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=2, thinking=["one", "two"]))


async def test_a_part_missing_from_the_middle_ends_the_run_instead_of_folding_a_checkpoint_it_never_had(hosts) -> None:
    """Finding (torn store, low): `fold` (agent/checkpoint_form.py) detects a missing part only when a later
    part keeps more items than the parts before it hold. A part that rewrote from an earlier message (a result
    trimmed to save context) followed by one that rewrites from a later message folds without it into a
    checkpoint the run never had: here the tool result the model was sent trimmed is resumed whole (and a
    result it was shown only as a placeholder would be shown again), with nothing telling the reader or the
    log. The parts carry no sequence the fold checks (`seq` is read only to order them). Safe: each part
    names the part it follows (its seq, or the rounds of the checkpoint before it) and a gap makes the run
    unreadable, so it ends with a message."""
    a, b = hosts("a"), hosts("b")
    await a.begin(kept())
    whole, trimmed = "Q1: " + "| JFK | 1 |\n" * 40, "Q1: | JFK | 1 |\n…[452 characters trimmed]…\n"
    question = {"role": "user", "content": QUESTION}
    rounds = [
        [question, tool_result(whole), {"role": "assistant", "content": "Looking."}],
        [question, tool_result(trimmed), {"role": "assistant", "content": "Looking."}],  # rewrites from 1
        [question, tool_result(trimmed), {"role": "assistant", "content": "Looking again."}],  # from 2
    ]
    for number, messages in enumerate(rounds, 1):
        assert await a.save("r1", Checkpoint(question=QUESTION, policy="ops", rounds=number, messages=messages))
    written = parts(a)
    assert len(written) == 3
    middle = written[1][0]
    a._file.now(lambda c: c.execute("DELETE FROM durable_run_parts WHERE run_id = 'r1' AND seq = ?", (middle,)))
    lapse(a)
    taken = await b.claim_lapsed({"web"})
    assert taken is not None
    saved = taken.saved()
    assert saved is None, f"a run with a part missing resumed, its model now sent {saved.messages[1]!r}"
