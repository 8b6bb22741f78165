"""The eval cases over aircraft_registrations (a ReplacingMergeTree with unmerged updates): the naive
reading of each (its gold SQL without FINAL) gives another result, which the case's checks reject, and
the gold reading passes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.db import Database
from evals.scoring import gold_found, mentions, orders_rows, unnamed
from evals.suite import Case, load_suite

SUITE = Path(__file__).resolve().parents[2] / "evals" / "suites" / "nycflights13.yaml"


def engine_cases() -> list[Case]:
    return [case for case in load_suite(SUITE).cases if "engine" in case.tags]


def test_the_suite_has_engine_cases_whose_gold_reads_with_final() -> None:
    cases = engine_cases()
    assert [c.id for c in cases] == ["registrations-total", "registrations-valid", "registrations-valid-by-carrier"]
    assert all(c.gold_sql and "aircraft_registrations FINAL" in c.gold_sql for c in cases)


@pytest.mark.parametrize("case", engine_cases(), ids=lambda case: case.id)
async def test_the_naive_answer_is_wrong_and_the_gold_one_right(db: Database, case: Case) -> None:
    assert case.gold_sql is not None
    gold = await db.execute(case.gold_sql)
    naive = await db.execute(case.gold_sql.replace(" FINAL", ""))
    assert gold.ok and naive.ok
    ordered = orders_rows(case.gold_sql)
    assert not gold_found(gold, [naive], ordered=ordered)  # the naive query does not return the gold result
    assert gold_found(gold, [gold], ordered=ordered)

    def answer(rows: list[list[str | None]]) -> str:
        return "; ".join(" ".join(str(cell) for cell in row) for row in rows)

    right, wrong = answer(gold.rows), answer(naive.rows)
    assert unnamed(right, case.expect.contains) == []
    assert not any(mentions(right, value) for value in case.expect.not_contains)
    assert unnamed(wrong, case.expect.contains) or any(mentions(wrong, v) for v in case.expect.not_contains)
