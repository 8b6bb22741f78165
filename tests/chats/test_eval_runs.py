"""Eval runs in the state, on both backends: each suite's latest run, the runs newest first, and the
knowledge hash the latest run saw."""

from __future__ import annotations

from collections.abc import Callable

from chats.eval_runs import CaseOutcome, EvalRun, EvalRunStore
from chats.state_file import StateFile


def run(id: str, at: float, passed: int, total: int, knowledge: str = "") -> EvalRun:
    return EvalRun(id, at - 5, at, "schedule", knowledge, "claude-sonnet-5-5", passed, total, 0.01)


def case(suite: str, id: str, passed: bool, *tags: str) -> CaseOutcome:
    return CaseOutcome(suite=suite, case_id=id, tags=tags, passed=passed, latency_ms=1200, cost_usd=None)


async def test_each_suite_reads_from_its_latest_run(state_files: Callable[[], StateFile]) -> None:
    store = EvalRunStore(state_files())
    assert await store.latest_by_suite() == [] and await store.last_knowledge_hash() is None
    await store.record(
        run("r1", 100, 2, 3, "k1"), [case("a", "x", True, "t"), case("a", "y", False), case("b", "z", True)]
    )
    await store.record(run("r2", 200, 1, 1, "k2"), [case("a", "x", True, "t", "u")])
    latest = {s.suite: s for s in await store.latest_by_suite()}
    assert (latest["a"].run_id, [c.case_id for c in latest["a"].cases]) == ("r2", ["x"])
    assert latest["a"].cases[0].tags == ("t", "u") and latest["a"].finished_at == 200
    assert (latest["b"].run_id, latest["b"].cases[0].passed) == ("r1", True), (
        "a suite not in the last run keeps its own"
    )
    assert [r.id for r in await store.runs()] == ["r2", "r1"] and await store.last_knowledge_hash() == "k2"
    assert (await store.runs(limit=1))[0].pass_rate == 1.0
