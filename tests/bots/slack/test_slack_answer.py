"""The bot answers in Slack threads: the real Bolt app, served as `agent serve` serves it, driven with
signed HTTP requests, against the fake Slack Web API and the fake model."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.reply import AnswerWriter, Streaming
from bots.slack.thread import ANSWER_EVENT, answer_metadata, part_metadata, turns
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Hang, MidStreamFailure, Reply
from tests.fakes.slack_api import BOT_USER_ID, DM_ID, GENERAL_ID, HUMAN_ID, TEAM_ID, FakeSlack
from tests.slack_helpers import (
    SlackHarness,
    answer_message,
    bot_replies,
    carriers_script,
    held_first,
    sample,
    wait_for,
)


def streamed_text(args: dict[str, Any]) -> str:
    """The answer text a stream call carried, as `markdown_text` or in markdown_text chunks."""
    chunks = [c["text"] for c in args.get("chunks") or [] if c["type"] == "markdown_text"]
    return str(args.get("markdown_text") or "") + "".join(chunks)


def texts(fake: FakeSlack) -> list[str]:
    return [str(c.args.get("text") or streamed_text(c.args)) for c in fake.calls() if c.ok]


# --- answering ---


async def test_a_mention_is_answered_in_its_thread(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    model_answers, script = held_first(carriers_script())
    fake_anthropic.script(*script)
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
    response = await bot.event(events.app_mention("which carrier flew the most?", ts=question))
    assert response.status_code == 200, "acknowledged while the model has not answered yet (Slack waits 3 s)"
    model_answers.set()
    await bot.idle()

    progress, answer = bot_replies(fake_slack, GENERAL_ID, question)
    assert progress["text"].startswith("_Answered in") and "Q1" not in progress["text"], "the plan lists the queries"
    [plan] = [b for b in answer["blocks"] if b["type"] == "plan"]
    assert [(t["title"], t["status"], t["output"]["elements"][0]["elements"][0]["text"]) for t in plan["tasks"]] == [
        ("Q1 Flights per carrier", "complete", "16 rows")
    ]
    assert answer["text"] == "UA flew the most flights: 58,665 [Q1]."
    start = fake_slack.last("chat.startStream").args
    assert (start["thread_ts"], start["recipient_team_id"], start["recipient_user_id"]) == (question, TEAM_ID, HUMAN_ID)
    payload = answer["metadata"]["event_payload"]
    assert answer["metadata"]["event_type"] == ANSWER_EVENT and payload["question"] == "which carrier flew the most?"
    assert payload["queries"][0]["sql"].startswith("SELECT carrier, count() AS n FROM nycflights13.flights")
    buttons = [e["text"]["text"] for b in answer["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert buttons == [
        "Repeat…", "Show SQL Q1", "Which carrier was most punctual?", "How did UA do month by month?",
        "Dig deeper: a report",
    ]  # fmt: skip
    [thumbs] = [e for b in answer["blocks"] if b["type"] == "context_actions" for e in b["elements"]]
    assert (thumbs["type"], thumbs["positive_button"]["value"]) == ("feedback_buttons", f"up:{payload['run_id']}")
    assert "Slack" in fake_anthropic.requests[0]["system"][-1]["text"]  # the Slack format guidance
    first = next(c for c in fake_slack.calls() if c.method.startswith("chat."))
    assert (first.method, first.args["text"]) == ("chat.postMessage", "_Thinking…_"), "progress comes first"


async def test_a_thread_follow_up_carries_the_earlier_turn_and_its_sql_across_a_restart(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    await bot.restart()  # a new process: what it knows of the thread comes from the thread

    fake_anthropic.reset()
    fake_anthropic.script(Reply(text="The data covers 2013 only."), Reply(text="[]"))
    follow_up = fake_slack.add_message(GENERAL_ID, "and for 2014?", thread_ts=question)
    await bot.event(events.message("and for 2014?", ts=follow_up, thread_ts=question, parent_user_id=HUMAN_ID))
    await bot.idle()

    messages = fake_anthropic.requests[0]["messages"]
    assert messages[0]["content"][0]["text"] == "which carrier flew the most?"
    # The earlier turn as the store keeps it (the thread names its run): its SQL as run, its answer whole.
    [ran] = [b for m in messages[1:-1] for b in m["content"] if b["type"] == "tool_use"]
    assert ran["input"]["queries"][0]["sql"].startswith("SELECT carrier, count() AS n")
    assert messages[-2]["content"][-1]["text"] == "UA flew the most flights: 58,665 [Q1]."
    assert messages[-1]["content"][0]["text"] == "and for 2014?"
    assert fake_slack.last("conversations.replies").args["include_all_metadata"] in ("1", True)
    answers = [m for m in bot_replies(fake_slack, GENERAL_ID, question) if m.get("metadata")]
    assert [m["text"] for m in answers][-1] == "The data covers 2013 only."


async def test_a_reply_in_a_thread_without_the_bot_is_left_alone(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    root = fake_slack.add_message(GENERAL_ID, "lunch?")
    reply = fake_slack.add_message(GENERAL_ID, "sure", thread_ts=root)
    await bot.event(events.message("sure", ts=reply, thread_ts=root, parent_user_id=HUMAN_ID))
    await bot.idle()
    assert bot_replies(fake_slack, GENERAL_ID, root) == [] and fake_anthropic.requests == []
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="not_addressed") == 1


LONG_ANSWER = "**UA** flew the most flights: 58,665 [Q1].\n\n" + "\n\n".join(
    f"Paragraph {n}: `carrier` UA kept its lead that month [Q1]." for n in range(12)
)


async def test_a_follow_up_reads_the_earlier_answer_whole_from_the_store_by_its_run_id(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack keeps a posted answer's markdown block only as its translation and its `text` as a preview;
    the history reads the answer from the store, by the run id in the message's metadata."""
    bot = await start_bot()
    fake_slack.disable("chat.startStream", "chat.appendStream", "chat.stopStream")  # posted, then updated
    fake_anthropic.script(*carriers_script(LONG_ANSWER))
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    assert all(b["type"] != "markdown" for b in answer["blocks"]) and len(answer["text"]) < len(LONG_ANSWER)

    fake_anthropic.reset()
    fake_anthropic.script(Reply(text="The data covers 2013 only."), Reply(text="[]"))
    await bot.ask("and for 2014?", thread_ts=question)
    messages = fake_anthropic.requests[0]["messages"]
    assert messages[-2]["content"][-1]["text"] == LONG_ANSWER, "the earlier answer, whole, as it was written"


