"""Prometheus metrics, recorded where the work happens. Labels are bounded enums only: never a
user, channel, question or SQL text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

if TYPE_CHECKING:
    from agent.llm import Usage

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)
TOKEN_TYPES = ("input", "output", "cache_read", "cache_creation")


class Metrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
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
        for token_type in TOKEN_TYPES:
            self.tokens.labels(token_type)

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
