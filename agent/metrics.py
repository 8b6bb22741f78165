"""Prometheus metrics, recorded where the work happens. Labels are bounded enums only: never a
user, channel, question or SQL text."""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agent.llm.turns import Usage

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)
TOKEN_TYPES = ("input", "output", "cache_read", "cache_creation")
FALLBACK_REASONS = ("overloaded", "rate_limited", "unavailable")  # agent/llm/turns.py's FallbackReason
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# The loop's guards and the chart tool's refusals: bounded label values, present as 0 from the start so a
# dashboard reads "0", not "No data", before the first one happens.
GUARDS = (
    "duplicate_sql",
    "citation_without_query",
    "no_data_answer",
    "think_only_rounds",
    "empty_answer",
    "repaired_tool_input",
    "malformed_tool_input",
    "context_compaction",
    "query_cap",
)
PREFLIGHT_OUTCOMES = ("passed", "stopped", "unavailable", "filtered")  # agent/pipeline/preflight.py
LOOKUP_TYPES = ("details", "search")  # what lookup_schema was asked for (a large warehouse's schema)
CHART_REFUSALS = ("unknown_query", "bad_column", "failed_query", "invalid", "too_large", "too_many", "render")
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Every other bounded label value, so each labelled series exists at 0 from start-up: a rate or an alert over
# it reads 0 after a restart, not nothing. Each mirrors its source (tests/agent/test_metrics.py compares them):
INTERFACES = ("slack", "web", "cli", "eval")  # agent/runner.py's Interface
CLASSIFICATIONS = ("data_analysis", "conversational", "clarification")  # agent/runner.py's Classification
OUTCOMES = ("answered", "capped", "no_data", "cancelled", "error")  # agent/runner.py's Outcome
ROLES = ("main", "synthesis", "followup", "examples", "judge")  # the `role` of each model call
SQL_STATUSES = ("ok", "error", "reused")
SQL_ERROR_CODES = ("none", "other")  # the codes themselves are ClickHouse's, counted as they happen
BUDGET_KINDS = ("tokens", "rows_read")  # agent/pipeline/question_budget.py
BUDGET_INTERFACES = ("web", "slack")
# bots/slack's: receive.py's KNOWN_EVENTS (plus button clicks and `other`), its Ignore, failures.py's Failure
SLACK_EVENTS = (
    "app_mention",
    "message",
    "app_home_opened",
    "assistant_thread_started",
    "assistant_thread_context_changed",
    "block_actions",
    "other",
)
SLACK_IGNORED = (
    "edit",
    "deletion",
    "own_message",
    "bot",
    "subtype",
    "empty",
    "team_not_allowed",
    "channel_not_allowed",
    "not_addressed",
    "mention_in_message",
    "other_event",
)
SLACK_FAILURES = (
    "model_busy",
    "model_setup",
    "database_unreachable",
    "query_timeout",
    "too_long",
    "thread_too_long",
    "rate_limited",
    "over_budget",
    "restarting",
    "not_in_channel",
    "slack_scope",
    "slack_busy",
    "asker_unknown",
    "lost",
    "internal",
)
SLACK_DUPLICATES = ("event", "message")
SLACK_DELIVERIES = ("stream", "update")
SLACK_FEEDBACK = ("up", "down")
# process/scheduler.py's: chats/schedules.py's Kind, where a delivery went, why a fire posted nothing, what failed
SCHEDULE_KINDS = ("question", "alert", "evals")
SCHEDULE_DESTINATIONS = ("inbox", "slack")
SCHEDULE_SKIPS = ("condition", "access", "destination", "no_job", "budget")
SCHEDULE_FAILURES = ("run", "delivery", "gave_up")


