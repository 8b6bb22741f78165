"""Several hosts on one PostgreSQL (AGENT_STATE_URL), in one run:

1. CPU per chat of one `agent serve` host whose state is PostgreSQL against the same host on its SQLite
   file (the goal: at most 1.3x), 100 concurrent web chats each (bench_workers.measure: the fake model
   answering each call after 2 s, the fake ClickHouse server). On PostgreSQL the host shares every run's
   events, rate limits, turns and budgets through the database, as one of several hosts does; the
   database server's own CPU over the same chats is printed beside it.
2. The delay of an event reaching a reader on the other host: two hosts (tests/hosts.py) on one
   PostgreSQL, 100 concurrent chats asked at host 0, each followed at once from host 1 as a page that
   reconnected there would. For every event both streams carried, the time this client received it from
   host 1 minus the time it received it from host 0 (the owner's own stream), counted only for events
   the owner sent after host 1's stream had opened. The goal: p95 under 50 ms.
3. With `--parts floor`, the same with the reader on host 0 itself (the owner's host: no database between
   them): what a second stream of the same run costs on this machine at that load, the floor under 2.

Everything shares this machine's cores (the hosts, PostgreSQL, the fakes and this client).

    python -m benchmarks.bench_hosts [--chats 100] [--rounds 1] [--profile DIR] [--parts cpu,delays,floor]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_web import _process
from benchmarks.bench_workers import (
    CHATS,
    LATENCY_S,
    Figures,
    cpu_seconds,
    measure,
    percentile,
    process_tree,
    profiled,
    question,
    top_frames,
)
from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.sse_client import sse_events
from tests.hosts import host_environment, running_hosts
from tests.postgres import running_postgres

GOAL_CPU_RATIO = 1.3
GOAL_P95_MS = 50.0


@dataclass
class CpuFigures:
    sqlite: Figures
    postgres: Figures
    database_cpu_s: float  # the PostgreSQL server's processes over the timed chats, summed over the rounds

    @property
    def ratio(self) -> float:
        return self.postgres.cpu_per_chat / self.sqlite.cpu_per_chat

    @property
    def database_per_chat(self) -> float:
        return self.database_cpu_s / len(self.postgres.chats)


@dataclass
class Delays:
    chats: int = 0
    followed: int = 0  # chats whose reader on the other host saw `done`
    delays_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def fail(self, why: str) -> None:
        self.failures[why] = self.failures.get(why, 0) + 1


def postgres_pids(port: int) -> list[int]:
    """The PostgreSQL server listening on `port` and its backends."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "postgres" in command and f"-p {port}" in command:
                return process_tree(int(entry.name))
    return []


# --- 1. CPU per chat ---


async def measure_cpu(env: dict[str, str], log: Path, count: int, profile: Path | None, port: int) -> tuple[Any, float]:
    before = sum(cpu_seconds(postgres_pids(port)).values())
    one = await measure(env, 1, log, count, profile)
    return one, sum(cpu_seconds(postgres_pids(port)).values()) - before


def cpu_per_chat(
    root: Path, base: dict[str, str], new_database: Any, port: int, args: argparse.Namespace
) -> CpuFigures:
    sqlite, postgres, database_s = Figures(1, []), Figures(1, []), 0.0
    for number in range(1, args.rounds + 1):
        for name, pooled in (("sqlite", sqlite), ("postgres", postgres)):
            env = {**base, "AGENT_DATA_DIR": str(root / f"app-{name}-{number}")}
            if name == "postgres":
                env["AGENT_STATE_URL"] = new_database()
            profile = args.profile / f"cpu-{name}-{number}.txt" if args.profile else None
            one, db_s = asyncio.run(measure_cpu(env, root / f"serve-{name}-{number}.log", args.chats, profile, port))
            pooled.rounds.append(one)
            database_s += db_s if name == "postgres" else 0.0
            if profile is not None:
                print(f"\nprofile of one host on {name}, round {number} ({profile}): self time")
                for share, frame in top_frames(profile):
                    print(f"  {share:6.1%}  {frame}")
    return CpuFigures(sqlite, postgres, database_s)


