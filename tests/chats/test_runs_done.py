"""One `done`, built in one place: the Runner's events are progress only and `run()` returns the result;
the run registry stores the turn after `run()` returns, then publishes exactly one `done`, on every path."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from agent.runner import (
    AnswerEvent,
    Event,
    EventSink,
    ExecutingEvent,
    Outcome,
    RunResult,
    Turn,
    ignore_events,
)
from chats.conversations import ConversationStore
from chats.runs import RunEvent, RunRegistry
from chats.state import ChatState
from tests.fakes.anthropic_api import FakeAnthropic, Reply

ROOT = Path(__file__).resolve().parents[2]


class ScriptedRunner:
    """A Runner that emits `events`, then ends as `end` says: returns a result, is cancelled, or raises."""

    def __init__(self, *events: Event, end: str = "answered") -> None:
        self.events, self.end = events, end
        self.started = asyncio.Event()

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Any = "cli",
        interface: Any = "cli",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Any = None,
    ) -> RunResult:
        for event in self.events:
            await on_event(event)
        if self.end == "raises":
            raise RuntimeError("a bug")
        if self.end == "failed":
            return RunResult(question=question, outcome=Outcome.ERROR, error="the model is away")
        if self.end in ("cancelled", "cancel raises"):
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                if self.end == "cancel raises":
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # as the pipeline does
                return RunResult(question=question, answer="[cancelled]", outcome=Outcome.CANCELLED, cancelled=True)
        return RunResult(question=question, answer="Hello.")


@pytest.fixture
def store(state_location: Path | str):
    state = ChatState(state_location)
    yield state.conversations
    state.close()


async def _run(store: ConversationStore, runner: ScriptedRunner, *, cancel: bool = False) -> list[RunEvent]:
    runs = RunRegistry(runner, store)
    conversation = await store.create_conversation("hi")
    handle = runs.start(conversation, "hi", [], platform="web", interface="web")
    if cancel:
        await runner.started.wait()
        runs.cancel(handle, "the test stopped it")
    events = [event async for event in runs.follow(handle)]
    if handle.task is not None:
        await asyncio.gather(handle.task, return_exceptions=True)
    return events


async def test_the_pipeline_emits_progress_only_and_returns_how_it_ended(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    events: list[Event] = []

    async def record(event: Event) -> None:
        events.append(event)

    result = await make_app().runner.run("hi", on_event=record, followups=False)
    assert result.answer == "Hello." and events and all(event.type != "done" for event in events)
    with pytest.raises(ValidationError):  # `done` is no Runner event at all
        TypeAdapter(Event).validate_python({"type": "done", "result": None})


@pytest.mark.parametrize(
    ("end", "cancel", "outcome"),
    [
        ("answered", False, "answered"),
        ("failed", False, "error"),
        ("cancelled", True, "cancelled"),
        ("cancel raises", True, None),
        ("raises", False, None),
    ],
)
async def test_the_registry_publishes_exactly_one_done_last(
    store: ConversationStore, end: str, cancel: bool, outcome: str | None
) -> None:
    runner = ScriptedRunner(
        ExecutingEvent(query_id="Q1", question="n", sql="SELECT 1"), AnswerEvent(text="He"), end=end
    )
    events = await _run(store, runner, cancel=cancel)
    names = [event.name for event in events]
    assert names.count("done") == 1 and names[-1] == "done" and names[0] == "started"
    done = events[-1].data["result"]
    assert (done["outcome"] if done else None) == outcome
    stored = await store.run_events(events[0].run_id)
    if outcome is None:  # no result to store: the log says the run failed
        assert stored is None and done is None
    else:  # stored before `done` was published, with the log as published
        assert stored is not None and [event["event"] for event in stored[1]] == names


async def test_a_store_that_fails_still_ends_with_one_done(tmp_path: Path) -> None:
    class BrokenStore(ConversationStore):
        async def save_turn(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("disk I/O error")

    state = ChatState(tmp_path / "broken.sqlite3")
    try:
        names = [event.name for event in await _run(BrokenStore(state.file), ScriptedRunner())]
    finally:
        state.close()
    assert names[-2:] == ["error", "done"] and names.count("done") == 1


def test_done_is_built_in_one_place() -> None:
    """Only `chats.runs.done_event` constructs a `done` event (FinishedEvent, or the old DoneEvent) in the
    application's code."""
    built: list[str] = []
    for folder in ("agent", "chats", "bots", "web", "process", "evals"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for call in ast.walk(tree):
                if isinstance(call, ast.Call) and _named(call.func) in ("FinishedEvent", "DoneEvent"):
                    built.append(f"{path.relative_to(ROOT)}:{_enclosing(tree, call)}")
    assert built == ["chats/runs.py:done_event"]


def _named(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _enclosing(tree: ast.Module, call: ast.Call) -> str:
    """The innermost function holding `call` ("" at module level)."""
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
    holding = [f for f in functions if f.lineno <= call.lineno <= (f.end_lineno or f.lineno)]
    return max(holding, key=lambda f: f.lineno).name if holding else ""
