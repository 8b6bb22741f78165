"""The eval runner drives any `Runner`: each case its own run (interface eval, platform cli, no
follow-ups), and a run that raises is a failed case, never a crashed eval run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.db import Database
from agent.runner import ExecutedQuery, RunMetrics, RunResult, Turn, ignore_events
from evals.runner import run_cases
from evals.suite import Suite


class PartlyBrokenRunner:
    """Implements `Runner`: answers by running the question's SQL on the real database, and raises
    for a question that says so."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.calls: list[dict[str, Any]] = []

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: str = "cli",
        interface: str = "cli",
        on_event: Any = ignore_events,
        followups: bool = True,
    ) -> RunResult:
        self.calls.append({"platform": platform, "interface": interface, "followups": followups})
        if question.startswith("raise"):
            raise RuntimeError("the engine caught fire")
        result = await self.db.execute("SELECT count() AS n FROM nycflights13.airlines")
        query = ExecutedQuery(id="Q1", question=question, sql=result.sql, result=result)
        metrics = RunMetrics(sql_queries=1, total_ms=5, output_tokens=7)
        return RunResult(question=question, answer="There are 16 airlines [Q1].", queries=[query], metrics=metrics)


SUITE = Suite.model_validate(
    {
        "name": "t",
        "dataset": "demo",
        "cases": [
            {
                "id": "fine",
                "question": "count?",
                "gold_sql": "SELECT count() FROM nycflights13.airlines",
                "expect": {"contains": ["16"]},
            },
            {"id": "raises", "question": "raise, please", "expect": {"contains": ["16"]}},
            {"id": "bad-gold", "question": "count again?", "gold_sql": "SELECT nope FROM nycflights13.airlines"},
        ],
    }
)


async def test_a_case_whose_run_raises_counts_as_failed(db: Database) -> None:
    runner = PartlyBrokenRunner(db)
    seen: list[str] = []
    results = await run_cases(
        runner, db, [(SUITE, case) for case in SUITE.cases], concurrency=3, on_result=lambda r: seen.append(r.id)
    )
    assert [r.id for r in results] == ["fine", "raises", "bad-gold"] and sorted(seen) == sorted(
        ["fine", "raises", "bad-gold"]
    )
    fine, raised, bad_gold = results
    assert fine.passed and [c.name for c in fine.checks] == ["run", "contains", "gold_sql"]
    assert fine.tokens.output == 7 and fine.sql[0].row_count == 1
    assert not raised.passed and raised.outcome == "error"
    assert [(c.name, c.reason) for c in raised.checks] == [
        ("run", "the run raised RuntimeError: the engine caught fire")
    ]
    assert not bad_gold.passed
    (gold_check,) = [c for c in bad_gold.checks if c.name == "gold_sql"]
    assert gold_check.reason is not None and gold_check.reason.startswith("the gold query failed:")
    assert runner.calls == [{"platform": "cli", "interface": "eval", "followups": False}] * 3
