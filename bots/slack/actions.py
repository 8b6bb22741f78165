"""The buttons under an answer: Show SQL (posts it in the thread), a follow-up (asks it in the
thread), Dig deeper (asks for a report on the answer's question, in the thread), Resume under a partial
report (continues it), thumbs up / down (stored with the turn; a thumbs-down asks what was wrong, for the eval case it
proposes), and the CSV link (Slack reports the click; the
browser does the rest)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.metrics import Metrics
from bots.slack import blocks, refusals
from bots.slack.receive import Allowed, Ignore, Question, channel_type_of, conversation_key
from chats.conversations import ConversationStore
from chats.proposals import ProposalStore

if TYPE_CHECKING:
    from bots.slack.schedules import SlackSchedules

log = logging.getLogger(__name__)
FEEDBACK_VALUES = ("up", "down")


@dataclass(frozen=True)
class Click:
    kind: str
    value: str
    block: str
    team: str
    channel: str
    thread_ts: str
    user: str

    @classmethod
    def of(cls, body: dict[str, Any]) -> Click:
        action = (body.get("actions") or [{}])[0]
        container = body.get("container") or {}
        message = body.get("message") or {}
        user = body.get("user") or {}
        return cls(
            kind=blocks.action_kind(str(action.get("action_id") or "")),
            value=str(action.get("value") or ""),
            block=str(action.get("block_id") or ""),
            team=str((body.get("team") or {}).get("id") or user.get("team_id") or ""),
            channel=str(container.get("channel_id") or (body.get("channel") or {}).get("id") or ""),
            thread_ts=str(container.get("thread_ts") or message.get("thread_ts") or container.get("message_ts") or ""),
            user=str(user.get("id") or ""),
        )


class Actions:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: ConversationStore,
        metrics: Metrics,
        ask: Callable[[Question], None],
        proposals: ProposalStore | None = None,
        allowed: Allowed | None = None,
        home_team: str = "",
        schedules: SlackSchedules | None = None,
    ) -> None:
        self._client, self._store, self._metrics, self._ask = client, store, metrics, ask
        self._proposals, self._schedules = proposals, schedules
        self._allowed, self._home_team = allowed or Allowed(), home_team

    async def handle(self, body: dict[str, Any]) -> None:
        """The payload's team is the clicker's (Bolt's context takes it from there too: interactivity
        payloads carry no `authorizations`), which in a Slack Connect channel is another organisation's:
        the conversation is the installing team's, as the typed questions' are, and both teams must pass
        the allowlist."""
        click = Click.of(body)
        if not click.channel or not click.thread_ts:
            return
        home = self._home_team or click.team
        if not self._allowed.admits_teams(home, click.team or None) or (
            self._allowed.channels and not click.channel.startswith("D") and click.channel not in self._allowed.channels
        ):
            self._metrics.slack_ignored.labels(Ignore.TEAM_NOT_ALLOWED.value).inc()
            return
        click = dataclasses.replace(click, team=home)
        try:
            if click.kind == blocks.SHOW_SQL:
                await self._show_sql(click)
            elif click.kind == blocks.FOLLOWUP and click.value.strip():
                await self._follow_up(click)
            elif click.kind == blocks.DIG_DEEPER and click.value.strip():
                await self._dig_deeper(click)
            elif click.kind == blocks.RESUME_REPORT and click.value.strip():
                await self._resume(click)
            elif click.kind == blocks.FEEDBACK:
                await self._feedback(click)
            elif click.kind in (blocks.REPEAT, blocks.SCHEDULE) and self._schedules is not None:
                await self._schedule(click, body)
            elif click.kind == blocks.REASON and self._proposals is not None and click.value.strip():
                await self._proposals.note_reason(click.block.removeprefix(f"{blocks.REASON}_"), click.value)
                await self._client.chat_postEphemeral(
                    channel=click.channel, user=click.user, thread_ts=click.thread_ts, text="Thanks, I will pass it on."
                )
        except SlackApiError as exc:
            refusals.log_refusal(log, f"answer a button in {click.channel}", exc)

    async def _schedule(self, click: Click, body: dict[str, Any]) -> None:
        """ "Repeat…" opens the schedule modal; a listed schedule's button pauses, resumes or deletes it."""
        assert self._schedules is not None
        where = {"team": click.team, "channel": click.channel, "user": click.user}
        if click.kind == blocks.REPEAT:
            await self._schedules.open_modal(body, run_id=click.value, **where)
            return
        action = str(((body.get("actions") or [{}])[0]).get("action_id") or "")
        ts = str((body.get("container") or {}).get("message_ts") or "")
        await self._schedules.manage(action, click.value, ts=ts, **where)

    async def _show_sql(self, click: Click) -> None:
        label = click.value.rsplit("-", 1)[-1]
        sql = await self._store.query_sql(click.value)
        if sql is None:
            text = f"I no longer have the SQL of {blocks.escape(label)}."
        else:
            code = blocks.escape(sql.replace("```", "'''"))
            text = f"*{blocks.escape(label)}*\n```\n{code}\n```"
        await self._client.chat_postMessage(
            channel=click.channel, thread_ts=click.thread_ts, text=text, **blocks.NO_PREVIEWS
        )

    async def _follow_up(self, click: Click) -> None:
        """Say who asked what in the thread, then ask it as if they had typed it there."""
        question = " ".join(click.value.split())
        await self._ask_in_thread(click, f"<@{click.user}> asked: {blocks.escape(question)}", question)

    async def _dig_deeper(self, click: Click) -> None:
        """A report on the question the answer above was to (read from the store by its run, in this thread's
        conversation only): said in the thread, then asked as if typed there with `report:`."""
        key = conversation_key(click.team, click.channel, click.thread_ts)
        turn = (await self._store.turns_by_run([click.value], key=key)).get(click.value)
        if turn is None:
            await self._client.chat_postEphemeral(
                channel=click.channel, user=click.user, thread_ts=click.thread_ts,
                text="I no longer have that answer's question; ask with `report: <your question>`.",
            )  # fmt: skip
            return
        said = f"<@{click.user}> asked for a report: {blocks.escape(turn.question)}"
        await self._ask_in_thread(click, said, turn.question, report=True)

    async def _resume(self, click: Click) -> None:
        """Continue a partial report where it stopped (its queries that succeeded are not run again)."""
        await self._ask_in_thread(click, f"<@{click.user}> resumed the report.", "", report=True, resume=click.value)

    async def _ask_in_thread(
        self, click: Click, said: str, question: str, *, report: bool = False, resume: str | None = None
    ) -> None:
        clicked_at = time.perf_counter()
        posted = await self._client.chat_postMessage(
            channel=click.channel, thread_ts=click.thread_ts, text=said, **blocks.NO_PREVIEWS
        )
        is_dm = click.channel.startswith("D")
        self._ask(
            Question(
                team=click.team,
                channel=click.channel,
                user=click.user,
                text=question,
                ts=str(posted["ts"]),
                thread_ts=click.thread_ts,
                event_id="",
                is_dm=is_dm,
                channel_type=channel_type_of(click.channel),
                assistant_thread=is_dm,  # tried; a DM without Slack's assistant falls back to a message
                addressed=True,
                parent_user_id=None,
                received_at=clicked_at,
                report=report,
                resume=resume,
            )
        )

    async def _feedback(self, click: Click) -> None:
        value, _, run_id = click.value.partition(":")
        if value not in FEEDBACK_VALUES or not run_id:
            return
        self._metrics.slack_feedback.labels(value).inc()
        if not await self._store.record_feedback(run_id, value, interface="slack"):
            log.info("feedback for run %s, which the store does not have", run_id)
        asks_why = value == "down" and self._proposals is not None
        await self._client.chat_postEphemeral(
            channel=click.channel,
            user=click.user,
            thread_ts=click.thread_ts,
            text="Thanks, noted.",
            blocks=blocks.reason_blocks(run_id) if asks_why else None,
        )
