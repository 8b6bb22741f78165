"""The run shown as Slack's own plan in the streamed answer, with Slack's feedback buttons; today's progress
message where the workspace lacks them; and every answer's writes kept within Slack's rate-limit tiers."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.slack.api_tiers import MAX_KEYS, PROGRESS_SHARE, RECHECK_S, CallBudget
from bots.slack.streaming import Streaming
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.fakes.slack_limits import RateLimits
from tests.slack_helpers import answer_message, bot_replies, carriers_script, sql_call, stamp_sends

WEB = "https://analyst.example"


def task_updates(fake: FakeSlack) -> list[dict[str, Any]]:
    calls = fake.calls("chat.startStream") + fake.calls("chat.appendStream")
    return [chunk for c in calls if c.ok for chunk in c.args.get("chunks") or [] if chunk["type"] == "task_update"]


async def test_each_query_is_a_task_in_slacks_plan_above_the_streamed_answer(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_web_url=WEB)
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")

    start = fake_slack.calls("chat.startStream")[0].args
    assert start["task_display_mode"] == "plan"
    updates = task_updates(fake_slack)
    assert [(u["id"], u["status"]) for u in updates] == [("Q1", "in_progress"), ("Q1", "complete")]
    run_id = answer_message(fake_slack, GENERAL_ID, question)["metadata"]["event_payload"]["run_id"]
    assert "sources" not in updates[0], "no link while the query runs: its page exists once the answer is stored"
    assert updates[-1]["output"] == "16 rows" and updates[-1]["sources"] == [
        {"type": "url", "url": f"{WEB}/queries/{run_id}-Q1", "text": "Q1 SQL and results"}
    ]
    answer = answer_message(fake_slack, GENERAL_ID, question)
    kinds = [b["type"] for b in answer["blocks"]]
    assert kinds[0] == "plan" and kinds[-1] == "context_actions", "the plan, the answer, then the buttons"
    assert answer["text"] == "UA flew the most flights: 58,665 [Q1]."


async def test_task_titles_and_errors_from_the_run_neither_ping_nor_hide_links(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(
        Reply(tool_calls=[sql_call("<!channel> & <http://evil|click>", "SELECT * FROM no_such_table")]),
        Reply(text="That table does not exist."),
        Reply(text="[]"),
    )
    await bot.ask("what is in no_such_table?")
    failed = task_updates(fake_slack)[-1]
    assert failed["status"] == "error" and failed["output"] == "failed"
    # Plain text, as Slack shows it: `&` stays `&`, and every `<` is followed by an invisible space (the
    # project's rule for plain text, bots/slack/blocks.py no_pings), so no `<!…>` or `<url|label>` syntax holds.
    assert failed["title"] == "Q1 <\u200b!channel> & <\u200bhttp://evil|click>"
    assert failed["details"] and "&lt;" not in failed["details"]
    assert all(part.startswith("\u200b") for part in failed["details"].split("<")[1:])


async def test_where_slack_refuses_the_plan_the_progress_message_lists_the_queries_and_it_is_remembered(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_slack.fail("chat.startStream", "invalid_chunks")
    fake_anthropic.script(*carriers_script(), *carriers_script())
    question = await bot.ask("which carrier flew the most?")
    assert fake_slack.calls("chat.startStream")[0].args["task_display_mode"] == "plan", "the plan was tried"
    progress, answer = bot_replies(fake_slack, GENERAL_ID, question)
    assert "*Q1* Flights per carrier, 16 rows" in progress["text"]
    run_id = answer["metadata"]["event_payload"]["run_id"]
    thumbs = [e["value"] for b in answer["blocks"] if b.get("block_id") == "analyst_feedback" for e in b["elements"]]
    assert thumbs == [f"up:{run_id}", f"down:{run_id}"], "the classic thumbs, as buttons"

    await bot.ask("and the least?")
    later = fake_slack.calls("chat.startStream")[-1].args
    assert "task_display_mode" not in later and later["markdown_text"], "streamed, without a plan, for now"


async def test_thirty_answers_at_once_stay_within_slacks_tiers_and_every_answer_lands(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """Slack counts a minute; here two seconds, with the bot's budget counting a little longer. The fake
    counts each call at the moment the bot sent it: a busy machine can take longer than the half second
    between the windows to carry a call to the fake."""
    fake_slack.rate_limits = RateLimits(window_s=2.0)
    bot = await start_bot(slack_rate_per_minute=100, slack_progress_interval_s=0.001)
    assert bot.bot.client is not None
    stamp_sends(bot.bot.client)
    bot.bot._answerer.budget = CallBudget(window_s=2.5)  # type: ignore[union-attr]
    fake_anthropic.always(Reply(text="UA flew the most flights. " * 40))
    asked = [fake_slack.add_message(GENERAL_ID, f"<@{fake_slack.bot_user_id}> question {n}") for n in range(30)]
    await asyncio.gather(*(bot.event(events.app_mention(f"question {n}", ts=ts)) for n, ts in enumerate(asked)))
    await asyncio.wait_for(bot.bot.idle(), 90)

    assert [(c.method, c.args.get("ts")) for c in fake_slack.throttled()] == []
    for ts in asked:
        answer = answer_message(fake_slack, GENERAL_ID, ts)
        assert answer["text"].startswith("UA flew the most flights.") and answer["metadata"]["event_payload"]["final"]
        assert any(b["block_id"] == "analyst_feedback" for b in answer["blocks"] if "block_id" in b)


async def test_progress_writes_leave_room_for_final_writes_which_wait_for_the_window() -> None:
    now = [0.0]
    budget = CallBudget(window_s=60, clock=lambda: now[0])
    progress = [budget.try_take("T1", "chat.update") for _ in range(50)]
    assert progress.count(True) == 30, "progress edits take 60% of chat.update's Tier 3 (50 a minute)"
    for _ in range(20):
        await asyncio.wait_for(budget.take("T1", "chat.update"), 0.1)  # the finals fit in what is left
    assert budget.try_take("T2", "chat.update"), "another workspace has its own budget"
    waiting = asyncio.ensure_future(budget.take("T1", "chat.update"))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "a final write past the limit waits ..."
    now[0] = 60.0
    await asyncio.wait_for(waiting, 2)  # ... until the window has room
    assert budget.try_take("T1", "chat.postMessage", "C1") and budget.try_take("T1", "chat.postMessage", "C2")


def test_a_refused_plan_is_remembered_apart_from_streaming_for_a_while() -> None:
    now = [0.0]
    streaming = Streaming(retry_s=60, clock=lambda: now[0])
    streaming.plan_refused(("T1", "channel"), "invalid_chunks")
    streaming.refused(("T1", "channel"), "invalid_chunks")  # the plan's fault, not streaming's
    assert streaming.allowed(("T1", "channel")) and not streaming.plans_allowed(("T1", "channel"))
    assert streaming.plans_allowed(("T1", "im")) and streaming.plans_allowed(("T2", "channel"))
    now[0] = 60.0
    assert streaming.plans_allowed(("T1", "channel"))


async def test_a_refused_plan_update_is_sent_again_so_no_task_stays_running(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """chat.appendStream stays rate limited past the SDK's retries when Q1's result comes: the plan's
    news goes out with a later write, at the latest when the stream stops."""
    bot = await start_bot()
    fake_slack.ratelimit("chat.appendStream", retry_after=0, times=3)
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    # Which write the refusals hit depends on timing: the plan's own update (sent again later), or the text's
    # (the stream ends with the plan's last states, and the answer is finished by chat.update, plan or not).
    tasks = [task for block in answer["blocks"] if block["type"] == "plan" for task in block["tasks"]]
    assert [(task["task_id"], task["status"]) for task in tasks] in ([("Q1", "complete")], [])
    assert answer["text"] == "UA flew the most flights: 58,665 [Q1]."


async def test_a_final_write_waits_for_room_at_most_max_wait_s() -> None:
    """Past `max_wait_s` a final write goes anyway: Slack's own 429 and Retry-After take over from there."""
    now = [0.0]
    full = CallBudget(max_wait_s=30, clock=lambda: now[0])
    for _ in range(20):
        full.count("T1", "chat.stopStream")
    waiting = asyncio.ensure_future(full.take("T1", "chat.stopStream"))
    await asyncio.sleep(0.05)
    now[0] = 29.9
    await asyncio.sleep(RECHECK_S + 0.1)  # it looked again (on a busy machine, maybe not yet: still waiting)
    assert not waiting.done(), "the window is full for another half minute: it waits"
    now[0] = 30.0  # still full (until 60 s), but it has waited max_wait_s
    await asyncio.wait_for(waiting, 30)  # it goes at its next look


