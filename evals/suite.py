"""Eval suites: YAML files of cases, validated into typed models with errors that name the file and
the case.

A suite has a `name`, a `dataset` (`demo`: the embedded demo data; any other name: the ClickHouse
server given to the run by CLICKHOUSE_URL) and `cases`. See README.md ("Evals") for the fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent import linear_re, safe_yaml
from agent.knowledge.writer import append_to_list
from agent.reports import ReportOutcome
from agent.reports.sections import SECTIONS
from agent.runner import Classification, Turn, TurnQuery

SUITES_DIR = Path(__file__).resolve().parent / "suites"
DEMO = "demo"


class SuiteError(Exception):
    """A suite file that cannot be read or does not validate; the message names the file and case."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A thing an answer must name: a value, or a list of ways to write it (any one will do).
Mention = str | list[str]


class ReportExpect(_Strict):
    """What a report case (`report: true`) expects of its report: how it ends, which sections have text
    (summary, findings, method, caveats, unanswered, remaining) and at least how many findings."""

    outcome: ReportOutcome | None = None
    sections: list[str] = Field(default_factory=list)
    min_findings: Annotated[int | None, Field(ge=0)] = None

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, names: list[str]) -> list[str]:
        if unknown := [name for name in names if name not in SECTIONS]:
            raise ValueError(f"unknown section {unknown[0]!r}; use {', '.join(SECTIONS)}")
        return names


class Expect(_Strict):
    contains: list[Mention] = Field(default_factory=list)
    not_contains: list[str] = Field(default_factory=list)
    classification: Classification | None = None
    max_queries: Annotated[int | None, Field(ge=0)] = None
    refused: bool | None = None
    # What the data lacks: the answer names each and says it is not there (a canned decline names nothing).
    missing: list[Mention] = Field(default_factory=list)
    # What the answer must decline: it declines, and names each (not just "I can't help with that").
    refuses: list[Mention] = Field(default_factory=list)
    figures_verified: bool | None = None  # true: every figure of the answer checks out against its queries
    report: ReportExpect | None = None  # a report case's report (the case has `report: true`)

    @field_validator("contains", "not_contains", "missing", "refuses")
    @classmethod
    def _no_blank(cls, values: list[Mention]) -> list[Mention]:
        ways = [way for value in values for way in ([value] if isinstance(value, str) else value)]
        if any(not way.strip() for way in ways) or any(value == [] for value in values):
            raise ValueError("values must not be blank")
        return values


class HistoryTurn(_Strict):
    """An earlier turn of the conversation, replayed as the agent would have stored it."""

    question: str
    answer: str
    sql: list[str] = Field(default_factory=list)

    def to_turn(self) -> Turn:
        queries = [TurnQuery(id=f"Q{n}", question=self.question, sql=sql) for n, sql in enumerate(self.sql, start=1)]
        return Turn(question=self.question, answer=self.answer, queries=queries)


class Case(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    question: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    history: list[HistoryTurn] = Field(default_factory=list)
    gold_sql: str | None = None
    expect: Expect = Expect()
    judge: str | None = None  # a rubric for the model judge
    report: bool = False  # asked as a report (Runner.run(report=...)), never guessed from the question

    @model_validator(mode="after")
    def _report_expectations_need_a_report(self) -> Case:
        if self.expect.report is not None and not self.report:
            raise ValueError("expect.report needs `report: true` (a report is asked for explicitly)")
        return self

    @property
    def history_turns(self) -> list[Turn]:
        return [turn.to_turn() for turn in self.history]


class Suite(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    dataset: str = Field(min_length=1)
    cases: list[Case] = Field(min_length=1)
    path: Path | None = None  # where it was loaded from; not a YAML field

    @model_validator(mode="after")
    def _unique_ids(self) -> Suite:
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"case id {case.id!r} is used twice")
            seen.add(case.id)
        return self

    @property
    def source(self) -> str:
        return str(self.path) if self.path else self.name


def default_suite_paths() -> list[Path]:
    return sorted(SUITES_DIR.glob("*.yaml"))


def load_suite(path: Path) -> Suite:
    try:
        data = safe_yaml.load(safe_yaml.read_text(path))  # within bounds: a suite may come from a pull request
    except OSError as exc:
        raise SuiteError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (safe_yaml.TooLarge, UnicodeError) as exc:
        raise SuiteError(f"{path}: {exc}") from None
    except RecursionError:
        raise SuiteError(f"{path}: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SuiteError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: a suite is a mapping with name, dataset and cases")
    if "path" in data:
        raise SuiteError(f"{path}: path: Extra inputs are not permitted")
    try:
        return Suite.model_validate({**data, "path": path})
    except ValidationError as exc:
        raise SuiteError(f"{path}: {_describe(exc, data)}") from None


def load_suites(paths: Iterable[Path]) -> list[Suite]:
    suites = [load_suite(path) for path in paths]
    names: dict[str, Suite] = {}
    for suite in suites:
        if suite.name in names:
            raise SuiteError(f"{suite.source}: suite name {suite.name!r} is also used by {names[suite.name].source}")
        names[suite.name] = suite
    return suites


def select_cases(suites: Sequence[Suite], pattern: str | None) -> list[tuple[Suite, Case]]:
    """The cases whose `suite/id` matches the regular expression (all cases without one). It runs on
    RE2 (linear time whatever the pattern; linear_re.error for one RE2 does not take)."""
    regex = linear_re.compile(pattern) if pattern else None
    return [
        (suite, case)
        for suite in suites
        for case in suite.cases
        if regex is None or regex.search(f"{suite.name}/{case.id}")
    ]


def _describe(exc: ValidationError, data: dict[str, Any]) -> str:
    """The first error, as `case <id>: field.path: message`."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    where = ""
    if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
        cases = data.get("cases") or []
        raw = cases[loc[1]] if loc[1] < len(cases) else None
        case_id = raw.get("id") if isinstance(raw, dict) else None
        where = f"case {case_id!r}: " if isinstance(case_id, str) else f"case #{loc[1] + 1}: "
        loc = loc[2:]
    field = ".".join(str(part) for part in loc)
    message = error["msg"]
    if error["type"] == "string_type" and error.get("input") is None:
        message += ' (a bare null in YAML is no value: quote it, as in "null")'
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}{field + ': ' if field else ''}{message}{more}"


def append_case(path: Path, case: dict[str, Any], *, name: str = "feedback", dataset: str = DEMO) -> None:
    """Append one case (validated first) to a suite file, creating the file when it does not exist;
    appended as text, so the file's comments and layout stay."""
    Case.model_validate(case)
    append_to_list(path, "cases", case, header=f"name: {name}\ndataset: {dataset}\ncases:\n")
    load_suite(path)  # the suite as a whole still loads
