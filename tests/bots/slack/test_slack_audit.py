"""A Slack question's audit entry names the Slack person who asked (by their verified email, the same person
as on the web: bots/slack/people.py) and the channel it was asked in."""

from __future__ import annotations

from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack
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


async def test_refused_questions_are_audited_with_their_asker_and_reason(
    start_bot, fake_anthropic: FakeAnthropic
) -> None:
    """Too long and over the daily budget: refused before any run, each still leaves its entry naming the
    asker as an answered question does (the rate limit: tests/bots/slack/test_attacks_review.py)."""
    bot = await start_bot(slack_max_message_chars=40, agent_daily_user_tokens=1)
    await bot.ask("which carrier flew the most in the whole of 2013, month by month?")  # over 40 characters
    fake_anthropic.script(*carriers_script())
    await bot.ask("which carrier flew the most?")  # answered: it spends the budget
    await bot.ask("and the least?")
    entries = await bot.service.state.audit.entries()
    assert [(e.person, e.channel, e.outcome, len(e.queries)) for e in entries] == [
        (f"person:email:{HUMAN_EMAIL}", GENERAL_ID, "refused: too_long", 0),
        (f"person:email:{HUMAN_EMAIL}", GENERAL_ID, "answered", 1),
        (f"person:email:{HUMAN_EMAIL}", GENERAL_ID, "refused: over_budget", 0),
    ]
    assert len(entries[0].question) == 40, "a refused text is kept only up to the length cap"


async def test_a_mention_in_a_channel_not_allowed_is_audited_once_without_an_answer(
    start_bot, fake_slack: FakeSlack
) -> None:
    """Never answered and no Slack call spent on it (the asker is named by team and user id), but audited,
    once however often Slack delivers the event."""
    bot = await start_bot(slack_allowed_channels="C0SALES0001")
    asked = fake_slack.add_message(GENERAL_ID, f"<@{fake_slack.bot_user_id}> how many flights?")
    mention = events.events_request(events.event_callback(events.app_mention("how many flights?", ts=asked)))
    await bot.deliver(mention)
    await bot.deliver(mention)  # Slack's retry of the same event
    await bot.idle()
    assert [c.method for c in fake_slack.calls()] == ["auth.test"]
    [entry] = await bot.service.state.audit.entries()
    assert (entry.person, entry.channel, entry.outcome, entry.question) == (
        f"person:slack:{TEAM_ID}:{HUMAN_ID}",
        GENERAL_ID,
        "refused: channel_not_allowed",
        "how many flights?",
    )
