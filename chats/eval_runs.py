"""Eval runs as the state keeps them (`agent evals` on a schedule or on a knowledge change:
process/evals_job.py): each case's result by its suite file's names (suite, case id, tags), never its
question, so that every host's /metrics reads the latest run of each suite (evals/metrics.py), the runs'
trend is there to read without a scrape, and a run knows the knowledge's content hash the last one saw.
Nothing here is a person's: retention does not sweep it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from chats.state_file import StateFile, write_transaction


@dataclass(frozen=True)
class CaseOutcome:
    suite: str
    case_id: str
    tags: tuple[str, ...]
    passed: bool
    latency_ms: int
    cost_usd: float | None  # None: the answering model has no price
    attempt: int = 1


@dataclass(frozen=True)
class EvalRun:
    id: str
    started_at: float
    finished_at: float
    trigger: str  # schedule, knowledge, manual
    knowledge_hash: str
    model: str
    passed: int
    total: int
    cost_usd: float | None

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class SuiteResults:
    """One suite's cases in the latest run that had it."""

    suite: str
    run_id: str
    finished_at: float
    cases: tuple[CaseOutcome, ...]


class EvalRunStore:
    def __init__(self, file: StateFile) -> None:
        self._file = file

    async def record(self, run: EvalRun, cases: Sequence[CaseOutcome]) -> None:
        """The run and its cases, in one transaction."""

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.execute(
                    "INSERT INTO eval_runs (id, started_at, finished_at, trigger, knowledge_hash, model, passed, "
                    "total, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.id,
                        run.started_at,
                        run.finished_at,
                        run.trigger,
                        run.knowledge_hash,
                        run.model,
                        run.passed,
                        run.total,
                        run.cost_usd,
                    ),
                )
                c.executemany(
                    "INSERT INTO eval_case_results (run_id, suite, case_id, attempt, tags, passed, latency_ms, "
                    "cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            run.id,
                            o.suite,
                            o.case_id,
                            o.attempt,
                            json.dumps(list(o.tags)),
                            int(o.passed),
                            o.latency_ms,
                            o.cost_usd,
                        )
                        for o in cases
                    ],
                )

        await self._file.run(write)

    async def latest_by_suite(self) -> list[SuiteResults]:
        """Each suite's cases in the latest run that ran it, by suite name."""

        def read(c: sqlite3.Connection) -> list[SuiteResults]:
            rows = c.execute(
                "SELECT c.suite, c.case_id, c.attempt, c.tags, c.passed, c.latency_ms, c.cost_usd, r.id, "
                "r.finished_at FROM eval_case_results c JOIN eval_runs r ON r.id = c.run_id "
                "WHERE r.id = (SELECT r2.id FROM eval_runs r2 JOIN eval_case_results c2 ON c2.run_id = r2.id "
                "WHERE c2.suite = c.suite ORDER BY r2.finished_at DESC, r2.id DESC LIMIT 1) "
                "ORDER BY c.suite, c.case_id, c.attempt"
            ).fetchall()
            suites: dict[str, SuiteResults] = {}
            for row in rows:
                outcome = CaseOutcome(
                    suite=row[0],
                    case_id=row[1],
                    attempt=row[2],
                    tags=tuple(json.loads(row[3])),
                    passed=bool(row[4]),
                    latency_ms=row[5],
                    cost_usd=row[6],
                )
                found = suites.get(row[0]) or SuiteResults(row[0], row[7], row[8], ())
                suites[row[0]] = SuiteResults(found.suite, found.run_id, found.finished_at, (*found.cases, outcome))
            return list(suites.values())

        return await self._file.run(read)

    async def runs(self, limit: int = 20) -> list[EvalRun]:
        """The latest runs, newest first: the trend as the state has it."""

        def read(c: sqlite3.Connection) -> list[EvalRun]:
            rows = c.execute(
                "SELECT id, started_at, finished_at, trigger, knowledge_hash, model, passed, total, cost_usd "
                "FROM eval_runs ORDER BY finished_at DESC, id DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [EvalRun(*row) for row in rows]

        return await self._file.run(read)

    async def last_knowledge_hash(self) -> str | None:
        """The knowledge's content hash the latest run saw (None: no run yet)."""
        latest = await self.runs(limit=1)
        return latest[0].knowledge_hash if latest else None
