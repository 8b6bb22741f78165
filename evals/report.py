"""What a run leaves behind: `results.json` (every case, every check) and `report.md` (pass rate
overall and by tag, failed cases and why, tokens and cost, latency, flaky cases)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from agent.pricing import PRICING_FILE, load_pricing
from evals.results import CaseResult, Latency, RunRecord, SuiteRef, Tokens
from evals.suite import Suite

RESULTS_FILE, REPORT_FILE = "results.json", "report.md"
_ANSWER_CHARS, _SQL_CHARS = 400, 300


def percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def build_record(
    results: list[CaseResult],
    *,
    suites: Sequence[Suite],
    started_at: str,
    wall_s: float,
    model: str,
    judge_model: str | None,
    knowledge: str | None = None,
    temperature: float | None,
    concurrency: int,
    repeat: int,
    filter: str | None,
) -> RunRecord:
    passed = sum(result.passed for result in results)
    verdicts = [r.judge.passed for r in results if r.judge is not None and r.judge.passed is not None]
    tokens = sum((r.tokens for r in results), Tokens())
    judge_tokens = sum((r.judge.tokens for r in results if r.judge is not None), Tokens())
    pricing = load_pricing()
    latencies = [r.latency_ms for r in results]
    return RunRecord(
        pass_rate=passed / len(results) if results else 0.0,
        passed=passed,
        total=len(results),
        judge_pass_rate=sum(verdicts) / len(verdicts) if verdicts else None,
        judge_errors=sum(r.ungraded for r in results),
        started_at=started_at,
        wall_s=round(wall_s, 2),
        model=model,
        knowledge=knowledge,
        judge_model=judge_model,
        temperature=temperature,
        concurrency=concurrency,
        repeat=repeat,
        filter=filter,
        suites=[SuiteRef(name=s.name, path=s.source, dataset=s.dataset) for s in suites],
        tokens=tokens,
        judge_tokens=judge_tokens,
        cost_usd=pricing.cost(model, tokens.model_dump()),
        judge_cost_usd=pricing.cost(judge_model, judge_tokens.model_dump()) if judge_model else None,
        latency=Latency(p50_ms=percentile(latencies, 0.50), p95_ms=percentile(latencies, 0.95)),
        cases=results,
    )


def write_report(out: Path, record: RunRecord) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    results_path, report_path = out / RESULTS_FILE, out / REPORT_FILE
    results_path.write_text(json.dumps(record.dump(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    report_path.write_text(render_markdown(record), encoding="utf-8")
    return results_path, report_path


def render_markdown(record: RunRecord) -> str:
    sections = [
        _summary(record),
        _rates("By tag", "tag", ((tag, r) for r in record.cases for tag in r.tags or ["(untagged)"])),
        _rates("By suite", "suite", ((r.suite, r) for r in record.cases)),
        _figures(record),
        _failures(record),
        _flaky(record),
        _judge(record),
    ]
    return "\n\n".join(section for section in sections if section) + "\n"


def _figures(record: RunRecord) -> str:
    """Per suite, the share of the answers' figures their cited cells give (agent/figures)."""
    by_suite: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in record.cases:
        by_suite[r.suite][0] += r.figures_verified
        by_suite[r.suite][1] += r.figures_checked
    if not any(checked for _, checked in by_suite.values()):
        return ""
    lines = ["## Figures verified against their queries", "", "| suite | verified | rate |", "|---|---|---|"]
    for suite, (verified, checked) in sorted(by_suite.items()):
        rate = _pct(verified / checked) if checked else "no figures"
        lines.append(f"| {suite} | {verified}/{checked} | {rate} |")
    return "\n".join(lines)


def _summary(record: RunRecord) -> str:
    suites = ", ".join(f"{s.name} ({s.dataset})" for s in record.suites)
    temperature = "API default" if record.temperature is None else f"{record.temperature:g}"
    cases = record.total // max(record.repeat, 1)
    lines = [
        f"# Eval run: {headline(record)}",
        "",
        f"{suites}; model `{record.model}`, temperature {temperature}, knowledge "
        f"{f'`{record.knowledge}`' if record.knowledge else 'none'}; {cases} cases x {record.repeat}, "
        f"concurrency {record.concurrency}{f', filter `{record.filter}`' if record.filter else ''}; "
        f"started {record.started_at}, took {record.wall_s:.1f} s.",
        "",
        "| | |",
        "|---|---|",
        f"| pass rate | {_pct(record.pass_rate)} ({record.passed}/{record.total}) |",
    ]
    if record.judge_model:
        lines.append(f"| judge (`{record.judge_model}`, apart from the checks) | {_judge_line(record)} |")
    if answered := _answered_by(record):
        lines.append(f"| answered by | {answered} |")
    t = record.tokens
    lines += [
        f"| tokens | {t.input:,} input, {t.output:,} output, {t.cache_read:,} cache read, "
        f"{t.cache_creation:,} cache write; cache-read share {_pct(t.cache_read_share)} |",
        f"| cost estimate | {_cost(record)} |",
        f"| latency per case | p50 {record.latency.p50_ms / 1000:.1f} s, p95 {record.latency.p95_ms / 1000:.1f} s |",
    ]
    return "\n".join(lines)


