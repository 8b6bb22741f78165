"""`agent serve` and `agent slack`: the web chat and the Slack bot in one process, or the bot alone.

One process, because the embedded engine allows one process per data directory. Slack arrives over
HTTP at /slack/events on the same app, or, when SLACK_APP_TOKEN is set, over Socket Mode as a task on
the same event loop. Whatever runs, /healthz and /metrics are served.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_sdk.errors import SlackApiError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent.app import AgentApp
from agent.config import ConfigError, Settings
from agent.conversations import ConversationStore
from agent.db import DatabaseUnavailable
from bots.slack import SlackBot
from web.app import create_app
from web.server import check_exposure, server_options


@dataclass
class Service:
    """What one process serves: the agent, its conversation store, the bot (if any) and the HTTP app."""

    agent: AgentApp
    store: ConversationStore
    bot: SlackBot | None
    app: Starlette
    owns_agent: bool = True  # False when the caller passed the agent in (and closes it)
    closed: bool = False

    @classmethod
    async def open(cls, settings: Settings, *, web: bool, slack: bool, agent: AgentApp | None = None) -> Service:
        owns_agent = agent is None
        agent = agent or AgentApp.start(settings)
        store = ConversationStore(settings.agent_data_dir / "conversations.sqlite3")
        bot: SlackBot | None = None
        try:
            if slack:
                bot = SlackBot(agent, store)
                await bot.start()
            routes = bot.routes() if bot is not None and not bot.socket_mode else []
            app = create_app(agent, store, extra_routes=routes) if web else slack_app(agent, routes)
        except BaseException:
            if bot is not None:
                await bot.close()
            if owns_agent:
                await agent.close()
            store.close()
            raise
        app.state.settings = settings
        return cls(agent=agent, store=store, bot=bot, app=app, owns_agent=owns_agent)

    @property
    def slack_mode(self) -> str:
        if self.bot is None:
            return "off"
        return "Socket Mode" if self.bot.socket_mode else "HTTP at /slack/events"

    async def run(self, server: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        """Serve until the server is told to stop (Ctrl-C, or `server.should_exit`)."""
        if self.bot is not None and self.bot.socket_mode:
            try:
                await self.bot.connect_socket_mode()
            except SlackApiError as exc:
                raise ConfigError(f"SLACK_APP_TOKEN: Slack refused it ({exc.response.get('error')}).") from None
        await server.serve(sockets=sockets)

    async def close(self) -> None:
        """The bot first (its runs use the agent), then the agent and the store. Once."""
        if self.closed:
            return
        self.closed = True
        if self.bot is not None:
            await self.bot.close()
        if self.owns_agent:
            await self.agent.close()
        self.store.close()


def slack_app(agent: AgentApp, routes: list[BaseRoute]) -> Starlette:
    """The bot alone: Slack's endpoint (HTTP mode), /healthz and /metrics."""

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(agent.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        checks = {"settings": "ok" if agent.settings.anthropic_api_key else "ANTHROPIC_API_KEY is not set"}
        try:
            await agent.db.ping()
            checks["database"] = "ok"
        except DatabaseUnavailable as exc:
            checks["database"] = str(exc)
        healthy = all(value == "ok" for value in checks.values())
        return JSONResponse({"status": "ok" if healthy else "unhealthy", **checks}, status_code=200 if healthy else 503)

    return Starlette(routes=[*routes, Route("/healthz", healthz), Route("/metrics", metrics)])


def serve(settings: Settings, *, host: str, port: int, web: bool) -> None:
    """`agent serve` (web=True: the chat, plus Slack when SLACK_BOT_TOKEN is set) or `agent slack`."""
    if web:
        check_exposure(settings, host)
    slack = settings.slack_bot_token is not None or not web
    asyncio.run(_serve(settings, host=host, port=port, web=web, slack=slack))


async def _serve(settings: Settings, *, host: str, port: int, web: bool, slack: bool) -> None:
    service = await Service.open(settings, web=web, slack=slack)
    try:
        config = uvicorn.Config(
            service.app, host=host, port=port, log_level=settings.log_level.lower(), **server_options(settings)
        )
        what = "the chat" if web else "the Slack bot"
        print(f"Serving {what} on http://{host}:{port}; Slack: {service.slack_mode}  (Ctrl-C to stop)", flush=True)
        if web and settings.anthropic_api_key is None:
            print("warning: ANTHROPIC_API_KEY is not set; questions will fail until it is.", flush=True)
        await service.run(uvicorn.Server(config))
    finally:
        await service.close()
