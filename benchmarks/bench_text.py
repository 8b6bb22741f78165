"""How long the text transformations that a query, a model or a Slack user chooses the input of take on
adversarial text of the largest size they receive (64 KB): the absolute figures that
tests/agent/test_linear_text.py leaves out (it asserts that each grows linearly, which a busy machine
cannot fail). On Python's backtracking `re`, 4,000 spaces in an error froze the app for 17.5 s.

    python -m benchmarks.bench_text
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.db.hints import clean_error, hint_for
from agent.pipeline.tools import clean_sql
from bots.slack import blocks
from evals import judge, scoring

SIZE = 64 * 1024
FRAGMENTS = [" ", "\n", "Maybe you meant: [", "Code: 1. DB::Exception: ", " In scope ", "1,234", "| 1 ", "<@UA|", "[Q1"]
TRANSFORMATIONS: dict[str, Callable[[str], object]] = {
    "clean_error": lambda t: clean_error(t, lambda name: True),
    "hint_for": lambda t: hint_for(t, ["db.t"], ["c"]),
    "clean_sql": clean_sql,
    "slack_markdown": lambda t: blocks.slack_markdown(t, final=True),
    "scoring figures": scoring.figures,
    "scoring mentions a number": lambda t: scoring.mentions(t, "336776"),
    "judge verdict": lambda t: judge._VERDICT_LINE.search(t),
}


def _slowest_s(transformation: Callable[[str], object]) -> tuple[float, str]:
    slowest = (0.0, "")
    for fragment in FRAGMENTS:
        text = (fragment * (SIZE // len(fragment) + 1))[:SIZE]
        started = time.perf_counter()
        transformation(text)
        slowest = max(slowest, (time.perf_counter() - started, repr(fragment)))
    return slowest


def run() -> dict[str, tuple[float, str]]:
    return {name: _slowest_s(transformation) for name, transformation in TRANSFORMATIONS.items()}


def report(figures: dict[str, tuple[float, str]]) -> None:
    print(f"\n{'transformation (64 KB, slowest text)':40} {'ms':>8}  text repeated")
    for name, (seconds, fragment) in figures.items():
        print(f"{name:40} {seconds * 1000:8.1f}  {fragment}")


if __name__ == "__main__":
    report(run())
