"""`agent serve --workers N` (a ClickHouse server only): N processes, each the whole one-process service,
sharing the port, the conversation file and the metrics.

Each worker listens on a socket of its own bound with SO_REUSEPORT, so the kernel spreads connections
evenly over the workers. (uvicorn's own supervisor shares one listening socket; an asyncio worker that
wakes first accepts every pending connection, so one worker could take a whole burst of chats.)
Conversations and runs in progress are shared through the SQLite file (WAL; chats/shared_runs.py), metrics
through PROMETHEUS_MULTIPROC_DIR. The supervisor replaces a worker that dies, stops everything if one
of the first workers fails as it starts, and on SIGTERM or SIGINT passes SIGTERM on and waits for every
worker to drain and exit; a second signal makes them cancel what still runs. Rate limits are kept per
worker.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from agent.config import ConfigError, Settings
from agent.logs import announce

log = logging.getLogger(__name__)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STARTUP_S = 20.0  # a worker that exits sooner than this after it started failed to start


# One worker's whole life: (host, port, web, slack, workers, its listening socket) -> its exit code. The
# service passes its own entry point in, so this module never imports the service back.
WorkerMain = Callable[[str, int, bool, bool, int, socket.socket], int]


def serve_workers(
    settings: Settings, *, host: str, port: int, web: bool, slack: bool, workers: int, worker: WorkerMain
) -> None:
    reserved = _reserve(host, port)
    metrics_dir, made = _metrics_dir()
    what = "the chat" if web else "the Slack bot"
    announce(settings, f"Serving {what} on http://{host}:{port} with {workers} workers  (Ctrl-C to stop)")
    supervisor = Supervisor(workers, (worker, host, port, web, slack, workers))
    try:
        supervisor.run()
    finally:
        reserved.close()
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    if supervisor.failed:
        raise ConfigError("a worker failed to start; its error is printed above.")
    if supervisor.interrupted:
        raise KeyboardInterrupt  # Ctrl-C: the command says so and exits 130


class Supervisor:
    def __init__(self, count: int, arguments: tuple[object, ...]) -> None:
        self._count, self._arguments = count, arguments
        self._context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited loop or locks
        self._workers: list[BaseProcess] = []
        self._stop = threading.Event()
        self._signals = 0
        self.failed = False
        self.interrupted = False

    def run(self) -> None:
        """Until a signal: replace workers that die. Then pass the signal on and wait for them all, with
        our handler still in place (a second signal is passed on too: they cancel what still runs)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            started = time.monotonic()
            self._workers = [self._start() for _ in range(self._count)]
            while not self._stop.wait(0.5):
                if not self._replace_dead(starting=time.monotonic() - started < STARTUP_S):
                    break
            self._send(signal.SIGTERM)
            for process in self._workers:
                process.join()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        self.interrupted = self.interrupted or sig == signal.SIGINT
        if self._signals > 1:
            self._send(signal.SIGINT)  # a worker's second signal: cancel now
        self._stop.set()

    def _start(self) -> BaseProcess:
        process = self._context.Process(target=run_worker, args=(*self._arguments, os.getpid()), name="agent-worker")
        process.start()
        return process

    def _replace_dead(self, *, starting: bool) -> bool:
        """False when a worker of the first generation failed as it started (its error is on stderr):
        every worker would. Later, a worker that dies is replaced, at most one a second."""
        for index, process in enumerate(self._workers):
            if process.is_alive():
                continue
            if starting and process.exitcode != 0:
                self.failed = True
                return False
            log.warning("worker %s exited (code %s); starting another", process.pid, process.exitcode)
            self._workers[index] = self._start()
            time.sleep(1)
        return True

    def _send(self, sig: int) -> None:
        for process in self._workers:
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)


def run_worker(worker: WorkerMain, host: str, port: int, web: bool, slack: bool, workers: int, supervisor: int) -> None:
    """One worker process: the one-process service on a SO_REUSEPORT socket of its own."""
    threading.Thread(target=_stop_when_orphaned, args=(supervisor,), daemon=True).start()
    sys.exit(worker(host, port, web, slack, workers, _listening_socket(host, port)))


def _stop_when_orphaned(supervisor: int) -> None:
    """A supervisor killed outright (SIGKILL) cannot pass anything on: its workers notice they were
    orphaned and drain as on SIGTERM, rather than serve the port on their own."""
    while os.getppid() == supervisor:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def _listening_socket(host: str, port: int) -> socket.socket:
    sock = _bound(host, port)
    sock.listen(2048)
    return sock


def _reserve(host: str, port: int) -> socket.socket:
    """Bind (not listen) the port in the supervisor: one clear error when something else holds it, and
    no other program can take it while the workers come and go."""
    try:
        return _bound(host, port)
    except OSError as exc:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}).") from None


def _bound(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on connections whose socket names
    # the protocol. Without it every response written in two pieces (headers, then body; each SSE
    # event) waited for the client's delayed ACK: 40 ms per keep-alive request.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _metrics_dir() -> tuple[Path, bool]:
    """PROMETHEUS_MULTIPROC_DIR for the workers: the configured one, emptied (files left from an earlier
    run would be summed in), or a fresh temporary one, removed at exit."""
    configured = os.environ.get(MULTIPROC_ENV)
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        return path, False
    path = Path(tempfile.mkdtemp(prefix="agent-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    return path, True
