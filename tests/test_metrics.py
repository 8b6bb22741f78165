"""Metrics: the bounded label values a dashboard and the alerts read are there, at 0, from the start."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from agent.metrics import CHART_REFUSALS, GUARDS, TOKEN_TYPES, Metrics


def test_labelled_counters_start_at_zero_rather_than_missing() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    for name, label, values in (
        ("agent_guard_interventions_total", "guard", GUARDS),
        ("agent_chart_errors_total", "reason", CHART_REFUSALS),
        ("agent_llm_tokens_total", "type", TOKEN_TYPES),
    ):
        assert [registry.get_sample_value(name, {label: value}) for value in values] == [0.0] * len(values), name
    assert registry.get_sample_value("agent_slack_events_total", {"type": "app_mention"}) is None  # Slack is off
