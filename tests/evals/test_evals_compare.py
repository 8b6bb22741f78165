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
    assert "pass rate: 50.0% -> 50.0% (+0.0 pts)" in out
    assert "regressed (1):\n  t/a: passed -> failed  contains: the answer does not mention '16'" in out
    assert "improved (1):\n  t/b: failed -> passed" in out
    assert "t/c" not in out  # failed both times: neither
    assert "only in the old run (1): t/gone" in out and "only in the new run (1): t/added" in out
    assert "input: 400 -> 500 (+25.0%)" in out and "cost: $" in out and "latency p95: 1.0 s -> 2.0 s" in out


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
