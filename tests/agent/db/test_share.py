"""The engine share when everything is cancelled at once, as `asyncio.run` does to the tasks left at its
end (a command whose database is unreachable): no slot is granted to a waiter already cancelled."""

from __future__ import annotations

import asyncio

from agent.db.share import EngineShare


async def test_holders_and_waiters_cancelled_together_end_cancelled_and_free_every_slot() -> None:
    share = EngineShare(total=1, per_owner=1)
    release = asyncio.Event()

    async def hold(owner: str) -> None:
        async with share.slot(owner):
            await release.wait()

    tasks = [asyncio.create_task(hold(owner)) for owner in ("a", "b", "c")]
    await asyncio.sleep(0.01)
    assert share.in_use == 1 and share.waiting == 2
    for task in tasks:  # the holder and the waiters in one go: the waiters' futures are cancelled first
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["CancelledError"] * 3  # not InvalidStateError
    assert share.in_use == 0 and share.waiting == 0
