"""Runs in progress, for every adapter: each run's event log, its readers, and its lifetime.

A run belongs to no connection: its events go into a log that any number of readers follow (a web
page reload reattaches with Last-Event-ID and loses nothing; Slack follows the log to post
progress). An adapter may ask for a run to be cancelled when its last reader goes away and nobody
comes back within a grace period (the web does; a Slack thread has no reader to lose): that stops
the model call and kills its ClickHouse queries. The finished turn is written to the conversation
store before `done` is published. The log always opens with `started` and ends with `done`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agent.conversations import ConversationStore
from agent.pipeline.runner import DoneEvent, Interface, Platform, Runner, Turn

log = logging.getLogger(__name__)


@dataclass
class RunEvent:
    id: int
    event: str
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "data": self.data}


@dataclass
class RunHandle:
    run_id: str
    conversation_id: str
    events: list[RunEvent] = field(default_factory=list)
    done: bool = False
    abandon_after_s: float | None = None  # cancel when unwatched this long; None: never
    readers: int = 0
    task: asyncio.Task[Any] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    grace_timer: asyncio.TimerHandle | None = None


class RunRegistry:
    def __init__(self, runner: Runner, store: ConversationStore, *, keep_finished: int = 500):
        self._runner = runner
        self._store = store
        self._keep_finished = keep_finished
        self._runs: OrderedDict[str, RunHandle] = OrderedDict()

    def get(self, run_id: str) -> RunHandle | None:
        return self._runs.get(run_id)

    def start(
        self,
        conversation_id: str,
        question: str,
        history: list[Turn],
        *,
        platform: Platform,
        interface: Interface,
        abandon_after_s: float | None = None,
        followups: bool = True,
    ) -> RunHandle:
        """Register the run with its first event, `started`, already in its log (so a reader sees
        something before the model's first reply, and a replay shows the same), then drive it."""
        handle = RunHandle(run_id=uuid.uuid4().hex, conversation_id=conversation_id, abandon_after_s=abandon_after_s)
        started = {"run_id": handle.run_id, "conversation_id": conversation_id, "question": question}
        handle.events.append(RunEvent(1, "started", started))
        self._runs[handle.run_id] = handle
        run = self._drive(handle, question, history, platform, interface, followups)
        handle.task = asyncio.create_task(run, name=f"run-{handle.run_id}")
        return handle

    async def _drive(
        self,
        handle: RunHandle,
        question: str,
        history: list[Turn],
        platform: Platform,
        interface: Interface,
        followups: bool,
    ) -> None:
        async def publish(event: Any) -> None:
            data = {"run_id": handle.run_id, "conversation_id": handle.conversation_id, **event.model_dump(mode="json")}
            data.pop("type")
            if isinstance(event, DoneEvent):
                record = [e.as_dict() for e in handle.events] + [
                    {"id": len(handle.events) + 1, "event": "done", "data": data}
                ]
                await asyncio.shield(self._store.save_turn(handle.conversation_id, handle.run_id, event.result, record))
            await self._append(handle, event.type, data)

        try:
            await self._runner.run(
                question,
                history=history,
                platform=platform,
                interface=interface,
                on_event=publish,
                followups=followups,
            )
        except Exception:  # the runner turns its failures into events; this is the rest (the store, a reader)
            log.exception("run %s failed", handle.run_id)
            ids = {"run_id": handle.run_id, "conversation_id": handle.conversation_id}
            await self._append(handle, "error", {**ids, "message": "Something went wrong on the server; try again."})
            if handle.events[-2].event != "done":
                await self._append(handle, "done", {**ids, "result": None})
        finally:
            async with handle.changed:
                handle.done = True
                handle.changed.notify_all()
            self._forget_old_runs()

    async def _append(self, handle: RunHandle, name: str, data: dict[str, Any]) -> None:
        async with handle.changed:
            handle.events.append(RunEvent(len(handle.events) + 1, name, data))
            handle.changed.notify_all()

    async def follow(self, handle: RunHandle, after: int = 0) -> AsyncIterator[RunEvent]:
        """Events after id `after`, then new ones as they come, until the run is done."""
        handle.readers += 1
        if handle.grace_timer is not None:
            handle.grace_timer.cancel()
            handle.grace_timer = None
        try:
            position = after

            def ready(seen: int) -> bool:
                return len(handle.events) > seen or handle.done

            while True:
                async with handle.changed:
                    await handle.changed.wait_for(partial(ready, position))
                    fresh = handle.events[position:]
                    finished = handle.done
                for event in fresh:
                    yield event
                position += len(fresh)
                if finished and position >= len(handle.events):
                    return
        finally:
            handle.readers -= 1
            if handle.readers == 0 and not handle.done and handle.abandon_after_s is not None:
                handle.grace_timer = asyncio.get_running_loop().call_later(
                    handle.abandon_after_s, self._cancel_unwatched, handle
                )

    def _cancel_unwatched(self, handle: RunHandle) -> None:
        handle.grace_timer = None
        if handle.readers == 0 and not handle.done and handle.task is not None:
            log.info("run %s cancelled: its client went away", handle.run_id)
            handle.task.cancel()

    def _forget_old_runs(self) -> None:
        finished = [run_id for run_id, h in self._runs.items() if h.done]
        for run_id in finished[: max(0, len(finished) - self._keep_finished)]:
            del self._runs[run_id]

    async def shutdown(self) -> None:
        tasks = [h.task for h in self._runs.values() if h.task is not None and not h.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
