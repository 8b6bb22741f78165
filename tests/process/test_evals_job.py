"""The eval job a schedule fires: the suites run through the evals runner against the fake model and the
real engine, each case's result recorded in the state store, its figures at /metrics; with
`when_knowledge_changes`, it runs only after the knowledge files' content changed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.config import DEMO_KNOWLEDGE_DIR, Settings
from agent.db import Database
from agent.metrics import Metrics
from chats.eval_runs import CaseOutcome, EvalRun
from chats.state import ChatState
from evals.metrics import export_eval_metrics
from process.evals_job import knowledge_hash, run_eval_job
from process.service import Service
from tests.evals_helpers import HALF_WRONG, RIGHT, SUITE, answer_cases, job_settings, write_suite
from tests.fakes.anthropic_api import FakeAnthropic
from tests.web_helpers import LiveServer


def knowledge_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO_KNOWLEDGE_DIR, tmp_path / "knowledge"))


async def test_a_job_records_each_case_and_runs_again_only_when_the_knowledge_changes(
    settings: Settings, db: Database, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    knowledge = knowledge_copy(tmp_path)
    configured = job_settings(settings, fake_anthropic, tmp_path, agent_knowledge_dir=str(knowledge))
    suite = write_suite(tmp_path)
    state = ChatState(tmp_path / "state.sqlite3")
    try:
        answer_cases(fake_anthropic, HALF_WRONG)
        first = await run_eval_job(configured, state, suites=[suite], db=db, judge=False)
        assert first.ran and first.run is not None and (first.run.passed, first.run.total) == (1, 2)
        assert first.out is not None and (first.out / "results.json").is_file() and (first.out / "report.md").is_file()
        [latest] = await state.eval_runs.latest_by_suite()
        assert latest.suite == SUITE and {(c.case_id, c.passed) for c in latest.cases} == {
            ("airlines", True),
            ("airports", False),
        }
        assert first.run.knowledge_hash == knowledge_hash(knowledge) != ""

        asked = len(fake_anthropic.requests)
        unchanged = await run_eval_job(
            configured, state, suites=[suite], db=db, judge=False, when_knowledge_changes=True
        )
        assert not unchanged.ran and "not changed" in unchanged.why
        assert len(fake_anthropic.requests) == asked, "no model call when nothing changed"

        first_file = sorted(knowledge.glob("*.yaml"))[0]
        first_file.write_text(first_file.read_text() + "\n# a teammate's edit\n")
        answer_cases(fake_anthropic, RIGHT)
        changed = await run_eval_job(
            configured, state, suites=[suite], db=db, judge=False, when_knowledge_changes=True, trigger="knowledge"
        )
        assert changed.ran and changed.run is not None and changed.run.passed == 2
        runs = await state.eval_runs.runs()
        assert [(r.trigger, r.passed) for r in runs] == [("knowledge", 2), ("schedule", 1)]
        assert runs[0].knowledge_hash != runs[1].knowledge_hash
    finally:
        state.close()


async def test_the_latest_run_of_each_suite_is_served_at_metrics_with_bounded_labels(
    settings: Settings, db: Database, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    configured = job_settings(settings, fake_anthropic, tmp_path, agent_knowledge_dir="none")
    suite = write_suite(tmp_path)
    state = ChatState(tmp_path / "state.sqlite3")
    metrics = Metrics(CollectorRegistry())
    export_eval_metrics(metrics, state.eval_runs)
    try:
        await metrics.refresh_shared()
        assert metrics.registry.get_sample_value("agent_eval_pass_rate", {"suite": SUITE}) is None, "no run yet"
        answer_cases(fake_anthropic, HALF_WRONG)
        await run_eval_job(configured, state, suites=[suite], db=db, judge=False)
        await metrics.refresh_shared()

        def value(name: str, **labels: str) -> float | None:
            return metrics.registry.get_sample_value(name, labels)

        assert value("agent_eval_pass_rate", suite=SUITE) == 0.5
        assert value("agent_eval_tag_pass_rate", suite=SUITE, tag="count") == 0.5
        assert value("agent_eval_tag_pass_rate", suite=SUITE, tag="geo") == 0.0
        assert value("agent_eval_cases", suite=SUITE) == 2
        cost, p95 = value("agent_eval_case_cost_usd", suite=SUITE), value("agent_eval_case_p95_seconds", suite=SUITE)
        assert cost is not None and cost > 0 and p95 is not None and p95 > 0
        labels = {
            key: value
            for family in metrics.registry.collect()
            if family.name.startswith("agent_eval_")
            for sample in family.samples
            for key, value in sample.labels.items()
        }
        assert set(labels) == {"suite", "tag"}, "no case id, question or answer as a label"
    finally:
        state.close()


async def test_the_service_serves_the_eval_runs_at_metrics_once_whatever_the_workers(
    make_app: Callable[..., AgentApp], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever host or worker ran the job, each serves the state's figures (read at the scrape), and with
    several workers (Prometheus's multiprocess mode) they are served once, not summed."""
    agent = make_app(agent_data_dir=tmp_path)
    service = Service.build(agent.settings, web=True, slack=False, agent=agent, workers=2)
    try:
        async with LiveServer(service.app) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert "agent_eval_pass_rate{" not in (await client.get("/metrics")).text
            run = EvalRun("r1", 1.0, 2.0, "schedule", "", "claude-sonnet-5-5", 1, 2, None)
            outcomes = [
                CaseOutcome("s", "a", ("t",), True, 900, None),
                CaseOutcome("s", "b", ("t",), False, 1500, None),
            ]
            await service.state.eval_runs.record(run, outcomes)
            assert 'agent_eval_pass_rate{suite="s"} 0.5' in (await client.get("/metrics")).text
            (tmp_path / "prom").mkdir()
            monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "prom"))
            served = (await client.get("/metrics")).text
        assert served.count('agent_eval_pass_rate{suite="s"} 0.5') == 1
        assert 'agent_eval_case_p95_seconds{suite="s"} 1.5' in served
    finally:
        await service.close()