def test_workers_share_the_tiers_and_emptied_windows_are_forgotten() -> None:
    now = [0.0]
    two = CallBudget(clock=lambda: now[0], workers=2)
    assert sum(two.try_take("T1", "chat.update") for _ in range(50)) == int(50 // 2 * PROGRESS_SHARE)
    for channel in range(MAX_KEYS + 5):
        two.count("T1", "chat.postMessage", f"C{channel}")
    now[0] += 61
    two.count("T1", "chat.postMessage", "C-new")
    assert len(two._calls) < 10


def test_the_plan_and_the_progress_steps_read_one_view_of_the_run() -> None:
    """Slack keeps no per-query state of its own: the plan's task and the progress message's step are the
    run's view of the query, as the answerer applied its events."""
    from agent.runner import ExecutingEvent, ResultEvent
    from bots.slack.plan import Plan
    from bots.slack.progress import step_line
    from chats.run_view import RunView

    view = RunView()
    plan = Plan("r" * 32, view, "https://analyst.example")
    started = ExecutingEvent(query_id="Q1", question="Flights per carrier", sql="SELECT 1")
    view.apply(started)
    assert plan.update(started) and step_line(view.queries["Q1"]) == "• *Q1* Flights per carrier, running…"
    (title, task) = plan.take_changes()
    assert title["type"] == "plan_update" and task["status"] == "in_progress" and "sources" not in task
    answered = ResultEvent(
        query_id="Q1", columns=["n"], rows=[[1]], row_count=16, has_more=False, error=None, hint=None, elapsed_ms=3
    )
    view.apply(answered)
    assert plan.update(answered) and step_line(view.queries["Q1"]) == "• *Q1* Flights per carrier, 16 rows"
    (task,) = plan.take_changes()
    assert (task["status"], task["output"]) == ("complete", "16 rows") and task["sources"]
    unknown = answered.model_copy(update={"query_id": "Q9"})
    view.apply(unknown)
    assert not plan.update(unknown) and list(view.queries) == ["Q1"]
