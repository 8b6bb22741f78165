"""The eval job a schedule fires (and `agent evals job` runs now): the suites through the same runner as
`agent evals run`, its results.json and report.md written beside theirs, and each case's result recorded
in the state store (chats/eval_runs.py), where every host's /metrics reads the latest run of each suite
(evals/metrics.py) and the trend is kept.

"When the team's knowledge changes" is a content hash of the knowledge files (names and bytes, as the
agent reads them) compared with the one the last recorded run saw: a schedule that fires often with
`when_knowledge_changes=True` runs the suites only after an edit, and costs one read of the state otherwise.
The scheduler (its lease) makes sure one host fires it; this function runs whatever it is asked to.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry

from agent.app import AgentApp
from agent.config import Settings
from agent.db import Database
from agent.llm import LLMClient, LLMConfigError
from agent.metrics import Metrics
from agent.pricing import load_pricing
from chats.eval_runs import CaseOutcome, EvalRun
from chats.state import ChatState
from evals.dataset import open_dataset
from evals.judge import Judge
from evals.report import build_record, write_report
from evals.results import CaseResult, RunRecord
from evals.runner import run_cases
from evals.suite import Suite, default_suite_paths, load_suites, select_cases

Trigger = Literal["schedule", "knowledge", "manual"]


@dataclass(frozen=True)
class EvalJobResult:
    ran: bool
    why: str  # what happened, in a line for the scheduler's log or the person who ran it
    run: EvalRun | None = None
    out: Path | None = None  # where results.json and report.md are


def knowledge_hash(directory: Path | None) -> str:
    """A SHA-256 of the knowledge files the agent reads (`*.yaml`, `*.yml`, in its order): their names and
    bytes. '' for no knowledge folder."""
    if directory is None or not directory.is_dir():
        return ""
    digest = hashlib.sha256()
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


async def run_eval_job(
    settings: Settings,
    state: ChatState,
    *,
    suites: Sequence[Path] | None = None,
    trigger: Trigger = "schedule",
    when_knowledge_changes: bool = False,
    judge: bool = True,
    concurrency: int = 4,
    db: Database | None = None,
    llm: LLMClient | None = None,
) -> EvalJobResult:
    """Run the suites (default: every suite in evals/suites) and record their results. With
    `when_knowledge_changes`, only when the knowledge's hash differs from the last recorded run's. `db`
    and `llm` are a serving process's own (left open; the embedded engine has one owner), else opened here.
    Raises SuiteError, DatasetError or LLMConfigError for a job that cannot run; a case that fails is a
    result."""
    # Files are read and written off the event loop: a serving process's requests share it.
    digest = await asyncio.to_thread(knowledge_hash, settings.knowledge_dir)
    if when_knowledge_changes and await state.eval_runs.last_knowledge_hash() == digest:
        return EvalJobResult(False, "the team's knowledge has not changed since the last eval run")
    chosen = await asyncio.to_thread(load_suites, suites or default_suite_paths())
    judge_model = (settings.agent_judge_model or settings.agent_model) if judge else None
    if problem := settings.missing_model_key(("main", "judge") if judge_model else ("main",)):
        raise LLMConfigError(problem)
    started_at, started = time.time(), time.perf_counter()
    results = await _run(settings, chosen, judge_model, concurrency, db, llm)
    record = build_record(
        results,
        suites=chosen,
        started_at=datetime.fromtimestamp(started_at, UTC).isoformat(timespec="seconds"),
        wall_s=time.perf_counter() - started,
        model=settings.agent_model,
        knowledge=str(settings.knowledge_dir) if settings.knowledge_dir else None,
        judge_model=judge_model,
        temperature=settings.agent_temperature,
        concurrency=concurrency,
        repeat=1,
        filter=None,
    )
    out = settings.agent_data_dir / "evals" / f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{trigger}"
    await asyncio.to_thread(write_report, out, record)
    run = EvalRun(
        id=uuid.uuid4().hex,
        started_at=started_at,
        finished_at=time.time(),
        trigger=trigger,
        knowledge_hash=digest,
        model=settings.agent_model,
        passed=record.passed,
        total=record.total,
        cost_usd=record.cost_usd,
    )
    await state.eval_runs.record(run, outcomes(record))
    return EvalJobResult(True, f"pass rate {100 * record.pass_rate:.1f}% ({record.passed}/{record.total})", run, out)


def outcomes(record: RunRecord) -> list[CaseOutcome]:
    """Each case as the state keeps it: names from the suite file, its time, its cost at the answering
    model's price."""
    return [
        CaseOutcome(
            suite=case.suite,
            case_id=case.id,
            attempt=case.attempt,
            tags=tuple(case.tags),
            passed=case.passed,
            latency_ms=case.latency_ms,
            cost_usd=_cost(case, record.model),
        )
        for case in record.cases
    ]


def _cost(case: CaseResult, model: str) -> float | None:
    return load_pricing().cost(case.model or model, case.tokens.model_dump())


async def _run(
    settings: Settings,
    suites: list[Suite],
    judge_model: str | None,
    concurrency: int,
    db: Database | None,
    llm: LLMClient | None,
) -> list[CaseResult]:
    """The cases through an app of the job's own (its metrics apart from the serving process's)."""
    from agent.prompts import prompt_library

    database = db or await open_dataset(settings, suites)
    app = AgentApp.start(settings, db=database, llm=llm, metrics=Metrics(CollectorRegistry()))
    prompts = prompt_library(settings.agent_prompts_dir)
    grader = Judge(app.llm, prompts, judge_model, temperature=settings.agent_temperature) if judge_model else None
    try:
        return await run_cases(app.runner, app.db, select_cases(suites, None), judge=grader, concurrency=concurrency)
    finally:
        await app.examples.close()
        if llm is None:
            await app.llm.close()
        if db is None:
            await database.close()
