"""The web inbox over HTTP against a real server where Alice and Bob sign in through a trusted proxy: a
delivery written through the kit's store (as the scheduler writes one) is listed, counted unread, opened,
marked read and deleted by its owner; every one of its ids answers Bob byte for byte as the same id at a
twin server over an empty file, and his own inbox stays empty."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.app import AgentApp
from chats.schedules import Delivery
from tests.fakes.anthropic_api import FakeAnthropic
from tests.web.people_helpers import PROXY_MODE, Served, said
from tests.web.test_schedules import ALICE, BOB, alices_run, daily, made


@pytest.fixture
async def served(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[tuple[Served, Served]]:
    async with (
        Served(make_app, tmp_path / "ours", **PROXY_MODE) as ours,
        Served(make_app, tmp_path / "twin", **PROXY_MODE) as twin,
    ):
        yield ours, twin


async def delivered(ours: Served, schedule_id: str, text: str, **more: Any) -> str:
    """A delivery into the schedule owner's inbox, written as the scheduler writes it."""
    schedule = await ours.state.schedules.get(schedule_id, owner=f"person:email:{ALICE}")
    assert schedule is not None
    item = await ours.state.schedules.deliver_to_inbox(schedule, Delivery(text=text, **more))
    return item.id


async def test_a_delivery_is_listed_counted_opened_read_and_deleted(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE)
    schedule_id = (await made(alice, daily(run_id)))["id"]
    first = await delivered(ours, schedule_id, "UA flew 58,665 flights [Q1].", run_id=run_id, queries=(f"{run_id}-Q1",))
    second = await delivered(
        ours,
        schedule_id,
        "UA flew 58,665 flights [Q1].",
        changed="No change since the last delivery.",
        late="Ran 2 h late.",
    )
    assert (await alice.get("/api/inbox/unread")).json() == {"unread": 2}
    listed = (await alice.get("/api/inbox")).json()
    assert [d["id"] for d in listed["deliveries"]] == [second, first] and listed["unread"] == 2
    assert set(listed["deliveries"][0]) == {"id", "schedule_id", "title", "at", "changed", "late", "read"}

    opened = (await alice.get(f"/api/inbox/{second}")).json()
    assert (
        opened["text"] == "UA flew 58,665 flights [Q1]." and opened["changed"] == "No change since the last delivery."
    )
    assert opened["late"] == "Ran 2 h late." and opened["read"] is False
    assert (await alice.get(f"/api/inbox/{first}")).json()["queries"] == [f"{run_id}-Q1"]
    query = await alice.get(f"/api/queries/{run_id}-Q1")  # its query opens through the door every answer's shares
    assert query.status_code == 200 and query.json()["columns"] == ["carrier", "n"]

    read = await alice.post(f"/api/inbox/{second}/read", json={})
    assert read.status_code == 200 and read.json() == {"read": second, "unread": 1}
    assert (await alice.get(f"/api/inbox/{second}")).json()["read"] is True
    deleted = await alice.delete(f"/api/inbox/{first}")
    assert deleted.status_code == 200 and deleted.json() == {"deleted": first}
    assert [d["id"] for d in (await alice.get("/api/inbox")).json()["deliveries"]] == [second]
    assert (await alice.get("/api/inbox/unread")).json() == {"unread": 0}


async def test_every_inbox_route_answers_another_persons_delivery_as_never_seen(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, twin = served
    run_id = await alices_run(ours, fake_anthropic)
    alice = ours.client(email=ALICE)
    item = await delivered(ours, (await made(alice, daily(run_id)))["id"], "Alice's figures.")
    bob, bob_at_twin = ours.client(email=BOB), twin.client(email=BOB)
    for method, path, request in [
        ("GET", f"/api/inbox/{item}", {}),
        ("POST", f"/api/inbox/{item}/read", {"json": {}}),
        ("DELETE", f"/api/inbox/{item}", {}),
    ]:
        theirs = await bob.request(method, path, **request)
        never = await bob_at_twin.request(method, path, **request)
        assert theirs.status_code == 404 and said(theirs) == said(never), (method, path, theirs.text)
    assert (await bob.get("/api/inbox")).json() == {"deliveries": [], "unread": 0}
    assert (await bob.get("/api/inbox/unread")).json() == {"unread": 0}
    kept = (await alice.get(f"/api/inbox/{item}")).json()
    assert kept["read"] is False, "Bob neither read nor deleted it"


async def test_inbox_changes_come_from_our_own_pages(
    served: tuple[Served, Served], fake_anthropic: FakeAnthropic
) -> None:
    ours, _ = served
    run_id = await alices_run(ours, fake_anthropic)
    item = await delivered(ours, (await made(ours.client(email=ALICE), daily(run_id)))["id"], "Alice's figures.")
    forged = ours.client(email=ALICE, origin=False, Origin="https://evil.example")
    assert (await forged.post(f"/api/inbox/{item}/read", json={})).status_code == 403
    assert (await forged.delete(f"/api/inbox/{item}")).status_code == 403
    assert (await ours.client(email=ALICE).get("/api/inbox/unread")).json() == {"unread": 1}