async def test_without_the_stored_turn_the_history_falls_back_to_the_thread(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    store = bot.service.store  # type: ignore[union-attr]
    assert await store.delete_conversation(str(await store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{question}")))

    fake_anthropic.reset()
    fake_anthropic.script(Reply(text="The data covers 2013 only."), Reply(text="[]"))
    await bot.ask("and for 2014?", thread_ts=question)
    messages = fake_anthropic.requests[0]["messages"]
    earlier = messages[1]["content"][0]["text"]  # from the thread's metadata: no transcript, the SQL in brief
    assert earlier.startswith("UA flew the most flights: 58,665 [Q1].")
    assert "[SQL run for this answer:\n- Q1 (Flights per carrier): SELECT carrier, count() AS n" in earlier


async def test_a_direct_message_in_an_assistant_thread_uses_status_title_and_streaming(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.experience = "assistant_view"  # the legacy experience, where a workspace still has it
    bot = await start_bot()
    thread = fake_slack.start_assistant_thread(DM_ID)
    await bot.event(events.assistant_thread_started(thread_ts=thread))
    await bot.idle()
    prompts = fake_slack.assistant_thread(DM_ID, thread)["prompts"]
    assert [p["message"] for p in prompts] == bot.service.agent.settings.agent_example_questions  # type: ignore[union-attr]

    fake_anthropic.script(*carriers_script())
    ts = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=ts, thread_ts=thread))
    await bot.idle()

    state = fake_slack.assistant_thread(DM_ID, thread)
    assert state["status_history"][0] == "is thinking…" and state["status_history"][-1] == ""
    assert "is running Q1: Flights per carrier…" in state["status_history"]
    assert state["title"] == "which carrier flew the most?"
    assert [m["text"] for m in bot_replies(fake_slack, DM_ID, thread)] == ["UA flew the most flights: 58,665 [Q1]."]
    assert fake_slack.calls("chat.startStream") and not fake_slack.calls("chat.update")


async def test_a_plain_direct_message_is_answered_in_a_thread_with_a_progress_message(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    ts = fake_slack.add_message(DM_ID, "which carrier flew the most?")
    await bot.event(events.im_message("which carrier flew the most?", ts=ts))
    await bot.idle()
    progress, answer = bot_replies(fake_slack, DM_ID, ts)
    assert progress["text"].startswith("_Answered in") and answer["text"] == "UA flew the most flights: 58,665 [Q1]."
    [plan] = [b for b in answer["blocks"] if b["type"] == "plan"]
    assert plan["tasks"][0]["output"]["elements"][0]["elements"][0]["text"] == "16 rows"


# --- what is refused or ignored ---


async def test_unsigned_stale_and_forged_requests_are_refused(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    payload = events.event_callback(events.app_mention("which carrier flew the most?"))
    stale = await bot.deliver(events.events_request(payload, stale=True))
    forged = await bot.deliver(events.events_request(payload, bad_signature=True))
    assert bot.http is not None
    unsigned = await bot.http.post("/slack/events", json=payload)
    click = events.interactivity_request(events.block_actions("analyst_feedback_up", "up:r1", message_ts="1.2"))
    unsigned_click = await bot.http.post(
        "/slack/events", content=click.body, headers={"content-type": click.headers["Content-Type"]}
    )
    await bot.idle()
    assert [r.status_code for r in (stale, forged, unsigned, unsigned_click)] == [401, 401, 401, 401]
    assert [c.method for c in fake_slack.calls()] == ["auth.test"] and fake_anthropic.requests == []
    challenge = await bot.deliver(events.events_request(events.url_verification("abc")))
    assert challenge.json() == {"challenge": "abc"}


async def test_the_same_event_delivered_three_times_is_answered_once_even_across_a_restart(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> which carrier flew the most?")
    payload = events.event_callback(events.app_mention("which carrier flew the most?", ts=question))
    statuses = [(await bot.deliver(events.events_request(payload, retry_num=n))).status_code for n in (None, 1, 2)]
    await bot.idle()
    assert statuses == [200, 200, 200]
    assert len(fake_slack.calls("chat.stopStream")) == 1 and len(fake_anthropic.requests) == 3  # one run
    assert sample(bot.metrics, "agent_slack_duplicates_total", kind="event") == 2

    await bot.restart()
    await bot.deliver(events.events_request(payload, retry_num=3, retry_reason="http_error"))
    await bot.idle()
    assert len(fake_slack.calls("chat.stopStream")) == 1 and len(fake_anthropic.requests) == 3
    assert len(bot_replies(fake_slack, GENERAL_ID, question)) == 2  # the progress message and the answer


async def test_one_message_delivered_as_two_events_is_answered_once(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """The same message can arrive in two events with different ids (two subscriptions that match it, a
    Slack Connect channel seen from both sides): the message, not the event, is what gets answered."""
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    ts = fake_slack.add_message(DM_ID, "which carrier flew the most?", user=HUMAN_ID)
    for _ in range(2):
        event = events.event_callback(events.im_message("which carrier flew the most?", ts=ts))
        assert (await bot.deliver(events.events_request(event))).status_code == 200
    await bot.idle()
    assert len(fake_anthropic.requests) == 3  # one run: the loop's two rounds and the follow-ups
    assert sample(bot.metrics, "agent_slack_duplicates_total", kind="message") == 1
    assert sample(bot.metrics, "agent_slack_duplicates_total", kind="event") == 0


async def test_edits_deletions_other_bots_own_messages_and_empty_text_are_ignored(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    ts = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how many flights?")
    ignored = [
        events.message_changed(channel=GENERAL_ID, ts=ts, text=f"<@{BOT_USER_ID}> how many?", previous_text="x"),
        events.message_deleted(channel=GENERAL_ID, deleted_ts=ts, previous_text="how many flights?"),
        events.bot_message(f"<@{BOT_USER_ID}> deploy done"),
        events.bot_message("done", user="U0OTHERBOT1", channel=DM_ID, channel_type="im"),
        events.im_message("my own words", user=BOT_USER_ID),
        events.app_mention(" "),
        events.message("lunch anyone?"),
        events.message(f"<@{BOT_USER_ID}> how many flights?", ts=ts),  # its app_mention answers it
    ]
    for event in ignored:
        assert (await bot.event(event)).status_code == 200
    await bot.idle()
    assert [c.method for c in fake_slack.calls()] == ["auth.test"] and fake_anthropic.requests == []
    reasons = ("edit", "deletion", "bot", "own_message", "empty", "not_addressed", "mention_in_message")
    counts = {r: sample(bot.metrics, "agent_slack_events_ignored_total", reason=r) for r in reasons}
    assert counts == {**dict.fromkeys(reasons, 1.0), "bot": 2.0}


async def test_channels_outside_the_allowlist_are_ignored(start_bot, fake_slack: FakeSlack) -> None:
    bot = await start_bot(slack_allowed_channels="C0SALES0001")
    await bot.ask("how many flights?")
    assert [c.method for c in fake_slack.calls()] == ["auth.test"]
    assert sample(bot.metrics, "agent_slack_events_ignored_total", reason="channel_not_allowed") == 1


# --- failures ---


async def test_a_failing_model_reads_as_a_friendly_message(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*[Failure(529, "overloaded_error", "Overloaded")] * 8)
    question = await bot.ask("which carrier flew the most?")
    progress, told = bot_replies(fake_slack, GENERAL_ID, question)
    assert told["text"] == "The model is busy right now, so I couldn't finish. Please try again in a minute."
    assert progress["text"].startswith("_Stopped_")
    assert not any("Traceback" in t or "overloaded_error" in t or "529" in t for t in texts(fake_slack))
    assert sample(bot.metrics, "agent_slack_errors_total", type="model_busy") == 1


async def test_a_retried_model_stream_replaces_what_was_streamed(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(slack_progress_interval_s=0.001)
    fake_anthropic.script(
        MidStreamFailure(partial_text="Half an answer that will be withdrawn "),
        Reply(text="There are 16 airlines."),
        Reply(text="[]"),
    )
    question = await bot.ask("how many airlines?")
    answers = [m["text"] for m in bot_replies(fake_slack, GENERAL_ID, question) if m.get("metadata")]
    assert answers == ["There are 16 airlines."], [m.get("text") for m in fake_slack.replies(GENERAL_ID, question)]
    # Whether the half answer got out before the retry depends on timing; if it did, it was taken back.
    started = [streamed_text(c.args) for c in fake_slack.calls("chat.startStream")]
    withdrawn = [text for text in started if not "There are 16 airlines.".startswith(text)]
    assert len(fake_slack.calls("chat.delete")) == len(withdrawn)
    assert not any("withdrawn" in m.get("text", "") for m in fake_slack.replies(GENERAL_ID, question))


async def test_too_long_and_too_many_questions_are_answered_politely(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(slack_max_message_chars=40, slack_rate_per_minute=1)
    long = await bot.ask("which carrier flew the most flights out of New York in 2013?")
    [told] = bot_replies(fake_slack, GENERAL_ID, long)
    assert told["text"] == "That question is 60 characters long; I can take up to 40. Could you shorten it?"

    fake_anthropic.script(Reply(text="16."), Reply(text="[]"))
    await bot.ask("how many airlines?")
    second = await bot.ask("and airports?")
    [told] = bot_replies(fake_slack, GENERAL_ID, second)
    assert told["text"].startswith("You're asking faster than I can keep up. Please wait about")
    assert len(fake_anthropic.requests) == 2
    assert sample(bot.metrics, "agent_slack_errors_total", type="rate_limited") == 1
    assert sample(bot.metrics, "agent_slack_errors_total", type="too_long") == 1


# --- buttons ---


async def test_show_sql_posts_the_query_in_the_thread(start_bot, fake_slack: FakeSlack, fake_anthropic) -> None:
    bot = await start_bot(agent_web_url="https://analyst.example.com/")
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    show, page = answer["blocks"][-4]["elements"]
    run_id = answer["metadata"]["event_payload"]["run_id"]
    assert page["url"] == f"https://analyst.example.com/queries/{run_id}-Q1"  # the web UI's page of the query
    click = events.block_actions(show["action_id"], show["value"], message_ts=answer["ts"], thread_ts=question)
    assert (await bot.click(click)).status_code == 200
    await bot.idle()
    shown = bot_replies(fake_slack, GENERAL_ID, question)[-1]["text"]
    assert shown.startswith("*Q1*\n```\nSELECT carrier, count() AS n FROM nycflights13.flights")


async def test_a_follow_up_button_asks_it_in_the_thread(start_bot, fake_slack: FakeSlack, fake_anthropic) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    follow_up = answer["blocks"][-3]["elements"][0]
    fake_anthropic.script(Reply(text="HA was most punctual."), Reply(text="[]"))
    await bot.click(
        events.block_actions(follow_up["action_id"], follow_up["value"], message_ts=answer["ts"], thread_ts=question)
    )
    await bot.idle()
    replies = bot_replies(fake_slack, GENERAL_ID, question)
    assert replies[2]["text"] == f"<@{HUMAN_ID}> asked: Which carrier was most punctual?"
    assert replies[-1]["text"] == "HA was most punctual."
    request = fake_anthropic.requests[-2]["messages"]
    assert request[0]["content"][0]["text"] == "which carrier flew the most?"
    assert request[-1]["content"][0]["text"] == "Which carrier was most punctual?"


async def test_thumbs_are_stored_with_the_turn_and_counted(start_bot, fake_slack: FakeSlack, fake_anthropic) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    await bot.click(events.feedback_click(answer, "negative", thread_ts=question))  # Slack's feedback buttons
    await bot.idle()
    assert bot.service is not None
    store = bot.service.store
    conversation = await store.get_conversation(str(await store.find(f"slack:{TEAM_ID}:{GENERAL_ID}:{question}")))
    assert conversation is not None and conversation["turns"][0]["feedback"] == "down"
    assert conversation["interface"] == "slack"
    assert fake_slack.ephemeral[-1]["text"] == "Thanks, noted." and fake_slack.ephemeral[-1]["user"] == HUMAN_ID
    assert sample(bot.metrics, "agent_slack_feedback_total", value="down") == 1


# --- how the answer is delivered ---


async def test_without_streaming_the_answer_is_posted_then_updated(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_slack.disable("chat.startStream", "chat.appendStream", "chat.stopStream")
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    assert fake_slack.markdown(GENERAL_ID, answer["ts"]) == "UA flew the most flights: 58,665 [Q1]."
    kinds = [b["type"] for b in answer["blocks"]]
    assert kinds == ["rich_text", "context", "actions", "actions", "actions", "actions", "actions"]  # as Slack keeps it
    receipt = answer["blocks"][1]["elements"][0]["text"]  # the receipt, as a context line
    assert receipt.startswith("claude-sonnet-5-5, claude-haiku-5-5 · 2 rounds · ") and "1 query: 336.8k rows" in receipt
    assert answer["metadata"]["event_payload"]["final"] is True
    assert sample(bot.metrics, "agent_slack_answers_total", delivery="update") == 1
    [history] = turns(
        fake_slack.thread_messages(GENERAL_ID, question), bot_id=fake_slack.bot_id, before_ts="9999999999.0"
    )
    assert history.answer == "UA flew the most flights: 58,665 [Q1]." and history.queries[0].id == "Q1"


TABLE_ANSWER = (
    "Carriers by flights [Q1]:\n\n| carrier | flights |\n|---|---|\n| UA | 58,665 |\n| B6 | 54,635 |\n\nUA leads."
)
TABLE_SHOWN = (
    "Carriers by flights [Q1]:\n\n```\ncarrier  flights\n-------  -------\nUA        58,665\nB6        54,635\n```"
    "\n\nUA leads."
)


async def test_a_stream_that_will_not_stop_is_finished_by_updating_the_message(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_slack.fail("chat.stopStream", "internal_error")
    fake_anthropic.script(*carriers_script(TABLE_ANSWER))
    question = await bot.ask("flights per carrier?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    assert [c.error for c in fake_slack.calls("chat.stopStream")] == ["internal_error", None]
    assert fake_slack.markdown(GENERAL_ID, answer["ts"]) == TABLE_SHOWN  # the table as aligned text
    assert (
        answer["metadata"]["event_payload"]["final"] is True and answer["blocks"][-1]["block_id"] == "analyst_feedback"
    )


async def test_an_append_that_fails_switches_to_updating_the_message(fake_slack: FakeSlack) -> None:
    question = fake_slack.add_message(GENERAL_ID, "how many flights?")
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.base_url, session=session)
        writer = AnswerWriter(
            client,
            GENERAL_ID,
            question,
            recipient=(TEAM_ID, HUMAN_ID),
            streaming=Streaming(),
            interval_s=0.01,
            part_metadata=partial(part_metadata, "r1"),
        )
        writer.add("336,776 flights ")
        await wait_for(lambda: bool(fake_slack.calls("chat.startStream")))
        fake_slack.fail("chat.appendStream", "not_allowed")
        writer.add("left New York in 2013 [Q1].")
        await wait_for(lambda: bool(fake_slack.calls("chat.update")))
        writer.add(" That is 923 a day.")
        delivery = await writer.finish(
            "336,776 flights left New York in 2013 [Q1]. That is 923 a day.",
            [],
            partial(answer_metadata, "r1", question="how many flights?", asked_ts="1.0", queries=[]),
        )
    [answer] = fake_slack.replies(GENERAL_ID, question)
    assert delivery == "update" and answer["metadata"]["event_payload"]["final"] is True
    assert (
        fake_slack.markdown(GENERAL_ID, answer["ts"])
        == "336,776 flights left New York in 2013 [Q1]. That is 923 a day."
    )
    assert [c.method for c in fake_slack.calls()][-1] == "chat.update"


async def test_a_long_answer_is_split_at_slacks_limit(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    long_answer = "\n".join(f"Line {n}: carrier UA flew {n:,} flights that month [Q1]." for n in range(600))
    script = carriers_script(long_answer)
    fake_anthropic.script(*script[:2], Reply(text=long_answer), *script[2:])  # its figures are made up: one correction
    question = await bot.ask("every month, in detail")
    parts = [m for m in bot_replies(fake_slack, GENERAL_ID, question) if m.get("metadata")]
    assert len(parts) == 3 and all(len(m["text"]) <= 12_000 for m in parts)
    assert "".join(m["text"] for m in parts) == long_answer
    assert all(m["text"].endswith("\n") for m in parts[:-1]), "split between lines"
    assert [m["metadata"]["event_payload"].get("final", False) for m in parts] == [False, False, True]
    assert [any(b["type"] == "actions" for b in m.get("blocks", [])) for m in parts] == [False, False, True]
    [history] = turns(
        fake_slack.thread_messages(GENERAL_ID, question), bot_id=fake_slack.bot_id, before_ts="9999999999.0"
    )
    assert history.answer == long_answer


async def test_slack_series_start_at_zero_once_the_bot_runs(start_bot) -> None:
    bot = await start_bot()
    for name, label, value in (
        ("agent_slack_events_total", "type", "app_mention"),
        ("agent_slack_events_ignored_total", "reason", "edit"),
        ("agent_slack_duplicates_total", "kind", "message"),
        ("agent_slack_answers_total", "delivery", "stream"),
        ("agent_slack_errors_total", "type", "model_busy"),
        ("agent_slack_feedback_total", "value", "down"),
    ):
        assert bot.metrics.registry.get_sample_value(name, {label: value}) == 0.0, name


async def test_slack_metrics_are_recorded(start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic) -> None:
    bot = await start_bot(slack_max_message_chars=100)
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    await bot.event(events.message_changed(channel=GENERAL_ID, ts=question, text="x", previous_text="y"))
    await bot.ask("x" * 101)
    answer = answer_message(fake_slack, GENERAL_ID, question)
    await bot.click(events.feedback_click(answer, "positive", thread_ts=question))
    await bot.idle()
    m = bot.metrics
    assert sample(m, "agent_slack_events_total", type="app_mention") == 2
    assert sample(m, "agent_slack_events_total", type="message") == 1
    assert sample(m, "agent_slack_events_total", type="block_actions") == 1
    assert sample(m, "agent_slack_events_ignored_total", reason="edit") == 1
    assert sample(m, "agent_slack_answers_total", delivery="stream") == 1
    assert sample(m, "agent_slack_errors_total", type="too_long") == 1
    assert sample(m, "agent_slack_feedback_total", value="up") == 1
    assert sample(m, "agent_slack_first_progress_seconds_count") == 1
    assert sample(m, "agent_slack_answer_seconds_count") == 1
    first_progress = sample(m, "agent_slack_first_progress_seconds_sum")
    assert 0 < first_progress <= sample(m, "agent_slack_answer_seconds_sum"), "progress shows before the answer ends"


async def test_shutting_down_mid_answer_leaves_nothing_running(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    hang = Hang()
    fake_anthropic.script(hang)
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how many flights?")
    await bot.event(events.app_mention("how many flights?", ts=question))
    await wait_for(lambda: len(fake_anthropic.requests) == 1)
    before = {t for t in asyncio.all_tasks() if not t.done()}
    assert {t.get_name().split("-")[0] for t in before} >= {"slack", "run"}
    await bot.stop()
    hang.release.set()
    await asyncio.sleep(0.05)
    leftover = [t for t in asyncio.all_tasks() if not t.done() and t in before and t is not asyncio.current_task()]
    assert [t.get_name() for t in leftover if t.get_name().startswith(("slack-", "run-"))] == []


async def test_a_chart_is_uploaded_in_the_thread_as_a_png(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    monthly = (
        "SELECT toStartOfMonth(time_hour) AS month, round(avg(dep_delay), 1) AS avg_dep_delay "
        "FROM nycflights13.flights GROUP BY month ORDER BY month"
    )
    chart = {"query_id": "Q1", "kind": "line", "x": "month", "y": "avg_dep_delay", "title": "Delay by month"}
    fake_anthropic.script(
        Reply(tool_calls=[("execute_sql", {"queries": [{"question": "Delay by month", "sql": monthly}]})]),
        Reply(tool_calls=[("chart", chart)]),
        Reply(text="Delays peaked in July [Q1]."),
        Reply(text="[]"),
    )
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how did delays change by month?")
    await bot.event(events.app_mention("how did delays change by month?", ts=question))
    await bot.idle()
    (uploaded,) = fake_slack.files
    assert uploaded.data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(uploaded.data) < 2_000_000
    assert (uploaded.channel, uploaded.thread_ts) == (GENERAL_ID, question)
    assert uploaded.alt_txt == "line chart of avg_dep_delay by month from Q1 (12 rows)"
    assert uploaded.filename == "C1-Q1.png" and uploaded.title == "Delay by month"
    Path(__file__).parent.joinpath("artifacts").mkdir(exist_ok=True)
    Path(__file__).parent.joinpath("artifacts", "slack-chart.png").write_bytes(uploaded.data)


# --- several workers (`agent serve --workers N`), here two services in one process on one conversation file ---


async def test_a_thread_whose_messages_reach_two_workers_is_answered_in_order(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """A, then B on the first worker while A is being answered, then C on the second: answered A, B, C,
    one at a time, each reading the answers before it (posted after it was sent)."""
    first_worker, second_worker = await start_bot(workers=2), await start_bot(workers=2)
    let_go = threading.Event()
    answers = {"how many airlines?": "There are 16 airlines.", "and airports?": "1,458.", "and planes?": "3,322."}

    def model(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text="[]")  # follow-ups
        asked = body["messages"][-1]["content"][0]["text"]
        if asked == "how many airlines?":
            let_go.wait(10)
        return Reply(text=answers[asked])

    fake_anthropic.always(model)

    async def ask(worker: SlackHarness, text: str, thread_ts: str | None = None) -> str:
        ts = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> {text}", thread_ts=thread_ts)
        await worker.event(events.app_mention(text, ts=ts, thread_ts=thread_ts))
        return ts

    question = await ask(first_worker, "how many airlines?")
    await wait_for(lambda: len(fake_anthropic.requests) == 1)
    await ask(first_worker, "and airports?", thread_ts=question)
    await asyncio.sleep(0.1)
    await ask(second_worker, "and planes?", thread_ts=question)
    await asyncio.sleep(1)
    assert len(fake_anthropic.requests) == 1, "the others wait for the thread's first answer"

    let_go.set()
    await first_worker.idle()
    await second_worker.idle()
    asked = [r["messages"] for r in fake_anthropic.requests if r.get("tools")]
    assert [messages[-1]["content"][0]["text"] for messages in asked] == list(answers)
    history = [[m["content"][0]["text"].split("\n")[0] for m in messages[:-1]] for messages in asked]
    assert history == [
        [],
        ["how many airlines?", "There are 16 airlines."],
        ["how many airlines?", "There are 16 airlines.", "and airports?", "1,458."],
    ], "each answer reads the ones before it, though they were posted after its question"
    posted = [m["text"] for m in bot_replies(fake_slack, GENERAL_ID, question) if m.get("metadata")]
    assert posted == list(answers.values())


async def test_a_message_still_waiting_for_its_turn_when_its_worker_stops_is_told_so(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    first_worker, second_worker = await start_bot(workers=2), await start_bot(workers=2)
    let_go = threading.Event()

    def model(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            let_go.wait(10)
        return Reply(text="There are 16 airlines." if body.get("tools") else "[]")

    fake_anthropic.always(model)
    question = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> how many airlines?")
    await first_worker.event(events.app_mention("how many airlines?", ts=question))
    await wait_for(lambda: len(fake_anthropic.requests) == 1)
    follow_up = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> and airports?", thread_ts=question)
    await second_worker.event(events.app_mention("and airports?", ts=follow_up, thread_ts=question))
    await asyncio.sleep(0.3)
    await second_worker.stop()  # its drain times out while the first worker still holds the thread

    replies = [m["text"] for m in bot_replies(fake_slack, GENERAL_ID, question)]
    assert replies[-1].startswith("I'm restarting right now"), replies
    let_go.set()
    await first_worker.idle()
    assert len([r for r in fake_anthropic.requests if r.get("tools")]) == 1, "the waiting message was not answered"


async def test_workers_share_a_persons_question_budget(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    first_worker = await start_bot(workers=2, slack_rate_per_minute=1)
    second_worker = await start_bot(workers=2, slack_rate_per_minute=1)
    fake_anthropic.script(Reply(text="16."), Reply(text="[]"))
    await first_worker.ask("how many airlines?")
    second = await second_worker.ask("and airports?")
    [told] = bot_replies(fake_slack, GENERAL_ID, second)
    assert told["text"].startswith("You're asking faster than I can keep up. Please wait about")
    assert len(fake_anthropic.requests) == 2


async def test_a_fallback_shows_in_the_status_and_the_answer_comes_from_the_next_model(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_model="claude-sonnet-5-5,claude-opus-5-5")
    fake_anthropic.for_model("claude-sonnet-5-5", Failure(529, "overloaded_error", "Overloaded"))
    thread = fake_slack.start_assistant_thread(DM_ID)
    first, *rest = carriers_script()

    def slow_first(body: dict[str, Any]) -> Any:
        time.sleep(0.3)  # the note stays up long enough for a paint (one a progress interval)
        return first

    fake_anthropic.script(slow_first, *rest)
    ts = fake_slack.add_message(DM_ID, "which carrier flew the most?", thread_ts=thread)
    await bot.event(events.im_message("which carrier flew the most?", ts=ts, thread_ts=thread))
    await bot.idle()

    state = fake_slack.assistant_thread(DM_ID, thread)
    assert "is thinking (on anthropic:claude-opus-5-5, the first model being busy)…" in state["status_history"]
    assert [m["text"] for m in bot_replies(fake_slack, DM_ID, thread)] == ["UA flew the most flights: 58,665 [Q1]."]
