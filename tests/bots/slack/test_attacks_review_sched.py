"""An outside review's attacks on schedules in Slack (bots/slack/schedules.py), against the strict fake.

Finding (fails on the code as reviewed): a channel's answer scheduled to its maker's web inbox keeps
delivering after they have left the channel; only a channel destination checks membership at each fire.
Attacks that held (pass): a submitted modal whose private_metadata names another conversation than the
answer's, or a run that is not a Slack answer of theirs, is refused and nothing is made; a schedule's title
(which its owner may set on the web) cannot ping a channel or disguise a link when delivered there; another
person's click on one's Delete button changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.bots.slack.test_slack_schedules import ALICE, _repeat, _scheduler
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import DM_ID, GENERAL_ID, HUMAN_ID, FakeSlack
from tests.moved_clock import MovedClock


def _forged(view: dict[str, Any], **meta: str) -> dict[str, Any]:
    """The opened view with its private_metadata changed (the modal's hidden state, as a forger sends it)."""
    kept = json.loads(view["private_metadata"])
    return {**view, "private_metadata": json.dumps({**kept, **meta})}


async def test_a_channels_answer_scheduled_to_ones_inbox_stops_once_one_has_left_the_channel(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """FINDING (low): "My web inbox" in the modal takes the channel's answer (its question, its SQL, read
    under the channel's policy) out of the channel; after its maker leaves (or is removed from) the
    channel, each fire still re-runs it and delivers it to their inbox. SlackOutlet.refusal checks the
    maker's membership only when the destination is the channel. A fix checks, at each fire, that the owner
    still reads the conversation the answer came from (`source_run_id`'s channel), and stops it otherwise."""
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    assert (await bot.click(events.view_submission(view, {"where": "inbox", "timezone": "UTC"}))).text == ""
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    assert made.draft.destination == "inbox"
    fake_slack.workspace.channels[GENERAL_ID].members.discard(HUMAN_ID)

    scheduler, store, _ = _scheduler(bot, MovedClock(datetime.fromtimestamp(made.next_at or 0, UTC)))
    assert await scheduler.tick() == 1
    delivered = [i for i in await store.inbox(ALICE) if not i.details.get("notice")]
    kept = await store.get(made.id, owner=ALICE)
    assert delivered == [], "the channel's answer no longer reaches someone who left the channel"
    assert kept is not None and kept.state == "stopped"


async def test_a_modal_whose_metadata_names_another_conversation_or_run_makes_nothing(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    fake_slack.add_channel("C0SECRET01", "secret", members={HUMAN_ID})
    for forged in (
        _forged(view, channel="C0SECRET01"),  # general's answer, posted into another channel
        _forged(view, channel=DM_ID),  # ... or taken into a DM, out of the channel's sight
        _forged(view, run="0" * 32),  # a run never stored
        _forged(view, team="T0OTHER001"),  # another workspace's same-named channel
    ):
        refused = await bot.click(events.view_submission(forged, {"timezone": "UTC"}))
        assert refused.status_code == 200
        assert refused.json()["response_action"] == "errors", forged["private_metadata"]
    assert bot.service is not None and await bot.service.state.schedules.list_for(ALICE) == []


async def test_a_title_cannot_ping_a_channel_or_disguise_a_link_when_delivered(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    assert (await bot.click(events.view_submission(view, {"timezone": "UTC"}))).text == ""
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    hostile = "<!channel> <!here> <@U0BOB000001> <https://evil.example|the report> [the report](https://evil.example)"
    assert await bot.service.state.schedules.edit(made.id, owner=ALICE, title=hostile) is not None

    scheduler, _, _ = _scheduler(bot, MovedClock(datetime.fromtimestamp(made.next_at or 0, UTC)))
    assert await scheduler.tick() == 1
    posted = fake_slack.calls("chat.postMessage")[-1]
    assert posted.args["channel"] == GENERAL_ID
    sent = json.dumps(posted.args["blocks"]) + posted.args["text"]
    for live in ("<!channel>", "<!here>", "<@U0BOB000001>", "<https://evil.example|", "](https://evil.example)"):
        assert live not in sent, live


async def test_another_persons_click_on_ones_buttons_changes_nothing(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    assert (await bot.click(events.view_submission(view, {"timezone": "UTC"}))).text == ""
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    fake_slack.add_user("U0BOB000001", "bob", email="bob@example.com")
    for action in ("analyst_schedule_pause", "analyst_schedule_delete"):
        click = events.block_actions(action, made.id, message_ts="1.000001", channel=DM_ID)
        click["user"]["id"] = "U0BOB000001"
        await bot.click(click)
        await bot.idle()
    kept = await bot.service.state.schedules.get(made.id, owner=ALICE)
    assert kept is not None and kept.state == "active"
