"""The Slack bot: slack-bolt's AsyncApp, whose listeners only sort what arrives and queue it, so Slack
is answered at once and the work runs after. Served over HTTP (`routes()`, mounted at /slack/events)
or Socket Mode (`connect_socket_mode()`, a task on the caller's event loop).

Messages in one thread are answered one at a time, in order (chats/pacing.py, across workers too);
threads run side by side. Runs go through the RunRegistry and the ConversationStore like every other
adapter's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from functools import partial
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent.access.policy import Asker
from agent.app import AgentApp
from agent.config import ConfigError, Settings
from bots.slack import blocks, refusals
from bots.slack.access import dm_policy, wants_groups
from bots.slack.actions import Actions
from bots.slack.answer import Answerer
from bots.slack.channel_members import SlackChannelMembers
from bots.slack.people import SlackPeople
from bots.slack.prompts import PromptsGate, prompts_asker, prompts_place
from bots.slack.queues import SerialQueues
from bots.slack.receive import Allowed, Identity, Ignore, Ignored, Question, event_type, read_question
from bots.slack.schedules import MODAL, SlackOutlet, SlackSchedules, is_keyword
from bots.slack.web_client import TracedWebClient
from chats.runs import RunHandle, RunRegistry
from chats.state import ChatState

log = logging.getLogger(__name__)
DEFAULT_API_URL = "https://slack.com/api/"
MAX_SUGGESTED_PROMPTS = 4
# How long who a person is, their groups and a channel's members are kept: someone removed from a channel
# or a group keeps its access at most this long.
IDENTITY_TTL_S = 60.0
EXAMPLES_WAIT_S = 10.0  # how long a new assistant thread waits for example questions being written


class SlackBot:
    def __init__(self, agent: AgentApp, state: ChatState, runs: RunRegistry | None = None) -> None:
        settings = agent.settings
        check_slack_settings(settings)
        assert settings.slack_bot_token is not None
        self._agent, self._state, self._store, self._settings = agent, state, state.conversations, settings
        self._token = settings.slack_bot_token.get_secret_value()
        self._api_url = api_url(settings.slack_api_url)
        self._allowed = Allowed(frozenset(settings.slack_allowed_teams), frozenset(settings.slack_allowed_channels))
        self._metrics = agent.metrics
        self._queues = SerialQueues()
        self._clicks = itertools.count()
        self._prompts = PromptsGate(self._allowed)
        self.runs = runs or RunRegistry(agent.runner, self._store, max_event_bytes=agent.settings.max_event_bytes)
        self._pacing = state.pacing
        self._policies = agent.policies
        wants = wants_groups(self._policies) if self._policies is not None else False
        self.people = SlackPeople(lambda: self.client, wants_groups=wants, ttl_s=IDENTITY_TTL_S, seen=self._seen)
        # For the web: whether a signed-in person is in a channel an answer was asked in (chats/audiences.py).
        self.channel_members = SlackChannelMembers(
            lambda: self.client,
            lambda: self.identity.team_id if self.identity is not None else None,
            ttl_s=IDENTITY_TTL_S,
        )
        self.schedules = SlackSchedules(lambda: self.client, state.schedules, self._store, self.people, self._policies)
        secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else ""

        async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
            return self._authorization(enterprise_id, team_id)  # Bolt passes arguments by name, not to methods

        bolt_log = logging.getLogger("bots.slack.bolt")
        if not any(isinstance(f, _TokenFromSettings) for f in bolt_log.filters):
            bolt_log.addFilter(_TokenFromSettings())
        self.app = AsyncApp(
            name="clickhouse-analyst",  # unnamed, Bolt names it by walking the stack with its source (inspect.stack)
            client=TracedWebClient(base_url=self._api_url),  # Bolt's own; the token comes from authorize
            signing_secret=secret,
            authorize=authorize,
            ignoring_self_events_enabled=False,  # receive.py ignores them, and counts them
            attaching_conversation_kwargs_enabled=False,
            logger=bolt_log,
        )
        # Bolt takes only Python's re.Pattern; these two have no nested or adjacent repeats (linear time).
        self.app.event(re.compile(r".+"))(self._on_event)
        self.app.action(re.compile(r"^analyst_"))(self._on_action)
        self.app.view(MODAL)(self._on_view)
        self._handler = AsyncSlackRequestHandler(self.app)
        self._session: aiohttp.ClientSession | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self.client: AsyncWebClient | None = None
        self.identity: Identity | None = None
        self._answerer: Answerer | None = None
        self._actions: Actions | None = None

    @property
    def socket_mode(self) -> bool:
        return self._settings.slack_app_token is not None

    async def start(self) -> None:
        """Open the Web API client and learn who the bot is (auth.test), before any event is taken."""
        self._session = aiohttp.ClientSession()
        self.client = TracedWebClient(
            token=self._token,
            base_url=self._api_url,
            session=self._session,
            retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
        )
        try:
            who = await self.client.auth_test()
        except SlackApiError as exc:
            await self.close()
            raise ConfigError(f"SLACK_BOT_TOKEN: Slack refused it ({exc.response.get('error')}).") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            raise unreachable(self._api_url, exc) from None
        self.identity = Identity(team_id=who["team_id"], user_id=who["user_id"], bot_id=who.get("bot_id") or "")
        self._answerer = Answerer(
            client=self.client,
            identity=self.identity,
            store=self._store,
            runs=self.runs,
            pacing=self._pacing,
            settings=self._settings,
            metrics=self._metrics,
            knowledge=self._agent.knowledge,
            people=self.people,
            policies=self._policies,
        )
        self._actions = Actions(
            client=self.client,
            store=self._store,
            metrics=self._metrics,
            ask=self._ask,
            proposals=self._state.proposals,
            allowed=self._allowed,
            home_team=self.identity.team_id,
            schedules=self.schedules,
        )
        log.info("Slack bot %s ready in workspace %s", self.identity.user_id, self.identity.team_id)

    def routes(self) -> list[BaseRoute]:
        """Slack's HTTP endpoint, for Events API and interactivity alike."""
        return [Route("/slack/events", self._http, methods=["POST"])]

    async def _http(self, request: Request) -> Response:
        return await self._handler.handle(request)

    async def connect_socket_mode(self) -> None:
        assert self._settings.slack_app_token is not None and self.client is not None
        self._socket = AsyncSocketModeHandler(
            self.app, self._settings.slack_app_token.get_secret_value(), web_client=self.client
        )
        await self._socket.connect_async()

    async def idle(self) -> None:
        """Wait until everything received so far has been answered."""
        await self._queues.idle()

    async def stop_receiving(self) -> None:
        """Shutting down: close the Socket Mode connection, so Slack sends new events to the other
        connections (or to this app once it is back). In HTTP mode the server stops listening."""
        if self._socket is not None:
            socket, self._socket = self._socket, None
            await socket.close_async()

    async def drain(self, timeout_s: float) -> None:
        """Shutting down: take nothing new and let the questions received so far be answered and
        posted (each refused with a message once the registry stops taking runs), up to `timeout_s`."""
        await self.stop_receiving()
        if not self._queues.busy:
            return
        try:
            await asyncio.wait_for(self._queues.idle(), timeout_s)
        except TimeoutError:
            log.info("Slack answers still running after %.0f s are cancelled", timeout_s)

    async def close(self) -> None:
        await self.stop_receiving()
        await self._queues.close()
        await self.runs.shutdown()
        if self._session is not None:
            await self._session.close()

    # --- Bolt's side ---

    def _authorization(self, enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        """The identity learned at start-up, so no event waits for an auth.test of its own."""
        assert self.identity is not None, "start() runs before any request is served"
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id or self.identity.team_id,
            bot_token=self._token,
            bot_id=self.identity.bot_id,
            bot_user_id=self.identity.user_id,
        )

    async def _on_event(self, body: dict[str, Any], context: AsyncBoltContext) -> None:
        """Runs after Bolt has acknowledged the event: sorts it and queues the work, nothing more."""
        received_at = time.perf_counter()
        kind = event_type(body)
        self._metrics.slack_events.labels(kind).inc()
        if self.identity is None:
            return
        if where := prompts_place(body):
            team = str(context.team_id or self.identity.team_id)
            if not self._prompts.admits(body, team):
                self._metrics.slack_ignored.labels(Ignore.TEAM_NOT_ALLOWED.value).inc()
            elif self._prompts.due(*where):
                suggest = partial(self._suggest, *where, asker=(team, prompts_asker(body)))
                self._queues.add(f"suggest:{next(self._clicks)}", suggest)
            return
        found = read_question(body, self.identity, self._allowed, received_at, installed_team=context.team_id)
        if isinstance(found, Ignored):
            self._metrics.slack_ignored.labels(found.reason.value).inc()
            if found.refused is not None and self._answerer is not None:  # never answered, but audited
                self._queues.add(found.refused.message_key, partial(self._answerer.refuse_unheard, found.refused))
            return
        self._ask(found)

    async def _on_action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self._metrics.slack_events.labels("block_actions").inc()
        if self._actions is not None:
            self._queues.add(f"click:{next(self._clicks)}", partial(self._actions.handle, body))

    async def _on_view(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """The schedule modal submitted: made, or Slack shows what to fix beside each field."""
        errors = await self.schedules.submitted(body)
        await (ack(response_action="errors", errors=errors) if errors else ack())

    async def _seen(self, owner: str, asker: Asker) -> None:
        """Who a person asking in Slack is now: their schedules fire under the policy that picks."""
        await self._state.schedules.seen(
            owner, email=asker.email, slack_user=asker.slack_user, slack_usergroups=asker.slack_usergroups
        )

    def outlet(self) -> SlackOutlet:
        """Where schedules made in Slack deliver (process/scheduler.py)."""
        return SlackOutlet(lambda: self.client, self.channel_members, self._settings)

    def _ask(self, question: Question) -> None:
        assert self._answerer is not None
        if question.is_dm and is_keyword(question.text):  # a person's own schedules, in their DM
            listing = partial(self.schedules.post_list, question.team, question.channel, question.user)
            self._queues.add(question.message_key, listing)
            return
        # One process: the thread's queue keeps its order. Several workers: the shared turn does (by
        # message ts), so each message must take its place in line at once, not behind this worker's queue.
        queue = question.message_key if self._pacing.shared else question.conversation_key
        self._queues.add(queue, partial(self._answerer.handle, question))

    def deliver_resumed(self, handle: RunHandle, delivery: dict[str, Any]) -> None:
        """A run another host started in a thread, taken over by this one (its host died): its answer posted
        there by this bot, as a job of its own (a shutdown drains it like the others)."""
        assert self._answerer is not None
        self._queues.add(f"resumed:{handle.run_id}", partial(self._answerer.deliver_resumed, handle, delivery))

    async def _suggest(self, channel: str, thread_ts: str | None, *, asker: tuple[str, str]) -> None:
        """Offer example questions as suggested prompts: on a new assistant thread (legacy), or pinned on the
        DM when a person opens it (the agent experience: no thread_ts). Written from the schema the DM's
        policy sees (the asker's; the default's, which reads nothing, when Slack cannot say who they are)."""
        if self.client is None:
            return
        policy = None
        if self._policies is not None:
            policy = dm_policy(await self.people.person(*asker), self._policies)
        questions = (await self._agent.examples.get(wait_s=EXAMPLES_WAIT_S, policy=policy))[:MAX_SUGGESTED_PROMPTS]
        if not questions:  # a policy that reads nothing: nothing to suggest
            return
        # The model writes the examples from the schema, whose comments anyone with DDL may have written;
        # a prompt's message is posted as the person's own when clicked: no markup of data may act in it.
        # Prompts are plain text (not mrkdwn): markup is broken with an invisible space, not &-escaped.
        prompts = [{"title": blocks.no_pings(blocks.button_label(q)), "message": blocks.no_pings(q)} for q in questions]
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, title="Try asking", prompts=prompts
            )
        except SlackApiError as exc:
            refusals.log_refusal(log, f"suggest prompts in {channel}", exc)


def check_slack_settings(settings: Settings) -> None:
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN: the Slack bot needs its xoxb- token.")
    if settings.slack_app_token is None and settings.slack_signing_secret is None:
        raise ConfigError(
            "SLACK_SIGNING_SECRET: needed to verify Slack's requests in HTTP mode "
            "(or set SLACK_APP_TOKEN to use Socket Mode)."
        )


class _TokenFromSettings(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment by itself and, given a client too, warns at every
    start that the token is unused. That is meant: the token comes from the settings, read once, through
    `authorize`; the client Bolt is given only names SLACK_API_URL. So that one warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def unreachable(url: str, exc: BaseException) -> ConfigError:
    """Slack could not be reached at start (DNS, a refused connection, a timeout): one line, exit 2."""
    why = str(exc) or type(exc).__name__
    return ConfigError(f"Slack is unreachable at {url} ({why}); check the network, or SLACK_API_URL.")


def api_url(configured: str | None) -> str:
    """SLACK_API_URL as slack_sdk wants it: ending in a slash (it joins method names on)."""
    url = configured or DEFAULT_API_URL
    return url if url.endswith("/") else url + "/"
