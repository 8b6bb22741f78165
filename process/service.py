"""`agent serve`, `agent web` and `agent slack`: the web chat and the Slack bot in one process (or either
alone), and with a ClickHouse server, in several worker processes.

The embedded engine allows one process per data directory, so with it everything runs in one process.
Slack arrives over HTTP at /slack/events on the same app, or, when SLACK_APP_TOKEN is set, over Socket
Mode as a task on the same event loop. /healthz, /readyz and /metrics are served whatever runs.

Shutdown (SIGTERM): the process stops taking questions at once (the listener closes, Socket Mode
disconnects, a question that still arrives is refused with a message), lets the answers already running
finish and be stored for up to AGENT_SHUTDOWN_GRACE_S, cancels what is left (stored as cancelled), and
exits 0. A second signal cancels at once. Ctrl-C (SIGINT) is a person at the terminal: what runs is
cancelled at once (its queries killed, stored as cancelled) and the command exits 130.

With the embedded engine, the process holds the data folder before it listens (a second server on the
same folder stops with one line), and records its address beside the folder's lock, so `agent ask` in
another terminal asks it (process/running_server.py). A taken port is one line too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import Any

import aiohttp
import uvicorn
from slack_sdk.errors import SlackApiError
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from agent.access.policy import Policy
from agent.app import AgentApp
from agent.config import ConfigError, Settings, load_settings
from agent.logs import announce, configure_logging
from agent.loop_lag import LoopLag
from agent.prompts import prompt_library
from agent.runner import RunResult
from agent.tracing_setup import configure_tracing
from bots.slack import SlackBot
from bots.slack.app import api_url, check_slack_settings, unreachable
from chats.audiences import Audiences
from chats.conversations import ConversationStore
from chats.daily_budgets import DailyBudget, Reservation
from chats.durable import DurableRun, ResumeLimits, lost_message
from chats.report_runs import ReportRuns
from chats.retention import Retention
from chats.runs import STREAM_MARGIN_S, RunHandle, RunRegistry
from chats.schedule_deliveries import InboxOutlet, Outlet
from chats.schedule_runs import FireMaker
from chats.schedules import INBOX
from chats.state import ChatState, state_path
from evals.metrics import export_eval_metrics
from process.evals_schedule import eval_job
from process.running_server import new_key, proving, recorded
from process.scheduler import Job, Scheduler, Timing
from process.workers import serve_workers
from web.app import create_app
from web.exposure import check_exposure, server_options
from web.probes import probe_routes

log = logging.getLogger(__name__)
SignalHandler = Callable[[int, FrameType | None], Any]


@dataclass
class Service:
    """What one process serves: the agent, the kit's state (its stores) and run registry, the bot (if any)
    and the HTTP app, whose lifespan starts and drains them."""

    agent: AgentApp
    state: ChatState
    runs: RunRegistry
    bot: SlackBot | None
    app: Starlette = field(init=False)
    audiences: Audiences = field(default_factory=Audiences)  # who may open what: a channel's members ask the bot
    owns_agent: bool = True  # False when the caller passed the agent in (and closes it)
    started: bool = False
    closed: bool = False
    interrupted: bool = False  # stopped by Ctrl-C (SIGINT): the command exits 130
    terminated: bool = False  # stopped by SIGTERM: the host goes away (its durable runs are handed over)
    _draining: asyncio.Task[None] | None = None
    _forced: asyncio.Task[None] | None = None
    _retention: asyncio.Task[None] | None = None
    _scheduler: asyncio.Task[None] | None = None
    scheduler: Scheduler | None = None  # while it fires (AGENT_SCHEDULER)
    jobs: dict[str, Job] = field(default_factory=dict)  # scheduled jobs by kind ("evals": process/evals_schedule.py)
    _takeovers: asyncio.Task[None] | None = None  # renews this host's leases, takes over dead hosts' runs
    interfaces: tuple[str, ...] = ()  # the runs this host can deliver, so may take over
    _budget: DailyBudget | None = None  # settles the runs taken over
    # Told once the server has the signals (its lifespan): a Ctrl-C after "Serving ..." is the server's to handle.
    on_serving: Callable[[], object] | None = None
    _restore: dict[int, SignalHandler] = field(default_factory=dict)

    @property
    def store(self) -> ConversationStore:
        return self.state.conversations

    @classmethod
    def build(
        cls, settings: Settings, *, web: bool, slack: bool, agent: AgentApp | None = None, workers: int = 1
    ) -> Service:
        """Everything but what needs the event loop (see `start`)."""
        if slack:
            check_slack_settings(settings)  # before the engine starts, so nothing is left to close
        # Several workers share answers in progress, rate limits and each thread's turn through the file.
        # Opened before the engine starts: a file a newer release wrote is refused with nothing to stop.
        state = ChatState.of(settings, workers=workers)
        owns_agent = agent is None
        agent = agent or AgentApp.start(settings)
        runs = RunRegistry(
            agent.runner,
            state.conversations,
            shared=state.shared_runs,
            max_event_bytes=settings.max_event_bytes,
            durable=state.durable,
        )
        bot = SlackBot(agent, state, runs) if slack else None
        audiences = Audiences(bot.channel_members if bot is not None else None)  # for the web's links
        service = cls(agent=agent, state=state, runs=runs, bot=bot, owns_agent=owns_agent, audiences=audiences)
        export_eval_metrics(agent.metrics, state.eval_runs)  # the scheduled eval runs' figures, at /metrics
        service.interfaces = (*(("web",) if web else ()), *(("slack",) if bot is not None else ()))
        service.jobs["evals"] = eval_job(agent, state)  # on this process's own engine and model client
        routes = bot.routes() if bot is not None and not bot.socket_mode else []
        if web:
            service.app = create_app(
                agent, state, runs=runs, extra_routes=routes, lifespan=service.lifespan, audiences=audiences
            )
        else:
            service.app = slack_app(agent, runs, routes, service.lifespan)
        service.app.state.settings = settings
        return service

    @classmethod
    async def open(
        cls, settings: Settings, *, web: bool, slack: bool, agent: AgentApp | None = None, workers: int = 1
    ) -> Service:
        service = cls.build(settings, web=web, slack=slack, agent=agent, workers=workers)
        try:
            await service.start()
        except BaseException:
            await service.close()
            raise
        return service

    async def start(self) -> None:
        """Check the policy file against the warehouse, learn the bot's identity and connect Socket Mode;
        once, whoever asks first (`agent serve`, before the server starts, so a bad token or a bad row
        filter is one line; or the app's lifespan)."""
        if self.started:
            return
        self.started = True
        await self.agent.check_access()
        self._retention = start_retention(self.agent, self.state)
        self.scheduler = make_scheduler(self.agent, self.state, self.bot, self.jobs)
        if self.scheduler is not None:
            self._scheduler = asyncio.get_running_loop().create_task(self.scheduler.keep_firing(), name="scheduler")
        if self.state.durable is not None:
            takeovers = self.state.durable.watch(self._take_over, self.interfaces, taking=lambda: self.runs.accepting)
            self._takeovers = asyncio.get_running_loop().create_task(takeovers, name="takeovers")
        if self.bot is not None:
            await self.bot.start()
        if self.state.durable is None and self.state.workers == 1:  # alone with the state: its reports go on
            await ReportRuns(self.runs).resume_unfinished(
                self.agent.policy_named, interfaces=self.interfaces, deliver=self._deliver_resumed
            )  # after the bot starts: it posts the Slack ones in their threads
        if self.bot is not None and self.bot.socket_mode:
            try:
                await self.bot.connect_socket_mode()
            except SlackApiError as exc:
                raise ConfigError(f"SLACK_APP_TOKEN: Slack refused it ({exc.response.get('error')}).") from None

    async def _take_over(self, kept: DurableRun) -> None:
        """A run whose host died, claimed by this host: resumed under its policy (or ended with a message when
        it may not be), and for Slack, its answer posted in its thread by this host's bot."""
        settings = self.agent.settings
        policy, gone = resumed_policy(self.agent, kept.policy)
        limits = ResumeLimits(settings.agent_run_max_resumes, settings.agent_run_resume_max_age_s)
        refused = limits.why_not(kept) or (lost_message("its access policy is gone") if gone else None)
        slack = self.bot if kept.interface == "slack" else None
        on_done = self._settle_resumed(kept.delivery)
        handle = await self.runs.take_over(kept, policy, refused=refused, on_done=on_done)
        if handle is not None and slack is not None:
            slack.deliver_resumed(handle, kept.delivery)

    def _deliver_resumed(self, handle: RunHandle, delivery: dict[str, Any]) -> None:
        """A report this host goes on with after its restart: in Slack, posted in its thread by the bot."""
        if handle.interface == "slack" and self.bot is not None:
            self.bot.deliver_resumed(handle, delivery)

    def _settle_resumed(self, delivery: dict[str, Any]) -> Callable[[RunResult], Awaitable[None]] | None:
        """How a run taken over settles its asker's daily budget: the hold its first host made (web and Slack
        keep it in the run's delivery context), counted as the first host would have."""
        try:
            reservation = Reservation(**delivery["reservation"])
        except (KeyError, TypeError):
            return None
        if self._budget is None:
            self._budget = self.state.pacing.asker_budget(self.agent.settings)
        budget = self._budget
        return lambda result: budget.settle(reservation, result.receipt)

    @property
    def slack_mode(self) -> str:
        if self.bot is None:
            return "off"
        return "Socket Mode" if self.bot.socket_mode else "HTTP at /slack/events"

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.start()
        self._catch_signals()
        if self.on_serving is not None:
            self.on_serving()
        try:
            async with LoopLag(self.agent.metrics).running():
                yield
        finally:
            self._release_signals()
            await self.close()

    def begin_drain(self, *, at_once: bool = False) -> None:
        """The first signal: take nothing new, and give what runs the grace period, from now: the
        cancelled ones still reach their readers (and are stored) before the server closes their
        streams. A second signal, or `at_once` (Ctrl-C): cancel what runs now."""
        if self._draining is not None:
            log.info("second signal: cancelling the answers still running")
            self._forced = asyncio.get_running_loop().create_task(self._drain(0))
            return
        grace_s = 0.0 if at_once else self.agent.settings.agent_shutdown_grace_s
        log.info(
            "shutting down: %d answer(s) running get up to %.0f s to finish; new questions are refused",
            self.runs.running,
            grace_s,
        )
        self._draining = asyncio.get_running_loop().create_task(self._drain(grace_s))

    async def _drain(self, grace_s: float) -> None:
        self.runs.accepting = False
        # SIGTERM: the host goes away, so what outlasts the grace is handed to another host (on PostgreSQL);
        # Ctrl-C is a person cancelling what runs.
        hand_over = self.terminated and not self.interrupted
        waits: list[Coroutine[Any, Any, object]] = [self.runs.drain(grace_s, hand_over=hand_over)]
        if self.bot is not None:  # its jobs post the answers, cancelled ones too: they get the margin
            waits.append(self.bot.drain(grace_s + STREAM_MARGIN_S))
        await asyncio.gather(*waits)

    def _catch_signals(self) -> None:
        """Chain onto the server's own handlers (uvicorn stops listening and waits for open streams;
        we stop taking runs in the same instant)."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            if callable(previous):
                self._restore[sig] = previous
                notify = partial(self._on_signal, loop, sig)
                signal.signal(sig, _Chained(previous, notify).handle)

    def _on_signal(self, loop: asyncio.AbstractEventLoop, sig: int) -> None:
        if sig == signal.SIGINT:
            self.interrupted = True
        elif sig == signal.SIGTERM:
            self.terminated = True
        loop.call_soon_threadsafe(partial(self.begin_drain, at_once=sig == signal.SIGINT))

    def _release_signals(self) -> None:
        for sig, previous in self._restore.items():
            current = signal.getsignal(sig)
            if isinstance(getattr(current, "__self__", None), _Chained):
                signal.signal(sig, previous)
        self._restore.clear()

    async def close(self) -> None:
        """Drain (what a signal asked for), then close the bot (its runs use the agent), the agent and the
        store. Once."""
        if self.closed:
            return
        self.closed = True
        # Without a signal (a failed start, a test) there is nothing to wait for.
        await (self._draining or self._drain(0))
        if self._forced is not None:
            await self._forced
        for task in (self._retention, self._scheduler, self._takeovers):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.bot is not None:
            await self.bot.close()
        if self.owns_agent:
            await self.agent.close()
        self.state.close()


def resumed_policy(agent: AgentApp, name: str) -> tuple[Policy | None, bool]:
    """The policy a run taken over ran under, by its name ("" none), and whether it is gone (the policy file
    no longer has it: the run is not resumed under another). A run of no policy is not resumed on a host with a
    policy file: it would read unrestricted what this host restricts."""
    if not name:
        return None, agent.policies is not None
    policy = agent.policies.named(name) if agent.policies is not None else None
    return policy, policy is None


def start_retention(agent: AgentApp, state: ChatState) -> asyncio.Task[None] | None:
    """With AGENT_RETENTION_DAYS, sweep the state file now and hourly (every worker sweeps: a row is
    deleted once, whoever gets to it), counting the rows deleted by table."""
    days = agent.settings.agent_retention_days
    if days is None:
        return None
    deleted = agent.metrics.retention_deleted
    retention = Retention(state.file, days, on_deleted=lambda table, rows: deleted.labels(table).inc(rows))
    return asyncio.get_running_loop().create_task(retention.keep_sweeping(), name="retention")


def make_scheduler(
    agent: AgentApp, state: ChatState, bot: SlackBot | None, jobs: Mapping[str, Job]
) -> Scheduler | None:
    """With AGENT_SCHEDULER (on by default), fire schedules from this worker: each fire is claimed by one
    worker of all those sharing the state, so every worker may run it. Eval runs fire beside the ticks:
    one that takes minutes holds up no other schedule."""
    settings = agent.settings
    if not settings.agent_scheduler:
        return None
    outlets: dict[str, Outlet] = {INBOX: InboxOutlet(state.schedules)}
    if bot is not None:
        outlets["slack"] = bot.outlet()
    return Scheduler(
        state.schedules,
        state.conversations,
        FireMaker(agent, prompt_library(settings.agent_prompts_dir), budget=state.pacing.asker_budget(settings)),
        outlets,
        agent.metrics,
        policies=lambda: agent.policies,
        timing=Timing.of(settings),
        jobs=jobs,
        audit=state.audit,
        beside=("evals",),
    )


class _Chained:
    """A signal handler that tells the service, then calls the server's. It shows the server's
    `should_exit`, as sse-starlette looks for it on whatever handles SIGTERM."""

    def __init__(self, previous: SignalHandler, notify: Callable[[], object]) -> None:
        self._previous, self._notify = previous, notify

    @property
    def should_exit(self) -> bool:
        return bool(getattr(getattr(self._previous, "__self__", None), "should_exit", False))

    def handle(self, sig: int, frame: FrameType | None) -> None:
        self._notify()
        self._previous(sig, frame)


def slack_app(
    agent: AgentApp, runs: RunRegistry, routes: list[BaseRoute], lifespan: Callable[[Starlette], Any]
) -> Starlette:
    """The bot alone: Slack's endpoint (HTTP mode), /healthz, /readyz and /metrics."""
    return Starlette(routes=[*routes, *probe_routes(agent, runs, token=None)], lifespan=lifespan)


def serve(settings: Settings, *, host: str, port: int, web: bool, slack: bool | None = None, workers: int = 1) -> None:
    """`agent serve` (web=True: the chat, plus Slack when SLACK_BOT_TOKEN is set), `agent web` (slack=False)
    or `agent slack` (web=False); with a ClickHouse server, in `workers` processes (process/workers.py).
    Raises KeyboardInterrupt once a Ctrl-C has stopped it (what ran was cancelled)."""
    if web:
        check_exposure(settings, host)
    if slack is None:
        slack = settings.slack_bot_token is not None or not web
    if workers > 1 and settings.embedded:
        announce(
            settings,
            f"Serving one process, not {workers}: the embedded engine allows one process per data directory. "
            "Set CLICKHOUSE_URL to a ClickHouse server to run several workers.",
        )
        workers = 1
    if workers > 1:
        _warn_without_key(settings, web)
        asyncio.run(check_slack_token(settings, slack))  # a bad token: one line here, not one per worker
        state_path(settings.agent_data_dir)  # an earlier release's file renamed once, before the workers open it
        serve_workers(settings, host=host, port=port, web=web, slack=slack, workers=workers, worker=serve_in_worker)
        return
    if settings.embedded:  # a second server on the same folder would serve and fail every question
        from agent.db.embedded import claim_data_dir

        claim_data_dir(settings.chdb_path)
    sock = listening_socket(host, port)
    _warn_without_key(settings, web)
    try:
        interrupted = asyncio.run(_serve(settings, host=host, port=port, web=web, slack=slack, sockets=[sock]))
    finally:
        sock.close()
    if interrupted:
        raise KeyboardInterrupt


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound here so that a taken port is one line a person can act on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # IPPROTO_TCP: see workers._bound
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"--port {port}: {host}:{port} is taken ({exc.strerror}); stop what serves it, or pick another port "
            f"(--port {port + 1})."
        ) from None
    return sock


