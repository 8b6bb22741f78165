"""`agent evals check`: are the suites themselves right? Needs no model: every gold query must run
on the dataset, fit in the rows the agent sees, and satisfy its own case's `contains`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from agent.db import Database, QueryResult
from evals.runner import run_gold
from evals.scoring import quoted, unnamed
from evals.suite import Case, Suite


@dataclass(frozen=True)
class Problem:
    where: str  # suite/case, or a file
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


async def check_gold(db: Database, suites: Sequence[Suite], concurrency: int = 4) -> list[Problem]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(suite: Suite, case: Case) -> list[Problem]:
        assert case.gold_sql is not None
        async with semaphore:
            gold = await run_gold(db, case.gold_sql)
        where = f"{suite.name}/{case.id}"
        if gold.problem:
            return [Problem(where, gold.problem)]
        assert gold.result is not None
        if not gold.result.rows:
            return [Problem(where, "the gold query returns no rows")]
        text = result_text(gold.result)
        if missing := unnamed(text, case.expect.contains):
            return [Problem(where, f"the gold result does not contain {quoted(missing)} (expect.contains)")]
        return []

    found = await asyncio.gather(*(one(suite, case) for suite in suites for case in suite.cases if case.gold_sql))
    return [problem for problems in found for problem in problems]


def result_text(result: QueryResult) -> str:
    """A result as plain text, one row a line, for matching `contains` values against it."""
    return "\n".join(" | ".join("NULL" if cell is None else cell for cell in row) for row in result.rows)
