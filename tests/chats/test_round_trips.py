"""What the kit's state costs a chat on PostgreSQL, counted, not timed: thread hops (the state's calls, each a
hop to a pooled connection's thread and back) and round trips to the server (psycopg's statements; a write
transaction's BEGIN carries its lock). A chat's share of a host's CPU on PostgreSQL against SQLite
(benchmarks/bench_hosts.py) follows these counts; a change that adds a statement or a hop to a chat fails here.

The figures: a rate-limit take is one statement under the lock (3 round trips), a durable run's begin and an
audit entry one statement each, a turn's store with its fence four round trips; and the host's runs that come
at once share the hops of their takes, begins, saves, "still mine?" and audit entries (chats/state_postgres.py
`GroupCalls`), so a hundred concurrent chats cost a few hops each, not one per call."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg.types.array import ListDumper

from agent.runner import (
    AnswerEvent,
    Checkpoint,
    CheckpointSink,
    EventSink,
    ExecutingEvent,
    RunResult,
    Turn,
    ignore_events,
)
from chats.audit import AuditEntry, AuditQuery, Origin
from chats.durable import DurableRun, DurableRuns
from chats.rate_limits import SharedRateLimit
from chats.runs import RunRegistry
from chats.shared_runs_postgres import _CLOSE, _COPY, _OPEN, _READ
from chats.state import ChatState
from chats.state_postgres import PostgresFile, postgres_sql
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)
CHATS = 20
LOG = {" ".join(postgres_sql(statement).split()) for statement in (_OPEN, _COPY, _CLOSE, _READ)}


class Counts:
    """The state's hops and round trips from the moment it is made."""

    def __init__(self) -> None:
        self.hops = 0
        self.statements: list[str] = []

    @property
    def trips(self) -> int:
        return len(self.statements)

    @property
    def trips_besides_the_log(self) -> int:
        """Round trips but the shared run log's (chats/shared_runs_postgres.py): how many copies and beats a
        run makes depends on the clock (its ticks), not on what it stores."""
        return sum(statement not in LOG for statement in self.statements)


@pytest.fixture
def state(postgres_server: PostgresServer) -> Iterator[ChatState]:
    state = ChatState(postgres_server.new_database())
    yield state
    state.close()


