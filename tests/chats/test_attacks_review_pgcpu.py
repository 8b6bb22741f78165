"""An outside review's attacks on PostgreSQL's grouped statements (chats/state_postgres.py `GroupCalls.each`,
the grouped rate-limit takes, durable begins and saves, audit entries, a turn's one-statement store, and the
binary arrays): a connection lost as its group commits, a caller cancelled mid-group, fencing, two hosts'
exact limits, and odd values through the arrays. Against the real server tests/postgres.py starts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agent.runner import Checkpoint
from chats.audit import AuditEntry, AuditFilter, AuditQuery
from chats.durable import DurableRun, DurableRuns
from chats.rate_limits import SharedRateLimit
from chats.state import ChatState
from chats.state_postgres import LOCKED, PostgresFile
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    url = postgres_server.new_database()
    ChatState(url).close()  # the tables
    return url


class CommitCutter:
    """A TCP proxy to the server that, once armed, passes a COMMIT on and cuts its client off as the server
    answers it: the transaction landed, and the client only sees its connection lost."""

    def __init__(self, url: str) -> None:
        self._server = ("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0]))
        self.url = url.replace(f":{self._server[1]}/", ":{port}/")
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = self.url.format(port=self._listener.getsockname()[1])
        self.armed, self.cut = threading.Event(), threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._server)
            self._sockets += [client, server]
            committing = threading.Event()
            threading.Thread(target=self._to_server, args=(client, server, committing), daemon=True).start()
            threading.Thread(target=self._to_client, args=(server, client, committing), daemon=True).start()

    def _to_server(self, client: socket.socket, server: socket.socket, committing: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if self.armed.is_set() and b"COMMIT\x00" in data:
                    self.armed.clear()
                    committing.set()
                server.sendall(data)
        except OSError:
            pass

    def _to_client(self, server: socket.socket, client: socket.socket, committing: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if committing.is_set():  # the server answered the COMMIT: it landed; the client never hears so
                    self.cut.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        for end in (client, server):
            _hang_up(end)

    def close(self) -> None:
        for end in self._sockets:
            _hang_up(end)


def _hang_up(end: socket.socket) -> None:
    # shutdown first: a close alone leaves the connection open while another thread waits in its recv
    with contextlib.suppress(OSError):
        end.shutdown(socket.SHUT_RDWR)
    end.close()


@pytest.fixture
def cutter(url: str) -> Iterator[CommitCutter]:
    cutter = CommitCutter(url)
    yield cutter
    cutter.close()


def _one(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    file = PostgresFile(url)
    try:
        return file.now(lambda c: c.execute(sql, params).fetchall())
    finally:
        file.close()


async def test_grouped_takes_whose_commit_answer_is_lost_are_not_counted_twice(url: str, cutter: CommitCutter) -> None:
    """Two takes grouped in one transaction; the connection is lost as the server commits it. The takes landed:
    made again one by one they would count twice, and the person would be refused before the limit."""
    file = PostgresFile(cutter.url)
    try:
        limit = SharedRateLimit(file, "web", per_minute=2)
        cutter.armed.set()
        await asyncio.gather(limit.take("ann"), limit.take("bob"))
        assert cutter.cut.is_set()
        counted = _one(url, "SELECT key, count(*) FROM pace_takes GROUP BY key ORDER BY key")
        assert [tuple(row) for row in counted] == [("ann", 1), ("bob", 1)]
        assert await limit.take("ann") is None  # the second of two a minute goes ahead
    finally:
        file.close()


def _entry(run_id: str, question: str, queries: tuple[AuditQuery, ...] = ()) -> AuditEntry:
    return AuditEntry(run_id, 1.0, "person:ann", "web", "", "", "", question, "answered", queries=queries)


ODD = [
    'say "hi"',
    "back\\slash \\\\ and \\N and NULL",
    "NULL",
    "",
    "{a,b}",
    "uni ✓ 𝔘 — ünïcödé \u2028 \u3000",
    "tab\tnew\nline\r",
    "x" * 300_000,
]


async def test_odd_values_round_trip_exactly_through_a_grouped_audit_entry(url: str) -> None:
    state = ChatState(url)
    try:
        queries = tuple(
            AuditQuery(text, text, None if n % 2 else n, None if n % 3 else 2**40, error=text if n % 2 else None)
            for n, text in enumerate(ODD)
        )
        entries = [_entry("r1", ODD[0], queries), _entry("r2", "no queries"), _entry("r3", ODD[1], queries[:1])]
        await asyncio.gather(*(state.audit.record(entry) for entry in entries))
        found = {entry.run_id: entry for entry in await state.audit.entries(AuditFilter())}
        assert found["r1"].queries == queries and found["r1"].question == ODD[0]
        assert found["r2"].queries == ()
        assert found["r3"].queries == queries[:1]
    finally:
        state.close()


async def test_an_entry_the_server_refuses_fails_alone_in_its_group(url: str) -> None:
    """A NUL byte PostgreSQL's text cannot hold: that entry fails, the others of its group land once."""
    state = ChatState(url)
    try:
        good = [_entry(f"r{n}", f"q{n}", (AuditQuery("Q1", "SELECT 1", 1, 8),)) for n in range(3)]
        bad = _entry("bad", "nul\x00byte")
        outcomes = await asyncio.gather(*(state.audit.record(e) for e in [*good, bad]), return_exceptions=True)
        assert outcomes[:3] == [None, None, None] and isinstance(outcomes[3], Exception)
        found = await state.audit.entries(AuditFilter())
        assert sorted(e.run_id for e in found) == ["r0", "r1", "r2"]
        assert all(len(e.queries) == 1 for e in found)
    finally:
        state.close()


