"""The kit's state in PostgreSQL (`AGENT_STATE_URL=postgresql://...`), behind the same `StateFile`
interface as the SQLite file (chats/state_file.py), so several hosts can share it.

A thin dialect layer rather than two copies of each store: a store's function gets a connection that
speaks the part of sqlite3's API the stores use, and its SQL is rewritten once per statement for
PostgreSQL (`?` and `:name` placeholders; SQLite's REAL and INTEGER as PostgreSQL's 8-byte types in
table definitions). The stores keep to SQL both engines read (`ON CONFLICT`, `RETURNING`, no `OR IGNORE`).

SQLite's `BEGIN IMMEDIATE` is one write lock for the whole file; here a write transaction takes one
transaction-scoped advisory lock, the same single lock, so budgets' reservations, rate limits and a
conversation's turn keep exactly the guarantees they have on SQLite, across hosts too. The lock goes in
the message of the BEGIN: one round trip for both.

The pool is psycopg_pool's synchronous one: the stores' functions are synchronous (SQLite has no async
driver) and run in worker threads as on SQLite; an async pool would need every store written twice (and
measured no cheaper: about 170 CPU us a statement through psycopg's async pool against 100-140 through the
threads). What costs is the count of thread hops and round trips: calls that many tasks make at once (a hundred
runs' copies, saves, rate-limit takes, audit entries) are made as one (`GroupCalls`), and a store's transaction
is as few statements as it can be (tests/chats/test_round_trips.py counts them). A grouped statement's arrays
go in binary: psycopg escapes a text array's elements in Python, which cost more than the round trips.

`Notices` is the push side: one connection per process that LISTENs on a channel and wakes the tasks
waiting on a key (a run's id) when another host NOTIFYs it, so a reader on another host follows a run
without polling. A notice is only a nudge to re-read the table: one sent while the connection was down
is not lost, since every waiter is woken (and re-reads) when it is back. A notice may carry what it is
about after its key (`key` newline `data`, within PostgreSQL's 8000 bytes): each waiter is handed the data
(`Woken.take`), so it can often skip the read; what it makes of a gap is its own affair.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import lru_cache, partial
from typing import Any, Generic, TypeGuard, TypeVar, cast

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import RowMaker
from psycopg.types.array import ListBinaryDumper
from psycopg_pool import ConnectionPool, PoolTimeout

from agent.config import ConfigError, redacted_url

T = TypeVar("T")
Item = TypeVar("Item")
Result = TypeVar("Result")
log = logging.getLogger(__name__)

# Every write transaction of the kit takes this lock (an arbitrary constant: "chats" in ASCII).
WRITE_LOCK = 0x6368617473
LOCKED = f"SELECT pg_advisory_xact_lock({WRITE_LOCK})"
LOCK_WAIT = "10s"  # as SQLite's busy timeout (chats/state_file.py): then the write fails, as there
POOL_SIZE = 16  # connections per process, and the threads that use them
GROUP_LANES = 4  # groups of one kind of call on their way at once (GroupCalls)
GROUP_MAX = 256  # calls in one group at most: the rest leave in the next (one statement's work stays bounded)
CONNECT_WAIT_S = 10
CARRIED_MAX = 64  # notices' data a waiter holds untaken at most: past that it is dropped, and the waiter reads
LISTEN_CHECK_S = 30.0  # a listening connection idle this long is asked whether it is still there
RECONNECT_S = (0.1, 5.0)  # the first and the longest pause before listening again after a lost connection
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def is_postgres_url(location: object) -> TypeGuard[str]:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


# The database's clock in SQL, in seconds since the epoch (chats/durable.py judges leases by it).
POSTGRES_NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


class Row(tuple[Any, ...]):
    """A row by position or by column name, as sqlite3.Row."""

    _names: tuple[str, ...]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(self._names.index(key))
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    names = tuple(column.name for column in cursor.description or ())

    def make(values: Sequence[Any]) -> Row:
        row = Row(values)
        row._names = names
        return row

    return make


class PostgresConnection:
    """One pooled connection, for one store function, with sqlite3's calls."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> psycopg.Cursor[Row]:
        return self._conn.execute(postgres_sql(sql), _adapt(params))  # type: ignore[arg-type]

    def executemany(self, sql: str, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> psycopg.Cursor[Row]:
        cursor = self._conn.cursor()
        cursor.executemany(postgres_sql(sql), [_adapt(row) for row in rows])  # type: ignore[arg-type]
        return cursor

    @contextmanager
    def write_transaction(self) -> Iterator[None]:
        if self._conn.info.transaction_status != TransactionStatus.IDLE:  # within one already: a savepoint
            with self._conn.transaction():
                self._conn.execute(LOCKED)
                yield
            return
        self._conn.execute(f"BEGIN; {LOCKED}")  # no parameters: one message, one round trip for both
        try:
            yield
        except BaseException:
            with suppress(psycopg.Error):  # a connection gone with it: the pool discards it, the error stands
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")


class PostgresFile:
    """The kit's state in a PostgreSQL database: a pool of connections, each lent to one store function."""

    def __init__(self, url: str) -> None:
        _reach(url)
        self._url = url
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            url,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True, "row_factory": _row_factory},
            configure=_configure,
            open=False,
        )
        self._pool.open(wait=True, timeout=CONNECT_WAIT_S)
        self._threads = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="state")

    def now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._pool.connection() as conn:
            return fn(cast(sqlite3.Connection, PostgresConnection(conn)))

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        # Threads of its own, one per connection: asyncio's default executor has a handful (cores + 4), so
        # a host following a hundred runs would queue their reads behind one another's round trips.
        return await asyncio.get_running_loop().run_in_executor(self._threads, partial(self.now, fn))

    def notices(self, channel: str) -> Notices:
        """Wake-ups on `channel` (a name of letters and underscores), from any host."""
        return Notices(self._url, channel)

    def close(self) -> None:
        self._threads.shutdown(wait=False)
        self._pool.close()


