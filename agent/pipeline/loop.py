"""The pipeline: a think/execute_sql tool-calling loop that implements the Runner interface."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.access.policy import Policy
from agent.config import ModelRef
from agent.db import DatabaseUnavailable
from agent.llm import ContextOverflow, LLMClient, LLMError, ModelTurn
from agent.logs import context_fields, log_context
from agent.metrics import Metrics
from agent.pipeline import guards
from agent.pipeline.charting import ChartMaker
from agent.pipeline.context import (
    Message,
    append_text,
    assistant,
    estimate_tokens,
    history_messages,
    trim_tool_results,
    user_text,
    with_rolling_breakpoint,
)
from agent.pipeline.figures import FigureReview
from agent.pipeline.question_budget import QuestionBudget
from agent.pipeline.reporting import ReportRun
from agent.pipeline.request import RequestPrefix
from agent.pipeline.state import RunState
from agent.pipeline.tools import (
    SchemaLookup,
    SqlExecutor,
    ToolInputError,
    ToolOutcome,
    ask_clarification,
    parse_queries,
    run_think,
)
from agent.pricing import PriceList
from agent.prompts import PromptError, PromptLibrary
from agent.runner import (
    AnswerEvent,
    Checkpoint,
    CheckpointSink,
    ErrorEvent,
    EventSink,
    FollowupsEvent,
    Interface,
    Outcome,
    Platform,
    ReportRequest,
    RunResult,
    ThinkingEvent,
    Turn,
    ignore_events,
)
from agent.suggestions.followups import FollowupGenerator
from agent.tracing import span

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopSettings:
    """The loop's share of Settings (agent/config.py holds every default)."""

    model: tuple[ModelRef, ...]  # in order: the next answers when one is overloaded or unavailable
    max_tokens: int
    max_rounds: int
    context_tokens: int
    history_turns: int
    history_full_turns: int
    history_chars: int
    temperature: float | None  # None: send none (the API default)
    thinking_budget: int | None = None  # None: no extended thinking


