"""Schedules in Slack, against the strict fake: "Repeat…" under an answer opens the modal (views.open, on
the click's trigger), its submission makes the clicker's schedule (or shows what to fix beside a field);
a fire posts a normal answer into the channel (figures' receipt, Show SQL, the line on what changed); a
DM saying `schedules` lists one's own with Pause/Resume and Delete; an owner who left the channel stops
the schedule."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.metrics import Metrics
from agent.prompts import prompt_library
from chats.people import person_owner
from chats.schedule_deliveries import InboxOutlet
from chats.schedule_runs import FireMaker
from chats.schedules import INBOX, ScheduleStore
from process.scheduler import Scheduler
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import DM_ID, GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack
from tests.moved_clock import MovedClock
from tests.slack_helpers import SlackHarness, answer_message, carriers_script

ALICE = person_owner(f"email:{HUMAN_EMAIL}")


async def _answer_with_repeat(bot: SlackHarness, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> Any:
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    (repeat,) = [b for b in answer["blocks"] if b.get("block_id") == "analyst_repeat"]
    return question, answer, repeat["elements"][0]


async def _repeat(bot: SlackHarness, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> dict[str, Any]:
    """Click "Repeat…" under an answer; the modal it opened."""
    question, answer, button = await _answer_with_repeat(bot, fake_slack, fake_anthropic)
    click = events.block_actions(
        button["action_id"], button["value"], message_ts=answer["ts"], thread_ts=question, block_id="analyst_repeat"
    )
    assert (await bot.click(click)).status_code == 200
    await bot.idle()
    (opened,) = fake_slack.calls("views.open")
    assert opened.args["trigger_id"] == click["trigger_id"], "the click's own trigger"
    return dict(opened.response["view"])


def _scheduler(bot: SlackHarness, clock: MovedClock) -> tuple[Scheduler, ScheduleStore, Metrics]:
    assert bot.service is not None
    state, agent = bot.service.state, bot.service.agent
    store = ScheduleStore(state.file, clock=clock)
    metrics = Metrics(CollectorRegistry())
    maker = FireMaker(agent, prompt_library(agent.settings.agent_prompts_dir))
    outlets = {INBOX: InboxOutlet(store), "slack": bot.bot.outlet()}
    scheduler = Scheduler(
        store, state.conversations, maker, outlets, metrics, policies=lambda: agent.policies, clock=clock
    )
    return scheduler, store, metrics


async def test_repeat_opens_a_modal_whose_submission_schedules_the_answer_into_the_channel(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    assert view["callback_id"] == "analyst_schedule_modal" and view["type"] == "modal"

    wrong = events.view_submission(view, {"timezone": "Mars/Olympus"})
    refused = await bot.click(wrong)
    assert refused.status_code == 200
    assert refused.json() == {
        "response_action": "errors",
        "errors": {"timezone": "Unknown time zone 'Mars/Olympus': use a name such as Europe/Berlin."},
    }
    assert bot.service is not None and await bot.service.state.schedules.list_for(ALICE) == []

    submitted = events.view_submission(view, {"kind": "daily", "at": "09:00", "timezone": "Europe/Berlin"})
    accepted = await bot.click(submitted)
    assert accepted.status_code == 200 and accepted.text == ""
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    assert made.draft.destination == f"slack:{TEAM_ID}:{GENERAL_ID}" and made.draft.how == "rerun"
    assert made.draft.asker.slack_user == HUMAN_ID
    assert "count() AS n FROM nycflights13.flights GROUP BY carrier" in made.draft.queries[0].sql
    (confirmed,) = fake_slack.calls("chat.postEphemeral")
    assert confirmed.args["text"].startswith("Scheduled: which carrier flew the most? — every day at 09:00")

    # It fires on the moved clock: a normal answer posted into the channel, with no model call.
    clock = MovedClock(datetime.fromtimestamp(made.next_at or 0, UTC))
    scheduler, _, metrics = _scheduler(bot, clock)
    asked = len(fake_anthropic.requests)
    assert await scheduler.tick() == 1
    assert len(fake_anthropic.requests) == asked
    posted = fake_slack.calls("chat.postMessage")[-1]
    assert posted.args["channel"] == GENERAL_ID
    sent = json.dumps(posted.args["blocks"])
    assert "carrier UA, n 58665" in sent and "[Q1]" in sent
    assert "The first delivery of this schedule." in sent
    assert "analyst_receipt" in sent and "Show SQL Q1" in sent
    assert metrics.registry.get_sample_value("agent_schedule_deliveries_total", {"destination": "slack"}) == 1


async def test_a_dm_saying_schedules_lists_ones_own_with_pause_resume_and_delete(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    assert (await bot.click(events.view_submission(view, {"timezone": "Europe/Berlin"}))).text == ""
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)

    ts = fake_slack.add_message(DM_ID, "schedules")
    await bot.event(events.im_message("schedules", ts=ts))
    await bot.idle()
    listing = fake_slack.calls("chat.postMessage")[-1]
    assert listing.args["channel"] == DM_ID
    assert "which carrier flew the most?" in json.dumps(listing.args["blocks"])
    pause = next(
        e
        for b in listing.args["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["text"]["text"] == "Pause"
    )
    await bot.click(
        events.block_actions(pause["action_id"], pause["value"], message_ts=listing.response["ts"], channel=DM_ID)
    )
    await bot.idle()
    paused = await bot.service.state.schedules.get(made.id, owner=ALICE)
    assert paused is not None and paused.state == "paused"
    updated = fake_slack.calls("chat.update")[-1]
    assert "(paused)" in json.dumps(updated.args["blocks"])

    # Someone else's click with the same id changes nothing of Alice's.
    fake_slack.add_user("U0BOB000001", "bob", email="bob@example.com")
    delete = events.block_actions("analyst_schedule_delete", made.id, message_ts=listing.response["ts"], channel=DM_ID)
    delete["user"]["id"] = "U0BOB000001"
    await bot.click(delete)
    await bot.idle()
    assert await bot.service.state.schedules.get(made.id, owner=ALICE) is not None

    mine = events.block_actions("analyst_schedule_delete", made.id, message_ts=listing.response["ts"], channel=DM_ID)
    await bot.click(mine)
    await bot.idle()
    assert await bot.service.state.schedules.list_for(ALICE) == []


async def test_an_owner_who_left_the_channel_stops_the_schedule_and_is_told(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    await bot.click(events.view_submission(view, {"timezone": "Europe/Berlin"}))
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    fake_slack.workspace.channels[GENERAL_ID].members.discard(HUMAN_ID)
    posts = len(fake_slack.calls("chat.postMessage"))

    scheduler, store, metrics = _scheduler(bot, MovedClock(datetime.fromtimestamp(made.next_at or 0, UTC)))
    assert await scheduler.tick() == 1
    assert len(fake_slack.calls("chat.postMessage")) == posts, "nothing posted where its owner no longer is"
    stopped = await store.get(made.id, owner=ALICE)
    assert stopped is not None and stopped.state == "stopped"
    (notice,) = await store.inbox(ALICE)
    assert "You are no longer in the channel it posts to" in notice.text
    assert metrics.registry.get_sample_value("agent_schedule_skips_total", {"reason": "destination"}) == 1


async def test_an_alert_made_in_the_modal_posts_once_while_it_holds(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_scheduler=False)
    view = await _repeat(bot, fake_slack, fake_anthropic)
    no_threshold = await bot.click(events.view_submission(view, {"alert": "above", "column": "n"}))
    assert no_threshold.json()["errors"] == {"threshold": "An above or below alert needs a threshold."}
    chosen = {"alert": "above", "column": "n", "threshold": "50000", "timezone": "Europe/Berlin"}
    assert (await bot.click(events.view_submission(view, chosen))).text == ""
    assert bot.service is not None
    (made,) = await bot.service.state.schedules.list_for(ALICE)
    assert made.kind == "alert" and made.draft.alert is not None and made.draft.alert.threshold == 50_000

    clock = MovedClock(datetime.fromtimestamp(made.next_at or 0, UTC))
    scheduler, _, metrics = _scheduler(bot, clock)
    posts = len(fake_slack.calls("chat.postMessage"))
    assert await scheduler.tick() == 1
    alert = fake_slack.calls("chat.postMessage")[-1]
    assert len(fake_slack.calls("chat.postMessage")) == posts + 1
    assert "n is 58665 [Q1], above the threshold of 50,000." in json.dumps(alert.args["blocks"])
    clock.forward(24 * 3600)
    assert await scheduler.tick() == 1
    assert len(fake_slack.calls("chat.postMessage")) == posts + 1, "still holding: not posted again"
    assert metrics.registry.get_sample_value("agent_schedule_skips_total", {"reason": "condition"}) == 1


async def test_the_modal_opens_without_a_refusal_and_refuses_a_cadence_too_often_or_a_nan_threshold(
    start_bot: Any, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    """views.open answers {"ok": true, "view": ...} (docs.slack.dev/reference/methods/views.open), so opening
    the modal logs no refusal; a cadence firing every minute is refused on its cron field (the store's floor,
    AGENT_SCHEDULE_MIN_INTERVAL_S), and a threshold of "nan" on the threshold field, as the web refuses both."""
    bot = await start_bot(agent_scheduler=False)
    with caplog.at_level(logging.WARNING):
        view = await _repeat(bot, fake_slack, fake_anthropic)
    assert not [r for r in caplog.records if "schedule modal" in r.getMessage()], caplog.text
    every_minute = await bot.click(
        events.view_submission(view, {"kind": "cron", "cron": "* * * * *", "timezone": "UTC"})
    )
    assert set(every_minute.json()["errors"]) == {"cron"}, every_minute.text
    nan = await bot.click(
        events.view_submission(view, {"timezone": "UTC", "alert": "above", "column": "n", "threshold": "nan"})
    )
    assert set(nan.json()["errors"]) == {"threshold"}, nan.text
    assert bot.service is not None and await bot.service.state.schedules.list_for(ALICE) == []
