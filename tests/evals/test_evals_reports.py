"""A report case in the evals: asked as a report (`report: true`), it can expect the report's outcome, its
sections and at least some findings, and its figures verified (the whole report's, after its correction)."""

from __future__ import annotations

import pytest

from evals.runner import run_case
from evals.suite import Suite, SuiteError, load_suite
from tests.agent.pipeline.test_reports import MONTHS, ORIGINS, REPORT, sql
from tests.fakes.anthropic_api import FakeAnthropic, Reply

WRITTEN = REPORT.replace("25 minutes", "19 minutes")


def suite(expect: dict, *, report: bool = True) -> Suite:
    case = {"id": "july", "question": "Why did departure delays rise in July?", "report": report, "expect": expect}
    return Suite.model_validate({"name": "reports", "dataset": "demo", "cases": [case]})


async def test_a_report_case_checks_outcome_sections_findings_and_figures(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    expect = {
        "report": {"outcome": "complete", "sections": ["summary", "findings", "method", "caveats"], "min_findings": 3},
        "figures_verified": True,
    }
    cases = suite(expect)
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), Reply(tool_calls=[sql(ORIGINS)]), Reply(text=WRITTEN))
    result = await run_case(make_app().runner, cases, cases.cases[0], gold=None, judge=None)
    assert result.passed, result.checks
    assert [c.name for c in result.checks] == ["run", "report", "figures_verified"]
    assert result.report_outcome == "complete" and result.figures_verified == 6


async def test_a_report_that_is_not_what_the_case_expects_fails_saying_why(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    cases = suite({"report": {"outcome": "partial", "sections": ["remaining"], "min_findings": 4}})
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), Reply(tool_calls=[sql(ORIGINS)]), Reply(text=WRITTEN))
    result = await run_case(make_app().runner, cases, cases.cases[0], gold=None, judge=None)
    (check,) = [c for c in result.checks if c.name == "report"]
    assert not result.passed and check.reason == (
        "the report: it is complete, expected partial; no remaining section; 3 finding(s), at least 4 expected"
    )


def test_report_expectations_need_a_report_case_and_known_sections(tmp_path) -> None:
    with pytest.raises(ValueError, match="needs `report: true`"):
        suite({"report": {"outcome": "complete"}}, report=False)
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: r\ndataset: demo\ncases:\n  - id: a\n    question: q\n    report: true\n"
        "    expect:\n      report:\n        sections: [summary, appendix]\n"
    )
    with pytest.raises(SuiteError, match="unknown section 'appendix'"):
        load_suite(path)
