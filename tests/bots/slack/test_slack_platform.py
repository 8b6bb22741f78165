"""Slack as the real platform behaves: the app's scopes are the manifest's in docs/slack.md, links are
never unfurled, data never pings anyone, and a person's Stop stops the run."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from bots.slack.blocks import escape
from bots.slack.failures import Failure, explain
from chats.people import Person, channel_owner
from tests.fakes import bolt_samples, slack_manifest
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import BOT_USER_ID, DM_ID, GENERAL_ID, HUMAN_EMAIL, HUMAN_ID, TEAM_ID, FakeSlack
from tests.fakes.slack_scopes import EVENT_SCOPES
from tests.slack_helpers import (
    SlackHarness,
    answer_message,
    bot_replies,
    carriers_script,
    sample,
    sql_call,
    wait_for,
)

SQL = "SELECT carrier, count() AS n FROM nycflights13.flights GROUP BY carrier ORDER BY n DESC"
STREAMING = ("chat.startStream", "chat.appendStream", "chat.stopStream")
MONTHLY = (
    "SELECT toStartOfMonth(time_hour) AS month, round(avg(dep_delay), 1) AS avg_dep_delay "
    "FROM nycflights13.flights GROUP BY month ORDER BY month"
)
CHART = {"query_id": "Q1", "kind": "line", "x": "month", "y": "avg_dep_delay", "title": "Delay by month"}


async def tour(bot: SlackHarness, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> None:
    """What the bot does in a workspace: a mention answered with a chart, every button under it clicked;
    a DM in the agent experience, and a follow-up in its thread; an answer where the streaming methods
    are missing."""
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Delay by month", "sql": MONTHLY}]})]),
        Reply(tool_calls=[("chart", CHART)]),
        Reply(text="Delays peaked in July [Q1]."),
        Reply(text='["Which month was calmest?"]'),
        Reply(text="February was calmest."),  # the follow-up, clicked
        Reply(text="[]"),
    )
    question = await bot.ask("how did delays change by month?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    for button in [e for b in answer["blocks"] if b["type"] == "actions" for e in b["elements"]]:
        await bot.click(
            events.block_actions(button["action_id"], button["value"], message_ts=answer["ts"], thread_ts=question)
        )
        await bot.idle()

    await bot.event(events.app_home_opened(tab="messages"))  # the agent experience: the DM is opened
    fake_anthropic.script(*carriers_script())
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?")
    await bot.event(events.im_message("which carrier flew the most?", ts=asked))
    await bot.idle()
    fake_anthropic.script(Reply(text="UA again."), Reply(text="[]"))
    again = fake_slack.add_message(DM_ID, "and in 2013?", thread_ts=asked)  # in its thread: status and title
    await bot.event(events.im_message("and in 2013?", ts=again, thread_ts=asked))
    await bot.idle()

    fake_slack.disable(*STREAMING)
    fake_anthropic.script(Reply(text="There are 16 airlines."), Reply(text="[]"))
    await bot.ask("how many airlines?")


# --- scopes ---


# A policy file naming a Slack user group: the bot then asks for the asker's groups (usergroups:read).
OPS_POLICY = f"""
policies:
  - name: ops
    members:
      - slack_usergroup: S0OPS000001
    tables:
      nycflights13.flights:
channels:
  {GENERAL_ID}: ops
