"""The policy file checked at start-up: the app refuses to start on a file the warehouse refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.access.files import AccessFileError
from agent.app import AgentApp

DEMO = Path(__file__).resolve().parents[3] / "deploy" / "access" / "nycflights13.yaml"


async def test_the_app_starts_with_the_demo_file_and_knows_its_policies(make_app: Callable[..., AgentApp]) -> None:
    app = make_app(agent_access_file=str(DEMO))
    await app.check_access()
    assert app.policies is not None and app.policies.for_channel("C0JFKOPS1").name == "jfk"


def test_without_a_file_there_is_no_policy(make_app: Callable[..., AgentApp]) -> None:
    assert make_app().policies is None


def test_a_file_that_does_not_read_stops_the_start(make_app: Callable[..., AgentApp], tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text("policies:\n  - name: a\n    members:\n      - phone: x\n")
    with pytest.raises(AccessFileError, match=r"access.yaml:4: unknown member kind 'phone'"):
        make_app(agent_access_file=str(path))


async def test_a_filter_the_engine_refuses_stops_the_start(make_app: Callable[..., AgentApp], tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text("policies:\n  - name: a\n    tables:\n      nycflights13.flights: nope = 1\n")
    app = make_app(agent_access_file=str(path))
    with pytest.raises(AccessFileError) as raised:
        await app.check_access()
    [problem] = raised.value.problems
    assert problem.startswith(f"{path}:4: policy a: the row filter of nycflights13.flights:") and "nope" in problem
