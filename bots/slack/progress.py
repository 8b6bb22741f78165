"""What a person sees while the agent works. In an assistant thread: its status ("is running Q1:
flights per carrier…"), set again every `refresh_s` while the run works, since Slack removes a status
two minutes after it was set when no message follows. Elsewhere: one progress message in the thread,
edited at most once per interval, listing the steps so far ("Q1 Flights per carrier, 16 rows")."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.runner import AnswerEvent, ExecutingEvent, FallbackEvent, ResultEvent, ThinkingEvent, WireEvent
from bots.slack import refusals
from bots.slack.api_tiers import CallBudget, Skipped
from bots.slack.blocks import NO_PREVIEWS, escape
from chats.run_view import QueryView, RunView

log = logging.getLogger(__name__)
MAX_STATUS_CHARS = 100
MAX_STEPS_SHOWN = 15
MAX_STEP_QUESTION_CHARS = 120


class Painter:
    """Runs `paint` when asked: at once if it has not run for `interval_s`, else when that much time
    has passed; requests made meanwhile collapse into one, so each call shows the latest state and
    calls never overlap. `stop()` lets a call in flight finish, then ends."""

    def __init__(self, paint: Callable[[], Awaitable[None]], interval_s: float) -> None:
        self._paint, self._interval_s = paint, interval_s
        self._wanted = asyncio.Event()
        self._stopping = False
        self._last = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        self._wanted.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="slack-painter")

    async def _run(self) -> None:
        while True:
            await self._wanted.wait()
            if self._stopping:
                return
            delay = self._last + self._interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._stopping:
                return
            self._wanted.clear()
            self._last = time.monotonic()
            try:
                await self._paint()
            except Skipped:  # no room in the rate-limit budget: a later paint shows the latest state
                self._wanted.set()
            except SlackApiError as exc:  # the next paint carries the latest state anyway
                refusals.log_refusal(log, "update the thread", exc)
            except Exception:
                log.warning("a Slack update failed", exc_info=True)

    async def stop(self) -> None:
        self._stopping = True
        self._wanted.set()
        if self._task is not None:
            await self._task

    def cancel(self) -> None:
        """Drop a painter that was not stopped (its job failed, or the process is shutting down)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()


def step_line(query: QueryView) -> str:
    """A query as a step of the progress message: `• *Q1* Flights per carrier, 16 rows`."""
    question = query.question[:MAX_STEP_QUESTION_CHARS]
    if query.running:
        detail = "running…"
    elif query.error:
        detail = "failed"
    elif query.reused_from:
        detail = f"same as {query.reused_from}"
    else:
        detail = f"{query.row_count:,} row{'s' if query.row_count != 1 else ''}"
    return f"• *{query.query_id}* {escape(question)}, {detail}"