"""


async def open_links(bot: SlackHarness, fake_slack: FakeSlack) -> None:
    """A signed-in web person opens links to answers asked in a public channel, a private one and a group DM:
    the web asks the bot who is in each (process/service.py's Audiences)."""
    fake_slack.add_channel("G0PRIVATE01", "private", is_private=True, members={HUMAN_ID})
    fake_slack.add_channel("C0GROUPDM01", "mpdm-alice--bob-1", is_private=True, is_mpim=True, members={HUMAN_ID})
    assert bot.service is not None
    alice = Person(f"email:{HUMAN_EMAIL}", email=HUMAN_EMAIL)
    for channel in (GENERAL_ID, "G0PRIVATE01", "C0GROUPDM01"):
        assert await bot.service.audiences.includes(alice, channel_owner(TEAM_ID, channel))


async def test_the_manifest_grants_every_scope_the_bots_calls_need_and_each_says_why(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    (tmp_path / "access.yaml").write_text(OPS_POLICY, encoding="utf-8")
    fake_slack.add_usergroup("S0OPS000001", "ops", [HUMAN_ID])
    bot = await start_bot(agent_access_file=str(tmp_path / "access.yaml"))
    await tour(bot, fake_slack, fake_anthropic)
    await open_links(bot, fake_slack)
    # The chart was uploaded (files:write is among the scopes used); "Dig deeper" may attach its report too.
    assert [f for f in fake_slack.files if f.filename.endswith(".png")], "the chart was uploaded"
    granted = slack_manifest.bot_scopes()
    calls = [c for c in fake_slack.calls() if c.scopes]
    assert {c.method: c.scopes for c in calls if not granted & set(c.scopes)} == {}
    assert fake_slack.scope_refusals() == []

    needed_by: dict[str, set[str]] = defaultdict(set)  # scope -> the methods and events that need it
    for call in calls:
        for scope in call.scopes:
            needed_by[scope].add(call.method)
    for event in slack_manifest.bot_events():
        if scope := EVENT_SCOPES[event]:
            needed_by[scope].add(event)
    assert granted - set(needed_by) == set(), "no scope the bot does not use"
    for scope, comment in slack_manifest.scope_comments().items():
        assert any(reason in comment for reason in needed_by[scope]), f"{scope}: say which of {needed_by[scope]}"


# --- link previews ---


async def test_no_message_the_bot_posts_unfurls_its_links(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    await tour(bot, fake_slack, fake_anthropic)
    posts = fake_slack.calls("chat.postMessage")
    assert len(posts) >= 6  # progress, Show SQL, "asked:", the answer posted without streaming, ...
    assert [(c.args.get("unfurl_links"), c.args.get("unfurl_media")) for c in posts] == [(False, False)] * len(posts)


# --- what data may say ---

PINGS = ("<!channel>", "<!here>", "<!everyone>", "<@U0EVE00001>", "<!subteam^S0PEOPLE1>")
PLANTED = " ".join(PINGS) + " <http://evil.example|click> & co"
FLIGHTS = "nycflights13.flights"


async def test_mentions_and_links_in_data_reach_slack_as_text_that_pings_no_one(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    script = [
        Reply(
            tool_calls=[sql_call(f"Rows like {PLANTED}", f"SELECT '{PLANTED}' AS planted, count() AS n FROM {FLIGHTS}")]
        ),
        Reply(text=f"The data says {PLANTED} [Q1]."),
        Reply(text="[]"),
    ]
    thread = fake_slack.start_assistant_thread(DM_ID)  # status and title
    fake_anthropic.script(*script)
    asked = fake_slack.add_message(DM_ID, f"what is {PLANTED}?", thread_ts=thread)
    await bot.event(events.im_message(f"what is {PLANTED}?", ts=asked, thread_ts=thread))
    await bot.idle()
    fake_slack.disable(*STREAMING)  # a progress message, and the answer posted then updated
    fake_anthropic.script(*script)
    await bot.ask(f"what is {PLANTED}?")

    plain = [(c.method, n, c.args[n]) for c in fake_slack.calls() for n in ("text", "title", "status") if c.args.get(n)]
    assert {method for method, _, _ in plain} >= {
        "chat.postMessage",
        "chat.update",
        "assistant.threads.setTitle",
        "assistant.threads.setStatus",
    }
    assert [field for field in plain if "<" in field[2] or ">" in field[2]] == [], "escaped as Slack asks"
    assert any("&lt;!channel&gt;" in value and "&amp; co" in value for _, _, value in plain)

    markdown = [str(c.args["markdown_text"]) for c in fake_slack.calls() if c.args.get("markdown_text")]
    markdown += [
        b["text"] for c in fake_slack.calls() for b in c.args.get("blocks") or [] if b.get("type") == "markdown"
    ]
    assert len(markdown) >= 2
    assert [text for text in markdown if any(ping in text for ping in PINGS)] == []
    assert any(PLANTED in text.replace("\u200b", "") for text in markdown), "it reads the same"


# --- Stop ---


async def test_a_person_pressing_stop_cancels_the_run_and_nothing_more_is_written(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    go_on, held = threading.Event(), threading.Event()
    text = "UA flew the most flights in 2013, 58,665 of them, followed by B6 and EV."
    fake_anthropic.script(Reply(text=text, pauses={2: go_on, 8: held}), Reply(text="[]"))
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
    await bot.event(events.app_mention("which carrier flew the most?", ts=question))

    def shown() -> str:
        started = fake_slack.calls("chat.startStream")
        message = fake_slack.message(GENERAL_ID, str(started[0].response["ts"])) if started else None
        return str((message or {}).get("text") or "")

    try:
        await wait_for(lambda: shown() == "UA flew ")
        streamed = str(fake_slack.last("chat.startStream").response["ts"])
        fake_slack.stop_by_user(GENERAL_ID, streamed)
        go_on.set()  # more text comes; appending it is refused with stopped_by_user
        await asyncio.wait_for(bot.bot.idle(), 5)  # while the model is still held: the run was cancelled
    finally:
        held.set()

    assert [c.error for c in fake_slack.calls("chat.appendStream")][-1] == "stopped_by_user"
    assert [c for c in fake_slack.calls("chat.update") if c.args["ts"] == streamed] == []
    assert shown() == "UA flew ", "as the person stopped it"
    progress, stopped = bot_replies(fake_slack, GENERAL_ID, question)
    assert progress["text"].startswith("_Stopped_") and stopped["ts"] == streamed
    assert len(fake_anthropic.requests) == 1, "no follow-ups are asked for"
    store = bot.service.store  # type: ignore[union-attr]
    conversation = await store.get_conversation(str(await store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{question}")))
    assert conversation is not None and conversation["turns"][0]["outcome"] == "cancelled"


# --- Slack's routine refusals ---


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("bots.slack") and r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("channel", "private", "error"),
    [("C0SALES0001", False, "not_in_channel"), ("G0SECRET01", True, "channel_not_found")],
)
async def test_a_channel_the_bot_is_not_in_is_one_log_line_saying_to_invite_it(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, caplog, channel: str, private: bool, error: str
) -> None:
    fake_slack.add_channel(channel, "sales", is_private=private, is_member=False)
    bot = await start_bot()
    caplog.set_level(logging.INFO)
    await bot.ask("how many flights?", channel=channel)
    [line] = warnings(caplog)
    assert error in line.getMessage() and "/invite" in line.getMessage()
    assert line.exc_info is None and "Traceback" not in caplog.text
    assert fake_anthropic.requests == [] and fake_slack.bot_messages(channel) == []
    assert sample(bot.metrics, "agent_slack_errors_total", type="not_in_channel") == 1


async def test_a_chart_refused_for_a_missing_scope_is_one_log_line_and_a_message_naming_the_scope(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, caplog
) -> None:
    bot = await start_bot()
    fake_slack.revoke("files:write")  # installed from an older manifest
    caplog.set_level(logging.INFO)
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Delay by month", "sql": MONTHLY}]})]),
        Reply(tool_calls=[("chart", CHART)]),
        Reply(text="Delays peaked in July [Q1]."),
        Reply(text="[]"),
    )
    question = await bot.ask("how did delays change by month?")
    assert answer_message(fake_slack, GENERAL_ID, question)["text"] == "Delays peaked in July [Q1]."
    told = bot_replies(fake_slack, GENERAL_ID, question)[-1]["text"]
    assert told == escape(explain(Failure.SLACK_SCOPE, scope="files:write"))
    assert "`files:write`" in told and "OAuth &amp; Permissions" in told
    [line] = warnings(caplog)
    assert "missing_scope files:write" in line.getMessage() and "reinstall" in line.getMessage()
    assert line.exc_info is None and "Traceback" not in caplog.text
    assert fake_slack.files == []


async def test_rate_limiting_past_the_sdks_retries_is_one_log_line_and_a_message(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, caplog
) -> None:
    bot = await start_bot()
    fake_slack.ratelimit("chat.postMessage", retry_after=0, times=3)  # the first try and both retries
    caplog.set_level(logging.INFO)
    question = await bot.ask("how many flights?")
    [told] = bot_replies(fake_slack, GENERAL_ID, question)
    assert told["text"] == explain(Failure.SLACK_BUSY)
    assert [c.status for c in fake_slack.calls("chat.postMessage")] == [429, 429, 429, 200]
    [line] = warnings(caplog)
    assert "ratelimited" in line.getMessage() and line.exc_info is None and "Traceback" not in caplog.text
    assert fake_anthropic.requests == []


# --- buttons Slack refuses ---


async def test_an_answer_whose_buttons_slack_refuses_stands_and_its_buttons_follow_below(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)  # no progress message: every chat.update is the answer's
    fake_slack.fail("chat.stopStream", "invalid_blocks")  # stopping the stream with the buttons
    fake_slack.fail("chat.update", "invalid_blocks", times=2)  # and the updates that would add them (either thumbs)
    fake_anthropic.script(*carriers_script())
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    await bot.idle()
    answer, buttons = bot_replies(fake_slack, DM_ID, thread)
    assert answer["text"] == "UA flew the most flights: 58,665 [Q1]."
    assert answer["metadata"]["event_payload"]["final"] is True, "the thread's history keeps this turn"
    assert [b["block_id"] for b in buttons["blocks"]] == [
        "analyst_receipt", "analyst_repeat", "analyst_sql_0", "analyst_followups", "analyst_dig_deeper",
        "analyst_feedback"
    ]  # fmt: skip
    assert not any("Something went wrong" in c.args.get("text", "") for c in fake_slack.calls("chat.postMessage"))


TABLE_ANSWER = "Carriers:\n\n| carrier | n |\n|---|---|\n| UA | 58665 |\n| B6 | 54635 |"


@pytest.mark.parametrize("error", ["invalid_blocks", "ratelimited"])
async def test_an_answer_whose_last_edit_slack_refuses_arrives_whole_below_it(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, error: str
) -> None:
    """A table is held back until the final render, so the last edit carries it: when Slack refuses that
    edit, the whole last part is posted below, and nothing says the answer failed."""
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)
    fake_slack.disable("chat.startStream", "chat.appendStream", "chat.stopStream")
    if error == "ratelimited":
        fake_slack.ratelimit("chat.update", retry_after=0, times=3)
    else:
        fake_slack.fail("chat.update", error)
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("Flights per carrier", SQL)]),
        Reply(text=TABLE_ANSWER),
        Reply(text='["Which carrier was most punctual?"]'),
    )
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    await bot.idle()
    texts = [str(r.get("text") or "") for r in bot_replies(fake_slack, DM_ID, thread)]
    assert not any("Something went wrong" in t or "couldn't finish" in t for t in texts), texts
    shown = [fake_slack.markdown(DM_ID, r["ts"]) or "" for r in bot_replies(fake_slack, DM_ID, thread)]
    assert any("UA" in t and "B6" in t for t in shown), "the table reached the thread"


async def _stopped_when(
    bot: SlackHarness, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, shown_text: str, *replies: Reply, held: int
) -> str:
    """Ask in #general; reply `held` stalls once its text is out; then the person presses Stop (the run
    may go on, or have finished, before the bot learns of it); the outcome stored."""
    hold = threading.Event()
    stalled = replies[held]
    pieces = len(re.findall(r"\S+\s*|\s+", stalled.text)) or 1
    replies = (*replies[:held], replace(stalled, pauses={pieces: hold}), *replies[held + 1 :])
    fake_anthropic.script(*replies)
    # The Stop lands before the bot's last write of the stream reaches Slack (it may seal the answer while
    # the follow-ups are still being written): that write then learns of it.
    sealing = fake_slack.hold("chat.stopStream")
    q = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
    await bot.event(events.app_mention("which carrier flew the most?", ts=q))
    try:
        await wait_for(lambda: _streamed(fake_slack) == shown_text and len(fake_anthropic.requests) > held)
        fake_slack.stop_by_user(GENERAL_ID, str(fake_slack.last("chat.startStream").response["ts"]))
    finally:
        sealing.set()
        hold.set()
    await asyncio.wait_for(bot.bot.idle(), 15)
    assert len(fake_slack.calls("chat.startStream")) == 1, "no new answer after Stop"
    assert not fake_slack.calls("chat.delete"), "what the person stopped stays"
    store = bot.service.store
    conversation_id = str(await store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{q}"))
    for _ in range(100):  # a Stop learned after the run finished is stored a moment later
        conversation = await store.get_conversation(conversation_id)
        assert conversation is not None
        if conversation["turns"][0]["outcome"] == "cancelled":
            break
        await asyncio.sleep(0.05)
    return str(conversation["turns"][0]["outcome"])


def _streamed(fake_slack: FakeSlack) -> str:
    started = fake_slack.calls("chat.startStream")
    message = fake_slack.message(GENERAL_ID, str(started[0].response["ts"])) if started else None
    return str((message or {}).get("text") or "")


async def test_a_stop_pressed_on_narration_before_a_query_stops_the_answer(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """While a query runs, the narration is the only stream on screen; Slack reports the Stop when the bot
    ends that stream, which must not be taken for an expired one (and the message deleted)."""
    bot = await start_bot()
    outcome = await _stopped_when(
        bot,
        fake_slack,
        fake_anthropic,
        "Let me check.",
        Reply(text="Let me check.", tool_calls=[sql_call("Flights per carrier", SQL)]),
        Reply(text="UA flew the most flights."),
        Reply(text='["Which carrier was most punctual?"]'),
        held=0,
    )
    assert outcome == "cancelled"


async def test_a_stop_learned_after_the_run_finished_is_stored_as_cancelled(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack tells of a Stop only when the bot next writes; by then the run may have finished. The stored
    turn then says what the person saw: a stopped answer."""
    bot = await start_bot()
    outcome = await _stopped_when(
        bot,
        fake_slack,
        fake_anthropic,
        "UA flew the most flights.",
        Reply(tool_calls=[sql_call("Flights per carrier", SQL)]),
        Reply(text="UA flew the most flights."),
        Reply(text='["Which carrier was most punctual?"]'),
        held=2,
    )
    assert outcome == "cancelled"


async def test_suggested_prompts_written_from_data_carry_no_markup_that_acts(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """A prompt's message is posted as the person's own when clicked; examples come from the model reading
    a schema whose comments anyone with DDL may have written."""
    planted = "Who flew most? <!channel> <http://evil.example|see>"
    bot = await start_bot(agent_example_questions=[planted])
    await bot.event(events.app_home_opened(tab="messages"))
    await bot.idle()
    (prompt,) = (fake_slack.pinned_prompts(DM_ID) or {})["prompts"]
    assert prompt["message"] == planted.replace("<", "<\u200b"), "reads the same; no markup acts"


async def test_a_long_answer_with_one_refused_edit_arrives_once_and_whole(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """An answer of several messages whose first edit (sealing part one) is refused: what Slack shows is
    kept, the rest follows below, every paragraph once, none lost."""
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)
    fake_slack.disable(*STREAMING)
    answer = "\n\n".join(f"Paragraph {n}. " + "word " * 400 for n in range(8))  # about 16,000 characters
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("Flights per carrier", SQL)]),
        Reply(text=answer),
        Reply(text='["Which carrier was most punctual?"]'),
    )
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    fake_slack.fail("chat.update", "invalid_metadata", times=1)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    await bot.idle()
    replies = bot_replies(fake_slack, DM_ID, thread)
    shown = "".join(fake_slack.markdown(DM_ID, r["ts"]) or "" for r in replies)
    texts = [str(r.get("text") or "") for r in replies]
    assert not any("Something went wrong" in t or "couldn't finish" in t for t in texts), texts
    assert [shown.count(f"Paragraph {n}.") for n in range(8)] == [1] * 8, "every paragraph once"


# --- Slack Connect ---

PARTNER_TEAM = "T0PARTNER01"


async def test_in_a_slack_connect_channel_the_installing_team_is_the_team(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """The envelope's team_id is the other organisation's there; only `authorizations` names the installer,
    as Bolt's context reads it: the conversation key and the stream's recipient use it; the allowlist must
    name both teams."""
    bot = await start_bot(slack_allowed_teams=[TEAM_ID, PARTNER_TEAM])
    fake_anthropic.script(*carriers_script())
    asked = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?", team=PARTNER_TEAM)
    mention = events.app_mention("which carrier flew the most?", ts=asked)
    envelope = events.event_callback(mention, source_team=PARTNER_TEAM)
    assert (envelope["team_id"], envelope["event"]["user_team"]) == (PARTNER_TEAM, PARTNER_TEAM)
    assert (await bot.deliver(events.events_request(envelope))).status_code == 200
    await bot.idle()

    assert answer_message(fake_slack, GENERAL_ID, asked)["text"] == "UA flew the most flights: 58,665 [Q1]."
    assert fake_slack.last("chat.startStream").args["recipient_team_id"] == TEAM_ID
    assert await bot.service.store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{asked}")  # type: ignore[union-attr]
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="team_not_allowed") == 0


async def test_a_person_of_a_team_the_allowlist_does_not_name_is_not_answered_in_a_shared_channel(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """The installing team is always the one in `authorizations`: the asker's own team is checked too."""
    bot = await start_bot(slack_allowed_teams=[TEAM_ID])
    asked = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?", team=PARTNER_TEAM)
    envelope = events.event_callback(
        events.app_mention("which carrier flew the most?", ts=asked), source_team=PARTNER_TEAM
    )
    assert (await bot.deliver(events.events_request(envelope))).status_code == 200
    await bot.idle()
    assert fake_anthropic.requests == [] and bot_replies(fake_slack, GENERAL_ID, asked) == []
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="team_not_allowed") == 1


# --- the assistant status ---


async def test_the_assistant_status_is_set_again_while_a_run_works(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack removes a status two minutes after it was set (here 0.3 s); a run that thinks longer keeps it."""
    fake_slack.status_expiry_s = 0.3
    bot = await start_bot(slack_status_refresh_s=0.1)
    thread = fake_slack.start_assistant_thread(DM_ID)
    release = threading.Event()
    first, *rest = carriers_script()

    def slow(body: object) -> object:
        release.wait(10)
        return first

    fake_anthropic.script(slow, *rest)
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    try:
        await wait_for(lambda: fake_slack.shown_status(DM_ID, thread) == "is thinking…")
        await asyncio.sleep(1.0)  # more than three expiries
        shown = fake_slack.shown_status(DM_ID, thread)
    finally:
        release.set()
    await bot.idle()
    assert shown == "is thinking…"
    assert fake_slack.shown_status(DM_ID, thread) == "", "cleared at the end"
    assert [m["text"] for m in bot_replies(fake_slack, DM_ID, thread)] == ["UA flew the most flights: 58,665 [Q1]."]


async def test_the_status_is_not_kept_alive_over_a_posted_reply(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack clears the status when the app replies (docs.slack.dev/reference/methods/assistant.threads.setStatus);
    once the answer's first words are in the thread they show the work, and neither a refresh nor a later
    step sets a status under them while the rest is written (the status here would not expire meanwhile)."""
    bot = await start_bot(slack_status_refresh_s=0.1, slack_progress_interval_s=0.05)
    thread = fake_slack.start_assistant_thread(DM_ID)
    release = threading.Event()
    query, _, followups = carriers_script()
    answer = "UA flew the most flights: 58,665 [Q1] and more words after the pause."
    fake_anthropic.script(query, Reply(text=answer, pauses={2: release}), followups)
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    try:
        await wait_for(lambda: bool(bot_replies(fake_slack, DM_ID, thread)))
        await asyncio.sleep(0.2)  # a status in flight as the reply went out has landed, and was cleared
        before = len(fake_slack.calls("assistant.threads.setStatus"))
        shown = set()
        for _ in range(6):  # six refresh periods, a dozen progress intervals
            await asyncio.sleep(0.1)
            shown.add(fake_slack.shown_status(DM_ID, thread))
        refreshed = len(fake_slack.calls("assistant.threads.setStatus")) - before
    finally:
        release.set()
    await bot.idle()
    assert (refreshed, shown) == (0, {""})
    assert [m["text"] for m in bot_replies(fake_slack, DM_ID, thread)] == [answer]


async def test_the_status_comes_back_when_narration_is_taken_back(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Words written before a query are taken back when the query starts; from then on the status shows the
    work again, and is kept alive past Slack's expiry while the next model call takes its time. (Streamed,
    the plan takes the narration's place at once and shows the work itself.)"""
    fake_slack.status_expiry_s = 0.5
    fake_slack.disable(*STREAMING)
    bot = await start_bot(slack_status_refresh_s=0.1, slack_progress_interval_s=0.05)
    thread = fake_slack.start_assistant_thread(DM_ID)
    query, answer, followups = carriers_script()
    narrated = threading.Event()
    narration = replace(query, text="Let me count the flights first.", pauses={3: narrated})
    fake_anthropic.script(narration, answer, followups)
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    try:
        await wait_for(lambda: bool(bot_replies(fake_slack, DM_ID, thread)))  # the narration, posted
    finally:
        fake_anthropic.latency_s = 1.5  # the next model call
        narrated.set()
    await wait_for(lambda: bool(fake_slack.calls("chat.delete")))  # ... and taken back
    await asyncio.sleep(0.9)  # past the expiry, within the next model call
    shown = fake_slack.shown_status(DM_ID, thread)
    await bot.idle()
    assert shown.startswith("is ")
    assert [m["text"] for m in bot_replies(fake_slack, DM_ID, thread)] == ["UA flew the most flights: 58,665 [Q1]."]


# --- rate limits ---


async def test_an_answers_last_edit_waits_out_slacks_rate_limit_and_lands_whole_with_its_buttons(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """chat.update stays rate limited past the SDK's two retries: the bot waits Slack's Retry-After and
    tries again, so the answer ends as one message with its buttons, and nothing says it failed."""
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)
    fake_slack.disable(*STREAMING)
    fake_slack.ratelimit("chat.update", retry_after=0, times=5)
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("Flights per carrier", SQL)]),
        Reply(text=TABLE_ANSWER),
        Reply(text='["Which carrier was most punctual?"]'),
    )
    asked = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=asked, thread_ts=thread))
    await bot.idle()
    replies = bot_replies(fake_slack, DM_ID, thread)
    assert len(replies) == 1, [r.get("text") for r in replies]
    [answer] = replies
    assert "UA" in (fake_slack.markdown(DM_ID, answer["ts"]) or "") and answer["metadata"]["event_payload"]["final"]
    assert any(b["type"] == "actions" for b in answer["blocks"])
    assert [c.error for c in fake_slack.calls("chat.update")].count("ratelimited") == 5