def headline(record: RunRecord) -> str:
    """The pass rate, and how many cases the judge could not grade (failed cases, named up front)."""
    ungraded = f"; the judge could not grade {record.judge_errors}, failed" if record.judge_errors else ""
    return f"{_pct(record.pass_rate)} passed ({record.passed} of {record.total}){ungraded}"


def _answered_by(record: RunRecord) -> str:
    """Which models answered, when a fallback means not every answer is the first model's."""
    counts: dict[str, int] = defaultdict(int)
    for case in record.cases:
        if case.model:
            counts[case.model] += 1
    fallbacks = sum(case.fallbacks for case in record.cases)
    if len(counts) < 2 and not fallbacks:
        return ""
    models = ", ".join(f"`{model}` {count}" for model, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{models} cases; {fallbacks} fallbacks: not every answer is the first model's"


def _judge_line(record: RunRecord) -> str:
    judged = [r.judge for r in record.cases if r.judge is not None]
    verdicts = [j for j in judged if j.passed is not None]
    errors = len(judged) - len(verdicts)
    rate = _pct(record.judge_pass_rate) if record.judge_pass_rate is not None else "no verdicts"
    passed = sum(1 for j in verdicts if j.passed)
    return f"{rate} pass ({passed}/{len(verdicts)} verdicts{f'; {errors} judge errors' if errors else ''})"


def _cost(record: RunRecord) -> str:
    if record.cost_usd is None:
        return f"no price for `{record.model}` in {PRICING_FILE.name}"
    text = f"${record.cost_usd:.4f}"
    if record.judge_model and record.judge_tokens.total:
        judge = f"${record.judge_cost_usd:.4f}" if record.judge_cost_usd is not None else "not priced"
        text += f" (+ judge {judge})"
    return f"{text}, at the prices in agent/{PRICING_FILE.name} (check them against Anthropic's price list)"


def _rates(title: str, label: str, pairs: Iterable[tuple[str, CaseResult]]) -> str:
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for key, result in pairs:
        groups[key].append(result)
    if not groups:
        return ""
    lines = [f"## {title}", "", f"| {label} | passed | rate |", "|---|---:|---:|"]
    for key in sorted(groups):
        passed = sum(r.passed for r in groups[key])
        lines.append(f"| {key} | {passed}/{len(groups[key])} | {_pct(passed / len(groups[key]))} |")
    return "\n".join(lines)


def _failures(record: RunRecord) -> str:
    failed = [r for r in record.cases if not r.passed]
    if not failed:
        return "## Failed cases\n\nNone."
    lines = [f"## Failed cases ({len(failed)})"]
    for r in failed:
        attempt = f" (attempt {r.attempt})" if record.repeat > 1 else ""
        lines += ["", f"### {r.suite}/{r.id}{attempt}", "", f"Question: {r.question}", ""]
        lines += [f"- **{check.name}**: {check.reason}" for check in r.failed_checks]
        for query in r.sql:
            rows = f"{query.row_count} row{'' if query.row_count == 1 else 's'}"
            status = f"error: {_clip(query.error, 160)}" if query.error else rows
            lines.append(f"- SQL {query.id} ({status}): `{_clip(query.sql, _SQL_CHARS)}`")
        if r.answer:
            lines.append(f"- Answer: {_clip(r.answer, _ANSWER_CHARS)}")
    return "\n".join(lines)


def _flaky(record: RunRecord) -> str:
    if record.repeat <= 1:
        return ""
    outcomes: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in record.cases:
        outcomes[r.key].append(r.passed)
    flaky = {key: runs for key, runs in outcomes.items() if 0 < sum(runs) < len(runs)}
    if not flaky:
        return f"## Flaky cases\n\nNone: every case gave the same result in all {record.repeat} attempts."
    lines = [f"## Flaky cases ({len(flaky)})", "", "| case | passed |", "|---|---:|"]
    lines += [f"| {suite}/{case} | {sum(runs)}/{len(runs)} |" for (suite, case), runs in sorted(flaky.items())]
    return "\n".join(lines)


def _judge(record: RunRecord) -> str:
    flagged = [r for r in record.cases if r.judge is not None and r.judge.passed is not True]
    if not flagged:
        return ""
    lines = [f"## Judge: failed verdicts and errors ({len(flagged)})", ""]
    for r in flagged:
        assert r.judge is not None
        what = f"judge error: {r.judge.error}" if r.judge.error else f"fail: {r.judge.reason}"
        lines.append(f"- {r.suite}/{r.id}{f' (attempt {r.attempt})' if record.repeat > 1 else ''}: {_clip(what, 300)}")
    return "\n".join(lines)


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split()).replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
