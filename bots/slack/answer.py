"""One question in a thread, from a claimed event to a posted answer.

Drives the run only through the RunRegistry and the ConversationStore, follows the run's event log
to show progress and stream the answer, and turns failures into messages a person can act on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.access.policy import Policies
from agent.config import Settings
from agent.knowledge import KnowledgeBase
from agent.logs import log_context
from agent.metrics import Metrics
from agent.runner import AnswerEvent, Outcome, RunResult, Turn
from agent.tracing import Noted, span
from bots.slack import blocks, refusals
from bots.slack.access import NO_POLICY_FILE, Access, access_for
from bots.slack.api_tiers import CallBudget
from bots.slack.charts import upload_charts
from bots.slack.failures import Failure, classify, explain
from bots.slack.people import SlackPeople
from bots.slack.plan import Plan
from bots.slack.progress import Progress
from bots.slack.receipt import receipt_blocks
from bots.slack.receive import Identity, Ignore, Question
from bots.slack.reply import AnswerWriter, Streaming
from bots.slack.reports import SlackReports
from bots.slack.schedules import repeat_block
from bots.slack.thread import answer_metadata, part_metadata, read_history, ts_micros
from chats.audit import Origin, record_refusal
from chats.conversations import ConversationStore, readable_under
from chats.daily_budgets import Refusal, Reservation
from chats.pacing import Pacing
from chats.report_runs import REPORT_RATE_WEIGHT
from chats.run_view import RunView
from chats.runs import RunHandle, RunRegistry, ShuttingDown

log = logging.getLogger(__name__)


@dataclass
class _Hold:
    """A question's hold on its asker's daily budget. Once its run started, the hold ends with the run
    (`on_done` settles it to the receipt), whatever fails in following it here; before, the handler ends it."""

    reservation: Reservation
    run_started: bool = False


MAX_TITLE_CHARS = 80


class Answerer:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        identity: Identity,
        store: ConversationStore,
        runs: RunRegistry,
        pacing: Pacing,
        settings: Settings,
        metrics: Metrics,
        knowledge: KnowledgeBase | None = None,
        people: SlackPeople | None = None,
        policies: Policies | None = None,
    ) -> None:
        """`policies`: the access file's (None: there is none, and every question runs as before)."""
        self._client, self._me, self._store, self._runs = client, identity, store, runs
        self._people = people or SlackPeople(lambda: client)
        self._policies = policies
        self._knowledge = knowledge
        self._settings, self._metrics, self._pacing = settings, metrics, pacing
        self._limit = pacing.rate_limit("slack:questions", settings.slack_rate_per_minute)
        self._budget = pacing.asker_budget(settings)
        self.streaming = Streaming()
        self._remembering: set[asyncio.Task[None]] = set()  # messages posted, being kept for a takeover
        self.budget = CallBudget(workers=pacing.workers)  # every answer's writes, against Slack's tiers
        self._reports = SlackReports(
            client=client, store=store, runs=runs, settings=settings, metrics=metrics, budget=self.budget
        )
        self._interval_s = settings.slack_progress_interval_s

    async def handle(self, question: Question) -> None:
        """Answer `question` unless it was handled before (a redelivery, or the same message in another
        event) or is not for the bot. Never raises: a failure becomes a message in the thread."""
        in_turn = False
        try:
            if question.event_id and not await self._store.claim_event(f"slack:event:{question.event_id}"):
                self._metrics.slack_duplicates.labels("event").inc()
                return
            if not await self._store.claim_event(question.message_key):  # the same message in another event
                self._metrics.slack_duplicates.labels("message").inc()
                return
            # After the thread's earlier messages, whichever worker has them (in the order they were sent).
            async with self._pacing.turn(question.conversation_key, position=ts_micros(question.ts)):
                in_turn = True
                await self._handle_in_turn(question)
        except asyncio.CancelledError:  # shutting down while it waited for its turn: say so, or it is lost
            if not in_turn:
                await asyncio.shield(self._tell_if_ours(question, Failure.RESTARTING))
            raise
        except ShuttingDown:
            await self._tell(question, Failure.RESTARTING)
        except SlackApiError as exc:
            await self._refused(question, exc)
        except Exception:  # a store failure, or a bug: say so, keep the trace in the log
            log.exception("answering a Slack question failed")
            await self._tell(question, Failure.INTERNAL)

    async def _handle_in_turn(self, question: Question) -> None:
        if not question.addressed and not await self._in_thread(question):
            self._metrics.slack_ignored.labels(Ignore.NOT_ADDRESSED.value).inc()
            return
        limit = self._settings.slack_max_message_chars
        if len(question.text) > limit:
            await self._refuse(question, Failure.TOO_LONG, length=len(question.text), limit=limit)
            return
        if (wait_s := await self._take_rate(question)) is not None:
            await self._refuse(question, Failure.RATE_LIMITED, wait_s=wait_s)
            return
        if not self._runs.accepting:
            await self._refuse(question, Failure.RESTARTING)
            return
        # held until the run settles; a report holds its own budget's worth
        worth = self._settings.agent_report_max_tokens if question.report else None
        booked = await self._budget.reserve(f"{question.team}:{question.user}", run_tokens=worth)
        if isinstance(booked, Refusal):
            self._metrics.budget_refusals.labels("slack").inc()
            await self._refuse(question, Failure.OVER_BUDGET, message=booked.message)
            return
        hold = _Hold(booked)
        try:
            await self._answer(question, hold)
        finally:
            if not hold.run_started:  # a run that started goes on past a failure: its on_done settles
                await self._budget.settle(booked, None)  # none started (refused, or failed): nothing is held

    async def _take_rate(self, question: Question) -> float | None:
        """Count the question against its asker's per-minute rate; a report counts as REPORT_RATE_WEIGHT."""
        for _ in range(REPORT_RATE_WEIGHT if question.report else 1):
            if (wait_s := await self._limit.take(f"{question.team}:{question.user}")) is not None:
                return wait_s
        return None

    async def refuse_unheard(self, question: Question, reason: str = Ignore.CHANNEL_NOT_ALLOWED.value) -> None:
        """A question the bot may not answer where it was asked (a channel not allowed): nothing is posted,
        but it is audited, once however often Slack delivers it. Never raises."""
        try:
            if await self._store.claim_event(question.message_key):
                await self.audit_refusal(question, reason, ask_slack=False)
        except Exception:
            log.exception("could not audit a Slack question in a channel not allowed")

    async def _refuse(self, question: Question, kind: Failure, **facts: Any) -> None:
        """Tell the asker why their question will not run, and leave its audit entry all the same."""
        await self._tell(question, kind, **facts)
        await self.audit_refusal(question, kind.value)

    async def audit_refusal(self, question: Question, reason: str, *, ask_slack: bool = True) -> None:
        """The audit entry of a question refused before its run: who asked (as a run would name them), where,
        and the policy it would have run under. Without `ask_slack` (a channel the bot may not act in spends
        no Slack call) the asker is named by their Slack team and user id. Logged, never raised, on failure."""
        try:
            if ask_slack:
                asker = await self._people.person(question.team, question.user, question.asker_team)
            else:
                asker = SlackPeople.unlooked(question.asker_team or question.team, question.user)
            access = access_for(question, asker, self._policies or NO_POLICY_FILE)
            origin = Origin(access.asker, "slack", question.channel, access.policy.name if self._policies else "")
            conversation_id = await self._store.find(question.conversation_key) or ""
            text = question.text[: self._settings.slack_max_message_chars]  # a refused text may be huge
            await record_refusal(self._runs.audit, origin, text, reason, conversation_id=conversation_id)
        except Exception:
            log.exception("could not write the audit entry of a refused Slack question")

    async def _tell_if_ours(self, question: Question, kind: Failure) -> None:
        with suppress(Exception):
            if question.addressed or await self._in_thread(question):
                await self._tell(question, kind)

    async def _in_thread(self, question: Question) -> bool:
        """The bot is part of this thread: it started it, or it answered in it before."""
        if question.parent_user_id == self._me.user_id:
            return True
        return await self._store.find(question.conversation_key) is not None

    async def _answer(self, question: Question, hold: _Hold) -> None:
        """One trace per answer (agent/tracing.py): its run and every Slack call made for it."""
        with span("slack.answer") as traced:
            await self._answer_traced(question, hold, traced)

    async def _answer_traced(self, question: Question, hold: _Hold, traced: Noted) -> None:
        view = RunView()  # the run as its events tell it: the plan, the progress and the outcome read it
        progress = self._progress(question, view)
        history, access = await self._prepare(question, progress)
        request = None
        if question.report:
            found = await self._reports.request(question, owner=access.owner)
            if isinstance(found, str):  # a Resume that cannot go on: say why
                await progress.finish("Stopped")
                await self._say(question, found)
                return
            question, request = found
        if question.assistant_thread and not history:
            await self._set_title(question)
        conversation_id = await self._store.create_conversation(
            question.text, key=question.conversation_key, interface="slack", owner=access.owner
        )
        policy = access.policy if self._policies is not None else None
        origin = Origin(access.asker, "slack", question.channel)
        delivery = delivery_of(question, hold.reservation, [progress.message_ts])

        async def settle(result: RunResult) -> None:
            await self._budget.settle(hold.reservation, result.receipt)

        if question.resume is not None:  # the report's next run, delivered here by whichever host ends it
            resumed = await self._reports.resume(
                question.resume, policy=policy, origin=origin, on_done=settle, delivery=delivery
            )
            if isinstance(resumed, str):
                await progress.finish("Stopped")
                await self._say(question, resumed)
                return
            handle = resumed
        else:
            handle = self._runs.start(
                conversation_id, question.text, history, platform="slack", interface="slack", on_done=settle,
                policy=policy, origin=origin, report=request, delivery=delivery,
            )  # fmt: skip
        hold.run_started = True
        traced.set(agent__run_id=handle.run_id)
        await self._post(question, handle, view, progress, delivery)

    def _progress(self, question: Question, view: RunView) -> Progress:
        return Progress(
            self._client,
            question.channel,
            question.thread_ts,
            assistant=question.assistant_thread,
            interval_s=self._interval_s,
            refresh_s=self._settings.slack_status_refresh_s,
            on_first=partial(self._first_progress, question),
            budget=self.budget,
            team=question.team,
            view=view,
        )

    async def _post(
        self, question: Question, handle: RunHandle, view: RunView, progress: Progress, delivery: dict[str, Any]
    ) -> None:
        """Follow the run's log from its start, streaming its plan and answer into the thread, then finish.
        The messages it posts are added to `delivery`, kept with the run for a host that takes it over."""
        writer = AnswerWriter(
            self._client,
            question.channel,
            question.thread_ts,
            recipient=(question.team, question.user),
            streaming=self.streaming,
            channel_type=question.channel_type,
            interval_s=self._interval_s,
            part_metadata=partial(part_metadata, handle.run_id),
            on_stopped=partial(self._runs.cancel, handle, "its reader stopped it in Slack"),
            on_posted=lambda: self._posted(handle, delivery, progress, writer),
            on_withdrawn=progress.reply_withdrawn,
            budget=self.budget,
            plan=Plan(handle.run_id, view, self._settings.agent_web_url, report=question.report),
        )
        progress.plan_shown = lambda: writer.showing_plan
        try:
            with log_context(run_id=handle.run_id, interface="slack"):  # its log lines and spans name the run
                await self._follow(handle, view, progress, writer, report=question.report)
                if handle.superseded:  # another host took the run over: its bot posts the answer
                    return
                if question.report:
                    await self._reports.deliver(question, handle, view, progress, writer)
                    return
                await self._deliver(question, handle.run_id, view, progress, writer)
        finally:  # after a failure or a shutdown, no painter outlives its job
            progress.cancel()
            writer.cancel()

    async def deliver_resumed(self, handle: RunHandle, delivery: dict[str, Any]) -> None:
        """A run another host started in a thread, taken over by this host when that one died: its answer (or
        why there is none) posted in the thread, as the first host would have. Never raises."""
        question = question_of(delivery)
        if question is None:
            log.error("run %s was taken over without a thread to answer in", handle.run_id)
            return
        try:
            await self._withdraw(question, delivery.get("messages") or [])
            progress = self._progress(question, view := RunView())
            await progress.begin()
            await self._post(question, handle, view, progress, {**delivery, "messages": []})
        except SlackApiError as exc:
            await self._refused(question, exc)
        except Exception:
            log.exception("answering a Slack question taken over from another host failed")
            await self._tell(question, Failure.INTERNAL)

    async def _withdraw(self, question: Question, messages: list[str]) -> None:
        """The first host's messages for this answer (its progress, a stream it never finished), taken out of
        the thread: the answer is posted whole again, once."""
        for ts in messages:
            await self.budget.take(question.team, "chat.delete", question.channel)
            try:
                await self._client.chat_delete(channel=question.channel, ts=ts)
            except SlackApiError as exc:  # already gone, say: the answer still goes out
                refusals.log_refusal(log, f"take back a message of a run taken over in {question.channel}", exc)

    async def _prepare(self, question: Question, progress: Progress) -> tuple[list[Turn], Access]:
        """The progress shown, and meanwhile the thread's history read and the asker named: then the policy
        the question runs under and whom it belongs to (access.py). An asker Slack could not name in a DM is
        told why they get the default policy."""
        history_task = asyncio.create_task(self._thread(question))
        asker_task = asyncio.create_task(self._people.person(question.team, question.user, question.asker_team))
        try:
            await progress.begin()
        except BaseException:
            history_task.cancel()
            asker_task.cancel()
            raise
        in_thread = await history_task
        if isinstance(in_thread, SlackApiError):  # said only now: a refusal that stopped begin() says it all
            refusals.log_refusal(log, f"read thread {question.thread_ts} (answering without its history)", in_thread)
            in_thread = []
        asker = await asker_task
        access = access_for(question, asker, self._policies or NO_POLICY_FILE)
        if access.unknown_asker and self._policies is not None:
            await self._tell(
                question, Failure.ASKER_UNKNOWN, scope=asker.missing_scope, reads_nothing=access.policy.reads_nothing
            )
        return await self._history(question, in_thread, access), access

    async def _thread(self, question: Question) -> list[tuple[str, Turn]] | SlackApiError:
        """The thread's earlier turns as it shows them, each with its run id."""
        try:
            return await read_history(
                self._client, question.channel, question.thread_ts, before_ts=question.ts, bot_id=self._me.bot_id
            )
        except SlackApiError as exc:
            return exc

    async def _history(self, question: Question, in_thread: list[tuple[str, Turn]], access: Access) -> list[Turn]:
        """The thread's earlier turns, each read whole from the store by its run id (the thread's own copy,
        where the store has none, may be shorter: a preview, Slack's rich text). A turn asked under a policy
        the question's does not cover is given as its question alone (chats/conversations.py)."""
        may_read = readable_under(self._policies, access.policy)
        stored = await self._store.turns_by_run(
            [run_id for run_id, _ in in_thread], key=question.conversation_key, may_read=may_read
        )
        return [stored.get(run_id, shown) for run_id, shown in in_thread]

    async def _set_title(self, question: Question) -> None:
        title = question.text if len(question.text) <= MAX_TITLE_CHARS else question.text[: MAX_TITLE_CHARS - 1] + "…"
        try:
            await self._client.assistant_threads_setTitle(
                channel_id=question.channel, thread_ts=question.thread_ts, title=blocks.escape(title)
            )
        except SlackApiError:
            log.info("no title for thread %s", question.thread_ts)

    async def _follow(
        self, handle: RunHandle, view: RunView, progress: Progress, writer: AnswerWriter, *, report: bool = False
    ) -> None:
        """The run's events as they come: the plan and the progress follow them; an answer's text streams
        (a report is posted in parts once it is done)."""
        async for event in self._runs.follow(handle):
            view.apply(event.body)
            if isinstance(event.body, AnswerEvent) and not report:  # the writer streams the text as it comes
                writer.restart() if event.body.restart else writer.add(event.body.text)
            writer.follow(event.body)
            progress.update(event.body)

    def _posted(self, handle: RunHandle, delivery: dict[str, Any], progress: Progress, writer: AnswerWriter) -> None:
        """A message of the answer was posted: the progress told, and the message kept in the run's delivery
        context (once the writer has it), so a host taking the run over takes it back."""
        progress.replied()

        async def remember() -> None:
            posted = [ts for ts in [progress.message_ts, *writer.posted] if ts]
            if posted != delivery.get("messages"):
                delivery["messages"] = posted
                await self._runs.update_delivery(handle, dict(delivery))

        task = asyncio.create_task(remember())
        self._remembering.add(task)
        task.add_done_callback(self._remembering.discard)

    async def _deliver(
        self, question: Question, run_id: str, view: RunView, progress: Progress, writer: AnswerWriter
    ) -> None:
        result = view.result
        if writer.stopped_by_user:  # the run was cancelled; what the person saw stays as it is
            await writer.abandon()
            await progress.finish("Stopped")
            return
        if result is None or result.outcome is Outcome.ERROR:
            kind = classify(view.error or (result.error if result else None), list(view.queries.values()))
            await writer.abandon()
            await progress.finish("Stopped")
            await self._tell(question, kind, seconds=self._settings.max_execution_time)
            return
        web_url = self._settings.agent_web_url
        cited = self._knowledge.cited(result.answer) if self._knowledge is not None else []
        # An answer that read data can be repeated on a schedule: its button beside the receipt.
        repeat = [repeat_block(run_id)] if view.queries else []
        buttons = (
            receipt_blocks(result)
            + repeat
            + blocks.answer_blocks(
                run_id,
                list(view.queries),
                result.followups,
                web_url,
                knowledge=cited,
                feedback_buttons=writer.showing_plan,
                dig_deeper=result.outcome in (Outcome.ANSWERED, Outcome.CAPPED),
            )
        )
        # The metadata is Slack's wire: each query's id, question and SQL, read back as the thread's history.
        queries = [{"id": q.query_id, "question": q.question, "sql": q.sql} for q in view.queries.values()]
        metadata = partial(answer_metadata, run_id, question=question.text, asked_ts=question.ts, queries=queries)
        delivery = await writer.finish(result.answer, buttons, metadata)
        if writer.stopped_by_user:
            await progress.finish("Stopped")
            return
        if delivery is None:  # an empty answer: the buttons still need a home
            await self._client.chat_postMessage(
                channel=question.channel,
                thread_ts=question.thread_ts,
                text="(no answer)",
                blocks=blocks.classic_feedback(buttons),
                **blocks.NO_PREVIEWS,
            )
            delivery = "update"
        if view.charts:
            try:
                await upload_charts(
                    self._client, self._metrics, channel=question.channel, thread_ts=question.thread_ts,
                    charts=view.charts, timeout_s=self._settings.chart_render_timeout_s,
                )  # fmt: skip
            except SlackApiError as exc:  # a routine refusal: the answer stands, the person is told why
                await self._refused(question, exc)
        seconds = time.perf_counter() - question.received_at
        await progress.finish(f"Answered in {seconds:.1f} s")
        self._metrics.slack_answers.labels(delivery).inc()
        self._metrics.slack_answer_seconds.observe(seconds)

    async def _tell(self, question: Question, kind: Failure, **facts: Any) -> None:
        self._metrics.slack_errors.labels(kind.value).inc()
        await self._say(question, explain(kind, **facts), doing=f"tell {question.channel} about a failure ({kind})")

    async def _say(self, question: Question, text: str, *, doing: str = "post in the thread") -> None:
        """`text` (plain, escaped here) in the question's thread; a refusal is logged."""
        try:
            await self._client.chat_postMessage(
                channel=question.channel, thread_ts=question.thread_ts, text=blocks.escape(text), **blocks.NO_PREVIEWS
            )
        except SlackApiError as exc:
            refusals.log_refusal(log, doing, exc, self._me.user_id)

    async def _refused(self, question: Question, exc: SlackApiError) -> None:
        """Slack refused a call: a routine refusal is one log line saying what to do, and a message to the
        person where one can be posted; anything else keeps its trace and reads as an internal failure."""
        if not refusals.routine(exc):
            log.exception("answering a Slack question failed")
            await self._tell(question, Failure.INTERNAL)
            return
        log.warning("Slack refused the answer in %s: %s", question.channel, refusals.advice(exc, self._me.user_id))
        kind = refusals.failure(exc)
        if kind is Failure.NOT_IN_CHANNEL:  # nowhere to say so
            self._metrics.slack_errors.labels(kind.value).inc()
            return
        await self._tell(question, kind, scope=refusals.needed_scope(exc))

    def _first_progress(self, question: Question) -> None:
        self._metrics.slack_first_progress_seconds.observe(time.perf_counter() - question.received_at)


def delivery_of(question: Question, reservation: Reservation, messages: list[str | None]) -> dict[str, Any]:
    """What another host's bot needs to answer `question` if it takes the run over (chats/durable.py): the
    thread, the asker's budget hold, and the messages posted so far (the bot there takes them back)."""
    return {"question": asdict(question), "reservation": asdict(reservation), "messages": [m for m in messages if m]}


def question_of(delivery: dict[str, Any]) -> Question | None:
    """The question a delivery context names, received now (its first host's clock means nothing here)."""
    try:
        return replace(Question(**delivery["question"]), received_at=time.perf_counter())
    except (KeyError, TypeError):
        return None
