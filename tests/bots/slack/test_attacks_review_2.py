"""Outside review 2: a Slack channel's thread continued after the policy file maps the channel to another
policy (a restart with the edited file). The thread's earlier answer was read under the channel's old
policy; the new question runs under the new one, yet its model is handed the old answer's rows, and its
answer is posted to the channel. Asserts the SAFE behaviour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.slack_helpers import sql_call

BY_ORIGIN = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY origin"
POLICY_FILE = """
contact: "#data-help"
policies:
  - name: jfk
    members:
      - email: nobody@example.com
    tables:
      nycflights13.flights: origin = 'JFK'
  - name: newark
    members:
      - email: nobody-else@example.com
    tables:
      nycflights13.flights: origin = 'EWR'
channels:
  {channel}: {policy}
"""


async def test_a_thread_continued_after_the_channel_is_remapped_does_not_feed_the_model_old_rows(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    access = tmp_path / "access.yaml"
    access.write_text(POLICY_FILE.format(channel=GENERAL_ID, policy="jfk"), encoding="utf-8")
    first = await start_bot(agent_access_file=str(access))
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("Flights by origin", BY_ORIGIN)]), Reply(text="Counted [Q1]."), Reply(text="[]")
    )
    thread = await first.ask("flights by origin?", channel=GENERAL_ID)
    told_jfk = json.dumps(fake_anthropic.requests)
    await first.stop()

    access.write_text(POLICY_FILE.format(channel=GENERAL_ID, policy="newark"), encoding="utf-8")
    second = await start_bot(agent_access_file=str(access))
    fake_anthropic.reset()
    fake_anthropic.script(Reply(text="Nothing new."), Reply(text="[]"))
    await second.ask("and what did that table say?", channel=GENERAL_ID, thread_ts=thread)
    sent = json.dumps(fake_anthropic.requests)
    assert "| JFK | 111279 |" in told_jfk, "the first answer read JFK's rows under the channel's old policy"
    assert fake_anthropic.requests, "the follow-up reached the model"
    # (the prompts name JFK in their examples: the row's count is what only the old policy read)
    assert "111279" not in sent, "the thread's JFK rows are handed to the model under the channel's new policy"
