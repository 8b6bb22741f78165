"""Where a fire's answer goes, and how it is kept: an `Outlet` per kind of destination (the owner's web
inbox here; Slack's in bots/slack/schedules.py), each delivery stored as a turn of the schedule's own
conversation, so its queries have pages (/api/queries/{id}) and CSVs like any answer's, opened by whoever
reads the destination (the owner, or a Slack channel's members) and nobody else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Protocol

from agent.runner import Interface, RunResult
from chats.audit import AuditLog, Origin, entry_of
from chats.conversations import ConversationStore, query_key
from chats.people import channel_owner
from chats.schedule_runs import is_direct_message
from chats.schedules import Delivery, Schedule, ScheduleStore, slack_of

OutletName = Literal["inbox", "slack"]


@dataclass(frozen=True)
class Delivered:
    """One delivery: the answer (None for a notice or an eval run's summary), the turn it was stored as,
    and the lines on what changed and on lateness."""

    schedule: Schedule
    text: str
    result: RunResult | None = None
    run_id: str = ""
    queries: tuple[str, ...] = ()  # query ids of the stored turn
    changed: str = ""
    late: str = ""


class Outlet(Protocol):
    name: OutletName
    interface: Interface

    async def refusal(self, schedule: Schedule) -> str | None:
        """Why the owner may no longer deliver there (None: they may)."""
        ...

    async def deliver(self, delivered: Delivered) -> None:
        """Post it; any exception is a failed delivery, retried later."""
        ...

    async def tell(self, schedule: Schedule, text: str) -> bool:
        """Tell the schedule's owner something (it stopped, a delivery never arrived); False: no way here."""
        ...


def audience(schedule: Schedule) -> str:
    """Who reads the destination: a Slack channel's members, else the owner (their inbox or DM)."""
    where = slack_of(schedule.draft.destination)
    if where is not None and not is_direct_message(where[1]):
        return channel_owner(*where)
    return schedule.owner


async def store_turn(
    conversations: ConversationStore,
    audit: AuditLog | None,
    delivered_to: Outlet,
    schedule: Schedule,
    run_id: str,
    result: RunResult,
) -> tuple[str, ...]:
    """The answer as a turn of the schedule's conversation (one per destination: its owner is who reads
    it there), and its audit entry (asked by the schedule's owner, under the policy it ran under); the ids
    of its queries."""
    key = f"schedule:{schedule.id}:{schedule.draft.destination}"
    conversation = await conversations.create_conversation(
        schedule.title, key=key, interface=delivered_to.interface, owner=audience(schedule)
    )
    await conversations.save_turn(conversation, run_id, result, [])
    if audit is not None:
        where = slack_of(schedule.draft.destination)
        origin = Origin(person=schedule.owner, interface=delivered_to.interface, channel=where[1] if where else "")
        await audit.record(entry_of(run_id, conversation, origin, result.question, result, time.time()))
    return tuple(query_key(run_id, q.id) for q in result.queries)


class InboxOutlet:
    """The owner's web inbox (chats/schedules.py's `schedule_inbox`), which the web shows."""

    name: OutletName = "inbox"
    interface: Interface = "web"

    def __init__(self, store: ScheduleStore) -> None:
        self._store = store

    async def refusal(self, schedule: Schedule) -> str | None:
        return None  # one's own inbox always takes one's own schedules

    async def deliver(self, delivered: Delivered) -> None:
        details = {}
        if delivered.result is not None:
            result = delivered.result
            details["figures"] = result.figures.model_dump(mode="json") if result.figures else None
            details["receipt"] = result.receipt.model_dump(mode="json") if result.receipt else None
        await self._store.deliver_to_inbox(
            delivered.schedule,
            Delivery(
                text=delivered.text,
                changed=delivered.changed,
                late=delivered.late,
                run_id=delivered.run_id,
                queries=delivered.queries,
                details=details,
            ),
        )

    async def tell(self, schedule: Schedule, text: str) -> bool:
        await self._store.deliver_to_inbox(schedule, Delivery(text=text, details={"notice": True}))
        return True
