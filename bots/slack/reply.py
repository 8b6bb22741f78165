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

from bots.slack import refusals
from bots.slack.blocks import (
    MAX_MARKDOWN,
    NO_PREVIEWS,
    cut_point,
    markdown_block,
    preview,
    slack_markdown,
    split_markdown,
)
from bots.slack.progress import Painter

log = logging.getLogger(__name__)
# Answers from chat.startStream that mean streaming does not work here (this workspace, this kind of
# conversation) for now: remembered, and tried again after STREAMING_RETRY_S (a scope can be added, a
# workspace can gain the methods).
NO_STREAMING = {
    "unknown_method",
    "method_deprecated",
    "missing_scope",
    "not_allowed_token_type",
    "channel_type_not_supported",
}
STREAMING_RETRY_S = 600.0
BUTTONS_TEXT = "More on this answer"  # the stand-in text of buttons posted below an answer
# chat.appendStream / stopStream's answer once the person pressed Stop under the streaming answer.
STOPPED_BY_USER = "stopped_by_user"


class Streaming:
    """Where to try streaming: remembered per workspace and channel type once Slack says it does not work
    there (NO_STREAMING), and tried there again after `retry_s`; elsewhere it is still tried."""

    def __init__(self, retry_s: float = STREAMING_RETRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_s, self.clock = retry_s, clock
        self._off_until: dict[tuple[str, str], float] = {}

    def allowed(self, where: tuple[str, str]) -> bool:
        until = self._off_until.get(where)
        if until is not None and self.clock() >= until:
            del self._off_until[where]
            return True
        return until is None

    def refused(self, where: tuple[str, str], error: str) -> None:
        if error in NO_STREAMING:
            self._off_until[where] = self.clock() + self.retry_s


@dataclass
class Sent:
    ts: str
    text: str
    streaming: bool  # a stream still open (else a posted message, updated in place)
    part: int
    sealed: bool = False  # takes no more text
    shown: str = ""  # the text Slack last accepted for this message


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
    ) -> None:
        """`recipient`: the installing team and the person asking; `channel_type` (Slack's: channel, group,
        im, mpim) with the team says where streaming was found not to work."""
        self._client, self._channel, self._thread_ts = client, channel, thread_ts
        self._on_stopped = on_stopped
        self._on_posted = on_posted  # a message of the answer is in the thread (Slack clears the status)
        self._on_withdrawn = on_withdrawn  # ... and it was taken back
        self.stopped_by_user = False  # the person pressed Stop: nothing more is written
        self._team, self._user = recipient
        self._where = (self._team, channel_type)
        self._streaming, self._limit = streaming, limit
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
        # Counted as placed before the call: if it fails, the next update sends the whole text again.
        current.text += piece
        self._placed += len(piece)
        if current.streaming:
            try:
                await self._client.chat_appendStream(channel=self._channel, ts=current.ts, markdown_text=piece)
                current.shown = current.text
                return current
            except SlackApiError as exc:
                if self._stopped(exc, current):
                    return current
                log.info("streaming broke (%s); updating the message instead", _error(exc))
                await self._end_stream(current)
                if self.stopped_by_user:
                    return current
        await self._update(current)
        return current

    async def _start(self, piece: str, part: int) -> Sent:
        if self._streaming.allowed(self._where):
            try:
                started = await self._client.chat_startStream(
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    markdown_text=piece,
                    recipient_team_id=self._team,
                    recipient_user_id=self._user,
                )
                return Sent(started["ts"], piece, streaming=True, part=part, shown=piece)
            except SlackApiError as exc:
                self._streaming.refused(self._where, _error(exc))
                log.info("no streaming here (%s); posting, then updating", _error(exc))
        return await self._post(piece, part)

    async def _post(self, piece: str, part: int) -> Sent:
        """`piece` in a message of its own (not streamed), updated in place later."""
        posted = await self._client.chat_postMessage(
            channel=self._channel,
            thread_ts=self._thread_ts,
            text=preview(piece),
            blocks=[markdown_block(piece)],
            **NO_PREVIEWS,
        )
        return Sent(posted["ts"], piece, streaming=False, part=part, shown=piece)

    async def _update(self, message: Sent, extra: list[dict[str, Any]] | None = None, **fields: Any) -> None:
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
        message.sealed = True
        if self.stopped_by_user:
            return
        if message.streaming:
            try:

                async def stop() -> Any:
                    return await self._client.chat_stopStream(
                        channel=self._channel, ts=message.ts, blocks=blocks or None, metadata=metadata
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
        """The answer's last edit, with its buttons and metadata. When Slack refuses it, the answer stands
        without the buttons (a good answer never reads as a failure), and they follow in a message below."""
        try:
            await self._update(message, blocks, metadata=metadata)
            return
        except SlackApiError as exc:
            log.warning("Slack refused the answer's buttons (%s); posting them below it", _error(exc))
        try:
            await self._update(message, metadata=metadata)
        except SlackApiError as exc:
            log.warning("Slack refused the answer's last edit (%s); it stays as it was sent", _error(exc))
        try:
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=BUTTONS_TEXT, blocks=blocks, **NO_PREVIEWS
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
        try:
            await self._client.chat_stopStream(channel=self._channel, ts=message.ts)
        except SlackApiError as exc:  # a Stop is noted; any other refusal: it already ended on Slack's side
            self._stopped(exc, message)

    async def _discard(self) -> None:
        for message in self._messages:
            if message.streaming:
                await self._end_stream(message)
            if self.stopped_by_user:
                return  # what the person stopped stays as they saw it
            try:
                await self._client.chat_delete(channel=self._channel, ts=message.ts)
            except SlackApiError as exc:
                refusals.log_refusal(log, "delete a discarded answer", exc)
        if self._messages:
            self._on_withdrawn()
        self._messages = []
        self._placed = 0


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or exc)
