"""The time from a host's death to its run resuming on another host.

Two real `agent serve` hosts share one PostgreSQL (a server started for the benchmark, tests/postgres.py) and
one ClickHouse server (the HTTP fake), behind the small proxy of tests/hosts.py. Each round asks host 0 a
question whose first round runs a query; the fake model holds the second round's call, and once it is held
host 0 is killed (SIGKILL). Measured from the kill: when the resumed run's first model call reaches the
model (the run resuming on host 1), and when a reader who reattached through host 1 gets its first new
event. Host 0 is then started again for the next round.

What bounds it is the lease (AGENT_RUN_LEASE_S): the dead host last renewed it at most a third of a lease
before it died, so it lapses between 2/3 and 1 lease after the kill, and the survivor looks for lapsed
leases every third of a lease: the takeover comes between about 2/3 and 4/3 of a lease after the death,
plus the resume itself (reading the checkpoint and the event log: milliseconds).

    python -m benchmarks.bench_takeover [ROUNDS] [--lease S ...]   # 3 rounds at leases of 1 and 3 s
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse, default_users
from tests.fakes.sse_client import sse_events
from tests.hosts import Hosts, host_environment, running_hosts
from tests.postgres import running_postgres

ROUNDS = 3
LEASES_S = (1.0, 3.0)
AIRLINES = "SELECT count() AS airlines FROM nycflights13.airlines"


@dataclass
class Asked:
    """One question's model calls: its second round's first call held until its host is killed."""

    held: threading.Event = field(default_factory=threading.Event)
    resumed_at: float | None = None  # time.monotonic() of the resumed run's first model call
    second_rounds: int = 0


class HoldingModel:
    def __init__(self) -> None:
        self.asked: dict[str, Asked] = {}
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text="[]")
        question = body["messages"][0]["content"][0]["text"].split("\n")[0]
        results = sum(
            1 for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        if results == 0:
            return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": AIRLINES}]})])
        with self._lock:
            asked = self.asked.setdefault(question, Asked())
            asked.second_rounds += 1
            first = asked.second_rounds == 1
            if not first and asked.resumed_at is None:
                asked.resumed_at = time.monotonic()
        if first:
            asked.held.set()
            self.release.wait(600)
            return Reply(text="(too late)")
        return Reply(text="There are 16 airlines [Q1].")


@dataclass
class Takeover:
    lease_s: float
    resumed_s: float  # kill to the resumed run's first model call
    reader_s: float  # kill to the reattached reader's first new event


async def _one(hosts: Hosts, model: HoldingModel, lease_s: float, number: int) -> Takeover:
    question = f"How many airlines are there? (round {number})"
    seen: list[Any] = []

    async def ask() -> None:
        async with (
            httpx.AsyncClient(base_url=hosts.pinned(0), timeout=120) as client,
            client.stream("POST", "/api/chat", json={"message": question}) as response,
        ):
            async for event in sse_events(response):
                seen.append(event)

    asking = asyncio.create_task(ask())
    while question not in model.asked:
        await asyncio.sleep(0.01)
    await asyncio.to_thread(model.asked[question].held.wait, 120)
    await asyncio.sleep(0.2)  # its events so far reach the reader
    killed = time.monotonic()
    hosts[0].kill()
    await asyncio.gather(asking, return_exceptions=True)
    run_id, last = seen[0].data["run_id"], int(seen[-1].id)
    async with (
        httpx.AsyncClient(base_url=hosts.pinned(1), timeout=120) as client,
        client.stream("GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": str(last)}) as response,
    ):
        events = sse_events(response)
        await anext(events)
        reader_s = time.monotonic() - killed
        async for _ in events:
            pass
    resumed_at = model.asked[question].resumed_at
    assert resumed_at is not None, "the run was not resumed"
    await asyncio.to_thread(hosts[0].wait, 30)
    await hosts.restart(0)
    return Takeover(lease_s, resumed_at - killed, reader_s)


async def _lease(
    lease_s: float, rounds: int, state_url: str, clickhouse: FakeClickHouse, folder: Path
) -> list[Takeover]:
    fake, model = FakeAnthropic().start(), HoldingModel()
    fake.always(model)
    env = host_environment(
        state_url, clickhouse.url("agent", "nycflights13"), model_url=fake.base_url, agent_run_lease_s=str(lease_s)
    )
    try:
        with running_hosts(folder, env) as hosts:
            await hosts.ready()
            return [await _one(hosts, model, lease_s, number) for number in range(rounds)]
    finally:
        model.release.set()
        fake.stop()


def run(rounds: int = ROUNDS, leases_s: tuple[float, ...] = LEASES_S) -> list[Takeover]:
    with tempfile.TemporaryDirectory() as folder:
        load_demo_elsewhere(Path(folder))
        measured: list[Takeover] = []
        clickhouse = FakeClickHouse(Path(folder) / "clickhouse", default_users())
        with running_postgres() as postgres, clickhouse.start() as ch:
            for lease_s in leases_s:
                where = Path(folder) / f"lease-{lease_s}"
                measured += asyncio.run(_lease(lease_s, rounds, postgres.new_database(), ch, where))
        return measured


def report(measured: list[Takeover]) -> None:
    print("\n== takeover: a host killed mid-run, its run resumed on the other (python -m benchmarks.bench_takeover)")
    print(f"{'lease':>7} {'rounds':>6} {'resumed: median':>16} {'max':>7} {'reader: median':>15} {'max':>7}  bound")
    for lease_s in sorted({m.lease_s for m in measured}):
        of = [m for m in measured if m.lease_s == lease_s]
        resumed, reader = [m.resumed_s for m in of], [m.reader_s for m in of]
        print(
            f"{lease_s:>6.1f}s {len(of):>6} {statistics.median(resumed):>15.2f}s {max(resumed):>6.2f}s "
            f"{statistics.median(reader):>14.2f}s {max(reader):>6.2f}s  {2 * lease_s / 3:.1f}-{4 * lease_s / 3:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=ROUNDS)
    parser.add_argument("--lease", type=float, action="append", help="AGENT_RUN_LEASE_S to measure (repeatable)")
    args = parser.parse_args()
    report(run(args.rounds, tuple(args.lease or LEASES_S)))


if __name__ == "__main__":
    main()
