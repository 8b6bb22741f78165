"""The team's knowledge in Slack: a thumbs-up proposes the answer's query and the review writes it into the
knowledge files; an answer that cites an entry shows it underneath."""

from __future__ import annotations

from pathlib import Path

from agent.db import Database
from agent.knowledge import load_directory
from agent.runner import RunResult
from process.review import Reviewer, review
from tests.fakes import slack_events as events
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.slack_helpers import answer_message, carriers_script


async def test_a_thumbs_up_in_slack_ends_in_the_knowledge_file(
    start_bot, fake_slack: FakeSlack, fake_anthropic, db: Database, tmp_path: Path
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    await bot.click(events.feedback_click(answer, "positive", thread_ts=question))
    await bot.idle()
    assert bot.service is not None
    proposals = bot.service.state.proposals
    [proposal] = await proposals.pending()
    assert proposal.kind == "up" and proposal.question == "which carrier flew the most?"
    replies = iter(["yes"])
    reviewer = Reviewer("ana", ask=lambda _: next(replies), say=lambda _: None)
    knowledge = tmp_path / "knowledge"
    done = await review(proposals, db, reviewer, knowledge_dir=knowledge, suite=tmp_path / "s.yaml", dataset="demo")
    assert done.verified == 1 and await proposals.pending() == []
    [entry] = load_directory(knowledge)
    assert entry.kind == "verified_queries" and entry.fields["question"] == "which carrier flew the most?"
    assert entry.fields["sql"] == (await db.check(proposal.queries[0].sql)).sql  # ClickHouse's canonical text
    assert entry.fields["verified_by"] == "ana"


async def test_the_knowledge_an_answer_cites_is_shown_under_it(
    start_bot, fake_slack: FakeSlack, fake_anthropic
) -> None:
    bot = await start_bot()
    fake_anthropic.script(
        *carriers_script("HA flew the fewest flights, 342 [Q1], and was on time most often [metric: on-time rate].")
    )
    question = await bot.ask("which carrier was most punctual?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    [cited] = [b for b in answer["blocks"] if b.get("block_id") == "analyst_knowledge"]
    [text] = [element["text"] for element in cited["elements"]]
    assert text.startswith("*[metric: on-time rate]* on-time rate: Share of flights that arrived less than 15")
    assert text.endswith("(`metrics.yaml:2`)")


async def test_a_thumbs_down_asks_what_was_wrong_and_the_reason_reaches_the_review(
    start_bot, fake_slack: FakeSlack, fake_anthropic, tmp_path: Path
) -> None:
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    await bot.click(events.feedback_click(answer, "negative", thread_ts=question))
    await bot.idle()
    asked = fake_slack.ephemeral[-1]
    assert asked["text"] == "Thanks, noted." and asked["blocks"][1]["type"] == "input"
    box = asked["blocks"][1]
    reason = "It counted seats, not flights."
    await bot.click(
        events.block_actions(
            box["element"]["action_id"], reason, message_ts=answer["ts"], thread_ts=question, block_id=box["block_id"]
        )
    )
    await bot.idle()
    assert fake_slack.ephemeral[-1]["text"] == "Thanks, I will pass it on."
    assert bot.service is not None
    [proposal] = await bot.service.state.proposals.pending()
    assert proposal.kind == "down" and proposal.reason == reason


async def test_a_slack_thumb_naming_a_web_run_thumbs_nothing(start_bot, fake_slack: FakeSlack, fake_anthropic) -> None:
    """A button's value names the run it thumbs; the bot thumbs only Slack's runs, as the web only the web's."""
    bot = await start_bot()
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    answer = answer_message(fake_slack, GENERAL_ID, question)
    assert bot.service is not None
    store = bot.service.store
    web_run = "a" * 32
    conversation = await store.create_conversation("asked on the web", interface="web")
    await store.save_turn(conversation, web_run, RunResult(question="asked on the web", answer="Sixteen."), [])
    click = events.feedback_click(answer, "positive", thread_ts=question)
    value, _, slack_run = click["actions"][0]["value"].partition(":")
    click["actions"][0]["value"] = f"{value}:{web_run}"
    await bot.click(click)
    await bot.idle()
    [web_turn] = (await store.get_conversation(conversation))["turns"]  # type: ignore[index]
    assert web_turn["feedback"] is None and await bot.service.state.proposals.pending() == []
    assert slack_run != web_run and await store.record_feedback(slack_run, "up", interface="slack")