def serve_in_worker(host: str, port: int, web: bool, slack: bool, workers: int, sock: socket.socket) -> int:
    """One of `agent serve --workers N`'s processes: the same service, on the socket it was given, with the
    run log shared. Returns the exit code; a failure to start is one line on stderr."""
    from agent.db import DatabaseUnavailable
    from agent.llm import LLMConfigError

    try:
        settings = load_settings()
        configure_logging(settings)
        configure_tracing()
        serving = _serve(
            settings, host=host, port=port, web=web, slack=slack, workers=workers, sockets=[sock], in_worker=True
        )
        asyncio.run(serving)  # the supervisor tells of a Ctrl-C
    except (ConfigError, DatabaseUnavailable, LLMConfigError) as exc:
        print(f"error: worker {os.getpid()}: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # Ctrl-C in the terminal reaches every worker; each drained first
        return 0
    return 0


def _uvicorn_config(settings: Settings, app: Any, **options: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=settings.log_level.lower(),
        log_config=None,  # our handler (agent/logs.py) formats uvicorn's lines too, as text or JSON
        # Past the grace the registry cancels what still runs; the margin lets those `done` events out.
        timeout_graceful_shutdown=round(settings.agent_shutdown_grace_s + STREAM_MARGIN_S + 1),
        **server_options(settings),
        **options,
    )


async def _serve(
    settings: Settings,
    *,
    host: str,
    port: int,
    web: bool,
    slack: bool,
    workers: int = 1,
    sockets: list[socket.socket],
    in_worker: bool = False,
) -> bool:
    """Serve until a signal; True when it was Ctrl-C."""
    service = await Service.open(settings, web=web, slack=slack, workers=workers)
    try:
        key = new_key()  # in server.json; /healthz proves it knows it before `agent ask` sends the token
        app = proving(service.app, key) if web and settings.embedded else service.app
        server = uvicorn.Server(_uvicorn_config(settings, app, host=host, port=port))
        port = sockets[0].getsockname()[1]
        if not in_worker:  # said once uvicorn has the signals: a Ctrl-C before cancelled its start-up (a traceback)
            what = "the chat" if web else "the Slack bot"
            line = f"Serving {what} on http://{host}:{port}; Slack: {service.slack_mode}  (Ctrl-C to stop)"
            service.on_serving = partial(announce, settings, line)
        # uvicorn re-raises the signal that stopped it once it has shut down; a drained SIGTERM is a
        # clean exit, so the re-raised one lands here and is ignored (exit 0).
        previous = signal.signal(signal.SIGTERM, lambda sig, frame: None)
        try:
            # Only the web chat answers `agent ask` (POST /api/chat); the Slack bot alone records nothing.
            with recorded(settings, host, port, key) if web else contextlib.nullcontext():
                await server.serve(sockets=sockets)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        await service.close()
    return service.interrupted


def _warn_without_key(settings: Settings, web: bool) -> None:
    if web and (problem := settings.missing_model_key()):
        announce(settings, f"{problem} The page will load, but questions will fail.", warning=True)


async def check_slack_token(settings: Settings, slack: bool | None) -> None:
    """Before starting workers: the token works (each worker would fail on its own otherwise)."""
    if not slack:
        return
    from slack_sdk.web.async_client import AsyncWebClient

    check_slack_settings(settings)
    assert settings.slack_bot_token is not None
    client = AsyncWebClient(token=settings.slack_bot_token.get_secret_value(), base_url=api_url(settings.slack_api_url))
    try:
        await client.auth_test()
    except SlackApiError as exc:
        raise ConfigError(f"SLACK_BOT_TOKEN: Slack refused it ({exc.response.get('error')}).") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise unreachable(api_url(settings.slack_api_url), exc) from None