# --- where streaming works ---


async def test_streaming_refused_in_one_kind_of_conversation_is_remembered_there_and_tried_again_later(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """chat.startStream's channel_type_not_supported (or missing_scope, unknown_method) turns streaming off
    for that workspace and channel type only, and only for a while."""
    bot = await start_bot()
    streaming = bot.bot._answerer.streaming  # type: ignore[union-attr]
    fake_slack.fail("chat.startStream", "channel_type_not_supported")

    async def ask_dm(text: str) -> None:
        fake_anthropic.script(Reply(text="There are 16 airlines."), Reply(text="[]"))
        ts = fake_slack.add_message(DM_ID, text)
        await bot.event(events.im_message(text, ts=ts))
        await bot.idle()

    await ask_dm("how many airlines?")
    await ask_dm("how many airlines, again?")
    assert [c.error for c in fake_slack.calls("chat.startStream")] == ["channel_type_not_supported"], "remembered"
    fake_anthropic.script(Reply(text="There are 16 airlines."), Reply(text="[]"))
    await bot.ask("how many airlines?")  # a channel: another kind of conversation
    assert [c.args["channel"] for c in fake_slack.calls("chat.startStream")] == [DM_ID, GENERAL_ID]

    streaming.clock = lambda: time.monotonic() + streaming.retry_s  # time passes: the DM is tried again
    await ask_dm("how many airlines, once more?")  # streams now, and so does the next
    await ask_dm("how many airlines, at last?")
    assert [(c.args["channel"], c.ok) for c in fake_slack.calls("chat.startStream")][2:] == [(DM_ID, True)] * 2


# --- Bolt's own payload samples, replayed ---


async def test_bolts_own_payload_samples_are_answered_as_slack_means_them(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """tests/fakes/bolt_samples.py: Bolt for Python 1.30.0's assistant and shared-channel samples (the legacy
    assistant experience: its thread is opened with assistant_thread_started)."""
    fake_slack.experience = "assistant_view"
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)
    assert (await bot.deliver(events.events_request(bolt_samples.thread_started(thread)))).status_code == 200
    await bot.idle()
    assert fake_slack.assistant_thread(DM_ID, thread)["prompts"], "suggested prompts on a new thread"

    for token in (False, True):
        fake_anthropic.script(*carriers_script())
        asked = fake_slack.add_message(DM_ID, "When was Slack released?", thread_ts=thread)
        sample_body = bolt_samples.user_message(
            "When was Slack released?", ts=asked, thread_ts=thread, action_token=token
        )
        await bot.deliver(events.events_request(sample_body))
        await bot.idle()
    state = fake_slack.assistant_thread(DM_ID, thread)
    assert state["title"] == "When was Slack released?" and "is thinking…" in state["status_history"]
    replies = bot_replies(fake_slack, DM_ID, thread)
    assert [r["text"] for r in replies] == ["UA flew the most flights: 58,665 [Q1]."] * 2, "no progress messages"

    await bot.deliver(events.events_request(bolt_samples.title_changed(thread, "When was Slack released?")))
    await bot.idle()
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="edit") == 1

    fake_anthropic.script(*carriers_script())
    mentioned = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> Hi there!")
    await bot.deliver(events.events_request(bolt_samples.shared_channel_mention("Hi there!", ts=mentioned)))
    await bot.idle()
    assert answer_message(fake_slack, GENERAL_ID, mentioned)["text"] == "UA flew the most flights: 58,665 [Q1]."