async def test_a_caller_cancelled_mid_group_loses_no_one_elses_take(url: str) -> None:
    state = ChatState(url)
    try:
        limit = SharedRateLimit(state.file, "web", per_minute=100)
        tasks = [asyncio.ensure_future(limit.take(f"k{n}")) for n in range(20)]
        await asyncio.sleep(0)  # the group has left
        tasks[3].cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert [o for n, o in enumerate(outcomes) if n != 3] == [None] * 19
        keys = {row[0] for row in _one(url, "SELECT key FROM pace_takes")}
        assert keys >= {f"k{n}" for n in range(20) if n != 3}
        assert await limit.take("after") is None  # the connections are fine for the next caller
    finally:
        state.close()


async def test_two_hosts_takes_hold_the_limit_exactly(url: str) -> None:
    hosts = [ChatState(url), ChatState(url)]
    try:
        limits = [SharedRateLimit(host.file, "web", per_minute=7) for host in hosts]
        waits = await asyncio.gather(*(limits[n % 2].take("ann") for n in range(30)))
        assert waits.count(None) == 7
    finally:
        for host in hosts:
            host.close()


async def test_a_frozen_hosts_grouped_save_lands_only_in_the_run_it_still_holds(url: str) -> None:
    state = ChatState(url)
    try:
        frozen = DurableRuns(state.file, lease_s=30.0, host="frozen")
        for run_id in ("kept", "taken"):
            await frozen.begin(DurableRun(run_id, "c", "web", "web", "q"))
            assert await frozen.save(run_id, Checkpoint(question=run_id, rounds=1, thinking=["a"]))
        await state.file.run(lambda c: c.execute("UPDATE durable_runs SET lease_until = 0 WHERE run_id = 'taken'"))
        taker = DurableRuns(state.file, lease_s=30.0, host="taker")
        claimed = await taker.claim_lapsed({"web"})
        assert claimed is not None and claimed.run_id == "taken"
        late = [Checkpoint(question=run_id, rounds=2, thinking=["a", "b"]) for run_id in ("kept", "taken")]
        saved = await asyncio.gather(frozen.save("kept", late[0]), frozen.save("taken", late[1]))
        assert saved == [True, False]
        parts = dict(_one(url, "SELECT run_id, count(*) FROM durable_run_parts GROUP BY run_id"))
        assert parts == {"kept": 2, "taken": 1}
        assert not await frozen.held_here("taken") and await frozen.held_here("kept")
    finally:
        state.close()


async def test_a_group_whose_connection_is_killed_waiting_on_the_lock_lands_nothing_twice(url: str) -> None:
    """The group's backend is terminated while it waits on the write lock another host holds: its takes either
    landed once or not at all, and the next caller's connection works."""
    state = ChatState(url)
    try:
        limit = SharedRateLimit(state.file, "web", per_minute=2)
        with psycopg.connect(url, autocommit=True) as holder, psycopg.connect(url, autocommit=True) as killer:
            holder.execute(f"BEGIN; {LOCKED}")
            takes = asyncio.gather(limit.take("ann"), limit.take("bob"), return_exceptions=True)
            for _ in range(200):
                waiting = killer.execute(
                    "SELECT pid FROM pg_locks WHERE NOT granted AND locktype = 'advisory'"
                ).fetchall()
                if waiting:
                    break
                await asyncio.sleep(0.05)
            assert waiting, "the group never waited on the lock"
            killer.execute("SELECT pg_terminate_backend(%s)", (waiting[0][0],))
            outcomes = await takes
            holder.execute("COMMIT")
        assert outcomes == [None, None]  # the state was unavailable: the requests are let through
        counted = dict(_one(url, "SELECT key, count(*) FROM pace_takes GROUP BY key"))
        assert all(n <= 1 for n in counted.values()), counted
        assert [await limit.take("ann") for _ in range(2 - counted.get("ann", 0))] == [None] * (
            2 - counted.get("ann", 0)
        )
        assert (await limit.take("ann") or 0) > 0  # exactly two a minute
    finally:
        state.close()
