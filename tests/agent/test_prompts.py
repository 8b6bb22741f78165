"""Every prompt file renders with StrictUndefined; the tool schemas are valid for the API."""

from __future__ import annotations

import pytest

from agent.config import Settings
from agent.prompts import PLATFORMS, PromptError, PromptLibrary
from tests.fakes.anthropic_api import _validate_tools

VARIABLES = {
    "SYSTEM.md": {"max_rows": 50},
    "evals/JUDGE.md": {},
    "evals/JUDGE_REQUEST.md": {"question": "q", "rubric": "r", "answer": "a", "queries": []},
    "SCHEMA.md": {"schema": "## db.t", "catalogue": True, "complete": False, "tables": 400},
    "RETRIEVED.md": {"tables": "- db.t (~1K rows): Orders", "knowledge": "## Glossary\n- **churn** ..."},
    "KNOWLEDGE.md": {"knowledge": "## Glossary\n- **churn** ...", "left_out": 3},
    "CONTEXT.md": {"today": "2026-11-22", "format_guidance": "Use Markdown."},
    "FOLLOWUP.md": {},
    "FOLLOWUP_REQUEST.md": {"question": "q", "answer": "a", "queries": []},
    "EXAMPLES.md": {},
    "EXAMPLES_REQUEST.md": {"schema": "## db.t"},
    "NO_ACCESS.md": {"contact": "#data-help"},
    "TOOLS.yaml": {"max_rows": 50, "chart_max_rows": 5000, "lookup": True},
    "loop/penultimate.md": {},
    "loop/synthesize.md": {},
    "loop/think_nudge.md": {"rounds": 2},
    "loop/citation_retry.md": {"citations": "[Q1]", "answered": ["Q2"]},
    "loop/no_data.md": {},
    "loop/budget_note.md": {"kind": "tokens", "spent": "12,000", "limit": "10,000"},
    "loop/budget_stopped.md": {"spent": "12,000", "limit": "10,000", "gathered": "- Q1: 3 rows"},
    "loop/figure_correction.md": {
        "figures": [{"text": "120,853", "citations": ["Q1"], "reason": "no cell of Q1 gives it"}]
    },
    "loop/duplicate.md": {"original": "Q1"},
    "loop/clarification.md": {"question": "Which revenue?", "options": ["Net", "Gross"]},
    "loop/cancelled.md": {"partial": "x"},
    "loop/queries_skipped.md": {"skipped": 3, "per_call": 5, "per_run": 25, "run_spent": False},
    "loop/preflight.md": {
        "estimated": "336,776",
        "limit": "100,000",
        "tables": [{"name": "db.t", "rows": "336,776", "parts": 3, "sorting_key": "id", "partition_key": "d"}],
    },
    "report/request.md": {"budget": {"steps": 16, "tool_calls": 24, "queries": 15, "minutes": 10.0}},
    "report/penultimate.md": {},
    "report/partial.md": {"limit": "queries", "spent": "15", "allowed": "15"},
    "report/stopped.md": {"why": "it reached its budget of 500,000 tokens", "gathered": "Q1: x (3 rows)"},
    **{f"formats/{platform}.md": {} for platform in PLATFORMS},
}


@pytest.fixture(scope="module")
def prompts() -> PromptLibrary:
    return PromptLibrary(Settings.model_fields["agent_prompts_dir"].default)


def test_every_prompt_file_is_covered(prompts: PromptLibrary) -> None:
    assert set(prompts.names()) == set(VARIABLES)


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_prompt_renders(prompts: PromptLibrary, name: str) -> None:
    assert prompts.render(name, **VARIABLES[name]).strip()


@pytest.mark.parametrize("name", [n for n, v in VARIABLES.items() if v])
def test_a_missing_variable_is_an_error(prompts: PromptLibrary, name: str) -> None:
    with pytest.raises(Exception, match="undefined"):
        prompts.render(name)


def test_tool_schemas_are_valid_for_the_api(prompts: PromptLibrary) -> None:
    tools = prompts.tools(max_rows=50, chart_max_rows=5000, lookup=False)
    assert [t["name"] for t in tools] == ["think", "execute_sql", "ask_clarification", "chart"]
    _validate_tools(tools, None)
    tools = prompts.tools(max_rows=50, chart_max_rows=5000, lookup=True)
    assert [t["name"] for t in tools] == ["think", "execute_sql", "lookup_schema", "ask_clarification", "chart"]
    _validate_tools(tools, None)


def test_unknown_platform_and_missing_file_are_clear(prompts: PromptLibrary) -> None:
    with pytest.raises(PromptError, match="Unknown platform format 'teams'"):
        prompts.format_guidance("teams")
    with pytest.raises(PromptError, match="is missing"):
        prompts.render("NOPE.md")


def test_the_system_prompt_says_how_to_read_each_engine_and_to_filter_on_the_keys(prompts: PromptLibrary) -> None:
    text = prompts.render("SYSTEM.md", max_rows=50)
    for must in (
        "Engine note",
        "FINAL",
        "argMax(column, version)",
        "sum(sign)",
        "sum(x * sign)",
        "-Merge",
        "uniqMerge",
    ):
        assert must in text, must
    assert "partition key" in text and "leading columns of the sorting key" in text
    assert "estimated to\nread far too much is not run" in text