async def test_the_agent_experience_pins_suggested_prompts_when_the_dm_is_opened(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """agent_view (the manifest's experience) has no assistant_thread_started: Bolt 1.30.0's app_home_opened
    samples. Opening the Messages tab pins the prompts on the DM, without thread_ts (with one, Slack would
    silently drop them); opening the Home tab does nothing."""
    assert fake_slack.experience == "agent_view", "docs/slack.md's manifest sets the current experience"
    bot = await start_bot()
    assert (await bot.deliver(events.events_request(bolt_samples.app_home_opened("home")))).status_code == 200
    await bot.idle()
    assert fake_slack.calls("assistant.threads.setSuggestedPrompts") == []

    assert (await bot.deliver(events.events_request(bolt_samples.app_home_opened("messages")))).status_code == 200
    await bot.idle()
    (call,) = fake_slack.calls("assistant.threads.setSuggestedPrompts")
    assert call.ok and call.args["channel_id"] == DM_ID and "thread_ts" not in call.args
    pinned = fake_slack.pinned_prompts(DM_ID) or {}
    examples = bot.service.agent.settings.agent_example_questions  # type: ignore[union-attr]
    assert [p["message"] for p in pinned["prompts"]] == examples and pinned["prompts_title"] == "Try asking"
    assert sample(bot.metrics, "agent_slack_events_total", type="app_home_opened") == 2


async def test_suggested_prompts_go_only_to_askers_the_allowlist_admits(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """The prompts are example questions written from the schema: a workspace or a person's team outside
    the allowlist gets none, as it gets no answers."""
    bot = await start_bot(slack_allowed_teams=[PARTNER_TEAM])  # the installing team is not listed
    await bot.event(events.app_home_opened(tab="messages"))
    await bot.idle()
    assert fake_slack.calls("assistant.threads.setSuggestedPrompts") == []
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="team_not_allowed") == 1

    bot = await start_bot(slack_allowed_teams=[TEAM_ID])
    envelope = events.event_callback(events.app_home_opened(tab="messages"), team_id=PARTNER_TEAM)
    await bot.deliver(events.events_request(envelope))
    await bot.idle()
    assert fake_slack.calls("assistant.threads.setSuggestedPrompts") == []


async def test_a_dms_prompts_are_pinned_once_a_while_and_only_in_a_dm(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack sends app_home_opened each time a person enters the DM: the pinned prompts are set once, not
    on every visit; an event naming a channel that is not a DM sets none."""
    bot = await start_bot()
    for _ in range(3):
        await bot.event(events.app_home_opened(tab="messages"))
    await bot.event(events.app_home_opened(tab="messages", channel=GENERAL_ID))
    await bot.idle()
    calls = fake_slack.calls("assistant.threads.setSuggestedPrompts")
    assert [call.args["channel_id"] for call in calls] == [DM_ID]


async def test_a_follow_up_clicked_by_a_partner_continues_the_installing_teams_conversation(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """A click's payload names the clicker's team only: the thread stays one conversation, the installer's."""
    bot = await start_bot(slack_allowed_teams=[TEAM_ID, PARTNER_TEAM])
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    follow_up = answer["blocks"][-2]["elements"][0]
    fake_anthropic.script(Reply(text="HA was most punctual."), Reply(text="[]"))
    click = events.block_actions(
        follow_up["action_id"], follow_up["value"], message_ts=answer["ts"], thread_ts=question, team=PARTNER_TEAM
    )
    await bot.click(click)
    await bot.idle()
    store = bot.service.store  # type: ignore[union-attr]
    assert await store.find(f"slack:{PARTNER_TEAM}:{GENERAL_ID}:{question}") is None
    conversation = await store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{question}")
    assert conversation is not None and len(await store.history(conversation)) == 2


async def test_a_click_from_a_team_the_allowlist_does_not_name_is_ignored(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(slack_allowed_teams=[TEAM_ID])
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    follow_up = answer["blocks"][-2]["elements"][0]
    asked = len(fake_anthropic.requests)
    click = events.block_actions(
        follow_up["action_id"], follow_up["value"], message_ts=answer["ts"], thread_ts=question, team=PARTNER_TEAM
    )
    await bot.click(click)
    await bot.idle()
    assert len(fake_anthropic.requests) == asked
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="team_not_allowed") == 1