class Progress:
    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        *,
        assistant: bool,
        interval_s: float,
        refresh_s: float = 60.0,
        on_first: Callable[[], None] = lambda: None,
        budget: CallBudget | None = None,
        team: str = "",
        view: RunView,
    ) -> None:
        """`budget` (with the installing `team`): the process's share of Slack's rate limits; an edit with
        no room is skipped (the next shows the latest state), the first and the last wait for room. `view`:
        the run so far, which the answerer keeps (the steps are its queries)."""
        self._client, self._channel, self._thread_ts = client, channel, thread_ts
        self._budget, self._team = budget or CallBudget(), team
        self.plan_shown: Callable[[], bool] = lambda: False  # the answer's stream shows the steps instead
        self._assistant = assistant
        self._refresh_s = refresh_s
        self._status_lock = asyncio.Lock()  # a refresh never lands after the status was cleared
        self._finishing = False
        self._keepalive: asyncio.Task[None] | None = None
        self._on_first = on_first
        self._painter = Painter(self._paint, interval_s)
        self._view = view
        self._activity = "Thinking"
        self._message_ts: str | None = None
        self._status_shown = ""
        self._replied = False

    async def begin(self) -> None:
        """Show that the question was heard, now (not throttled)."""
        await self._paint(first=True)
        self._on_first()
        if self._assistant and self._message_ts is None:
            self._keepalive = asyncio.create_task(self._keep_status(), name="slack-status-refresh")

    async def _keep_status(self) -> None:
        """ "A two minute timeout applies, which will cause the status to be removed if no message has been
        sent" (docs.slack.dev/reference/methods/assistant.threads.setStatus): set it again while the run works."""
        while True:
            await asyncio.sleep(self._refresh_s)
            async with self._status_lock:
                if self._finishing or not self._assistant or self._message_ts is not None:
                    return
                if self._replied:  # the answer's message shows the work; a withdrawn one brings this back
                    continue
                if not self._budget.try_take(self._team, "assistant.threads.setStatus"):
                    continue  # the next refresh, well within the two minutes
                try:
                    status = self._status()
                    await self._client.assistant_threads_setStatus(
                        channel_id=self._channel, thread_ts=self._thread_ts, status=status
                    )
                    self._status_shown = status
                except SlackApiError as exc:
                    refusals.log_refusal(log, f"refresh the status in {self._channel}", exc)
                except Exception as exc:  # a dropped connection: the next refresh tries again, the loop stays
                    log.warning("could not refresh the status in %s: %s", self._channel, type(exc).__name__)

    @property
    def message_ts(self) -> str | None:
        """The progress message's, once posted (None: none, or the assistant thread's status shows it)."""
        return self._message_ts

    def replied(self) -> None:
        """The answer's first message is in the thread. "The status will be automatically cleared when the app
        sends a reply" (.../assistant.threads.setStatus): while a message of the answer shows, it shows the
        work, and no status is set over it. A status set in flight as the reply went out may have landed
        after it: it is cleared once more."""
        self._replied = True
        self._painter.request()

    def reply_withdrawn(self) -> None:
        """The answer's messages were taken back (narration before a query): the status shows the work again."""
        self._replied = False
        self._painter.request()

    def update(self, event: WireEvent) -> None:
        """What the run is doing now, from its latest event (the view has taken it already)."""
        match event:
            case ThinkingEvent():
                self._activity = "Thinking"
            case FallbackEvent(to_model=to_model):
                self._activity = f"Thinking (on {to_model}, the first model being busy)"
            case ExecutingEvent(query_id=query_id, question=asked):
                self._activity = f"Running {query_id}: {asked}"
            case ResultEvent(query_id=query_id) if query_id in self._view.queries:
                if not any(query.running for query in self._view.queries.values()):
                    self._activity = "Thinking"
            case AnswerEvent():
                if self._activity == "Writing the answer":
                    return
                self._activity = "Writing the answer"
            case _:
                return
        self._painter.request()

    def cancel(self) -> None:
        self._painter.cancel()
        if self._keepalive is not None:
            self._keepalive.cancel()

    async def finish(self, outcome: str) -> None:
        """The last word: the status cleared, or the progress message's final steps and `outcome`."""
        await self._painter.stop()
        self._activity = outcome
        async with self._status_lock:
            self._finishing = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        try:
            if self._message_ts is None and self._assistant:
                await self._set_status("", final=True)
            else:
                await self._edit(final=True)
        except SlackApiError as exc:
            refusals.log_refusal(log, f"finish the progress display in {self._channel}", exc)

    async def _paint(self, first: bool = False) -> None:
        if self._assistant and self._message_ts is None:
            if self._replied:
                await self._set_status("", final=True)
                return
            try:
                await self._set_status(self._status(), final=first)  # the acknowledgement waits for room
                return
            except SlackApiError as exc:  # not an assistant thread after all, or no status there
                log.info("no assistant status in %s (%s); using a progress message", self._channel, exc)
                self._assistant = False
        await self._edit(final=False, first=first)

    def _status(self) -> str:
        status = f"is {self._activity[0].lower()}{self._activity[1:]}…"
        return escape(status if len(status) <= MAX_STATUS_CHARS else status[: MAX_STATUS_CHARS - 1] + "…")

    async def _set_status(self, status: str, *, final: bool) -> None:
        if status != self._status_shown:
            await self._spend("assistant.threads.setStatus", final=final)
            await self._client.assistant_threads_setStatus(
                channel_id=self._channel, thread_ts=self._thread_ts, status=status
            )
            self._status_shown = status

    async def _edit(self, *, final: bool, first: bool = False) -> None:
        """The progress message: posted, then edited; `final`: its last state, `first`: the question's
        acknowledgement (both wait for room in the budget)."""
        text = self._text(final)
        method = "chat.postMessage" if self._message_ts is None else "chat.update"
        await self._spend(method, final=final or first)
        if self._message_ts is None:
            posted = await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=text, **NO_PREVIEWS
            )
            self._message_ts = posted["ts"]
        else:
            await self._client.chat_update(channel=self._channel, ts=self._message_ts, text=text)

    async def _spend(self, method: str, *, final: bool) -> None:
        if final:
            await self._budget.take(self._team, method, self._channel)
        elif not self._budget.try_take(self._team, method, self._channel):
            raise Skipped(method)

    def _text(self, final: bool) -> str:
        head = f"_{escape(self._activity)}{'' if final else '…'}_"
        steps = [] if self.plan_shown() else [step_line(query) for query in self._view.queries.values()]
        if len(steps) > MAX_STEPS_SHOWN:
            steps = [f"• … {len(steps) - MAX_STEPS_SHOWN} earlier", *steps[-MAX_STEPS_SHOWN:]]
        return "\n".join([head, *steps])
