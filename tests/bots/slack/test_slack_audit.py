"""A Slack question's audit entry names the Slack person who asked (by their verified email, the same person
as on the web: bots/slack/people.py) and the channel it was asked in."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import GENERAL_ID, HUMAN_EMAIL
from tests.slack_helpers import carriers_script


async def test_a_channel_question_is_audited_with_its_asker_and_channel(
    start_bot, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    await bot.ask("which carrier flew the most?")
    [entry] = await bot.service.state.audit.entries()
    assert (entry.person, entry.interface, entry.channel, entry.outcome) == (
        f"person:email:{HUMAN_EMAIL}",
        "slack",
        GENERAL_ID,
        "answered",
    )
    [query] = entry.queries
    assert query.sql.startswith("SELECT carrier, count() AS n FROM nycflights13.flights") and query.rows_read == 336776