class GroupCalls(Generic[Item, Result]):
    """Many tasks' calls of one kind made together (group commit): `fn` gets every item waiting and returns
    one result per item, in one store function (one thread hop, one round trip). The calls made in one turn
    of the event loop leave together at its end; those made while GROUP_LANES groups are on their way leave
    together as soon as one is back. So a quiet host waits for nothing, and a busy one makes one round trip
    for a hundred runs where it made a hundred, none waiting on a loop too busy to hear that the group before
    it is back. A group that fails is made again one item at a time, so one bad item fails alone; not one whose
    connection was lost (its COMMIT may have landed): each of its callers gets the error. A call whose caller
    was cancelled before its group left is dropped (no work done for nobody, no queue growing while the server
    is slow), and a group takes at most GROUP_MAX calls."""

    def __init__(self, file: PostgresFile, fn: Callable[[sqlite3.Connection, list[Item]], list[Result]]) -> None:
        self._file, self._fn = file, fn
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._lanes: set[asyncio.Task[None]] = set()  # groups on their way, each lane taking the next
        self._leaving: asyncio.Task[None] | None = None  # a lane started that has not yet taken what waits
        self.groups = 0  # made so far (for tests and benchmarks)

    @classmethod
    def each(
        cls, file: PostgresFile, fn: Callable[[sqlite3.Connection, Item], Result], *, locked: bool = False
    ) -> GroupCalls[Item, Result]:
        """Calls of `fn` (one item each) made one after another on one connection, one thread hop for the group:
        in one write transaction when the group has several (one fails, all are made again alone, so none may
        land twice), or when `locked` (`fn` needs the kit's write lock, and gets it held)."""

        def group(c: sqlite3.Connection, items: list[Item]) -> list[Result]:
            if len(items) == 1 and not locked:
                return [fn(c, items[0])]
            with cast(PostgresConnection, c).write_transaction():
                return [fn(c, item) for item in items]

        return cls(file, group)

    async def __call__(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        called: asyncio.Future[Result] = loop.create_future()
        waiting = (item, called)
        self._waiting.append(waiting)
        self._lanes = {lane for lane in self._lanes if not lane.done() and lane.get_loop() is loop}
        leaving = self._leaving is not None and not self._leaving.done() and self._leaving.get_loop() is loop
        if not leaving and len(self._lanes) < GROUP_LANES:
            self._waiting = [waiting for waiting in self._waiting if waiting[1].get_loop() is loop]
            self._leaving = loop.create_task(self._make_groups())  # after the other calls of this turn
            self._lanes.add(self._leaving)
        try:
            return await called
        except asyncio.CancelledError:
            with suppress(ValueError):  # not yet in a group: dropped
                self._waiting.remove(waiting)
            raise

    async def _make_groups(self) -> None:
        if self._leaving is asyncio.current_task():
            self._leaving = None
        while True:
            self._waiting = [waiting for waiting in self._waiting if not waiting[1].done()]
            if not self._waiting:
                return
            group, self._waiting = self._waiting[:GROUP_MAX], self._waiting[GROUP_MAX:]
            self.groups += 1
            try:
                results = await self._file.run(partial(_each_of, self._fn, [item for item, _ in group]))
            except Exception as exc:
                if len(group) == 1 or _outcome_unknown(exc):  # each caller hears it, as from a call of its own
                    for _, called in group:
                        _settle(called, exc)
                    continue
                await asyncio.gather(*(self._alone(item, called) for item, called in group))
                continue
            for (_, called), result in zip(group, results, strict=True):
                _settle(called, result)

    async def _alone(self, item: Item, called: asyncio.Future[Result]) -> None:
        if called.done():  # its caller was cancelled meanwhile
            return
        try:
            _settle(called, (await self._file.run(partial(_each_of, self._fn, [item])))[0])
        except Exception as exc:
            _settle(called, exc)


def _each_of(
    fn: Callable[[sqlite3.Connection, list[Item]], list[Result]], items: list[Item], c: sqlite3.Connection
) -> list[Result]:
    return fn(c, items)


def _outcome_unknown(exc: Exception) -> bool:
    """The group's connection was lost: its COMMIT may have landed, so no call of it may be made again (a
    rate-limit take would count twice)."""
    if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, PoolTimeout):  # a pool's: nothing ran
        return False
    return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))  # gone, or the server shut it


