"""`agent evals compare`, and the prices a cost estimate comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import DEFAULT_FOLLOWUP_MODEL, DEFAULT_MODEL
from agent.pricing import load_pricing
from evals.report import build_record, percentile
from evals.results import CaseResult, Check, Tokens
from process.cli import main


def case(id: str, passed: bool, *, attempt: int = 1, latency_ms: int = 1000, input: int = 100) -> CaseResult:
    checks = [Check(name="run", passed=True)]
    if not passed:
        checks.append(Check(name="contains", passed=False, reason="the answer does not mention '16'"))
    return CaseResult(
        suite="t",
        id=id,
        attempt=attempt,
        question="q",
        passed=passed,
        checks=checks,
        tokens=Tokens(input=input, output=10, cache_read=300),
        latency_ms=latency_ms,
    )


def write(path: Path, cases: list[CaseResult], repeat: int = 1) -> Path:
    record = build_record(
        cases,
        suites=[],
        started_at="2026-11-22T00:00:00+00:00",
        wall_s=1.0,
        model=DEFAULT_MODEL,
        judge_model=None,
        temperature=None,
        concurrency=4,
        repeat=repeat,
        filter=None,
    )
    path.write_text(json.dumps(record.dump()))
    return path


def test_compare_lists_regressions_improvements_and_deltas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = write(tmp_path / "old.json", [case("a", True), case("b", False), case("c", False), case("gone", True)])
    new = write(
        tmp_path / "new.json",
        [case("a", False, latency_ms=2000, input=200), case("b", True), case("c", False), case("added", True)],
    )
    assert main(["evals", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "compared: the 3 cases both runs have; not compared: 1 only in the old run and 1 only in the new run" in out
    assert "pass rate: 33.3% -> 33.3% (+0.0 pts; 1/3 -> 1/3)" in out
    assert "regressed (1):\n  t/a: passed -> failed  contains: the answer does not mention '16'" in out
    assert "improved (1):\n  t/b: failed -> passed" in out
    assert "t/c" not in out  # failed both times: neither
    assert "only in the old run (1): t/gone" in out and "only in the new run (1): t/added" in out
    assert "input: 300 -> 400 (+33.3%)" in out and "cost: $" in out and "latency p95: 1.0 s -> 2.0 s" in out


def test_a_filtered_run_is_compared_on_the_cases_it_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A filtered run beside a full one once read "+25.3 pts": the cases only one run has are named, not counted."""
    full = [case("a", True, input=100), *(case(name, False, input=100) for name in "bcd")]
    old = write(tmp_path / "old.json", full)
    new = write(tmp_path / "new.json", [case("a", True, input=100)])
    assert main(["evals", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "compared: the 1 cases both runs have; not compared: 3 only in the old run" in out
    assert "pass rate: 100.0% -> 100.0% (+0.0 pts; 1/1 -> 1/1)" in out
    assert "tokens: 410 -> 410 (no change)" in out and "only in the old run (3): t/b, t/c, t/d" in out
    assert main(["evals", "compare", str(new), str(write(tmp_path / "other.json", [case("z", True)]))]) == 0
    assert capsys.readouterr().out.startswith("no case is in both runs: nothing to compare\n")


def test_a_case_the_judge_could_not_grade_is_failed_in_an_older_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Written before a judge error failed its case: it reads as failed, and the comparison counts it."""
    older = json.loads(write(tmp_path / "x.json", [case("a", True), case("b", True)]).read_text())
    older["cases"][1]["judge"] = {"model": "claude-haiku-5-5", "passed": None, "error": "the judge gave no verdict"}
    (tmp_path / "old.json").write_text(json.dumps(older))
    new = write(tmp_path / "new.json", [case("a", True), case("b", True)])
    assert main(["evals", "compare", str(tmp_path / "old.json"), str(new)]) == 0
    out = capsys.readouterr().out
    assert "pass rate: 50.0% -> 100.0% (+50.0 pts; 1/2 -> 2/2)" in out
    assert "judge could not grade (failed): 1 -> 0" in out and "improved (1):\n  t/b: failed -> passed" in out


def test_compare_weighs_repeated_attempts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = write(tmp_path / "old.json", [case("a", True, attempt=1), case("a", True, attempt=2)], repeat=2)
    new = write(tmp_path / "new.json", [case("a", True, attempt=1), case("a", False, attempt=2)], repeat=2)
    assert main(["evals", "compare", str(old), str(new)]) == 0
    assert "t/a: passed -> 50.0% of attempts" in capsys.readouterr().out


def test_compare_rejects_a_file_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good.json", [case("a", True)])
    (tmp_path / "bad.json").write_text('{"cases": []}')
    assert main(["evals", "compare", str(good), str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not an eval results file (pass_rate: Field required)" in capsys.readouterr().err


def test_default_models_are_priced_and_dated_ids_fall_back() -> None:
    pricing = load_pricing()
    assert pricing.price(DEFAULT_MODEL) and pricing.price(DEFAULT_FOLLOWUP_MODEL)
    assert pricing.price("claude-sonnet-4-5-20250929") == pricing.price("claude-sonnet-4-5")
    assert pricing.cost("claude-unknown-1", {"input": 1}) is None
    price = pricing.models["claude-sonnet-4-5"]
    tokens = {"input": 1_000_000, "output": 1_000_000, "cache_read": 1_000_000, "cache_creation": 1_000_000}
    assert pricing.cost("claude-sonnet-4-5", tokens) == pytest.approx(
        price.input + price.output + price.cache_read + price.cache_creation
    )


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile([], 0.5), percentile([7], 0.95)) == (
        50,
        95,
        0,
        7,
    )