# --- 2. the delay to a reader on the other host ---


async def _owner_stream(
    client: httpx.AsyncClient, number: int, seen: dict[int, float], run: asyncio.Future[str]
) -> None:
    async with client.stream("POST", "/api/chat", json={"message": question(number)}) as response:
        if response.status_code != 200:
            run.set_exception(RuntimeError(f"http {response.status_code}"))
            return
        async for event in sse_events(response):
            seen[int(event.id)] = time.perf_counter()
            if event.event == "started":
                run.set_result(event.data["run_id"])


async def _reader_stream(
    client: httpx.AsyncClient, run_id: str, seen: dict[int, float], opened: list[float]
) -> list[str]:
    names = []
    async with client.stream("GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "1"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"reader: http {response.status_code}")
        opened.append(time.perf_counter())
        async for event in sse_events(response):
            seen[int(event.id)] = time.perf_counter()
            names.append(event.event)
    return names


async def one_followed(owner: httpx.AsyncClient, reader: httpx.AsyncClient, number: int, delays: Delays) -> None:
    at_owner: dict[int, float] = {}
    at_reader: dict[int, float] = {}
    opened: list[float] = []
    run: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asking = asyncio.create_task(_owner_stream(owner, number, at_owner, run))
    try:
        names = await _reader_stream(reader, await run, at_reader, opened)
        await asking
    except (httpx.HTTPError, RuntimeError) as exc:
        asking.cancel()
        delays.fail(str(exc) or type(exc).__name__)
        return
    if names[-1:] != ["done"]:
        delays.fail("the reader's stream ended before done")
        return
    delays.followed += 1
    for number_, at in at_reader.items():
        if number_ in at_owner and at_owner[number_] > opened[0]:
            delays.delays_ms.append((at - at_owner[number_]) * 1000)


async def measure_delays(
    env: dict[str, str], folder: Path, count: int, profile: Path | None = None, *, reader_host: int = 1
) -> Delays:
    """The delays to a reader on host `reader_host` (1: the other host; 0: the owner's own, the floor)."""
    delays = Delays(chats=count)
    with running_hosts(folder, env) as hosts:
        await hosts.ready()
        limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
        async with (
            httpx.AsyncClient(base_url=hosts[0].url, timeout=180, limits=limits) as owner,
            httpx.AsyncClient(base_url=hosts[reader_host].url, timeout=180, limits=limits) as reader,
        ):
            warm = Delays()
            await asyncio.gather(*(one_followed(owner, reader, count + 1 + i, warm) for i in range(2)))
            paths = [profile / f"delay-host-{i}.txt" if profile else None for i in range(2)]
            with profiled(hosts[0].pid, paths[0]), profiled(hosts[1].pid, paths[1]):
                await asyncio.gather(*(one_followed(owner, reader, number, delays) for number in range(1, count + 1)))
    for name, path in zip(("owner", "reader"), paths, strict=True):
        if path is not None:
            print(f"\nprofile of the {name}'s host while delays were timed ({path}): self time")
            for share, frame in top_frames(path):
                print(f"  {share:6.1%}  {frame}")
    return delays


# --- the run ---


def run(
    chats: int = CHATS, rounds: int = 1, profile: Path | None = None, parts: str = "cpu,delays"
) -> tuple[CpuFigures | None, Delays | None, Delays | None]:
    args = argparse.Namespace(chats=chats, rounds=rounds, profile=profile)
    cpu, delays, floor = None, None, None
    with tempfile.TemporaryDirectory() as scratch, running_postgres() as database:
        root = Path(scratch)
        load_demo_elsewhere(root / "server")
        base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        fake_model = [sys.executable, "-m", "benchmarks.bench_workers", "fake", str(LATENCY_S)]
        with FakeClickHouse(root / "server" / "clickhouse").start() as clickhouse, _process(fake_model, base) as fake:
            model_url = fake.stdout.readline().strip()  # type: ignore[union-attr]
            where = clickhouse.url("agent", "nycflights13")
            env = {
                **base,
                "CLICKHOUSE_URL": where,
                "ANTHROPIC_BASE_URL": model_url,
                "ANTHROPIC_API_KEY": "test-key",
                "AGENT_WEB_RATE_PER_MINUTE": "100000",
                "LOG_LEVEL": "WARNING",
            }
            if "cpu" in parts:
                cpu = cpu_per_chat(root, env, database.new_database, database.port, args)
            hosts_env = host_environment(
                database.new_database(), where, model_url=model_url, agent_web_rate_per_minute="100000"
            )
            hosts_env |= {"LOG_LEVEL": "WARNING"}
            if "delays" in parts:
                delays = asyncio.run(measure_delays(hosts_env, root / "hosts", chats, profile))
            if "floor" in parts:
                floor = asyncio.run(measure_delays(hosts_env, root / "floor", chats, reader_host=0))
    return cpu, delays, floor


def report(figures: tuple[CpuFigures | None, Delays | None, Delays | None]) -> None:
    cpu, delays, floor = figures
    if cpu is not None:
        report_cpu(cpu)
    if delays is not None:
        report_delays(delays)
    if floor is not None:
        report_delays(floor, where="the owner's own host (the floor: no database between)", goal=False)


def report_cpu(cpu: CpuFigures) -> None:
    print()
    print(f"Several hosts on one PostgreSQL: {len(cpu.sqlite.rounds[0].chats)} concurrent web chats a round, "
          f"{len(cpu.sqlite.rounds)} round(s); the fake model answers each call after {LATENCY_S:g} s.")  # fmt: skip
    print()
    print(f"{'':34}{'SQLite':>10}{'PostgreSQL':>12}")
    print(f"{'chats answered':34}{len(cpu.sqlite.ok):>10}{len(cpu.postgres.ok):>12}")
    print(f"{'CPU s per chat (agent serve)':34}{cpu.sqlite.cpu_per_chat:>10.3f}{cpu.postgres.cpu_per_chat:>12.3f}")
    print(f"{'CPU s per chat (PostgreSQL server)':34}{'':>10}{cpu.database_per_chat:>12.3f}")
    verdict = "met" if cpu.ratio <= GOAL_CPU_RATIO else "NOT met"
    print(f"PostgreSQL over SQLite, the host's CPU per chat: {cpu.ratio:.2f}x "
          f"(goal: at most {GOAL_CPU_RATIO}x: {verdict})")  # fmt: skip
    for name, pooled in (("SQLite", cpu.sqlite), ("PostgreSQL", cpu.postgres)):
        if pooled.failures:
            print(f"  {name} failures by kind: {pooled.failures}")


def report_delays(delays: Delays, where: str = "the other host", *, goal: bool = True) -> None:
    print()
    p50, p95 = percentile(delays.delays_ms, 0.5), percentile(delays.delays_ms, 0.95)
    print(f"An event reaching a reader on {where}, {delays.chats} concurrent chats: "
          f"{delays.followed} followed to done, {len(delays.delays_ms)} events timed")  # fmt: skip
    verdict = f" (goal: p95 under {GOAL_P95_MS:g} ms: {'met' if p95 < GOAL_P95_MS else 'NOT met'})" if goal else ""
    worst = max(delays.delays_ms, default=float("nan"))
    print(f"  later than on the owner's own stream: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {worst:.1f} ms{verdict}")
    if delays.failures:
        print(f"  failures by kind: {delays.failures}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_hosts")
    parser.add_argument("--chats", type=int, default=CHATS, help="concurrent chats")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the CPU comparison, pooled")
    parser.add_argument("--profile", type=Path, help="a folder for py-spy's profiles of the hosts")
    parser.add_argument(
        "--parts",
        default="cpu,delays",
        help="what to measure: cpu, delays, floor (comma-separated; cpu,delays by default)",
    )
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    report(run(args.chats, args.rounds, args.profile, args.parts))


if __name__ == "__main__":
    main(sys.argv[1:])