def _settle(called: asyncio.Future[Any], outcome: object) -> None:
    if called.done():  # its caller was cancelled meanwhile
        return
    if isinstance(outcome, Exception):
        called.set_exception(outcome)
    else:
        called.set_result(outcome)


class Woken(asyncio.Event):
    """Set when a notice on its key came. `take` hands over the data the notices carried since it was last
    called, and whether one came bare (no data, or the connection came back: what was said meanwhile is
    unknown), so the waiter must read what the notice is about."""

    def __init__(self) -> None:
        super().__init__()
        self._carried: list[str] = []
        self._bare = False

    def nudge(self, data: str = "") -> None:
        if not data:
            self._bare = True
        elif len(self._carried) < CARRIED_MAX:
            self._carried.append(data)
        else:  # a waiter that has not taken its data for long: it reads instead
            self._carried, self._bare = [], True
        self.set()

    def take(self) -> tuple[list[str], bool]:
        taken = self._carried, self._bare
        self._carried, self._bare = [], False
        return taken


class Notices:
    """LISTEN on one channel over one connection of this process's own, fanning each notice out to the
    tasks waiting on its payload. The connection is opened by the first waiter, in its event loop."""

    def __init__(self, url: str, channel: str) -> None:
        if not re.fullmatch(r"[a-z_]+", channel):
            raise ValueError(f"not a channel name: {channel!r}")
        self._url, self.channel = url, channel
        self._waiting: dict[str, set[Woken]] = {}
        self._waiting_quietly: dict[str, set[Woken]] = {}  # not woken when the connection comes back
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while LISTEN is in effect (for tests and benchmarks)

    @contextmanager
    def waiting(self, key: str, *, on_reconnect: bool = True) -> Iterator[Woken]:
        """An event set whenever `key` is notified (and, with `on_reconnect`, when the connection came back:
        what it would have said meanwhile is unknown), from now until the block ends. Register before reading
        what the notice is about, and clear the event before each read, so a notice between the read and the
        wait is not missed. Without `on_reconnect`, a notice sent while the connection was down is lost."""
        self._listen_in_background()
        woken = Woken()
        waiting = self._waiting if on_reconnect else self._waiting_quietly
        waiting.setdefault(key, set()).add(woken)
        try:
            yield woken
        finally:
            waiters = waiting.get(key, set())
            waiters.discard(woken)
            if not waiters:
                waiting.pop(key, None)

    def _listen_in_background(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self.listening = asyncio.Event()
            self._task = loop.create_task(self._listen(), name=f"listen-{self.channel}")

    async def _listen(self) -> None:
        pause = RECONNECT_S[0]
        while True:
            try:
                await self._listen_once()
            except (psycopg.Error, OSError) as exc:
                log.warning("lost the connection listening for %s (%s); listening again", self.channel, exc)
            if self.listening.is_set():  # it had worked: the first pause again
                pause = RECONNECT_S[0]
            self.listening.clear()
            self._wake_all()  # whatever the lost connection would have said: read again
            await asyncio.sleep(pause)
            pause = min(pause * 2, RECONNECT_S[1])

    async def _listen_once(self) -> None:
        where = make_conninfo(self._url, connect_timeout=CONNECT_WAIT_S, **KEEPALIVE)
        conn = await psycopg.AsyncConnection.connect(where, autocommit=True)
        async with conn:
            await conn.execute(f"LISTEN {self.channel}")
            self.listening.set()
            self._wake_all()  # anything notified before LISTEN took effect: read again
            while True:
                async for notice in conn.notifies(timeout=LISTEN_CHECK_S):
                    self._deliver(notice.payload)
                await conn.execute("SELECT 1")  # quiet for a while: is the server still there?

    def _deliver(self, payload: str) -> None:
        key, _, data = payload.partition("\n")
        for waiting in (self._waiting, self._waiting_quietly):
            for woken in waiting.get(key, ()):
                woken.nudge(data)

    def _wake_all(self) -> None:
        for waiters in self._waiting.values():
            for woken in waiters:
                woken.nudge()

    def close(self) -> None:
        """Stop listening: the connection closes as its task ends, on its loop."""
        if self._task is not None and not self._task.done() and not self._task.get_loop().is_closed():
            self._task.cancel()
        self._task = None


class StateUnreachable(ConfigError):
    """The database AGENT_STATE_URL names cannot be reached at start-up (one line, as a setting's error)."""


def _reach(url: str) -> None:
    # One connection first, for the server's own reason in one line: the pool would only time out.
    try:
        psycopg.connect(url, connect_timeout=CONNECT_WAIT_S).close()
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        raise StateUnreachable(f"AGENT_STATE_URL: cannot reach {redacted_url(url)}: {reason}") from None


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"SET lock_timeout = '{LOCK_WAIT}'")
    # The grouped statements pass their items' values as arrays (GroupCalls). psycopg dumps a list in text by
    # default, escaping each element in Python (a regular expression's substitution per quote: about 60 us for
    # an event's JSON of 400 characters); in binary it copies each as it is (under 1 us). Every list goes to a
    # CAST to its array type in the SQL, which reads either.
    conn.adapters.register_dumper(list, ListBinaryDumper)


