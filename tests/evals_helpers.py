"""An eval job's plumbing for tests: a small suite file, and the fake model answering each case by its
question (cases run concurrently, so the reply is chosen from the request, never from the order)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agent.config import Settings
from tests.conftest import make_settings
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Reply

SUITE = "trend"
CASES = [
    {"id": "airlines", "question": "How many airlines are there?", "tags": ["count"], "expect": {"contains": ["16"]}},
    {
        "id": "airports",
        "question": "How many airports are there?",
        "tags": ["count", "geo"],
        "expect": {"contains": ["1458"]},
    },
]
RIGHT = {"How many airlines are there?": "There are 16 airlines.", "How many airports are there?": "There are 1458."}
HALF_WRONG = {**RIGHT, "How many airports are there?": "There are 3 airports."}


def write_suite(directory: Path, name: str = SUITE) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "dataset": "demo", "cases": CASES}, sort_keys=False))
    return path


def _question(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else str(content[0].get("text", ""))


def answer_cases(fake: FakeAnthropic, answers: Mapping[str, str]) -> None:
    """Every request the script leaves answers its case's question (a 400 for any other question)."""

    def reply(body: dict[str, Any]) -> Reply | Failure:
        question = _question(body)
        if question in answers:
            return Reply(text=answers[question])
        return Failure(400, "invalid_request_error", f"fake: no answer for {question[:60]!r}")

    fake.always(reply)


def job_settings(settings: Settings, fake: FakeAnthropic, data_dir: Path, **overrides: Any) -> Settings:
    """The session's settings, with the fake model's address and a key, writing under `data_dir`."""
    values = {**settings.model_dump(), "anthropic_base_url": fake.base_url, "anthropic_api_key": "test-key"}
    return make_settings(**{**values, "agent_data_dir": data_dir, **overrides})
