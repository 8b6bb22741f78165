"""What one run has gathered so far; becomes the RunResult. Also where per-run metrics accumulate
alongside the Prometheus ones, so the two always agree."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agent.access.policy import Policy
from agent.charts import Chart
from agent.figures import FigureReport
from agent.llm import Fallback, ModelTurn, Usage
from agent.metrics import Metrics
from agent.pricing import PriceList
from agent.receipts import Receipt

if TYPE_CHECKING:
    from agent.pipeline.question_budget import Overspent
    from agent.pipeline.reporting import ReportRun

from agent.runner import (
    Checkpoint,
    Classification,
    Event,
    EventSink,
    ExecutedQuery,
    FallbackEvent,
    Interface,
    ModelCalls,
    Outcome,
    RunMetrics,
    RunResult,
)

log = logging.getLogger(__name__)


@dataclass
class RunState:
    question: str
    interface: Interface
    emit: EventSink
    metrics: Metrics
    run_id: str = ""  # the owner of the run's share of the engine
    policy: Policy | None = None  # what every query of the run may read (None: all of the scope)
    started: float = field(default_factory=time.perf_counter)
    started_at: float = field(default_factory=time.time)  # the same moment by the wall clock (a checkpoint's)
    run_metrics: RunMetrics = field(default_factory=RunMetrics)
    queries: list[ExecutedQuery] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    answer: str = ""
    streamed_text: str = ""
    outcome: Outcome = Outcome.ANSWERED
    error: str | None = None
    followups: list[str] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    think_only_rounds: int = 0
    charts_claimed: int = 0
    query_ids_taken: int = 0
    executions_claimed: int = 0
    citation_retries: int = 0
    clarification: str = ""  # the question asked back (ask_clarification); it ends the run as its answer
    first_event_s: float | None = None
    model: str = ""  # the model that gave the last turn
    figures: FigureReport | None = None
    prices: PriceList | None = None  # for the receipt's cost
    model_usage: dict[str, tuple[int, Usage]] = field(default_factory=dict)  # calls and tokens by model
    answered_s: float | None = None
    budget_spent: Overspent | None = None  # why the question stopped at its budget
    report: ReportRun | None = None  # a report run's own part (agent/pipeline/reporting.py); None: an answer
    max_queries: int | None = None  # queries the run may execute (a report's budget); None: MAX_QUERIES_PER_RUN
    note: str = ""  # what the program added at the end of the answer (not the model's: its figures are not checked)
    figures_corrected: bool = False
    unverified_before_correction: int = 0
    resumed: int = 0  # times this run went on from a checkpoint

    def __post_init__(self) -> None:
        sink = self.emit

        async def emit(event: Event) -> None:  # the run's first event after `started` is timed
            if self.first_event_s is None:
                self._record_first_event()
            await sink(event)

        self.emit = emit

    def _record_first_event(self) -> None:
        self.first_event_s = time.perf_counter() - self.started
        self.metrics.first_event_seconds.labels(self.interface).observe(self.first_event_s)

    def checkpoint(
        self, rounds: int, messages: list[dict[str, Any]], turn_start: int, result_chars: int = 0
    ) -> Checkpoint:
        """What the run has gathered after `rounds` model rounds, for `restore` in this or another process
        (`result_chars`: the cap the model is sent results at). A deep copy: the loop goes on changing its
        messages (trimming) after the checkpoint is handed on."""
        return Checkpoint(
            question=self.question,
            policy=self.policy.name if self.policy is not None else None,
            rounds=rounds,
            messages=messages,
            turn_start=turn_start,
            queries=self.queries,
            charts=self.charts,
            thinking=self.thinking,
            answer=self.answer,
            metrics=self.run_metrics,
            model_calls=[ModelCalls(model=m, calls=c, **asdict(u)) for m, (c, u) in self.model_usage.items()],
            model=self.model,
            query_ids_taken=self.query_ids_taken,
            executions_claimed=self.executions_claimed,
            charts_claimed=self.charts_claimed,
            think_only_rounds=self.think_only_rounds,
            citation_retries=self.citation_retries,
            figures_corrected=self.figures_corrected,
            unverified_before_correction=self.unverified_before_correction,
            started_at=self.started_at,
            first_event_ms=None if self.first_event_s is None else round(self.first_event_s * 1000),
            resumed=self.resumed,
            result_chars=result_chars,
        ).model_copy(deep=True)

    def restore(self, saved: Checkpoint) -> None:
        """Go on from `saved`: what it gathered, its counters and its clock (the time the takeover took
        counts in the answer's time), resumed once more."""
        saved = saved.model_copy(deep=True)
        self.queries, self.charts, self.thinking = saved.queries, saved.charts, saved.thinking
        self.answer = saved.answer
        self.run_metrics, self.model = saved.metrics, saved.model
        self.model_usage = {
            c.model: (c.calls, Usage(**c.model_dump(exclude={"model", "calls"}))) for c in saved.model_calls
        }
        self.query_ids_taken, self.executions_claimed = saved.query_ids_taken, saved.executions_claimed
        self.charts_claimed, self.think_only_rounds = saved.charts_claimed, saved.think_only_rounds
        self.citation_retries = saved.citation_retries
        self.figures_corrected = saved.figures_corrected
        self.unverified_before_correction = saved.unverified_before_correction
        self.started_at = saved.started_at
        self.started = time.perf_counter() - max(0.0, time.time() - saved.started_at)
        self.first_event_s = None if saved.first_event_ms is None else saved.first_event_ms / 1000
        self.resumed = saved.resumed + 1

    def take_query_id(self) -> str:
        """The next Q id, taken before any await: the execute_sql calls of one round run side by side, and
        each must number its queries apart from the others'."""
        self.query_ids_taken += 1
        return f"Q{self.query_ids_taken}"

    def claim_execution(self, most: int) -> bool:
        """A place for one more query in the engine, taken before any await (as query ids are); False
        once `most` are taken, whichever of a round's calls asks."""
        if self.executions_claimed >= most:
            return False
        self.executions_claimed += 1
        return True

    def claim_chart(self, most: int) -> bool:
        """A place for one more chart, taken before any await (the charts of one round are drawn side by
        side); False once `most` are taken. A chart that fails gives its place back."""
        if self.charts_claimed >= most:
            return False
        self.charts_claimed += 1
        return True

    def release_chart(self) -> None:
        self.charts_claimed -= 1

    def record_model_call(self, turn: ModelTurn, role: str) -> None:
        self.record_model_usage(turn.model, turn.usage)  # the model that answered, after any fallback
        m = self.run_metrics
        m.llm_calls += 1
        m.llm_ms += round(turn.elapsed_s * 1000)
        usage = turn.usage
        m.input_tokens += usage.input_tokens
        m.output_tokens += usage.output_tokens
        m.cache_read_tokens += usage.cache_read_tokens
        m.cache_creation_tokens += usage.cache_creation_tokens
        self.metrics.llm_calls.labels(role, "ok").inc()
        if turn.later_model:
            self.metrics.llm_later_model_calls.labels(role).inc()
        self.metrics.llm_seconds.labels(role).observe(turn.elapsed_s)
        self.metrics.count_tokens(usage)
        self.model = turn.model

    async def record_fallback(self, fallback: Fallback) -> None:
        """A model of the list was passed over: counted, and a short note in the stream."""
        self.run_metrics.fallbacks += 1
        self.metrics.count_fallback(fallback.role, fallback.reason)
        reason = fallback.reason.replace("_", " ")
        note = f"{fallback.from_model} is {reason}; going on with {fallback.to_model}."
        await self.emit(
            FallbackEvent(from_model=fallback.from_model, to_model=fallback.to_model, reason=fallback.reason, note=note)
        )

    def record_model_usage(self, model: str, usage: Usage) -> None:
        """One call's tokens, for the receipt (the main loop's calls, follow-ups too)."""
        calls, total = self.model_usage.get(model, (0, Usage()))
        total.add(usage)
        self.model_usage[model] = (calls + 1, total)

    def mark_answered(self) -> None:
        self.answered_s = time.perf_counter() - self.started

    def receipt(self, total_ms: int) -> Receipt:
        return Receipt.build(
            usage=self.model_usage,
            prices=self.prices,
            rounds=self.run_metrics.rounds,
            reads=[self._shown_read(q) for q in self.queries if not q.reused_from],
            first_event_ms=None if self.first_event_s is None else round(self.first_event_s * 1000),
            answer_ms=round(self.answered_s * 1000) if self.answered_s is not None else total_ms,
            answered=self.outcome not in (Outcome.ERROR, Outcome.CANCELLED),  # a cancel after the answer keeps it
            resumed=self.resumed,
        )

    def _shown_read(self, query: ExecutedQuery) -> tuple[int | None, int | None]:
        """What the receipt may say a query read. Under a policy that filters rows, nothing: the engine
        counts the rows it read before the filter, so a whole-table count would tell the asker how many
        rows the policy hides (the result keeps them, for budgets and the audit)."""
        if self.policy is not None and self.policy.filters_rows:
            return None, None
        return query.result.rows_read, query.result.bytes_read

    def record_failed_model_call(self, role: str) -> None:
        self.run_metrics.llm_calls += 1
        self.metrics.llm_calls.labels(role, "error").inc()

    def record_query(self, query: ExecutedQuery) -> None:
        self.queries.append(query)
        self.queries.sort(key=lambda q: int(q.id[1:]))  # side-by-side calls finish in any order
        m = self.run_metrics
        status = "reused" if query.reused_from else ("ok" if query.result.ok else "error")
        self.metrics.sql_queries.labels(status).inc()
        if query.reused_from:
            return
        m.sql_queries += 1
        m.sql_ms += query.result.elapsed_ms
        self.metrics.sql_seconds.observe(query.result.elapsed_ms / 1000)
        if not query.result.ok:
            m.sql_errors += 1
            self.metrics.count_sql_error(query.result.error_code)

    def record_chart(self, chart: Chart) -> Chart:
        """The chart under its id (C1, C2, ... in the order they were drawn), recorded."""
        chart = chart.model_copy(update={"id": f"C{len(self.charts) + 1}"})
        self.charts.append(chart)
        self.metrics.charts.labels(chart.kind).inc()
        return chart

    def record_chart_error(self, reason: str) -> None:
        self.metrics.chart_errors.labels(reason).inc()

    def record_think(self, text: str) -> None:
        self.thinking.append(text)
        self.run_metrics.think_calls += 1

    def record_guard(self, name: str) -> None:
        counts = self.run_metrics.guard_interventions
        counts[name] = counts.get(name, 0) + 1
        self.metrics.guards.labels(name).inc()

    @property
    def classification(self) -> Classification:
        if self.clarification:
            return Classification.CLARIFICATION
        return Classification.DATA_ANALYSIS if self.queries else Classification.CONVERSATIONAL

    def to_result(self) -> RunResult:
        m = self.run_metrics
        m.total_ms = round((time.perf_counter() - self.started) * 1000)
        m.hit_cap = self.outcome is Outcome.CAPPED
        return RunResult(
            question=self.question,
            answer=self.answer,
            classification=self.classification,
            outcome=self.outcome,
            thinking=self.thinking,
            queries=self.queries,
            followups=self.followups,
            charts=self.charts,
            metrics=m,
            cancelled=self.outcome is Outcome.CANCELLED,
            error=self.error,
            model=self.model,
            figures=self.figures,
            receipt=self.receipt(m.total_ms),
            policy=self.policy.name if self.policy is not None else None,
            resumed=self.resumed,
        )

    def record_finished(self, result: RunResult) -> None:
        if self.first_event_s is None and result.outcome is not Outcome.CANCELLED:
            self._record_first_event()  # nothing streamed: the error (or the `done` of its result) is first
        self.metrics.runs.labels(self.interface, result.classification.value, result.outcome.value).inc()
        self.metrics.run_seconds.observe(result.metrics.total_ms / 1000)
        self.metrics.rounds.observe(result.metrics.rounds)
        if result.metrics.hit_cap:
            self.metrics.capped.inc()
        m = result.metrics
        log.info(
            "run %s",
            result.outcome.value,
            extra={
                "outcome": result.outcome.value,
                "classification": result.classification.value,
                "total_ms": m.total_ms,
                "first_event_ms": None if self.first_event_s is None else round(self.first_event_s * 1000),
                "llm_ms": m.llm_ms,
                "sql_ms": m.sql_ms,
                "rounds": m.rounds,
                "llm_calls": m.llm_calls,
                "sql_queries": m.sql_queries,
                "sql_errors": m.sql_errors,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
                "cache_read_tokens": m.cache_read_tokens,
                "model": result.model,
                "fallbacks": m.fallbacks,
            },
        )
