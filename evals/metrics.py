"""`agent evals` results as Prometheus metrics: what the latest run of each suite says (its pass rate, per
tag too, and a case's cost and p95 time), read from the state store (chats/eval_runs.py) just before each
scrape, so every host and worker serves the same figures whichever of them ran the job, and Prometheus
keeps their trend (deploy/grafana's "Evals" row, deploy/prometheus's AgentEvalPassRateDrop).

Labels are the suite files' own names, a suite and a tag, never a case's question or answer: as many
series as the suite files have names. A suite never run has no series (the panel reads "No data").
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from agent.metrics import Metrics
from chats.eval_runs import CaseOutcome, EvalRunStore, SuiteResults
from chats.state_file import STATE_ERRORS
from evals.report import percentile

log = logging.getLogger(__name__)

PASS_RATE = "agent_eval_pass_rate"
TAG_PASS_RATE = "agent_eval_tag_pass_rate"
CASE_COST = "agent_eval_case_cost_usd"
CASE_P95 = "agent_eval_case_p95_seconds"
CASES = "agent_eval_cases"
LAST_RUN = "agent_eval_last_run_timestamp_seconds"


class EvalMetrics:
    """A collector of the eval runs' figures (agent/metrics.py's SharedCollector)."""

    key = "evals"

    def __init__(self, store: EvalRunStore) -> None:
        self._store = store
        self._latest: list[SuiteResults] = []

    async def refresh(self) -> None:
        try:
            self._latest = await self._store.latest_by_suite()
        except STATE_ERRORS as exc:  # a scrape still answers, with the figures last read
            log.warning("could not read the eval runs for /metrics: %s", exc)

    def describe(self) -> Iterator[Metric]:
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        suite, tag, cost, p95, cases, last = _families()
        for results in self._latest:
            name = [results.suite]
            suite.add_metric(name, _rate(results.cases))
            for label, outcomes in sorted(_by_tag(results.cases).items()):
                tag.add_metric([results.suite, label], _rate(outcomes))
            priced = [o.cost_usd for o in results.cases if o.cost_usd is not None]
            if priced:
                cost.add_metric(name, sum(priced) / len(priced))
            p95.add_metric(name, percentile([o.latency_ms for o in results.cases], 0.95) / 1000)
            cases.add_metric(name, len(results.cases))
            last.add_metric(name, results.finished_at)
        yield from (suite, tag, cost, p95, cases, last)


def export_eval_metrics(metrics: Metrics, store: EvalRunStore) -> EvalMetrics:
    """Serve the eval runs' figures at this process's /metrics."""
    collector = EvalMetrics(store)
    metrics.add_shared(collector)
    return collector


def _families() -> tuple[GaugeMetricFamily, ...]:
    return (
        GaugeMetricFamily(
            PASS_RATE, "Share of cases passed (0 to 1) in the latest eval run of each suite.", labels=["suite"]
        ),
        GaugeMetricFamily(
            TAG_PASS_RATE,
            "Share of a tag's cases passed in the latest eval run of each suite.",
            labels=["suite", "tag"],
        ),
        GaugeMetricFamily(
            CASE_COST,
            "Mean model cost of one case in the latest eval run of each suite (priced cases), in dollars.",
            labels=["suite"],
        ),
        GaugeMetricFamily(
            CASE_P95, "95th percentile of one case's time to answer in the latest eval run.", labels=["suite"]
        ),
        GaugeMetricFamily(CASES, "Cases (attempts) run in the latest eval run of each suite.", labels=["suite"]),
        GaugeMetricFamily(
            LAST_RUN, "When the latest eval run of each suite finished (Unix seconds).", labels=["suite"]
        ),
    )


def _by_tag(outcomes: tuple[CaseOutcome, ...]) -> dict[str, list[CaseOutcome]]:
    tagged: dict[str, list[CaseOutcome]] = defaultdict(list)
    for outcome in outcomes:
        for tag in outcome.tags:
            tagged[tag].append(outcome)
    return tagged


def _rate(outcomes: tuple[CaseOutcome, ...] | list[CaseOutcome]) -> float:
    return sum(o.passed for o in outcomes) / len(outcomes) if outcomes else 0.0
