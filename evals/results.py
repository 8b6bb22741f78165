"""The shape of an eval run's results (`results.json`): one model per thing, dumped where needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from agent.runner import RunMetrics


class ResultsError(Exception):
    """A results file that cannot be read; the message names the file."""


class Tokens(BaseModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0

    @classmethod
    def of(cls, metrics: RunMetrics) -> Tokens:
        return cls(
            input=metrics.input_tokens,
            output=metrics.output_tokens,
            cache_read=metrics.cache_read_tokens,
            cache_creation=metrics.cache_creation_tokens,
        )

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(**{kind: getattr(self, kind) + getattr(other, kind) for kind in Tokens.model_fields})

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_creation

    @property
    def cache_read_share(self) -> float:
        """Cache reads as a share of all input tokens (uncached, read and written)."""
        prompt = self.input + self.cache_read + self.cache_creation
        return self.cache_read / prompt if prompt else 0.0


class Check(BaseModel):
    """One deterministic check of a case; `reason` says why it failed (None when it passed)."""

    # run, contains, not_contains, classification, max_queries, refused, missing, refuses, figures_verified,
    # report (a report case's outcome, sections and findings), gold_sql, judge (the judge could not grade it)
    name: str
    passed: bool
    reason: str | None = None


class JudgeVerdict(BaseModel):
    """The model judge's reading of one answer, kept apart from the deterministic checks.
    `passed` is None when the judge gave no usable verdict (`error` says why)."""

    model: str
    passed: bool | None = None
    reason: str = ""
    error: str | None = None
    tokens: Tokens = Field(default_factory=Tokens)


class QueryRecord(BaseModel):
    id: str
    question: str
    sql: str
    row_count: int = 0
    error: str | None = None
    reused_from: str | None = None


class CaseResult(BaseModel):
    suite: str
    id: str
    attempt: int = 1
    question: str
    tags: list[str] = Field(default_factory=list)
    passed: bool
    checks: list[Check]
    judge: JudgeVerdict | None = None
    answer: str = ""
    outcome: str = ""
    classification: str = ""
    error: str | None = None
    sql: list[QueryRecord] = Field(default_factory=list)
    tokens: Tokens = Field(default_factory=Tokens)
    latency_ms: int = 0
    llm_calls: int = 0
    rounds: int = 0
    model: str = ""  # `provider:name` of the model that answered (after any fallback)
    fallbacks: int = 0
    figures_checked: int = 0  # the final answer's figures (agent/figures), after the correction round
    figures_verified: int = 0
    report_outcome: str | None = None  # a report case's: complete, partial or cannot_answer

    @model_validator(mode="after")
    def _ungraded_is_failed(self) -> CaseResult:
        """A case the judge could not grade has not passed: it fails a `judge` check saying why (a results
        file written before this rule reads the same way)."""
        if self.judge is not None and self.judge.passed is None and not any(c.name == "judge" for c in self.checks):
            why = f"the judge could not grade this case: {self.judge.error or 'no verdict'}"
            self.checks = [*self.checks, Check(name="judge", passed=False, reason=why)]
            self.passed = False
        return self

    @property
    def ungraded(self) -> bool:
        """The judge was asked and gave no verdict."""
        return self.judge is not None and self.judge.passed is None

    @property
    def key(self) -> tuple[str, str]:
        return self.suite, self.id

    @property
    def failed_checks(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]


class SuiteRef(BaseModel):
    name: str
    path: str
    dataset: str


class Latency(BaseModel):
    p50_ms: int = 0
    p95_ms: int = 0


class RunRecord(BaseModel):
    """The whole of results.json."""

    pass_rate: float  # 0 to 1, over every case run (each attempt counts)
    passed: int
    total: int
    judge_pass_rate: float | None = None  # over the cases the judge gave a verdict on
    judge_errors: int = 0  # cases the judge was asked to grade and could not (each a failed case)
    started_at: str
    wall_s: float
    model: str
    knowledge: str | None = None  # the knowledge folder the agent read; None: run without
    judge_model: str | None = None
    temperature: float | None = None
    concurrency: int = 1
    repeat: int = 1
    filter: str | None = None
    suites: list[SuiteRef] = Field(default_factory=list)
    tokens: Tokens = Field(default_factory=Tokens)
    judge_tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None  # the agent's tokens at the model's price; None when not priced
    judge_cost_usd: float | None = None
    latency: Latency = Field(default_factory=Latency)
    cases: list[CaseResult] = Field(default_factory=list)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def load_record(path: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ResultsError(f"{path}: not an eval results file ({where}: {error['msg']})") from None
