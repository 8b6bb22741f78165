"""The answer, written into the thread as it is generated.

Streamed (chat.startStream / appendStream / stopStream) where the workspace has them; otherwise, or
when a stream breaks, posted then updated. Pieces go out at most once per interval. An answer longer
than Slack's Markdown limit continues in a new message; the last one carries the buttons and the
metadata that lets a later question read this turn back (bots/slack/thread.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.runner import WireEvent
from bots.slack import refusals
from bots.slack.api_tiers import CallBudget, Skipped
from bots.slack.blocks import (
    MAX_MARKDOWN,
    NO_PREVIEWS,
    classic_feedback,
    cut_point,
    markdown_block,
    preview,
    slack_markdown,
    split_markdown,
)
from bots.slack.plan import Plan
from bots.slack.progress import Painter
from bots.slack.streaming import Streaming

log = logging.getLogger(__name__)
BUTTONS_TEXT = "More on this answer"  # the stand-in text of buttons posted below an answer
# chat.appendStream / stopStream's answer once the person pressed Stop under the streaming answer.
STOPPED_BY_USER = "stopped_by_user"
__all__ = ["AnswerWriter", "Streaming"]


@dataclass
class Sent:
    ts: str
    text: str
    streaming: bool  # a stream still open (else a posted message, updated in place)
    part: int
    sealed: bool = False  # takes no more text
    shown: str = ""  # the text Slack last accepted for this message
    chunks: bool = False  # a stream started with chunks (the plan's): it takes only chunks


class AnswerWriter:
    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str,
        *,
        recipient: tuple[str, str],
        streaming: Streaming,
        interval_s: float,
        part_metadata: Callable[[int], dict[str, Any]],
        on_stopped: Callable[[], None] = lambda: None,
        on_posted: Callable[[], None] = lambda: None,
        on_withdrawn: Callable[[], None] = lambda: None,
        limit: int = MAX_MARKDOWN,
        channel_type: str = "channel",
        budget: CallBudget | None = None,
        plan: Plan | None = None,
    ) -> None:
        """`recipient`: the installing team and the person asking; `channel_type` (Slack's: channel, group,
        im, mpim) with the team says where streaming was found not to work. `budget`: the process's share of
        Slack's rate limits, shared by every answer. `plan`: the run's queries, shown as Slack's plan in the
        stream where the workspace has it (else the progress display lists them)."""
        self._client, self._channel, self._thread_ts = client, channel, thread_ts
        self._on_stopped = on_stopped
        self._on_posted = on_posted  # a message of the answer is in the thread (Slack clears the status)
        self._on_withdrawn = on_withdrawn  # ... and it was taken back
        self.stopped_by_user = False  # the person pressed Stop: nothing more is written
        self._team, self._user = recipient
        self._where = (self._team, channel_type)
        self._streaming, self._limit = streaming, limit
        self._budget = budget or CallBudget()
        self._plan = plan if plan is not None and streaming.plans_allowed(self._where) else None
        self._part_metadata = part_metadata
        self._painter = Painter(self._flush, interval_s)
        self._raw = ""
        self._restarted = False
        self._messages: list[Sent] = []
        self._placed = 0  # characters of the rendered answer already in messages
        self._final = False
        self._final_deadline = 0.0

    # --- fed by the run's events ---

    def add(self, text: str) -> None:
        self._raw += text
        self._painter.request()

    def follow(self, event: WireEvent) -> None:
        """A query started or answered: its task in the plan."""
        if self._plan is not None and self._plan.update(event):
            self._painter.request()

    @property
    def posted(self) -> list[str]:
        """The ts of each message of the answer so far."""
        return [message.ts for message in self._messages]

    @property
    def showing_plan(self) -> bool:
        """The run's queries are (to be) shown as Slack's plan in the stream, not by the progress display."""
        return self._plan is not None

    def restart(self) -> None:
        """Discard the text so far (it was narration before a tool call, or a retried stream)."""
        self._raw = ""
        self._restarted = True
        self._painter.request()

    # --- the end ---

    async def finish(
        self, answer: str, blocks: list[dict[str, Any]], final_metadata: Callable[[int], dict[str, Any]]
    ) -> str | None:
        """Send the rest of `answer` (the run's final word: when it is not what was streamed, say a
        no-data answer or a corrected one, the streamed text is replaced), then the buttons and the
        metadata with the last message. Returns the delivery (`stream` or `update`), or None when
        there was no answer text to send."""
        await self._painter.stop()
        self._final = True  # from here each write is the answer's last state: rate limits are waited out
        self._final_deadline = time.monotonic() + refusals.FINAL_DEADLINE_S  # ... together, this long
        if self._raw.strip() != answer.strip():
            self._raw, self._restarted = answer, True
        try:
            await self._flush(final=True)
        except SlackApiError as exc:  # an edit or a post was refused: the answer must still arrive whole
            refusals.log_refusal(log, "write the answer's last part", exc)
            if not await self._post_unshown():
                raise
        if not self._messages or self.stopped_by_user:
            return None
        last = self._messages[-1]
        delivery = "stream" if last.streaming else "update"
        await self._seal(last, blocks=blocks, metadata=final_metadata(last.part))
        return delivery

    def cancel(self) -> None:
        self._painter.cancel()

    async def abandon(self) -> None:
        """Take back whatever was sent (the run failed; a message saying so follows)."""
        await self._painter.stop()
        if not self.stopped_by_user:  # what the person stopped stays as they saw it
            await self._discard()

    # --- placing text ---

    async def _flush(self, final: bool = False) -> None:
        if self.stopped_by_user:
            return
        if self._restarted:
            self._restarted = False
            await self._discard()
        rendered = slack_markdown(self._raw, final=final)
        if self._plan is not None and self._plan.changed and self._placed >= len(rendered):
            await self._show_plan()  # else the plan's news goes out with the text
        while self._placed < len(rendered) and not self.stopped_by_user:
            current = self._messages[-1] if self._messages and not self._messages[-1].sealed else None
            used = len(current.text) if current else 0
            pending = rendered[self._placed :]
            if used + len(pending) <= self._limit:
                await self._put(current, pending)
                return
            cut = cut_point((current.text if current else "") + pending, used, self._limit)
            if cut > used:
                current = await self._put(current, pending[: cut - used])
            if current is not None:
                await self._seal(current, metadata=self._part_metadata(current.part))

    async def _put(self, current: Sent | None, piece: str) -> Sent:
        if current is None:
            current = await self._start(piece, part=len(self._messages))
            self._on_posted()
            self._messages.append(current)
            self._placed += len(piece)
            return current
        if current.streaming:
            await self._spend("chat.appendStream")
        # Counted as placed before the call: if it fails, the next update sends the whole text again.
        current.text += piece
        self._placed += len(piece)
        if current.streaming:
            try:
                await self._append(current, piece)
                current.shown = current.text
                return current
            except SlackApiError as exc:
                if self._stopped(exc, current):
                    return current
                log.info("streaming broke (%s); updating the message instead", _error(exc))
                await self._end_stream(current)  # with the plan's last states
                self._plan = None
                if self.stopped_by_user:
                    return current
        await self._update(current)
        return current

    async def _start(self, piece: str, part: int) -> Sent:
        if (streamed := await self._stream(piece, part)) is not None:
            return streamed
        self._plan = None  # a posted answer has no plan: the progress display lists the queries
        return await self._post(piece, part)

    async def _stream(self, piece: str, part: int) -> Sent | None:
        """A stream started with `piece` (and the plan, if shown), or None where none can start now."""
        if not (self._streaming.allowed(self._where) and self._budget.try_take(self._team, "chat.startStream")):
            return None
        plan = self._plan is not None
        try:
            content: dict[str, Any] = (
                {"chunks": self._plan_chunks(piece), "task_display_mode": "plan"} if plan else {"markdown_text": piece}
            )
            started = await self._client.chat_startStream(
                channel=self._channel,
                thread_ts=self._thread_ts,
                recipient_team_id=self._team,
                recipient_user_id=self._user,
                **content,
            )
            return Sent(started["ts"], piece, streaming=True, part=part, shown=piece, chunks=plan)
        except SlackApiError as exc:
            self._refused(_error(exc))
            log.info("no streaming here (%s); posting, then updating", _error(exc))
            return None

    async def _show_plan(self) -> None:
        """The plan's news: in the stream that shows it, or one started for it (the answer's text follows
        in it); where the stream cannot take it, the progress display lists the queries instead."""
        current = self._messages[-1] if self._messages else None
        if current is None:
            started = await self._stream("", part=0)
            if started is not None:
                self._on_posted()
                self._messages.append(started)
            else:  # no stream for it (refused, or no room in the budget): the progress display lists the queries
                self._plan = None
            return
        if not (current.streaming and current.chunks and not current.sealed):
            self._plan = None  # the answer went on without a stream: the progress display has the queries
            return
        await self._spend("chat.appendStream")
        try:
            await self._append(current, "")
        except SlackApiError as exc:
            if not self._stopped(exc, current):
                log.info("the plan could not be updated (%s)", _error(exc))

    def _plan_chunks(self, piece: str) -> list[dict[str, Any]]:
        changes = self._plan.take_changes() if self._plan is not None else []
        return [*changes, {"type": "markdown_text", "text": piece}] if piece else changes

    async def _append(self, message: Sent, piece: str) -> None:
        content = {"chunks": self._plan_chunks(piece)} if message.chunks else {"markdown_text": piece}
        try:
            await self._client.chat_appendStream(channel=self._channel, ts=message.ts, **content)
        except SlackApiError:
            self._plan_not_sent(message)
            raise

    def _plan_not_sent(self, message: Sent) -> None:
        """A write carrying the plan's news was refused: the next one carries the whole plan again, so no task
        stays shown as running."""
        if message.chunks and self._plan is not None:
            self._plan.resend()

    def _refused(self, error: str) -> None:
        """chat.startStream refused: where streaming, or the plan, does not work, is remembered."""
        self._streaming.refused(self._where, error)
        if self._plan is not None:
            self._streaming.plan_refused(self._where, error)
            self._plan = None

    async def _spend(self, method: str) -> None:
        """Draw a call from the process's budget: a final write waits for room; a progress write with no
        room left is skipped (Skipped), and the next one carries the latest state."""
        if self._final:
            await self._budget.take(self._team, method, self._channel)
        elif not self._budget.try_take(self._team, method, self._channel):
            raise Skipped(method)

    async def _post(self, piece: str, part: int) -> Sent:
        """`piece` in a message of its own (not streamed), updated in place later."""
        if not piece:  # the plan alone, where no stream can show it: nothing to post
            return Sent("", "", streaming=False, part=part)
        await self._spend("chat.postMessage")
        posted = await self._client.chat_postMessage(
            channel=self._channel,
            thread_ts=self._thread_ts,
            text=preview(piece),
            blocks=[markdown_block(piece)],
            **NO_PREVIEWS,
        )
        return Sent(posted["ts"], piece, streaming=False, part=part, shown=piece)

    async def _update(self, message: Sent, extra: list[dict[str, Any]] | None = None, **fields: Any) -> None:
        await self._spend("chat.update")

        async def update() -> Any:
            return await self._client.chat_update(
                channel=self._channel,
                ts=message.ts,
                text=preview(message.text),
                blocks=[markdown_block(message.text), *(extra or [])],
                **fields,
            )

        await (refusals.until_landed(update, deadline=self._final_deadline) if self._final else update())
        message.shown = message.text

    async def _seal(
        self, message: Sent, *, blocks: list[dict[str, Any]] | None = None, metadata: dict[str, Any]
    ) -> None:
        if message.streaming and not self.stopped_by_user:
            # Never skipped: the text is already cut here, so a later flush must not find this message open.
            await self._budget.take(self._team, "chat.stopStream", self._channel)
        message.sealed = True
        if self.stopped_by_user:
            return
        if message.streaming:
            try:
                plan = self._plan_chunks("") if message.chunks else []  # the tasks' last states, if not yet sent

                async def stop() -> Any:
                    return await self._client.chat_stopStream(
                        channel=self._channel,
                        ts=message.ts,
                        chunks=plan or None,
                        blocks=blocks or None,
                        metadata=metadata,
                    )

                await (refusals.until_landed(stop, deadline=self._final_deadline) if self._final else stop())
                message.streaming = False
                return
            except SlackApiError as exc:
                if self._stopped(exc, message):
                    return
                # The stream expired, or stopping with blocks failed: end it plainly (if it is still open, it
                # cannot be updated), then put the text, buttons and metadata in with an update.
                log.info("could not stop the stream (%s); updating the message instead", _error(exc))
                await self._end_stream(message)
                if self.stopped_by_user:
                    return
        if blocks:
            await self._update_with_buttons(message, blocks, metadata)
        else:
            await self._update(message, metadata=metadata)

    async def _update_with_buttons(self, message: Sent, blocks: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
        """The answer's last edit, with its buttons and metadata. When Slack refuses it (say, Slack's feedback
        buttons where the workspace lacks them: then with classic thumbs), the answer stands without the
        buttons (a good answer never reads as a failure), and they follow in a message below."""
        classic = classic_feedback(blocks)
        for attempt in [blocks] if classic == blocks else [blocks, classic]:
            try:
                await self._update(message, attempt, metadata=metadata)
                return
            except SlackApiError as exc:
                log.warning("Slack refused the answer's buttons (%s)", _error(exc))
        try:
            await self._update(message, metadata=metadata)
        except SlackApiError as exc:
            log.warning("Slack refused the answer's last edit (%s); it stays as it was sent", _error(exc))
        try:
            await self._spend("chat.postMessage")
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=BUTTONS_TEXT, blocks=classic, **NO_PREVIEWS
            )
        except SlackApiError as exc:
            log.warning("Slack refused the answer's buttons in a message of their own too (%s)", _error(exc))

    def _stopped(self, exc: SlackApiError, message: Sent) -> bool:
        """Slack says the person stopped this answer: write nothing more, and let the run be cancelled."""
        if _error(exc) != STOPPED_BY_USER:
            return False
        log.info("the answer in %s was stopped by its reader", self._channel)
        message.streaming, message.sealed = False, True
        if not self.stopped_by_user:
            self.stopped_by_user = True
            self._on_stopped()
        return True

    async def _post_unshown(self) -> bool:
        """After a refusal: every message stays as Slack last accepted it, and whatever of the answer it
        does not show yet follows in messages of their own. False when nothing could be posted."""
        rendered = slack_markdown(self._raw, final=True)
        shown = ""
        for message in self._messages:
            message.sealed, message.streaming = True, False
        for message in self._messages:
            shown += message.shown
            if message.shown != message.text:
                break  # the text after this one's accepted part is not shown yet
        if not rendered.startswith(shown):
            shown = ""
        unshown = rendered[len(shown) :]
        if not unshown.strip():
            return bool(self._messages)
        for piece in split_markdown(unshown, self._limit):
            try:
                self._messages.append(await self._post(piece, part=len(self._messages)))
            except SlackApiError as exc:
                refusals.log_refusal(log, "post the rest of the answer", exc)
                return bool(self._messages)
        self._placed = len(rendered)
        return True

    async def _end_stream(self, message: Sent) -> None:
        message.streaming = False
        self._budget.count(self._team, "chat.stopStream", self._channel)
        plan = self._plan_chunks("") if message.chunks else []
        try:
            await self._client.chat_stopStream(channel=self._channel, ts=message.ts, chunks=plan or None)
        except SlackApiError as exc:  # a Stop is noted; any other refusal: it already ended on Slack's side
            self._stopped(exc, message)

    async def _discard(self) -> None:
        for message in self._messages:
            if message.streaming:
                await self._end_stream(message)
            if self.stopped_by_user:
                return  # what the person stopped stays as they saw it
            self._budget.count(self._team, "chat.delete", self._channel)
            try:
                await self._client.chat_delete(channel=self._channel, ts=message.ts)
            except SlackApiError as exc:
                refusals.log_refusal(log, "delete a discarded answer", exc)
        if self._messages:
            self._on_withdrawn()
        self._messages = []
        self._placed = 0
        if self._plan is not None:
            self._plan.resend()


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or exc)
