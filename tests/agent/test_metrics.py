"""Metrics: the bounded label values a dashboard and the alerts read are there, at 0, from the start."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from agent.loop_lag import LoopLag
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


async def test_a_frozen_event_loop_is_recorded_as_lag() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(Metrics(registry), interval_s=0.01)
    async with lag.running():
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # what a CPU-heavy step on the loop does to everyone else
        await asyncio.sleep(0.05)
    assert registry.get_sample_value("agent_event_loop_lag_seconds_count") >= 3
    assert registry.get_sample_value("agent_event_loop_lag_max_seconds") >= 0.25
    assert registry.get_sample_value("agent_event_loop_lag_seconds_bucket", {"le": "0.25"}) < (
        registry.get_sample_value("agent_event_loop_lag_seconds_count")
    )


def test_the_worst_lag_forgets_what_left_its_window() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(Metrics(registry), window_s=30.0)
    lag.record(now=100.0, lag=2.0)
    lag.record(now=120.0, lag=0.01)
    assert registry.get_sample_value("agent_event_loop_lag_max_seconds") == 2.0
    lag.record(now=131.0, lag=0.02)
    assert registry.get_sample_value("agent_event_loop_lag_max_seconds") == 0.02


def test_fallbacks_start_at_zero_with_the_reasons_the_client_gives() -> None:
    from agent import llm, metrics

    registry = CollectorRegistry()
    Metrics(registry)
    assert metrics.FALLBACK_REASONS == llm.FALLBACK_REASONS
    values = [
        registry.get_sample_value("agent_llm_fallbacks_total", {"role": "main", "reason": r})
        for r in llm.FALLBACK_REASONS
    ]
    assert values == [0.0] * 3