class SharedCollector(Collector, Protocol):
    """Figures of the shared state (the eval runs in the state store), not counted by this process: read
    again before each scrape (`refresh`), and served as they are whatever the number of workers."""

    key: str  # one of each per registry: added again, it replaces the earlier one

    async def refresh(self) -> None: ...


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.shared: dict[str, SharedCollector] = {}
        self.runs = Counter(
            "agent_runs_total",
            "Questions answered, by interface, classification and outcome.",
            ["interface", "classification", "outcome"],
            registry=registry,
        )
        self.llm_calls = Counter(
            "agent_llm_calls_total",
            "Model calls, by role (main, synthesis, followup) and status.",
            ["role", "status"],
            registry=registry,
        )
        self.llm_fallbacks = Counter(
            "agent_llm_fallbacks_total",
            "Times a call moved on to the next model in its role's list, by role (main, synthesis, followup, "
            "examples, judge) and reason (overloaded, rate_limited, unavailable).",
            ["role", "reason"],
            registry=registry,
        )
        self.llm_later_model_calls = Counter(
            "agent_llm_later_model_calls_total",
            "Model calls answered by a model after the first of the role's list: a fallback, or the cooldown "
            "after one, which sends calls to the next model without trying the first. By role.",
            ["role"],
            registry=registry,
        )
        self.tokens = Counter("agent_llm_tokens_total", "Model tokens, by type.", ["type"], registry=registry)
        self.sql_queries = Counter(
            "agent_sql_queries_total",
            "SQL queries from the agent, by status (ok, error, reused).",
            ["status"],
            registry=registry,
        )
        self.run_seconds = Histogram(
            "agent_run_duration_seconds", "Wall time of one question.", buckets=DURATION_BUCKETS, registry=registry
        )
        self.llm_seconds = Histogram(
            "agent_llm_duration_seconds",
            "Wall time of one model call.",
            ["role"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.sql_seconds = Histogram(
            "agent_sql_duration_seconds", "Wall time of one SQL query.", buckets=DURATION_BUCKETS, registry=registry
        )
        self.rounds = Histogram(
            "agent_run_rounds", "Model round-trips per question.", buckets=ROUND_BUCKETS, registry=registry
        )
        self.capped = Counter("agent_runs_capped_total", "Runs that hit the round cap.", registry=registry)
        self.guards = Counter(
            "agent_guard_interventions_total",
            "Times a loop guard stepped in, by guard.",
            ["guard"],
            registry=registry,
        )
        self.charts = Counter("agent_charts_total", "Charts drawn, by kind.", ["kind"], registry=registry)
        self.chart_errors = Counter(
            "agent_chart_errors_total",
            "Chart requests refused, by reason (unknown_query, bad_column, failed_query, invalid, too_large, too_many, "
            "render).",
            ["reason"],
            registry=registry,
        )
        self._figures(registry)
        self.schema_lookups = Counter(
            "agent_schema_lookups_total",
            "lookup_schema calls for a warehouse too large for the prompt, by type (details, search).",
            ["type"],
            registry=registry,
        )
        self.sql_preflights = Counter(
            "agent_sql_preflights_total",
            "Queries estimated (EXPLAIN ESTIMATE) before they ran, by outcome: passed, stopped (estimated past "
            "MAX_ESTIMATED_ROWS, not run; the model was told how to narrow it), unavailable (no estimate; it ran).",
            ["outcome"],
            registry=registry,
        )
        self._slack(registry)
        self._operations(registry)
        self._schedules(registry)
        self._start_series()

    def _start_series(self) -> None:
        """Every bounded label value's series, at 0 (web routes are started by web/request_metrics.py)."""
        series: list[tuple[Any, tuple[tuple[str, ...], ...]]] = [
            (self.runs, (INTERFACES, CLASSIFICATIONS, OUTCOMES)),
            (self.llm_calls, (ROLES, ("ok", "error"))),
            (self.llm_fallbacks, (ROLES, FALLBACK_REASONS)),
            (self.llm_later_model_calls, (ROLES,)),
            (self.llm_seconds, (ROLES,)),
            (self.tokens, (TOKEN_TYPES,)),
            (self.sql_queries, (SQL_STATUSES,)),
            (self.sql_errors, (SQL_ERROR_CODES,)),
            (self.guards, (GUARDS,)),
            (self.chart_errors, (CHART_REFUSALS,)),
            (self.schema_lookups, (LOOKUP_TYPES,)),
            (self.sql_preflights, (PREFLIGHT_OUTCOMES,)),
            (self.budget_stops, (BUDGET_KINDS,)),
            (self.budget_refusals, (BUDGET_INTERFACES,)),
            (self.first_event_seconds, (INTERFACES,)),
            (self.slack_events, (SLACK_EVENTS,)),
            (self.slack_ignored, (SLACK_IGNORED,)),
            (self.slack_duplicates, (SLACK_DUPLICATES,)),
            (self.slack_answers, (SLACK_DELIVERIES,)),
            (self.slack_errors, (SLACK_FAILURES,)),
            (self.slack_feedback, (SLACK_FEEDBACK,)),
            (self.schedule_fires, (SCHEDULE_KINDS, ("on_time", "late"))),
            (self.schedule_deliveries, (SCHEDULE_DESTINATIONS,)),
            (self.schedule_skips, (SCHEDULE_SKIPS,)),
            (self.schedule_failures, (SCHEDULE_FAILURES,)),
        ]
        for metric, label_values in series:
            for values in itertools.product(*label_values):
                metric.labels(*values)

    def _figures(self, registry: CollectorRegistry) -> None:
        """The figure check (agent/figures): what the answers people read state, and how much of it holds."""
        self.figures_checked = Counter(
            "agent_figures_checked_total", "Figures of final answers checked against their queries.", registry=registry
        )
        self.figures_verified = Counter(
            "agent_figures_verified_total", "Figures of final answers that their cited cells give.", registry=registry
        )
        self.figures_unverified = Counter(
            "agent_figures_unverified_total",
            "Figures of final answers that match nothing in their cited results, after the correction round.",
            registry=registry,
        )
        self.budget_stops = Counter(
            "agent_budget_stops_total",
            "Questions stopped at their budget and answered from what they had, by kind (tokens, rows_read).",
            ["kind"],
            registry=registry,
        )
        self.budget_refusals = Counter(
            "agent_budget_refusals_total",
            "Questions refused because the asker's daily budget was spent, by interface.",
            ["interface"],
            registry=registry,
        )
        self.figure_corrections = Counter(
            "agent_figure_corrections_total",
            "Answers sent back once to the model because figures matched nothing.",
            registry=registry,
        )

    def _schedules(self, registry: CollectorRegistry) -> None:
        """The scheduler's (process/scheduler.py): labels are its enums, never a schedule, owner or channel."""
        self.schedule_fires = Counter(
            "agent_schedule_fires_total",
            "Schedules fired (each once across workers), by kind and whether it ran late (the server was down).",
            ["kind", "timing"],
            registry=registry,
        )
        self.schedule_deliveries = Counter(
            "agent_schedule_deliveries_total",
            "Scheduled answers and alerts delivered, by where.",
            ["destination"],
            registry=registry,
        )
        self.schedule_skips = Counter(
            "agent_schedule_skips_total",
            "Fires that delivered nothing, by why: an alert's condition did not hold (or still held), the owner "
            "lost access, the destination no longer takes it, no job for the kind.",
            ["reason"],
            registry=registry,
        )
        self.schedule_failures = Counter(
            "agent_schedule_failures_total",
            "Fires that failed: running the question, delivering it (retried later), or given up on (owner told).",
            ["stage"],
            registry=registry,
        )

    def _slack(self, registry: CollectorRegistry) -> None:
        """The Slack adapter's. Its labels are enums of bots/slack (event types it knows, ignore reasons,
        failure kinds), never a team, channel, user or text."""
        self.slack_events = Counter(
            "agent_slack_events_total",
            "Slack events and button clicks received, by type (unknown types count as `other`).",
            ["type"],
            registry=registry,
        )
        self.slack_ignored = Counter(
            "agent_slack_events_ignored_total",
            "Slack messages and events not answered, by reason (edit, bot, own_message, empty, ...).",
            ["reason"],
            registry=registry,
        )
        self.slack_duplicates = Counter(
            "agent_slack_duplicates_total",
            "Slack deliveries dropped as already handled: `event` (a retried event id), `message` (the same "
            "message in another event, e.g. app_mention and message).",
            ["kind"],
            registry=registry,
        )
        self.slack_answers = Counter(
            "agent_slack_answers_total",
            "Answers posted in Slack, by delivery (stream: chat.startStream; update: post then update).",
            ["delivery"],
            registry=registry,
        )
        self.slack_errors = Counter(
            "agent_slack_errors_total",
            "Failures a Slack user was told about, by type (model_busy, database_unreachable, query_timeout, "
            "too_long, rate_limited, ...).",
            ["type"],
            registry=registry,
        )
        self.slack_first_progress_seconds = Histogram(
            "agent_slack_first_progress_seconds",
            "From receiving a Slack question to its first visible progress (status or progress message).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.slack_answer_seconds = Histogram(
            "agent_slack_answer_seconds",
            "From receiving a Slack question to its answer (or failure message) being posted whole.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.slack_feedback = Counter(
            "agent_slack_feedback_total", "Thumbs up / down on Slack answers.", ["value"], registry=registry
        )

    def _operations(self, registry: CollectorRegistry) -> None:
        """What the operations dashboard (deploy/grafana) reads beyond the loop's own counts. Labels: a route
        template and a status class, an interface, a ClickHouse error code; never a raw path."""
        self.web_requests = Counter(
            "agent_web_requests_total",
            "Web requests, by route template (`unmatched` when no route matched) and status class (2xx, 4xx, 5xx).",
            ["route", "status"],
            registry=registry,
        )
        self.first_event_seconds = Histogram(
            "agent_run_first_event_seconds",
            "From a question's start to its first event after `started` (thinking, a query, answer text or an "
            "error), by interface.",
            ["interface"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.loop_lag = Histogram(
            "agent_event_loop_lag_seconds",
            "How much later than asked the event loop woke up (sampled every 0.25 s): work that holds the loop "
            "delays every request the process serves.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.loop_lag_max = Gauge(
            "agent_event_loop_lag_max_seconds",
            "The worst event-loop lag of the last 30 s (with several workers, the worst worker's).",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.retention_deleted = Counter(
            "agent_retention_deleted_rows_total",
            "Rows deleted by retention (AGENT_RETENTION_DAYS), by table of the state file.",
            ["table"],
            registry=registry,
        )
        self.sql_errors = Counter(
            "agent_sql_errors_total",
            "Failed SQL queries from the agent, by ClickHouse error code (`none`: refused by the statement check "
            "before ClickHouse ran it, or a result that could not be read).",
            ["code"],
            registry=registry,
        )

    def add_shared(self, collector: SharedCollector) -> None:
        if (earlier := self.shared.pop(collector.key, None)) is not None:
            self.registry.unregister(earlier)
        self.registry.register(collector)
        self.shared[collector.key] = collector

    async def refresh_shared(self) -> None:
        """Read the shared figures again (each collector keeps its last when the state cannot be read)."""
        for collector in list(self.shared.values()):
            await collector.refresh()

    def count_sql_error(self, code: int | None) -> None:
        """One failed query, by its ClickHouse error code; anything outside ClickHouse's range of codes counts
        as `other`, so a code read from an error message cannot grow the label set."""
        label = "none" if code is None else str(code) if 0 < code < 2000 else "other"
        self.sql_errors.labels(label).inc()

    def count_fallback(self, role: str, reason: str) -> None:
        self.llm_fallbacks.labels(role, reason).inc()

    def count_tokens(self, usage: Usage) -> None:
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_creation", usage.cache_creation_tokens),
        ):
            self.tokens.labels(kind).inc(count)


_default: Metrics | None = None


def default_metrics() -> Metrics:
    """The process-wide metrics on the default registry (served at /metrics)."""
    global _default
    if _default is None:
        _default = Metrics()
    return _default


def exposition(metrics: Metrics) -> bytes:
    """What /metrics serves: this process's metrics; with several workers (`agent serve --workers N` sets
    PROMETHEUS_MULTIPROC_DIR), the sum over every worker, whichever worker Prometheus happens to reach."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        for collector in metrics.shared.values():  # the same in every worker: served once, never summed
            registry.register(collector)
        return generate_latest(registry)
    return generate_latest(metrics.registry)
