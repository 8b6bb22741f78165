"""The shared kit every adapter uses: conversations keyed by an adapter's key, handled events,
feedback, light history, and runs whose log opens with `started` and ends with `done`; on SQLite and on
PostgreSQL (`state_location`, tests/chats/conftest.py)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agent.runner import RunResult
from chats.conversations import ConversationStore
from chats.runs import RunRegistry
from chats.state import ChatState
from tests.fakes.anthropic_api import FakeAnthropic, Reply


@pytest.fixture
def store(state_location: Path | str):
    state = ChatState(state_location)
    yield state.conversations
    state.close()


async def test_an_adapter_key_finds_its_conversation(store: ConversationStore) -> None:
    key = "slack:T1:C1:1700000000.000100"
    first = await store.create_conversation("how many flights?", key=key, interface="slack")
    again = await store.create_conversation("and in 2014?", key=key, interface="slack")
    assert first == again == await store.find(key)
    assert await store.find("slack:T1:C1:other") is None
    web = await store.create_conversation("hello")
    assert [c["id"] for c in await store.list_conversations()] == [web]  # the sidebar lists web chats only


async def test_an_event_is_claimed_once_also_across_a_restart(state_location: Path | str) -> None:
    path = state_location
    state = ChatState(path)
    assert await state.conversations.claim_event("slack:Ev123")
    assert not await state.conversations.claim_event("slack:Ev123")
    state.close()
    restarted = ChatState(path)
    assert not await restarted.conversations.claim_event("slack:Ev123")
    assert await restarted.conversations.claim_event("slack:Ev124")
    restarted.close()


async def test_concurrent_claims_of_one_event_let_exactly_one_through(store: ConversationStore) -> None:
    results = await asyncio.gather(*(store.claim_event("slack:EvSame") for _ in range(20)))
    assert sorted(results) == [False] * 19 + [True]


async def test_history_is_light_and_feedback_is_kept(store: ConversationStore, make_app, fake_anthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "n", "sql": "SELECT number FROM numbers(30)"}]})]),
        Reply(text="Thirty rows [Q1]."),
    )
    app = make_app()
    result: RunResult = await app.runner.run("list numbers", followups=False)
    conversation = await store.create_conversation("list numbers")
    await store.save_turn(conversation, "run1", result, [])
    (turn,) = await store.history(conversation)
    assert turn.answer == "Thirty rows [Q1]." and turn.queries[0].sql == "SELECT number FROM numbers(30)"
    assert turn.queries[0].row_count == 30 and len(turn.queries[0].rows) == 5
    assert await store.record_feedback("run1", "up") and not await store.record_feedback("nope", "up")
    stored = await store.get_conversation(conversation)
    assert stored is not None and stored["turns"][0]["feedback"] == "up"


def test_a_file_from_the_previous_release_gains_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created_at REAL NOT NULL,"
                    " updated_at REAL NOT NULL)")  # fmt: skip
        old.execute("INSERT INTO conversations VALUES ('c1', 't', 0, 0)")
    ChatState(path).close()
    with sqlite3.connect(path) as upgraded:
        columns = {row[1] for row in upgraded.execute("PRAGMA table_info(conversations)")}
    assert {"interface", "adapter_key"} <= columns


async def test_a_run_that_nobody_watches_goes_on_unless_asked(
    store: ConversationStore, make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    runs = RunRegistry(make_app().runner, store)
    conversation = await store.create_conversation("hi", key="slack:k", interface="slack")
    handle = runs.start(conversation, "hi", [], platform="slack", interface="slack", followups=False)
    events = [event.name async for event in runs.follow(handle)]
    assert events[0] == "started" and events[-1] == "done"
    assert (await store.history(conversation))[0].answer == "Hello."


async def test_a_failing_store_still_ends_the_log_with_done(
    tmp_path: Path, make_app, fake_anthropic: FakeAnthropic
) -> None:
    class BrokenStore(ConversationStore):
        async def save_turn(self, *args, **kwargs) -> None:
            raise sqlite3.OperationalError("disk I/O error")

    state = ChatState(tmp_path / "broken.sqlite3")
    store = BrokenStore(state.file)
    fake_anthropic.script(Reply(text="Hello."))
    runs = RunRegistry(make_app().runner, store)
    handle = runs.start("c", "hi", [], platform="web", interface="web", followups=False)
    events = [event async for event in runs.follow(handle)]
    assert [e.name for e in events][-2:] == ["error", "done"] and events[-1].data["result"] is None
    state.close()


async def test_a_failing_store_still_tells_on_done_once(
    tmp_path: Path, make_app, fake_anthropic: FakeAnthropic
) -> None:
    """on_done ends what the run held (an asker's daily budget): a store that fails before it is called
    would keep the hold for an hour."""

    class BrokenStore(ConversationStore):
        async def save_turn(self, *args, **kwargs) -> None:
            raise sqlite3.OperationalError("disk I/O error")

    state = ChatState(tmp_path / "broken.sqlite3")
    store = BrokenStore(state.file)
    fake_anthropic.script(Reply(text="Hello."))
    told: list[RunResult] = []

    async def on_done(result: RunResult) -> None:
        told.append(result)

    runs = RunRegistry(make_app().runner, store)
    handle = runs.start("c", "hi", [], platform="web", interface="web", followups=False, on_done=on_done)
    [event async for event in runs.follow(handle)]
    state.close()
    assert len(told) == 1 and told[0].answer == "Hello." and told[0].receipt is not None


async def test_an_oversized_answer_still_ends_the_log_with_done(
    store: ConversationStore, make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Reply(text="y" * 5_000))
    runs = RunRegistry(make_app().runner, store, max_event_bytes=2_000)
    conversation = await store.create_conversation("hi")
    handle = runs.start(conversation, "hi", [], platform="web", interface="web", followups=False)
    live = [event.name async for event in runs.follow(handle)]
    stored = await store.run_events(handle.run_id)
    assert live[-2:] == ["error", "done"]
    assert stored is not None and [event["event"] for event in stored[1]][-2:] == ["error", "done"]


async def test_a_shared_event_another_release_wrote_is_skipped_and_the_run_still_ends(
    state_location: Path | str, store: ConversationStore, make_app
) -> None:
    path = state_location
    writer_state, reader_state = ChatState(path, workers=2), ChatState(path, workers=2)
    writer, reader = writer_state.shared_runs, reader_state.shared_runs
    assert writer is not None and reader is not None
    ids = {"run_id": "r1", "conversation_id": "c1"}
    await writer.open("r1", "c1")
    rows = [
        (1, "started", {**ids, "question": "q"}),
        (2, "status", {**ids, "text": "an event kind of a newer release"}),
        (3, "answer", {**ids, "text": "Hi", "restart": False}),
        (4, "done", {**ids, "result": {"outcome": "a newer outcome"}}),
    ]
    await writer.add("r1", rows, beat=True)
    runs = RunRegistry(make_app().runner, store, shared=reader)
    followed = await runs.follow_elsewhere("r1")
    assert followed is not None
    events = [event async for event in followed]
    assert [event.name for event in events] == ["started", "answer", "done"]
    assert events[-1].data["result"] is None
    writer_state.close()
    reader_state.close()


async def test_a_turn_keeps_its_figures_and_receipt_and_the_conversation_sums_them(
    store: ConversationStore, make_app, fake_anthropic: FakeAnthropic
) -> None:
    counted = "SELECT count() FROM nycflights13.flights WHERE distance > 1000"  # a bare count() reads metadata only
    count = ("execute_sql", {"queries": [{"question": "n", "sql": counted}]})
    fake_anthropic.script(
        Reply(tool_calls=[count]), Reply(text="147,105 flights [Q1]."),
        Reply(tool_calls=[count]), Reply(text="Still 147,105 [Q1]."),
    )  # fmt: skip
    app = make_app()
    conversation = await store.create_conversation("how many?")
    for run_id in ("run1", "run2"):
        result: RunResult = await app.runner.run("how many flights?", followups=False)
        await store.save_turn(conversation, run_id, result, [])
    stored = await store.get_conversation(conversation)
    assert stored is not None
    first = stored["turns"][0]
    assert first["figures"]["verified"] == 1 and first["figures"]["figures"][0]["cells"][0]["value"] == "147105"
    assert first["receipt"]["rows_read"] == 336776 and first["receipt"]["queries"] == 1
    total = stored["receipt"]
    assert total["answers"] == 2 and total["rows_read"] == 2 * 336776
    assert total["input_tokens"] == sum(t["receipt"]["input_tokens"] for t in stored["turns"])


def test_a_file_from_before_receipts_gains_their_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    ChatState(path).close()
    with sqlite3.connect(path) as old:
        old.execute("ALTER TABLE turns DROP COLUMN receipt")
        old.execute("ALTER TABLE turns DROP COLUMN figures")
        old.execute("PRAGMA user_version = 0")  # as releases before the schema's version left it
    ChatState(path).close()
    with sqlite3.connect(path) as upgraded:
        columns = {row[1] for row in upgraded.execute("PRAGMA table_info(turns)")}
    assert {"figures", "receipt"} <= columns


async def test_turns_by_run_reads_only_the_conversation_kept_under_the_key(state_location: Path | str) -> None:
    """Slack names runs by the ids in its messages' metadata: a run of another conversation is never read."""
    from agent.runner import RunResult

    state = ChatState(state_location)
    store = state.conversations
    mine = await store.create_conversation("q", key="slack:T:C:1", interface="slack")
    theirs = await store.create_conversation("q", key="slack:T:C:2", interface="slack")
    await store.save_turn(mine, "run-mine", RunResult(question="mine?", answer="a"), [])
    await store.save_turn(theirs, "run-theirs", RunResult(question="theirs?", answer="secret"), [])
    found = await store.turns_by_run(["run-mine", "run-theirs"], key="slack:T:C:1")
    assert list(found) == ["run-mine"] and found["run-mine"].question == "mine?"
    state.close()
