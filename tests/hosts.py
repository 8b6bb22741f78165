"""Several hosts on this machine: real `agent serve` processes sharing one PostgreSQL (AGENT_STATE_URL) and one
ClickHouse server (the HTTP fake), with the model and Slack fakes, behind a small reverse proxy that
round-robins each request over the hosts that are up, as a load balancer in front of them would.

    with running_hosts(state_url, clickhouse_url, model=fake_anthropic, slack=fake_slack) as hosts:
        await hosts.ready()
        hosts.url                      # the proxy: round-robin, a refused connection goes to the next host
        hosts.pinned(1)                # the proxy's URL pinned to host 1 (a `/pin/1` prefix)
        hosts[0].url                   # host 0 direct
        hosts[0].terminate()           # SIGTERM (drain); hosts[0].kill() is kill -9
        await hosts.restart(0)         # a new process for host 0 on the same port, once ready

The proxy forwards by streaming both ways (SSE goes through as it is written), on a new connection per
request (as nginx does by default), and, like deploy/nginx.conf's `proxy_next_upstream error http_503
non_idempotent`, tries the next host when a connection cannot be made or fails before the answer begins,
or a host answers 503 (a draining host refuses a question before doing anything with it). `proxy.served`
counts requests answered per host.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

ROOT = Path(__file__).resolve().parents[1]
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Host:
    """One `agent serve` process on a port of its own; `start` again after it stopped serves the same port."""

    def __init__(self, index: int, folder: Path, env: dict[str, str], arguments: Sequence[str] = ()) -> None:
        self.index, self.folder, self.env, self.arguments = index, folder, env, list(arguments)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None
        self.logs: list[str] = []  # what earlier processes of this host wrote, one string each
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        base = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "AGENT_DATA_DIR": str(self.folder / "data"),
            "AGENT_LOG_FORMAT": "json",
        }
        command = [sys.executable, "-m", "process.cli", "serve", "--port", str(self.port), *self.arguments]
        log = open(self.folder / f"serve-{len(self.logs)}.log", "w")  # noqa: SIM115 - the process writes it
        self.process = subprocess.Popen(
            command, env={**base, **self.env}, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, text=True
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.running, f"host {self.index} exited: {self.output()[-4000:]}"
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"host {self.index} not ready in {timeout_s} s: {self.output()[-4000:]}")

    def terminate(self) -> None:
        """SIGTERM: the host refuses new work and drains its running answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """kill -9: the host dies mid-whatever, as a crashed machine does."""
        assert self.process is not None
        self.process.kill()

    def wait(self, timeout_s: float = 90) -> int:
        """The process's exit code once it has exited (its log kept in `logs`)."""
        assert self.process is not None
        code = self.process.wait(timeout_s)
        self.logs.append(self.output())
        return code

    def stop(self, timeout_s: float = 90) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.terminate()
            try:
                return self.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.wait(timeout_s)

    def output(self) -> str:
        """What the current (or last) process wrote."""
        path = self.folder / f"serve-{len(self.logs)}.log"
        return path.read_text(errors="replace") if path.exists() else ""


