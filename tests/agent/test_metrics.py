"""Metrics: the bounded label values a dashboard and the alerts read are there, at 0, from the start."""

from __future__ import annotations

import asyncio
import time
from typing import get_args

from prometheus_client import CollectorRegistry

from agent import metrics
from agent.config import Role
from agent.llm.turns import FALLBACK_REASONS
from agent.loop_lag import LoopLag
from agent.metrics import CHART_REFUSALS, GUARDS, TOKEN_TYPES, Metrics
from agent.runner import Classification, Interface, Outcome
from bots.slack.actions import FEEDBACK_VALUES
from bots.slack.failures import Failure
from bots.slack.receive import KNOWN_EVENTS, Ignore
from chats.schedule_deliveries import OutletName
from chats.schedules import Kind as ScheduleKind


def test_labelled_counters_start_at_zero_rather_than_missing() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    for name, label, values in (
        ("agent_guard_interventions_total", "guard", GUARDS),
        ("agent_chart_errors_total", "reason", CHART_REFUSALS),
        ("agent_llm_tokens_total", "type", TOKEN_TYPES),
    ):
        assert [registry.get_sample_value(name, {label: value}) for value in values] == [0.0] * len(values), name
    # Slack's too, in a process that does not run the bot: the dashboard is one for every process
    assert registry.get_sample_value("agent_slack_events_total", {"type": "app_mention"}) == 0.0
    assert registry.get_sample_value("agent_sql_errors_total", {"code": "none"}) == 0.0


def test_each_bounded_label_list_is_its_sources() -> None:
    """agent/ cannot import the adapters, so the label values are listed here; each list must be its source's."""
    assert get_args(Interface) == metrics.INTERFACES
    assert tuple(Classification) == metrics.CLASSIFICATIONS
    assert tuple(Outcome) == metrics.OUTCOMES
    assert metrics.FALLBACK_REASONS == FALLBACK_REASONS
    assert set(get_args(Role)) <= set(metrics.ROLES)
    assert (*KNOWN_EVENTS, "block_actions", "other") == metrics.SLACK_EVENTS
    assert tuple(Ignore) == metrics.SLACK_IGNORED
    assert tuple(Failure) == metrics.SLACK_FAILURES
    assert metrics.SLACK_FEEDBACK == FEEDBACK_VALUES
    assert get_args(ScheduleKind) == metrics.SCHEDULE_KINDS
    assert get_args(OutletName) == metrics.SCHEDULE_DESTINATIONS


def test_the_schedulers_series_exist_at_zero_from_start_up() -> None:
    registry = CollectorRegistry()
    metrics.Metrics(registry)
    for name, label, values in (
        ("agent_schedule_deliveries_total", "destination", metrics.SCHEDULE_DESTINATIONS),
        ("agent_schedule_skips_total", "reason", metrics.SCHEDULE_SKIPS),
        ("agent_schedule_failures_total", "stage", metrics.SCHEDULE_FAILURES),
    ):
        assert [registry.get_sample_value(name, {label: value}) for value in values] == [0.0] * len(values), name
    fires = {"kind": "alert", "timing": "late"}
    assert registry.get_sample_value("agent_schedule_fires_total", fires) == 0.0


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
