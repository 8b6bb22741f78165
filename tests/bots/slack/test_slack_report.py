"""Reports in Slack: asked with `report:` or Dig deeper, never guessed; the live plan shows the report's steps;
the finished report lands in the thread in parts within Slack's limits, its chart as an image, its figures
checked (one marked), the receipt, and the whole of it as a PDF and a Markdown file; a partial one has a
Resume button that continues it; one that cannot be answered says what is missing. The real Bolt app,
against the strict fake Slack and the scripted model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent.db import Database
from agent.reports.model import Finding, Report, ReportOutcome, ReportQuery
from bots.slack import blocks
from bots.slack.receive import Allowed, Identity, Question, read_question
from bots.slack.report import MAX_BLOCKS, MAX_MESSAGES, report_parts
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.fakes import slack_events as events
from tests.fakes.anthropic_api import Failure, FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import BOT_ID, BOT_USER_ID, GENERAL_ID, HUMAN_ID, TEAM_ID, FakeSlack
from tests.fakes.slack_rules import MAX_MARKDOWN_BLOCK_CHARS, check_blocks
from tests.report_helpers import partial_then_resumed_script, report_script
from tests.slack_helpers import bot_replies, carriers_script

ARTIFACTS = Path(__file__).parent / "artifacts"


def report_blocks(fake: FakeSlack, thread: str) -> list[dict[str, Any]]:
    return [b for m in bot_replies(fake, GENERAL_ID, thread) for b in m.get("blocks") or []]


def shown_text(fake: FakeSlack, thread: str) -> str:
    """Everything the thread shows of the report, as text (markdown blocks, the streamed text, context lines)."""
    out = []
    for message in bot_replies(fake, GENERAL_ID, thread):
        out.append(message.get("text") or "")
        for block in message.get("blocks") or []:
            if block["type"] == "markdown":
                out.append(block["text"])
            elif block["type"] == "context":
                out += [e.get("text", "") for e in block["elements"]]
    return "\n".join(out)


def thread_dump(fake: FakeSlack, thread: str) -> str:
    """The thread as a person reads it: each message of the bot, its plan, text, blocks and files."""
    lines: list[str] = []
    for message in bot_replies(fake, GENERAL_ID, thread):
        lines.append("--- message")
        stream = fake.stream(GENERAL_ID, message["ts"])
        if stream is not None and stream.tasks:
            lines.append(f"  plan: {stream.plan_title}")
            lines += [f"    [{t['status']}] {t['title']} ({t.get('output', '')})" for t in stream.tasks.values()]
        markdown = [b["text"] for b in message.get("blocks") or [] if b["type"] == "markdown"]
        for text in markdown or [message.get("text") or ""]:
            lines += [f"  {line}" for line in text.splitlines()]
        for block in message.get("blocks") or []:
            if block["type"] == "context":
                lines += [f"  ({block['block_id']}) {e['text']}" for e in block["elements"]]
            elif block["type"] == "actions":
                lines.append(f"  [{'] ['.join(e['text']['text'] for e in block['elements'])}]")
        lines += [f"  file: {f['name']} ({f['mimetype']})" for f in message.get("files") or []]
    return "\n".join(lines) + "\n"


async def ask_report(bot: Any, fake: FakeSlack, text: str) -> str:
    ts = fake.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> {text}")
    response = await bot.event(events.app_mention(text, ts=ts))
    assert response.status_code == 200
    await bot.idle()
    return ts


async def test_a_report_asked_in_a_mention_lands_in_the_thread_with_its_plan_parts_chart_and_files(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(chart_render_timeout_s=120)  # a limit on a busy machine, not a claim about speed
    fake_anthropic.script(*report_script())
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")

    first = fake_anthropic.requests[0]
    asked = first["messages"][-1]["content"]
    assert asked[0]["text"] == "why did delays rise in July?", "the prefix asks for a report; the rest is the question"
    assert any("this is a report request" in part.get("text", "") for part in asked), "the report's own prompt"

    # The live plan: the report's steps as Slack's plan, each done, in the message that then holds the report.
    [plan] = [b for b in report_blocks(fake_slack, thread) if b["type"] == "plan"]
    assert plan["title"] == "Writing the report"
    tasks = [(t["task_id"], t["status"]) for t in plan["tasks"]]
    assert tasks == [("S1", "complete"), ("S2", "complete"), ("S3", "complete")]
    starts = [c for c in fake_slack.calls("chat.startStream") if c.ok]
    assert starts and starts[0].args["task_display_mode"] == "plan"

    text = shown_text(fake_slack, thread)
    for heading in ("Report:", "Findings", "How this was found", "Caveats and what remains uncertain"):
        assert heading in text, heading
    assert "21.7 minutes" in text and "EWR most of all" in text
    assert "What could not be answered" in text  # "Nothing." is said, not left out

    # The figure check over the whole report: 21.7 is Q1's cell; 9.2 matches nothing and is marked.
    [marked] = [b for b in report_blocks(fake_slack, thread) if b.get("block_id") == "analyst_unverified"]
    assert "*9.2*" in marked["elements"][0]["text"] and "21.7" not in marked["elements"][0]["text"]
    assert [b for b in report_blocks(fake_slack, thread) if b.get("block_id") == "analyst_receipt"]

    # Every message within Slack's limits, as the strict fake checked them when they were posted.
    for message in bot_replies(fake_slack, GENERAL_ID, thread):
        assert len(message.get("blocks") or []) <= MAX_BLOCKS
        assert sum(len(b["text"]) for b in message.get("blocks") or [] if b["type"] == "markdown") <= 12_000

    # The chart as an image, and the whole report as a PDF and a Markdown file, in the thread.
    files = {f.filename.rsplit(".", 1)[-1]: f for f in fake_slack.files}
    assert set(files) == {"png", "pdf", "md"}
    assert all((f.channel, f.thread_ts) == (GENERAL_ID, thread) for f in files.values())
    assert files["png"].data[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["pdf"].data.startswith(b"%PDF-")
    ARTIFACTS.mkdir(exist_ok=True)  # for a person to open: pdftoppm -png report.pdf page
    (ARTIFACTS / "report.pdf").write_bytes(files["pdf"].data)
    (ARTIFACTS / "slack-report.txt").write_text(thread_dump(fake_slack, thread), encoding="utf-8")
    markdown = files["md"].data.decode()
    assert "21.7" in markdown and "SELECT month" in markdown, "the Markdown file holds the report and its SQL"
    assert [c.method for c in fake_slack.calls() if c.method == "files.completeUploadExternal"].count(
        "files.completeUploadExternal"
    ) == 2, "the chart in one upload, the two files of the report together in another"
    assert not [b for b in report_blocks(fake_slack, thread) if b.get("block_id") == blocks.RESUME_REPORT]


async def test_a_question_without_the_prefix_gets_an_answer_and_a_dig_deeper_button_that_asks_for_the_report(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(chart_render_timeout_s=120)
    fake_anthropic.script(*carriers_script())
    thread = await ask_report(bot, fake_slack, "which carrier flew the most?")
    question = fake_anthropic.requests[0]["messages"][-1]["content"]
    assert not any("this is a report request" in p.get("text", "") for p in question), "no prefix: an answer"
    [(answer, dig)] = [
        (m, b) for m in bot_replies(fake_slack, GENERAL_ID, thread) for b in m.get("blocks") or []
        if b.get("block_id") == blocks.DIG_DEEPER
    ]  # fmt: skip
    button = dig["elements"][0]

    fake_anthropic.reset()
    fake_anthropic.script(*report_script())
    click = events.block_actions(button["action_id"], button["value"], message_ts=answer["ts"], thread_ts=thread)
    await bot.click(click)
    await bot.idle()
    asked = fake_anthropic.requests[0]["messages"][-1]["content"]
    assert asked[0]["text"] == "which carrier flew the most?"
    assert any("this is a report request" in part.get("text", "") for part in asked)
    assert f"<@{HUMAN_ID}> asked for a report: which carrier flew the most?" in shown_text(fake_slack, thread)
    assert {f.filename.rsplit(".", 1)[-1] for f in fake_slack.files} >= {"pdf", "md"}


async def test_a_partial_report_has_resume_which_finishes_it_without_running_its_queries_again(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    counting = CountingDatabase(db)
    bot = await start_bot(agent_report_max_queries=2, database=counting)
    first, resumed = partial_then_resumed_script()
    fake_anthropic.script(*first)
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")
    assert len(counting.executed) == 2, "two of the three queries asked: the budget"
    text = shown_text(fake_slack, thread)
    assert "**Partial report:** why did delays rise in July?" in text and "its query limit" in text
    assert "**What remains to do**" in text and "precipitation in June and July" in text
    [(message, block)] = [
        (m, b) for m in bot_replies(fake_slack, GENERAL_ID, thread) for b in m.get("blocks") or []
        if b.get("block_id") == blocks.RESUME_REPORT
    ]  # fmt: skip
    button = block["elements"][0]
    assert button["text"]["text"] == "Resume"

    fake_anthropic.reset()
    fake_anthropic.script(*resumed)
    await bot.click(
        events.block_actions(button["action_id"], button["value"], message_ts=message["ts"], thread_ts=thread)
    )
    await bot.idle()
    assert len(counting.executed) == 3 and "nycflights13.weather" in counting.executed[2], "Q1 and Q2 not run again"
    assert f"<@{HUMAN_ID}> resumed the report." in shown_text(fake_slack, thread)
    stored = await bot.service.state.reports.get(button["value"])
    assert stored is not None and stored.report is not None and stored.report.outcome is ReportOutcome.COMPLETE
    assert [q.id for q in stored.report.queries] == ["Q1", "Q2", "Q3"] and len(stored.report.runs) == 2
    assert shown_text(fake_slack, thread).count("**Report:** why did delays rise in July?") == 1, "the whole report"

    # The same button again: the report is complete, nothing more runs.
    asked = len(fake_anthropic.requests)
    await bot.click(
        events.block_actions(button["action_id"], button["value"], message_ts=message["ts"], thread_ts=thread)
    )
    await bot.idle()
    assert len(
        fake_anthropic.requests
    ) == asked and "There is no partial report of this thread to resume" in shown_text(fake_slack, thread)


async def test_a_report_whose_model_fails_part_way_is_posted_partial_with_resume(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    first, _ = partial_then_resumed_script()
    fake_anthropic.script(first[0], Failure(400, "invalid_request_error", "the request was refused"))
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")
    text = shown_text(fake_slack, thread)
    assert "**Partial report:** why did delays rise in July?" in text and "It stopped at an error" in text
    assert [b for b in report_blocks(fake_slack, thread) if b.get("block_id") == blocks.RESUME_REPORT]


async def test_a_resume_sent_from_another_thread_is_a_report_never_seen(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_report_max_queries=2)
    first, _ = partial_then_resumed_script()
    fake_anthropic.script(*first)
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")
    [report_id] = [
        b["elements"][0]["value"]
        for b in report_blocks(fake_slack, thread)
        if b.get("block_id") == blocks.RESUME_REPORT
    ]
    elsewhere = fake_slack.add_message(GENERAL_ID, "another thread")
    asked = len(fake_anthropic.requests)
    forged = events.block_actions(blocks.RESUME_REPORT, report_id, message_ts=elsewhere, thread_ts=elsewhere)
    await bot.click(forged)
    await bot.idle()
    assert len(fake_anthropic.requests) == asked
    assert "There is no partial report of this thread to resume" in shown_text(fake_slack, elsewhere)


async def test_a_report_the_data_cannot_answer_says_what_is_missing_and_attaches_nothing(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(
        Reply(tool_calls=[("think", {"content": "Ticket prices are in no table."})]),
        Reply(
            text="## Summary\nThe data cannot say how ticket prices changed.\n\n## What could not be answered\n"
            "No table holds ticket prices or fares."
        ),
        Reply(text="[]"),
    )
    thread = await ask_report(bot, fake_slack, "report: how did ticket prices change in July?")
    text = shown_text(fake_slack, thread)
    assert "**I cannot answer this from the data:** how did ticket prices change in July?" in text
    assert "**What could not be answered**" in text and "No table holds ticket prices or fares." in text
    assert fake_slack.files == [] and not [
        b for b in report_blocks(fake_slack, thread) if b.get("block_id") == blocks.RESUME_REPORT
    ]


async def test_without_files_write_the_report_stands_and_the_thread_says_why_its_files_are_missing(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    fake_slack.scopes = fake_slack.installed_scopes - {"files:write"}  # an app installed from an older manifest
    bot = await start_bot()
    fake_anthropic.script(*report_script())
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")
    text = shown_text(fake_slack, thread)
    assert "**Findings**" in text and fake_slack.files == []
    assert "The report's PDF and Markdown could not be attached: the app lacks the `files:write` scope." in text


def test_report_is_asked_only_by_its_prefix_in_a_mention_a_dm_or_the_bots_thread() -> None:
    me = Identity(team_id=TEAM_ID, user_id=BOT_USER_ID, bot_id=BOT_ID)

    def read(event: dict[str, Any]) -> Question:
        found = read_question(events.event_callback(event), me, Allowed(), 0.0)
        assert isinstance(found, Question)
        return found

    asked = [
        read(events.app_mention("Report: why did delays rise in July?")),
        read(events.im_message("report:   why did delays rise in July?")),
        read(events.message("REPORT: why did delays rise in July?", thread_ts="1700000000.000100")),
    ]
    assert [(q.report, q.text) for q in asked] == [(True, "why did delays rise in July?")] * 3
    plain = [
        read(events.app_mention("why did delays rise in July? a report would help")),
        read(events.im_message("a report: why did delays rise?")),
        read(events.app_mention("reports of delays in July?")),
    ]
    assert [q.report for q in plain] == [False, False, False], "never guessed: only the prefix asks for one"


# --- the parts, as a unit: Slack's limits hold for a long report ---


def long_report(findings: int, chars: int) -> Report:
    text = "Delays rose in July [Q1]. " * (chars // 26)
    return Report(
        id="r" * 32,
        question="why did delays rise in July?",
        outcome=ReportOutcome.PARTIAL,
        summary="Delays rose [Q1].",
        findings=[Finding(text=f"{n}: {text}", citations=["Q1"]) for n in range(findings)],
        method="One query.",
        remaining="The origins.",
        stopped_by="queries",
        queries=[ReportQuery(id="Q1", question="Delays per month", sql="SELECT 1", row_count=12)],
        runs=["r" * 32],
    )


def test_a_long_report_is_cut_into_messages_within_slacks_limits_and_the_last_has_resume() -> None:
    parts = report_parts(long_report(findings=30, chars=1_500), web_url="https://analyst.example")
    assert 1 < len(parts) <= MAX_MESSAGES
    for part in parts:
        check_blocks(part.blocks)  # the fake's own rules: 50 blocks, 12,000 markdown characters, fields' limits
        assert sum(len(b["text"]) for b in part.blocks if b["type"] == "markdown") <= MAX_MARKDOWN_BLOCK_CHARS
    [resume] = [b for b in parts[-1].blocks if b.get("block_id") == blocks.RESUME_REPORT]
    assert resume["elements"][0]["value"] == "r" * 32
    joined = "\n".join(b["text"] for p in parts for b in p.blocks if b["type"] == "markdown")
    assert joined.count("Delays rose in July [Q1].") == 30 * (1_500 // 26), "nothing lost between the parts"
    assert "https://analyst.example/queries/" + "r" * 32 + "-Q1" in joined


def test_a_report_past_what_a_thread_should_hold_says_the_rest_is_in_its_files() -> None:
    parts = report_parts(long_report(findings=80, chars=3_000))
    assert len(parts) == MAX_MESSAGES
    last = [b["text"] for b in parts[-1].blocks if b["type"] == "markdown"]
    assert last == ["_The report goes on in the PDF and Markdown files attached below (15 more message(s) of it)._"]
    assert [b for b in parts[-1].blocks if b.get("block_id") == blocks.RESUME_REPORT], "and Resume is still there"


def test_a_cannot_answer_report_says_so_and_what_is_missing() -> None:
    report = Report(
        id="c" * 32,
        question="what did passengers pay?",
        outcome=ReportOutcome.CANNOT_ANSWER,
        summary="The data holds no fares.",
        unanswered="Fares: no table holds ticket prices.",
    )
    [part] = report_parts(report)
    text = "\n".join(b["text"] for b in part.blocks if b["type"] == "markdown")
    assert text.startswith("**I cannot answer this from the data:** what did passengers pay?")
    assert "**What could not be answered**\n\nFares: no table holds ticket prices." in text
    assert not [b for b in part.blocks if b.get("block_id") == blocks.RESUME_REPORT]


async def test_a_report_a_restarted_server_goes_on_with_is_posted_in_its_thread(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """One server on SQLite (no durable runs): the report it was writing when it stopped goes on after its
    restart from the report's own record, and lands in the thread it was asked in."""
    bot = await start_bot(chart_render_timeout_s=120)
    hang = Hang()
    first, *rest = report_script()
    fake_anthropic.script(first, hang)
    ts = fake_slack.add_message(GENERAL_ID, f"<@{BOT_USER_ID}> report: why did delays rise in July?")
    assert (await bot.event(events.app_mention("report: why did delays rise in July?", ts=ts))).status_code == 200
    reports = bot.service.state.reports
    for _ in range(600):
        [running] = await reports.running() or [None]
        if running is not None and (saved := await reports.checkpoint(running.id)) is not None and saved.rounds:
            break
        await asyncio.sleep(0.05)
    assert running is not None and running.delivery["question"]["thread_ts"] == ts

    fake_anthropic.reset()
    fake_anthropic.script(*rest)
    await bot.restart()  # the first server stops mid-report (it stays running); the next goes on with it
    hang.release.set()
    await bot.idle()
    stored = await bot.service.state.reports.get(running.id)
    assert stored is not None and stored.state == "complete"
    assert shown_text(fake_slack, ts).count("**Report:** why did delays rise in July?") == 1
    files = [f["name"] for m in bot_replies(fake_slack, GENERAL_ID, ts) for f in m.get("files") or []]
    assert any(name.endswith(".pdf") for name in files), "its files attached too"


async def test_a_report_past_the_running_cap_is_refused_in_words_before_any_model_call(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    """AGENT_REPORT_MAX_RUNNING (1 by default): with one report of this channel being written, another asked
    here is answered with why, and nothing runs. (In a channel a report is the channel's: the cap counts there.)"""
    from agent.reports.model import ReportRequest
    from chats.people import channel_owner

    bot = await start_bot()
    await bot.service.state.reports.begin(
        "b" * 32, run_id="b" * 32, owner=channel_owner(TEAM_ID, GENERAL_ID), interface="slack",
        question="the first report", request=ReportRequest(),
    )  # fmt: skip
    thread = await ask_report(bot, fake_slack, "report: why did delays rise in July?")
    assert fake_anthropic.requests == []
    assert "being written already" in shown_text(fake_slack, thread), thread_dump(fake_slack, thread)