class Proxy:
    """A reverse proxy on its own thread and event loop: each request to the next host in turn (or the one
    a `/pin/<i>` prefix names), streamed both ways."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self.hosts = hosts
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.served: Counter[int] = Counter()  # requests answered, per host index
        self.refused: Counter[int] = Counter()  # 503s passed on to the next host, per host index
        self._turn = itertools.count()
        self._client: httpx.AsyncClient | None = None
        config = uvicorn.Config(
            self._app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", interface="asgi3"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="hosts-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        while not self._server.started:  # bounded by the test's time limit (pytest-timeout)
            if not self._thread.is_alive():
                raise RuntimeError("the proxy stopped before it started serving")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)

    def pinned(self, index: int) -> str:
        return f"{self.url}/pin/{index}"

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # the client to the hosts lives on the proxy's own loop
            while (await receive())["type"] != "lifespan.shutdown":
                self._client = httpx.AsyncClient(
                    timeout=httpx.Timeout(300, connect=5), limits=httpx.Limits(max_keepalive_connections=0)
                )
                await send({"type": "lifespan.startup.complete"})
            if self._client is not None:
                await self._client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = Request(scope, receive)
        response = await self._forward(request)
        await response(scope, receive, send)

    def _order(self, path: str) -> tuple[list[int], str]:
        """The hosts to try, in order, and the path to ask them for."""
        parts = path.split("/", 3)
        if len(parts) >= 3 and parts[1] == "pin" and parts[2].isdigit():
            return [int(parts[2])], "/" + (parts[3] if len(parts) > 3 else "")
        first = next(self._turn) % len(self.hosts)
        return [(first + step) % len(self.hosts) for step in range(len(self.hosts))], path

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None
        order, path = self._order(request.url.path)
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        for tried, index in enumerate(order, 1):
            host = self.hosts[index]
            url = httpx.URL(host.url + path, query=request.url.query.encode())
            outgoing = self._client.build_request(request.method, url, headers=headers, content=body)
            try:
                upstream = await self._client.send(outgoing, stream=True)
            except httpx.TransportError:  # no connection, or it closed before an answer began (a host
                continue  # stopping drops what it had not accepted yet): the next host may take it
            if upstream.status_code == 503 and tried < len(order):  # refused before anything was done
                self.refused[index] += 1
                await upstream.aclose()
                continue
            self.served[index] += 1
            kept = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            return StreamingResponse(
                _relay(upstream.aiter_raw()),
                status_code=upstream.status_code,
                headers=kept,
                background=BackgroundTask(upstream.aclose),
            )
        return PlainTextResponse("no host is up", status_code=502)


async def _relay(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except httpx.TransportError:  # the host went away mid-response: the client sees the stream end
        return


class Hosts:
    """The hosts and their proxy (see the module's docstring)."""

    def __init__(self, hosts: list[Host], proxy: Proxy) -> None:
        self.hosts, self.proxy = hosts, proxy

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def url(self) -> str:
        return self.proxy.url

    def pinned(self, index: int) -> str:
        return self.proxy.pinned(index)

    async def ready(self) -> None:
        await asyncio.gather(*(host.ready() for host in self.hosts if host.running))

    async def restart(self, index: int, timeout_s: float = 90) -> None:
        """Host `index` stopped (SIGTERM, drained) if it runs, then started again on its port, until ready."""
        host = self.hosts[index]
        if host.running:
            await asyncio.to_thread(host.stop, timeout_s)
        host.start()
        await host.ready()

    def said(self, index: int) -> str:
        """Everything host `index` wrote, over all its processes so far."""
        host = self.hosts[index]
        return "\n".join([*host.logs, host.output() if host.running else ""])


def host_environment(
    state_url: str,
    clickhouse_url: str,
    *,
    model_url: str,
    slack_api_url: str | None = None,
    slack_bot_token: str = "xoxb-test-token",
    slack_signing_secret: str = "test-signing-secret",
    **settings: str,
) -> dict[str, str]:
    """What every host is given: the shared state and engine, the fakes, and `settings` (AGENT_...=...)."""
    env = {
        "AGENT_STATE_URL": state_url,
        "CLICKHOUSE_URL": clickhouse_url,
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "test-key",
        "AGENT_EXAMPLE_QUESTIONS": "How many airlines are there?",
        "AGENT_SHUTDOWN_GRACE_S": "60",
    }
    if slack_api_url is not None:
        env |= {
            "SLACK_BOT_TOKEN": slack_bot_token,
            "SLACK_SIGNING_SECRET": slack_signing_secret,
            "SLACK_API_URL": slack_api_url,
            "SLACK_PROGRESS_INTERVAL_S": "0.05",
        }
    return env | {name.upper(): value for name, value in settings.items()}


@contextmanager
def running_hosts(
    folder: Path, env: dict[str, str], *, count: int = 2, arguments: Sequence[str] = ()
) -> Iterator[Hosts]:
    """`count` hosts started with `env` (host_environment), each in `folder/host-<i>`, and the proxy; all
    stopped at the end (SIGTERM, then kill -9 past a minute). Call `await hosts.ready()` before use."""
    hosts = [Host(i, folder / f"host-{i}", env, arguments) for i in range(count)]
    proxy = Proxy(hosts)
    try:
        for host in hosts:
            host.start()
        proxy.start()
        yield Hosts(hosts, proxy)
    finally:
        proxy.stop()
        for host in hosts:
            host.stop(60)
