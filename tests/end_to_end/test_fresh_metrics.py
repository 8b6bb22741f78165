"""A process just started already exposes every series the dashboards and alert rules read, each bounded
label value at 0: after a restart a rate or an alert reads 0, not nothing. The process is a real `agent serve`
(the web chat; Slack not configured, no data loaded), read over HTTP before anything has happened."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from pathlib import Path
from typing import get_args

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent.llm.turns import FALLBACK_REASONS
from agent.metrics import GUARDS, ROLES, TOKEN_TYPES
from agent.runner import Classification, Interface, Outcome
from bots.slack.actions import FEEDBACK_VALUES
from bots.slack.failures import Failure
from bots.slack.receive import KNOWN_EVENTS, Ignore
from tests.end_to_end.test_serve_process import Served

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
NAME = re.compile(r"\b(agent_[a-z0-9_]+)")

# Each labelled metric the deploy files read, and its bounded label values, from their sources.
BOUNDED: dict[str, dict[str, tuple[str, ...]]] = {
    "agent_runs_total": {
        "interface": get_args(Interface),
        "classification": tuple(Classification),
        "outcome": tuple(Outcome),
    },
    "agent_llm_calls_total": {"role": ROLES, "status": ("ok", "error")},
    "agent_llm_fallbacks_total": {"role": ROLES, "reason": FALLBACK_REASONS},
    "agent_llm_later_model_calls_total": {"role": ROLES},
    "agent_llm_tokens_total": {"type": TOKEN_TYPES},
    "agent_sql_queries_total": {"status": ("ok", "error", "reused")},
    "agent_sql_errors_total": {"code": ("none", "other")},
    "agent_guard_interventions_total": {"guard": GUARDS},
    "agent_web_requests_total": {"route": ("/api/chat",), "status": ("2xx", "4xx", "5xx")},
    "agent_run_first_event_seconds_count": {"interface": get_args(Interface)},
    "agent_slack_events_total": {"type": (*KNOWN_EVENTS, "block_actions", "other")},
    "agent_slack_events_ignored_total": {"reason": tuple(Ignore)},
    "agent_slack_duplicates_total": {"kind": ("event", "message")},
    "agent_slack_feedback_total": {"value": FEEDBACK_VALUES},
    "agent_slack_errors_total": {"type": tuple(Failure)},
    "agent_slack_answers_total": {"delivery": ("stream", "update")},
}


def deploy_expressions() -> list[str]:
    expressions = [
        target["expr"]
        for path in DASHBOARDS
        for panel in json.loads(path.read_text())["panels"]
        for target in panel.get("targets", [])
    ]
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return expressions + [rule["expr"] for group in groups for rule in group["rules"]]


def deploy_names() -> set[str]:
    return {name for expr in deploy_expressions() for name in NAME.findall(expr)}


async def fresh_metrics(served: Served, timeout_s: float = 60) -> str:
    """/metrics as first served (no request but this one and the polls before it was up)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=served.url, timeout=5) as client:
        while time.monotonic() < deadline:
            assert served.process.poll() is None, served.finish()
            try:
                response = await client.get("/metrics")
                if response.status_code == 200:
                    return response.text
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"no /metrics in {timeout_s} s: {served.finish()}")


@pytest.fixture(scope="module")
async def exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    served = Served(tmp_path_factory.mktemp("fresh"), {})
    try:
        return await fresh_metrics(served)
    finally:
        served.finish()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_the_deploy_files_read_the_metrics_this_test_knows() -> None:
    names = deploy_names()
    assert len(names) >= 20
    assert {"agent_slack_events_total", "agent_sql_errors_total", "agent_runs_total"} <= names


# The eval runs' figures (evals/metrics.py, from the state): a suite has series once it ran (a 0 would read as
# every case failing), but a fresh process already declares them.
EVAL_FIGURES = re.compile(r"^agent_eval_")


async def test_every_metric_the_deploy_files_read_has_its_series_at_start_up(exposition: str) -> None:
    found = samples(exposition)
    missing = sorted(name for name in deploy_names() if name not in found and not EVAL_FIGURES.match(name))
    assert not missing, f"absent from a fresh process's /metrics: {missing}"
    declared = {family.name for family in text_string_to_metric_families(exposition)}
    assert {name for name in deploy_names() if EVAL_FIGURES.match(name)} <= declared


async def test_every_bounded_label_value_is_there_at_zero(exposition: str) -> None:
    found = samples(exposition)
    for name, labels in BOUNDED.items():
        values = {tuple(sorted(series.items())): value for series, value in found.get(name, [])}
        for combination in itertools.product(*labels.values()):
            key = tuple(sorted(zip(labels, combination, strict=True)))
            assert values.get(key) == 0.0, f"{name}{dict(key)} is {values.get(key)}"


async def test_each_labelled_metric_of_the_deploy_files_has_its_label_values_listed(exposition: str) -> None:
    """A labelled metric added to a dashboard or a rule needs its bounded values in BOUNDED (and at start-up)."""
    found = samples(exposition)
    counts = {re.sub(r"_(bucket|sum)$", "_count", name) for name in deploy_names()}
    labelled = {name for name in counts if any(set(series) - {"le"} for series, _ in found.get(name, []))}
    assert labelled <= set(BOUNDED), sorted(labelled - set(BOUNDED))