class Pipeline:
    """Implements `Runner`. Receives its model client, database and prompts; constructs none."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        prefix: RequestPrefix,
        sql: SqlExecutor,
        prompts: PromptLibrary,
        settings: LoopSettings,
        metrics: Metrics,
        followups: FollowupGenerator | None = None,
        charts: ChartMaker | None = None,
        lookup: SchemaLookup | None = None,
        prices: PriceList | None = None,
        budget: QuestionBudget | None = None,
    ) -> None:
        self._llm, self._prefix, self._sql, self._prompts = llm, prefix, sql, prompts
        self._settings, self._metrics, self._followups = settings, metrics, followups
        self._charts, self._lookup = charts, lookup
        self._figures = FigureReview(prompts)
        self._prices = prices
        self._budget = budget or QuestionBudget()

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Platform = "cli",
        interface: Interface = "cli",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Policy | None = None,
        checkpoint: CheckpointSink | None = None,
        resume: Checkpoint | None = None,
        report: ReportRequest | None = None,
    ) -> RunResult:
        if resume is not None:
            _check_resumable(resume, question, policy)
        # An adapter's registry names the run; a run started directly (CLI, evals) gets a name here.
        run_id = context_fields().get("run_id") or uuid.uuid4().hex
        with log_context(run_id=run_id, interface=interface), span("agent.run", agent__interface=interface) as traced:
            log.debug("question", extra={"question": question})
            state = RunState(
                question=question,
                interface=interface,
                emit=on_event,
                metrics=self._metrics,
                run_id=run_id,
                policy=policy,
            )
            state.prices = self._prices
            if report is not None:  # asked for explicitly; its own part of the loop is agent/pipeline/reporting.py
                state.report = ReportRun(report, self._prompts, self._budget)
                followups = False
            if policy is not None and policy.reads_nothing:
                return await self._no_access(state, policy)
            durable = _Durable(checkpoint, resume, result_chars=self._sql.result_chars)
            result = await self._run(state, history, platform, on_event, followups, durable)
            traced.set(agent__outcome=result.outcome.value, agent__rounds=result.metrics.rounds)
            return result

    async def _no_access(self, state: RunState, policy: Policy) -> RunResult:
        """A policy that reads nothing (the default's "no data"): a polite answer naming who to ask for
        access, with no model call and no SQL."""
        state.answer = self._prompts.render("NO_ACCESS.md", contact=policy.contact)
        await state.emit(AnswerEvent(text=state.answer))
        state.mark_answered()
        result = state.to_result()
        result.transcript = [user_text(state.question), assistant([{"type": "text", "text": state.answer}])]
        state.record_finished(result)
        return result

    async def _opening(self, state: RunState, history: Sequence[Turn], durable: _Durable) -> list[Message]:
        """The messages of the first model call (history, then the question with what was retrieved for
        it), or, resumed, the checkpoint's: then the run's state is the checkpoint's too."""
        if durable.resume is not None:
            state.restore(durable.resume)
            durable.turn_start = durable.resume.turn_start
            log.info("run resumed after round %d", durable.resume.rounds, extra={"resumed": state.resumed})
            return list(durable.resume.messages)
        s = self._settings
        messages = history_messages(
            history, max_turns=s.history_turns, full_turns=s.history_full_turns, max_chars=s.history_chars
        )
        durable.turn_start = len(messages)
        messages.append(user_text(state.question))
        if state.report is not None:
            append_text(messages[-1], state.report.request_text())
        if retrieved := await self._prefix.retrieved(state.question, policy=state.policy):
            append_text(messages[-1], retrieved)
        await durable.save(state, 0, messages)
        return messages

    async def _run(
        self,
        state: RunState,
        history: Sequence[Turn],
        platform: Platform,
        on_event: EventSink,
        followups: bool,
        durable: _Durable,
    ) -> RunResult:
        question = state.question
        s = self._settings
        messages: list[Message] = []
        try:
            messages = await self._opening(state, history, durable)
            if state.report is not None:  # its budget counts from here (a Resume's from its checkpoint)
                state.report.attach(state, messages, durable.next_round - 1)
            request = {
                "model": s.model,
                "max_tokens": s.max_tokens,
                **await self._prefix.parts(platform, policy=state.policy),
                # Neutral capabilities, put in each provider's terms by agent/llm/capabilities.py.
                "temperature": s.temperature,
                "thinking_budget": s.thinking_budget,
            }
            await self._loop(state, request, messages, durable)
            if not state.clarification:  # a question asked back states no figures
                await self._figures.settle(state)
            if state.report is not None:
                await state.report.check_captions(state, self._figures)
            state.mark_answered()
            if state.clarification and state.followups:
                await on_event(FollowupsEvent(questions=state.followups))  # the options, as buttons
            elif (
                followups
                and self._followups
                and state.answer
                and state.outcome is not Outcome.NO_DATA
                and not self._budget.tokens_spent(state)  # a follow-up call is a model call too
            ):
                state.followups = await self._followups.generate(
                    question, state.answer, state.queries, on_usage=state.record_model_usage
                )
                if state.followups:
                    await on_event(FollowupsEvent(questions=state.followups))
        except asyncio.CancelledError:
            self._cancelled(state)
            if not state.clarification:
                await self._figures.settle_cancelled(state)
        except (LLMError, DatabaseUnavailable, PromptError) as exc:
            if not await self._figures.keep_answer(state, exc):
                state.outcome, state.error = Outcome.ERROR, str(exc)
                await on_event(ErrorEvent(message=str(exc)))
        except Exception as exc:  # the Runner promises a result, whatever broke
            log.exception("run failed unexpectedly")
            if not state.answer:
                state.outcome = Outcome.ERROR
                state.error = f"Something went wrong on our side ({type(exc).__name__}); the details are in the log."
                await on_event(ErrorEvent(message=state.error))
        result = state.to_result()
        result.transcript = _transcript(messages[durable.turn_start :], result)
        if state.report is not None:
            result.report = state.report.build(state, result)
        state.record_finished(result)
        return result  # how it ended is the caller's to tell (chats/runs.py publishes `done`)

    async def _loop(self, state: RunState, request: dict[str, Any], messages: list[Message], durable: _Durable) -> None:
        report, budget = state.report, state.report or self._budget
        max_rounds = report.max_rounds if report else self._settings.max_rounds
        for round_number in range(durable.next_round, max_rounds + 1):
            state.budget_spent = budget.spent(state)  # before every call, not only after tools
            if state.budget_spent:
                break
            if round_number == max_rounds - 1:
                wrap_up = report.penultimate_text() if report else self._prompts.render("loop/penultimate.md")
                append_text(messages[-1], wrap_up)
            turn = await self._model_turn(state, request, messages, role="main")
            messages.append(assistant(turn.content or [{"type": "text", "text": "(no reply)"}]))
            if not turn.tool_calls:
                if correction := self._check_answer(state, turn.text) or await self._figures.correction(state):
                    messages.append(user_text(correction))
                    await durable.save(state, round_number, messages)
                    continue
                return
            if report:
                await report.step_started(state, turn.tool_calls, turn)
            messages.append(await self._run_tools(state, turn.tool_calls))
            if report:
                await report.step_done(state)
            if state.clarification:
                return await self._ask_back(state)
            await durable.save(state, round_number, messages)
        else:
            state.budget_spent = budget.spent(state)
        await self._synthesize(state, request, messages)

    async def _model_turn(
        self, state: RunState, request: dict[str, Any], messages: list[Message], *, role: str, **extra: Any
    ) -> ModelTurn:
        fixed = estimate_tokens(request["system"], request["tools"], [])
        trim_tool_results(messages, self._settings.context_tokens, fixed)
        state.run_metrics.rounds += 1
        state.streamed_text = ""
        try:
            turn = await self._stream(state, {**request, **extra}, messages, role)
        except ContextOverflow:
            state.record_guard("context_compaction")
            trim_tool_results(messages, self._settings.context_tokens, fixed, force=True)
            turn = await self._stream(state, {**request, **extra}, messages, role)
        if turn.tool_calls and state.streamed_text:
            # Text before a tool call was narration, not the answer: show it as thinking instead.
            await state.emit(AnswerEvent(text="", restart=True))
            await state.emit(ThinkingEvent(text=turn.text))
        return turn

    async def _stream(self, state: RunState, request: dict[str, Any], messages: list[Message], role: str) -> ModelTurn:
        async def on_text(delta: str) -> None:
            state.streamed_text += delta
            await state.emit(AnswerEvent(text=delta))

        async def on_restart() -> None:
            state.streamed_text = ""
            await state.emit(AnswerEvent(text="", restart=True))

        try:
            turn = await self._llm.stream_turn(
                **request,
                messages=with_rolling_breakpoint(messages),
                on_text=on_text,
                on_restart=on_restart,
                on_fallback=state.record_fallback,
                on_usage=state.record_model_usage,  # an attempt cut short was billed too
                role=role,
            )
        except LLMError:
            state.record_failed_model_call(role)
            raise
        state.record_model_call(turn, role)
        return turn

    def _check_answer(self, state: RunState, text: str) -> str | None:
        """None to accept the answer; otherwise a correction to send back for one more try."""
        if not text:
            state.record_guard("empty_answer")
            state.answer, state.outcome = self._prompts.render("loop/no_data.md"), Outcome.NO_DATA
            return None
        cited = guards.dangling_citations(text, state)
        if cited and state.citation_retries == 0:
            state.citation_retries += 1
            state.record_guard("citation_without_query")
            answered = [q.id for q in state.queries if q.result.ok]
            return self._prompts.render("loop/citation_retry.md", citations=", ".join(cited), answered=answered)
        if cited:
            state.record_guard("no_data_answer")
            state.answer, state.outcome = self._prompts.render("loop/no_data.md"), Outcome.NO_DATA
            return None
        state.answer = text
        return None

    async def _run_tools(self, state: RunState, calls: list[dict[str, Any]]) -> Message:
        outcomes = await asyncio.gather(*(self._run_tool(state, call) for call in calls))
        message: Message = {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call["id"],
                    "content": outcome.content,
                    **({"is_error": True} if outcome.is_error else {}),
                }
                for call, outcome in zip(calls, outcomes, strict=True)
            ],
        }
        if guards.note_round_tools(state, [call["name"] for call in calls]):
            state.record_guard("think_only_rounds")
            append_text(message, self._prompts.render("loop/think_nudge.md", rounds=state.think_only_rounds))
        return message

    async def _run_tool(self, state: RunState, call: dict[str, Any]) -> ToolOutcome:
        try:
            if call["name"] == "think":
                outcome = await run_think(call["input"], state)
            elif call["name"] == "execute_sql":
                requests, repaired = parse_queries(call["input"])
                outcome = ToolOutcome(await self._sql.run(requests, state), repaired=repaired)
            elif call["name"] == "chart" and self._charts is not None:
                outcome = await self._charts.run(call["input"], state)
            elif call["name"] == "lookup_schema" and self._lookup is not None:
                outcome = await self._lookup.run(call["input"], state)
            elif call["name"] == "ask_clarification":
                outcome = ask_clarification(call["input"], state)
            else:
                raise ToolInputError(f"There is no tool named {call['name']!r}; use think, execute_sql or chart.")
        except ToolInputError as exc:
            state.record_guard("malformed_tool_input")
            return ToolOutcome(str(exc), is_error=True)
        if outcome.repaired:
            state.record_guard("repaired_tool_input")
        return outcome

    async def _ask_back(self, state: RunState) -> None:
        """The run ends with the clarifying question as its answer; the options follow as suggestions."""
        state.answer = self._prompts.render(
            "loop/clarification.md", question=state.clarification, options=state.followups
        )
        await state.emit(AnswerEvent(text=state.answer, restart=bool(state.streamed_text)))

    async def _synthesize(self, state: RunState, request: dict[str, Any], messages: list[Message]) -> None:
        """At the round cap or past the rows budget: one call with tools disabled answers from what was
        gathered. Same tools and system prefix, so the cache still hits. Past the token budget no call is
        made: the answer says what was gathered and why it stopped."""
        if state.report is not None:

            async def write(prompt: str) -> ModelTurn:
                append_text(messages[-1], prompt)
                turn = await self._model_turn(state, request, messages, role="synthesis", tool_choice={"type": "none"})
                messages.append(assistant(turn.content or [{"type": "text", "text": "(no reply)"}]))
                return turn

            return await state.report.synthesize(state, write, _gathered(state))
        state.outcome = Outcome.CAPPED
        if state.budget_spent and state.budget_spent.kind == "tokens":
            state.answer = state.note = QuestionBudget.stopped(self._prompts, state.budget_spent, _gathered(state))
            await state.emit(AnswerEvent(text=state.answer, restart=bool(state.streamed_text)))
            return
        append_text(messages[-1], self._prompts.render("loop/synthesize.md"))
        turn = await self._model_turn(state, request, messages, role="synthesis", tool_choice={"type": "none"})
        messages.append(assistant(turn.content or [{"type": "text", "text": "(no reply)"}]))
        state.answer = turn.text or self._prompts.render("loop/no_data.md")
        if state.budget_spent:
            counted = state.policy is None or not state.policy.filters_rows
            state.note = "\n\n" + QuestionBudget.note(self._prompts, state.budget_spent, counted=counted)
            state.answer += state.note

    def _cancelled(self, state: RunState) -> None:
        """Turn a cancelled run into a result instead of an exception. An answer that was already
        complete (cancelled while follow-ups were being suggested) stands as it is."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        if state.answer:
            return
        partial = state.streamed_text.strip() or _gathered(state)
        state.outcome = Outcome.CANCELLED
        state.answer = self._prompts.render("loop/cancelled.md", partial=partial)


@dataclass
class _Durable:
    """Where a run's checkpoints go (None: nowhere) and the one it resumed from."""

    sink: CheckpointSink | None
    resume: Checkpoint | None
    turn_start: int = 0
    result_chars: int = 0  # the cap results are sent to the model at: their text's stored form is a reference

    @property
    def next_round(self) -> int:
        return 1 if self.resume is None else self.resume.rounds + 1

    async def save(self, state: RunState, rounds: int, messages: list[Message]) -> None:
        """Hand the run's progress to the sink. A sink that fails costs the run its durability, not its answer."""
        if self.sink is None:
            return
        try:
            await self.sink(state.checkpoint(rounds, messages, self.turn_start, self.result_chars))
        except Exception:
            log.exception("could not checkpoint the run after round %d", rounds)


def _check_resumable(resume: Checkpoint, question: str, policy: Policy | None) -> None:
    """A checkpoint goes on only as the run it was taken from: the same question under the same policy."""
    if resume.question != question:
        raise ValueError("the checkpoint is another question's")
    if resume.policy != (policy.name if policy is not None else None):
        raise ValueError(f"the checkpoint was taken under policy {resume.policy!r}")


def _transcript(messages: list[Message], result: RunResult) -> list[Message]:
    """This turn's messages for the next question, ending in the answer as given. A cancelled or
    failed run keeps none: its messages may hold a tool call without a result."""
    if result.outcome in (Outcome.CANCELLED, Outcome.ERROR) or not messages or messages[-1]["role"] != "assistant":
        return []
    return [*messages[:-1], assistant([{"type": "text", "text": result.answer}])]


def _gathered(state: RunState) -> str:
    """The queries a run made, one a line, for an answer that was not written."""
    return "\n".join(
        f"{q.id}: {q.question} ({'failed' if q.result.error else _rows(q.result.row_count)})" for q in state.queries
    )


def _rows(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"
