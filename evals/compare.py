"""Two runs side by side: the cases that regressed and improved, and how pass rate, tokens, cost and
latency moved, over the cases both runs have (a filtered run beside a full one would otherwise
compare two different sets of questions). A case's standing is the share of its attempts that passed."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from agent.pricing import load_pricing
from evals.report import percentile
from evals.results import CaseResult, Latency, RunRecord, Tokens


@dataclass(frozen=True)
class CaseChange:
    key: tuple[str, str]
    old: float  # share of attempts passed
    new: float
    why: str  # the new run's failed checks, when it got worse

    @property
    def name(self) -> str:
        return "/".join(self.key)


@dataclass(frozen=True)
class Side:
    """One run's figures over the cases both runs have (every attempt of each)."""

    model: str
    knowledge: str | None
    passed: int
    total: int
    judge_errors: int
    tokens: Tokens
    cost_usd: float | None
    latency: Latency

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Comparison:
    old: Side
    new: Side
    shared: int  # cases both runs have: every figure is over these alone
    regressed: list[CaseChange]
    improved: list[CaseChange]
    only_old: list[str]
    only_new: list[str]


def compare(old: RunRecord, new: RunRecord) -> Comparison:
    """The two runs over the cases both have: a filtered run beside a full one compares the filter's
    cases, and the cases on one side only are listed, never counted."""
    before, after = _standing(old.cases), _standing(new.cases)
    shared = before.keys() & after.keys()
    reasons = _reasons(new.cases)
    regressed, improved = [], []
    for key in sorted(shared):
        if after[key] < before[key]:
            regressed.append(CaseChange(key, before[key], after[key], reasons.get(key, "")))
        elif after[key] > before[key]:
            improved.append(CaseChange(key, before[key], after[key], ""))
    return Comparison(
        old=_side(old, shared),
        new=_side(new, shared),
        shared=len(shared),
        regressed=regressed,
        improved=improved,
        only_old=["/".join(k) for k in sorted(before.keys() - after.keys())],
        only_new=["/".join(k) for k in sorted(after.keys() - before.keys())],
    )


def _side(record: RunRecord, shared: set[tuple[str, str]]) -> Side:
    cases = [case for case in record.cases if case.key in shared]
    tokens = sum((case.tokens for case in cases), Tokens())
    every_case = len(cases) == len(record.cases)  # then the record's own cost, at the prices it ran at
    latencies = [case.latency_ms for case in cases]
    return Side(
        model=record.model,
        knowledge=record.knowledge,
        passed=sum(case.passed for case in cases),
        total=len(cases),
        judge_errors=sum(case.ungraded for case in cases),
        tokens=tokens,
        cost_usd=record.cost_usd if every_case else load_pricing().cost(record.model, tokens.model_dump()),
        latency=Latency(p50_ms=percentile(latencies, 0.50), p95_ms=percentile(latencies, 0.95)),
    )


def _standing(cases: list[CaseResult]) -> dict[tuple[str, str], float]:
    runs: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for case in cases:
        runs[case.key].append(case.passed)
    return {key: sum(passed) / len(passed) for key, passed in runs.items()}


def _reasons(cases: list[CaseResult]) -> dict[tuple[str, str], str]:
    reasons: dict[tuple[str, str], str] = {}
    for case in cases:
        if not case.passed and case.key not in reasons:
            reasons[case.key] = "; ".join(f"{c.name}: {c.reason}" for c in case.failed_checks)
    return reasons


def render(comparison: Comparison) -> str:
    old, new = comparison.old, comparison.new
    if not comparison.shared:
        return "\n".join(["no case is in both runs: nothing to compare", *_one_sided(comparison)])
    lines = [
        f"compared: the {comparison.shared} cases both runs have{_left_out(comparison)}",
        f"pass rate: {_pct(old.pass_rate)} -> {_pct(new.pass_rate)} "
        f"({_signed(100 * (new.pass_rate - old.pass_rate), ' pts')}; "
        f"{old.passed}/{old.total} -> {new.passed}/{new.total})",
    ]
    if old.judge_errors or new.judge_errors:
        lines.append(f"judge could not grade (failed): {old.judge_errors} -> {new.judge_errors}")
    lines += [
        f"tokens: {old.tokens.total:,} -> {new.tokens.total:,} ({_relative(old.tokens.total, new.tokens.total)})",
    ]
    for kind in ("input", "output", "cache_read", "cache_creation"):
        a, b = getattr(old.tokens, kind), getattr(new.tokens, kind)
        lines.append(f"  {kind}: {a:,} -> {b:,} ({_relative(a, b)})")
    lines.append(f"cost: {_money(old.cost_usd)} -> {_money(new.cost_usd)}{_cost_delta(old.cost_usd, new.cost_usd)}")
    for label, a, b in (
        ("latency p50", old.latency.p50_ms, new.latency.p50_ms),
        ("latency p95", old.latency.p95_ms, new.latency.p95_ms),
    ):
        lines.append(f"{label}: {a / 1000:.1f} s -> {b / 1000:.1f} s ({_relative(a, b)})")
    if old.model != new.model:
        lines.append(f"model: {old.model} -> {new.model}")
    if old.knowledge != new.knowledge:
        lines.append(f"knowledge: {old.knowledge or 'none'} -> {new.knowledge or 'none'}")
    lines.append("")
    lines.append(f"regressed ({len(comparison.regressed)}):")
    lines += [f"  {c.name}: {_share(c.old)} -> {_share(c.new)}  {c.why}".rstrip() for c in comparison.regressed]
    lines.append(f"improved ({len(comparison.improved)}):")
    lines += [f"  {c.name}: {_share(c.old)} -> {_share(c.new)}" for c in comparison.improved]
    return "\n".join([*lines, *_one_sided(comparison)])


def _left_out(comparison: Comparison) -> str:
    sides = [(len(comparison.only_old), "only in the old run"), (len(comparison.only_new), "only in the new run")]
    said = [f"{count} {where}" for count, where in sides if count]
    return f"; not compared: {' and '.join(said)}" if said else ""


def _one_sided(comparison: Comparison) -> list[str]:
    lines = []
    if comparison.only_old:
        lines.append(f"only in the old run ({len(comparison.only_old)}): {', '.join(comparison.only_old)}")
    if comparison.only_new:
        lines.append(f"only in the new run ({len(comparison.only_new)}): {', '.join(comparison.only_new)}")
    return lines


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _share(share: float) -> str:
    return "passed" if share == 1 else "failed" if share == 0 else f"{_pct(share)} of attempts"


def _signed(value: float, unit: str) -> str:
    return f"{value:+.1f}{unit}"


def _relative(old: float, new: float) -> str:
    if old == new:
        return "no change"
    if not old:
        return "new"
    return _signed(100 * (new - old) / old, "%")


def _money(value: float | None) -> str:
    return "not priced" if value is None else f"${value:.4f}"


def _cost_delta(old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return ""
    return f" ({'+' if new >= old else '-'}${abs(new - old):.4f})"