def _adapt(params: Sequence[Any] | Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
    # SQLite keeps a bool as 0 or 1 in an INTEGER column; PostgreSQL would refuse a boolean there.
    if isinstance(params, Mapping):
        return {name: int(value) if isinstance(value, bool) else value for name, value in params.items()}
    return [int(value) if isinstance(value, bool) else value for value in params]


_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|(?<!:):([A-Za-z_]\w*)|%|\b(REAL|INTEGER)\b")
_DDL = re.compile(r"^\s*(CREATE TABLE|ALTER TABLE)", re.IGNORECASE)
_DDL_TYPES = {"REAL": "DOUBLE PRECISION", "INTEGER": "BIGINT"}


@lru_cache(maxsize=512)
def postgres_sql(sql: str) -> str:
    """`sql` as PostgreSQL reads it: psycopg's placeholders, and in a table's definition SQLite's
    8-byte REAL and INTEGER as PostgreSQL's (its own REAL and INTEGER are 4 bytes). Quoted text is kept,
    its `%` doubled as psycopg asks."""
    ddl = bool(_DDL.match(sql))

    def token(match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith("'"):
            return text.replace("%", "%%")  # psycopg reads `%` in quoted text too, when there are parameters
        if text == "?":
            return "%s"
        if text == "%":
            return "%%"
        if match.group(2):
            return _DDL_TYPES[text] if ddl else text
        return f"%({match.group(1)})s"

    return _TOKENS.sub(token, sql)