@pytest.fixture
def counted(state: ChatState, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    """Counts of `state`'s hops and of every statement a pooled connection sends (each one round trip; the
    settings a new pooled connection is given are not counted: a pool grows once)."""
    file = state.file
    assert isinstance(file, PostgresFile)
    counts = Counts()
    run, execute, executemany = file.run, psycopg.Connection.execute, psycopg.Cursor.executemany

    async def hop(fn: Any) -> Any:
        counts.hops += 1
        return await run(fn)

    def sent(conn: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if not str(query).startswith("SET lock_timeout"):
            counts.statements.append(" ".join(str(query).split()))
        return execute(conn, query, *args, **kwargs)

    def sent_many(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        counts.statements.append("many: " + " ".join(str(query).split()))  # one pipeline, one round trip
        return executemany(cursor, query, *args, **kwargs)

    monkeypatch.setattr(file, "run", hop)
    monkeypatch.setattr(psycopg.Connection, "execute", sent)
    monkeypatch.setattr(psycopg.Cursor, "executemany", sent_many)
    yield counts


def durable_run(run_id: str) -> DurableRun:
    return DurableRun(run_id, "conversation", "web", "web", "Which airport?")


async def test_a_rate_limit_take_is_one_statement_under_the_lock(state: ChatState, counted: Counts) -> None:
    limit = SharedRateLimit(state.file, "web", per_minute=2)
    assert [await limit.take("ann") for _ in range(2)] == [None, None]
    counted.statements.clear()
    assert await limit.take("bob") is None
    assert counted.trips == 3, counted.statements  # BEGIN and the lock, the take, COMMIT (it made five)
    assert (await limit.take("ann") or 0) > 0  # the third within the minute waits


async def test_concurrent_takes_share_their_hops_and_the_limit_still_holds(state: ChatState, counted: Counts) -> None:
    limit = SharedRateLimit(state.file, "web", per_minute=CHATS // 2)
    waits = await asyncio.gather(*(limit.take("ann") for _ in range(CHATS)))
    assert waits.count(None) == CHATS // 2  # exactly the limit's worth went ahead, taken one after another
    assert counted.hops <= 3, f"{CHATS} takes made {counted.hops} hops"  # they made one each


async def test_a_durable_runs_begin_save_and_finish_count(state: ChatState, counted: Counts) -> None:
    durable = DurableRuns(state.file, lease_s=30.0, host="host-1")
    await durable.begin(durable_run("r1"))
    assert counted.trips == 1, counted.statements  # one INSERT: no lock for a row no claim can take (it made 3)
    counted.statements.clear()
    assert await durable.save("r1", Checkpoint(question="Which airport?", rounds=1))
    assert counted.trips == 4, counted.statements  # a whole part: BEGIN and the lock, clear, append, COMMIT (6)
    counted.statements.clear()
    assert await durable.save("r1", Checkpoint(question="Which airport?", rounds=2, thinking=["EWR"]))
    assert counted.trips == 3, counted.statements  # BEGIN and the lock, renew and append, COMMIT (it made 4)
    counted.statements.clear()
    assert await durable.held_here("r1")
    assert counted.trips == 1
    counted.statements.clear()
    assert await state.file.run(lambda c: durable.finish_in(c, "r1"))
    assert counted.trips == 1, counted.statements  # the row and its parts in one statement (it made 2)


async def test_concurrent_durable_calls_share_their_hops_each_run_its_own(state: ChatState, counted: Counts) -> None:
    durable = DurableRuns(state.file, lease_s=30.0, host="host-1")
    ids = [f"r{n}" for n in range(CHATS)]
    await asyncio.gather(*(durable.begin(durable_run(run_id)) for run_id in ids))
    saved = [durable.save(run_id, Checkpoint(question=run_id, rounds=n)) for n, run_id in enumerate(ids)]
    assert await asyncio.gather(*saved) == [True] * CHATS
    assert await asyncio.gather(*(durable.held_here(run_id) for run_id in [*ids, "nobody's"])) == [True] * CHATS + [
        False
    ]
    assert counted.hops <= 9, f"{CHATS} runs' begins, saves and asks made {counted.hops} hops"  # they made 60
    other = DurableRuns(state.file, lease_s=30.0, host="host-2")
    await state.file.run(lambda c: c.execute("UPDATE durable_runs SET lease_until = 0 WHERE run_id = 'r7'"))
    claimed = await other.claim_lapsed({"web"})
    assert claimed is not None and claimed.run_id == "r7"
    saved_form = claimed.saved()
    assert saved_form is not None and saved_form.question == "r7" and saved_form.rounds == 7
    assert await durable.save("r7", Checkpoint(question="r7", rounds=8)) is False  # fenced out: another holds it


async def test_an_audit_entry_is_one_statement(state: ChatState, counted: Counts) -> None:
    queries = (AuditQuery("Q1", "SELECT 1", 1, 8), AuditQuery("Q2", "SELECT 2", None, None, error="no"))
    entry = AuditEntry("r1", 1.0, "person:ann", "web", "", "", "", "Which airport?", "answered", queries=queries)
    await state.audit.record(entry)
    assert counted.trips == 1, counted.statements  # the entry and its queries (it made 4)
    await state.audit.record(entry)  # a run's entry is written once
    [stored] = await state.audit.entries()
    assert stored.queries == queries


async def test_grouped_values_go_in_binary_never_escaped_one_by_one(
    state: ChatState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arrays of a grouped statement (events' and checkpoints' JSON) are not escaped element by element in
    Python (psycopg's text arrays: a substitution per quote, about 60 us an event), and arrive as they were."""
    escaped: list[int] = []
    dump = ListDumper.dump

    def counted(self: ListDumper, values: list[Any]) -> Any:
        escaped.append(len(values))
        return dump(self, values)

    monkeypatch.setattr(ListDumper, "dump", counted)
    log, durable = state.shared_runs, DurableRuns(state.file, lease_s=30.0, host="host-1")
    assert log is not None
    data = {"sql": "SELECT \"a\\b\" FROM t WHERE x = 'y'", "rows": [["9E", None, 1.5]]}
    await durable.begin(durable_run("r1"))
    await log.open("r1", "conversation")
    assert await log.add("r1", [(1, "result", data), (2, "answer", {"text": "é \u2603"})], beat=True, holder="host-1")
    assert await durable.save("r1", Checkpoint(question='say "hi"', rounds=1))
    assert escaped == [], f"lists escaped in text, one element at a time: {escaped}"
    assert await log.events_after("r1", 0) == [(1, "result", data), (2, "answer", {"text": "é \u2603"})]
    other = DurableRuns(state.file, lease_s=30.0, host="host-2")
    await state.file.run(lambda c: c.execute("UPDATE durable_runs SET lease_until = 0"))
    claimed = await other.claim_lapsed({"web"})
    assert claimed is not None and (saved := claimed.saved()) is not None and saved.question == 'say "hi"'


class TwoRounds:
    """A chat as the pipeline makes one: a checkpoint as it starts, a query, a checkpoint after the round, the
    answer."""

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
        checkpoint: CheckpointSink | None = None,
        resume: Checkpoint | None = None,
        report: Any = None,
    ) -> RunResult:
        assert checkpoint is not None
        await checkpoint(Checkpoint(question=question))
        await on_event(ExecutingEvent(query_id="Q1", question="Departures", sql="SELECT 1"))
        await checkpoint(Checkpoint(question=question, rounds=1, query_ids_taken=1))
        await on_event(AnswerEvent(text="EWR [Q1]."))
        return RunResult(question=question, answer="EWR [Q1].")


async def _chat(state: ChatState, registry: RunRegistry, limit: SharedRateLimit, number: int) -> list[str]:
    assert await limit.take("127.0.0.1") is None
    conversation = await state.conversations.create_conversation(f"chat {number}", owner="person:ann")
    history = await state.conversations.history(conversation)
    handle = registry.start(
        conversation, f"chat {number}", history, platform="web", interface="web", origin=Origin("person:ann", "web")
    )
    names = [event.name async for event in registry.follow(handle)]
    assert handle.task is not None
    await handle.task
    return names


async def _chats(state: ChatState, count: int, counted: Counts) -> tuple[int, int]:
    """`count` concurrent chats, all answered and stored: the hops, and round trips but the log's, they made."""
    durable = DurableRuns(state.file, lease_s=30.0, host="host-1")
    registry = RunRegistry(TwoRounds(), state.conversations, shared=state.shared_runs, durable=durable)
    limit = SharedRateLimit(state.file, "web", per_minute=10_000)
    try:
        for names in await asyncio.gather(*(_chat(state, registry, limit, number) for number in range(count))):
            assert names[-1] == "done", names
    finally:
        await registry.shutdown()
    made = counted.hops, counted.trips_besides_the_log
    stored = await state.file.run(lambda c: c.execute("SELECT count(*) FROM turns").fetchone()[0])
    assert stored == count
    return made


async def test_a_chat_alone_costs_at_most_its_round_trips(state: ChatState, counted: Counts) -> None:
    hops, trips = await _chats(state, 1, counted)
    # Besides the shared log's, the release before made 34 round trips for a chat alone (the rate limit 5 and
    # its first sweep, the begin 3, saves 6 and 4, the turn's store 9, the audit 4, ...); now 20.
    assert trips <= 20, counted.statements
    assert hops <= 16


async def test_concurrent_chats_share_their_hops(state: ChatState, counted: Counts) -> None:
    hops, trips = await _chats(state, CHATS, counted)
    # Besides the log's, the release before made 641 round trips for 20 chats at once (32 a chat) and a hop per
    # call; now about 11 a chat, and 5 hops (how many calls a group gathers depends on the clock: a margin).
    assert trips <= 15 * CHATS, f"{CHATS} concurrent chats made {trips} round trips besides the log's"
    assert hops <= 7 * CHATS, f"{CHATS} concurrent chats made {hops} hops"
