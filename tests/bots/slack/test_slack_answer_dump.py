"""What a finished answer looks like in Slack, as text: the blocks the fake received for it (the plan from
the stream's task updates, the answer's Markdown, the buttons and Slack's feedback buttons), rendered to
docs/screenshots/slack-answer.txt beside the web's screenshots. The test fails when the rendering changes
and the file was not updated: `UPDATE_SNAPSHOTS=1` writes it anew."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import GENERAL_ID, FakeSlack
from tests.slack_helpers import answer_message, bot_replies, carriers_script

DUMP = Path(__file__).parents[3] / "docs" / "screenshots" / "slack-answer.txt"
WEB = "https://analyst.example"


def render(fake: FakeSlack, question: str) -> str:
    progress, *_ = bot_replies(fake, GENERAL_ID, question)
    answer = answer_message(fake, GENERAL_ID, question)
    stream = fake.stream(GENERAL_ID, answer["ts"])
    assert stream is not None, "the answer was streamed"
    [stopped] = [c.args for c in fake.calls("chat.stopStream") if c.args["ts"] == answer["ts"]]
    lines = [f"progress message: {progress['text']}", "", "answer message:"]
    lines += _plan(stream.plan_title, list(stream.tasks.values()))
    lines += ["  markdown:", *(f"    {line}" for line in answer["text"].splitlines())]
    for block in stopped.get("blocks") or []:
        lines += _block(block)
    run_id = answer["metadata"]["event_payload"]["run_id"]
    text = "\n".join(lines).replace(run_id, "<run>")
    return re.sub(r"\b\d+(\.\d+)? s(?![a-z])", "<n> s", text) + "\n"


def _plan(title: str, tasks: list[dict[str, Any]]) -> list[str]:
    lines = [f"  plan: {title}"]
    for task in tasks:
        lines.append(f"    [{task['status']}] {task['title']}")
        lines += [f"      {name}: {task[name]}" for name in ("output", "details") if task.get(name)]
        lines += [f"      source: {s['text']} <{s['url']}>" for s in task.get("sources") or []]
    return lines


def _block(block: dict[str, Any]) -> list[str]:
    head = f"  {block['type']} ({block.get('block_id', '')}):"
    elements = block.get("elements") or []
    if block["type"] == "context":
        return [head, *(f"    {e['text']}" for e in elements)]
    if block["type"] == "actions":
        shown = [f"[{e['text']['text']}{' -> ' + e['url'] if e.get('url') else ''}]" for e in elements]
        return [head, f"    {'  '.join(shown)}"]
    if block["type"] == "context_actions":
        return [head, *(_feedback(e) for e in elements)]
    return [head, f"    {block}"]


def _feedback(element: dict[str, Any]) -> str:
    yes, no = element["positive_button"], element["negative_button"]
    return f"    {element['type']}: {yes['text']['text']} {yes['value']} / {no['text']['text']} {no['value']}"


async def test_a_finished_answer_renders_as_the_committed_dump(
    start_bot, fake_slack: FakeSlack, fake_anthropic: FakeAnthropic
) -> None:
    bot = await start_bot(agent_web_url=WEB)
    fake_anthropic.script(*carriers_script())
    question = await bot.ask("which carrier flew the most?")
    rendered = render(fake_slack, question)
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        DUMP.write_text(rendered, encoding="utf-8")
    assert DUMP.exists(), f"no {DUMP.name}: run with UPDATE_SNAPSHOTS=1 to write it"
    assert rendered == DUMP.read_text(encoding="utf-8"), (
        f"the answer renders differently: UPDATE_SNAPSHOTS=1 rewrites {DUMP}"
    )
