"""Runs eval cases through the same `Runner` as Slack and the web: each case attempt is its own
`Runner.run` (interface `eval`, platform `cli`, follow-ups off) with its own metrics, a semaphore
bounds how many run at once, and a case that errors becomes a failed case, never a crashed run."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from agent.db import Database
from agent.reports import ReportRequest
from agent.runner import Runner, RunResult
from evals.judge import Judge
from evals.results import CaseResult, Check, JudgeVerdict, QueryRecord, Tokens
from evals.scoring import Gold, score
from evals.suite import Case, Suite

log = logging.getLogger(__name__)
ResultSink = Callable[[CaseResult], None]


def _ignore(_: CaseResult) -> None:
    return None


async def run_cases(
    runner: Runner,
    db: Database,
    selected: Sequence[tuple[Suite, Case]],
    *,
    judge: Judge | None = None,
    concurrency: int = 4,
    repeat: int = 1,
    on_result: ResultSink = _ignore,
) -> list[CaseResult]:
    """Every selected case `repeat` times, at most `concurrency` at once; results in suite order."""
    semaphore = asyncio.Semaphore(concurrency)
    golds = await gold_results(db, selected, semaphore)

    async def attempt(index: int, suite: Suite, case: Case, number: int) -> tuple[int, CaseResult]:
        async with semaphore:
            result = await run_case(
                runner, suite, case, gold=golds.get((suite.name, case.id)), judge=judge, attempt=number
            )
        on_result(result)
        return index, result

    jobs = [
        attempt(index, suite, case, number)
        for number in range(1, repeat + 1)
        for index, (suite, case) in enumerate(selected)
    ]
    finished = await asyncio.gather(*jobs)
    return [result for _, result in sorted(finished, key=lambda item: (item[0], item[1].attempt))]


async def gold_results(
    db: Database, selected: Sequence[tuple[Suite, Case]], semaphore: asyncio.Semaphore
) -> dict[tuple[str, str], Gold]:
    """Each case's gold query, run once through the agent's own database path."""

    async def one(suite: Suite, case: Case) -> tuple[tuple[str, str], Gold]:
        assert case.gold_sql is not None
        async with semaphore:
            return (suite.name, case.id), await run_gold(db, case.gold_sql)

    pairs = await asyncio.gather(*(one(suite, case) for suite, case in selected if case.gold_sql))
    return dict(pairs)


async def run_gold(db: Database, sql: str) -> Gold:
    try:
        return Gold(sql=sql, result=await db.execute(sql))
    except Exception as exc:
        return Gold(sql=sql, error=f"the gold query could not run: {type(exc).__name__}: {exc}")


async def run_case(
    runner: Runner, suite: Suite, case: Case, *, gold: Gold | None, judge: Judge | None, attempt: int = 1
) -> CaseResult:
    started = time.perf_counter()
    try:
        result = await _run(runner, case)
        checks = score(case, result, gold)
    except Exception as exc:  # a case that errors is a failed case
        log.debug("eval case %s/%s raised", suite.name, case.id, exc_info=True)
        reason = f"the run raised {type(exc).__name__}: {exc}"
        return CaseResult(
            suite=suite.name,
            id=case.id,
            attempt=attempt,
            question=case.question,
            tags=case.tags,
            passed=False,
            checks=[Check(name="run", passed=False, reason=reason)],
            outcome="error",
            error=reason,
            latency_ms=round((time.perf_counter() - started) * 1000),
        )
    verdict = await judge.grade(case.question, case.judge, result) if judge and case.judge else None
    return _case_result(suite, case, attempt, result, checks, verdict)


async def _run(runner: Runner, case: Case) -> RunResult:
    history = case.history_turns
    if case.report:  # asked for explicitly, as a person would
        return await runner.run(
            case.question, history=history, platform="cli", interface="eval", followups=False, report=ReportRequest()
        )
    return await runner.run(case.question, history=history, platform="cli", interface="eval", followups=False)


def _case_result(
    suite: Suite, case: Case, attempt: int, result: RunResult, checks: list[Check], verdict: JudgeVerdict | None
) -> CaseResult:
    return CaseResult(
        suite=suite.name,
        id=case.id,
        attempt=attempt,
        question=case.question,
        tags=case.tags,
        passed=all(check.passed for check in checks),
        checks=checks,
        judge=verdict,
        answer=result.answer,
        outcome=result.outcome.value,
        classification=result.classification.value,
        error=result.error,
        sql=[
            QueryRecord(
                id=q.id,
                question=q.question,
                sql=q.sql,
                row_count=q.result.row_count,
                error=q.result.error,
                reused_from=q.reused_from,
            )
            for q in result.queries
        ],
        tokens=Tokens.of(result.metrics),
        latency_ms=result.metrics.total_ms,
        llm_calls=result.metrics.llm_calls,
        rounds=result.metrics.rounds,
        model=result.model,
        fallbacks=result.metrics.fallbacks,
        figures_checked=result.figures.checked if result.figures else 0,
        figures_verified=result.figures.verified if result.figures else 0,
        report_outcome=result.report.outcome.value if result.report is not None else None,
    )
