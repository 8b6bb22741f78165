"""An outside review's attack on row isolation through Slack: the prompts pinned on a DM are written for
no policy. Asserts the SAFE behaviour, so it fails while the leak is there."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bots.slack.test_slack_access import POLICY_FILE
from tests.fakes import bolt_samples
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import DM_ID, FakeSlack


async def test_a_dms_suggested_prompts_are_written_from_the_askers_policy_only(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    """The DM's asker is under jfk (flights at JFK and weather at JFK only). bots/slack/app.py asks
    `examples.get()` with no policy: the example questions are written by the model from the WHOLE
    schema (planes, airlines, airports, and flights' sampled origins EWR and LGA), then pinned on the DM.
    Safe: written from the schema jfk's model sees (or none)."""
    path = tmp_path / "access.yaml"
    path.write_text(POLICY_FILE, encoding="utf-8")
    fake_anthropic.script(Reply(text='["How many planes are there?", "Flights from LGA?", "Busiest airline?"]'))
    bot = await start_bot(agent_access_file=str(path), agent_example_questions=[])
    await bot.deliver(events.events_request(bolt_samples.app_home_opened("messages")))
    await bot.idle()
    written_from = json.dumps([request.get("system", "") for request in fake_anthropic.requests])
    written_from += json.dumps([request.get("messages", "") for request in fake_anthropic.requests])
    assert fake_anthropic.requests, "the prompts were written by the model"
    assert "nycflights13.planes" not in written_from and "LGA" not in written_from, written_from[:3000]
    pinned = fake_slack.pinned_prompts(DM_ID) or {}
    assert not any("planes" in p["message"] for p in pinned.get("prompts", [])), pinned
