from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.app import AgentApp
from tests.fakes.slack_api import FakeSlack
from tests.slack_helpers import SlackHarness


@pytest.fixture
async def start_bot(
    make_app: Callable[..., AgentApp], fake_slack: FakeSlack, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """Start the bot (keyword arguments go to settings); every one started is stopped at the end."""
    started: list[SlackHarness] = []

    async def start(**overrides: Any) -> SlackHarness:
        harness = await SlackHarness(make_app, fake_slack, tmp_path).start(**overrides)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.stop()
