"""The chunks of chat.startStream / appendStream / stopStream, checked as Slack checks them (`invalid_chunks`),
and the plan they build.

"The chunks parameter can include markdown text chunk objects, task update chunk objects, plan update chunks,
or blocks chunks" (https://docs.slack.dev/reference/methods/chat.appendStream); their fields as
slack_sdk.models.messages.chunk and @slack/types' chunk.ts define them
(https://docs.slack.dev/tools/node-slack-sdk/reference/types/interfaces/TaskUpdateChunk).
"""

from __future__ import annotations

from typing import Any

from tests.fakes.slack_rules import (
    MAX_MARKDOWN_TEXT_CHARS,
    TASK_STATUSES,
    SlackError,
    check_blocks,
    sources_problems,
)

# chat.startStream task_display_mode: "Default: timeline. Acceptable values: timeline plan"
# (https://docs.slack.dev/reference/methods/chat.startStream).
DISPLAY_MODES = ("timeline", "plan")


def check_display_mode(value: Any) -> str:
    if value is None:
        return "timeline"
    if value not in DISPLAY_MODES:
        raise SlackError(
            "invalid_arguments", f"must be one of {', '.join(DISPLAY_MODES)} [json-pointer:/task_display_mode]"
        )
    return str(value)


def check_chunks(value: Any) -> list[dict[str, Any]] | None:
    """`value` as `json_arg` decoded it (a form body's JSON string, or a JSON body's value)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise SlackError("invalid_chunks")
    for index, chunk in enumerate(value):
        problem = _chunk_problem(chunk, f"/chunks/{index}")
        if problem:
            raise SlackError("invalid_chunks", f"{problem} [json-pointer:/chunks/{index}]")
        if chunk["type"] == "blocks":
            check_blocks(chunk["blocks"], where=f"/chunks/{index}/blocks", too_many="msg_blocks_too_many")
    return value


def _chunk_problem(chunk: Any, path: str) -> str | None:
    if not isinstance(chunk, dict):
        return "expected object"
    kind = chunk.get("type")
    if kind == "markdown_text":
        text = chunk.get("text")
        if not isinstance(text, str):
            return "missing required field: text"
        too_long = len(text) > MAX_MARKDOWN_TEXT_CHARS
        return f"must be less than {MAX_MARKDOWN_TEXT_CHARS + 1} characters" if too_long else None
    if kind == "plan_update":
        return None if _text(chunk.get("title")) else "missing required field: title"
    if kind == "task_update":
        return _task_problem(chunk, path)
    if kind == "blocks":
        return None if isinstance(chunk.get("blocks"), list) else "missing required field: blocks"
    return f"unsupported chunk type: {kind}"


def _task_problem(chunk: dict[str, Any], path: str) -> str | None:
    for name in ("id", "title"):
        if not _text(chunk.get(name)):
            return f"missing required field: {name}"
    if chunk.get("status") not in TASK_STATUSES:
        return "status must be one of " + ", ".join(TASK_STATUSES)
    for name in ("details", "output"):
        if chunk.get(name) is not None and not isinstance(chunk[name], str):
            return f"{name} must be a string"
    problems = sources_problems(chunk.get("sources"), f"{path}/sources")
    return problems[0].rsplit(" [", 1)[0] if problems else None


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def streaming_mode(markdown: str | None, chunks: list[dict[str, Any]] | None) -> str | None:
    """How a call carries its content: `markdown_text`, `chunks`, or None (no content)."""
    if chunks:
        return "chunks"
    return "markdown_text" if markdown else None


def check_same_mode(started: str | None, now: str | None) -> None:
    """ "If you started the stream with `markdown_text`, you must append with `markdown_text`. If you started
    the stream with `chunks`, you must append with `chunks`" (streaming_mode_mismatch,
    https://docs.slack.dev/reference/methods/chat.stopStream)."""
    if started and now and started != now:
        raise SlackError("streaming_mode_mismatch")


def chunk_text(chunks: list[dict[str, Any]] | None) -> str:
    return "".join(chunk["text"] for chunk in chunks or [] if chunk["type"] == "markdown_text")


def plan_block(title: str, tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The plan a stream's task updates add up to (the latest update of each task, in first-seen order),
    as a plan block of task cards: how the fake stores a `plan` display mode stream's tasks."""
    cards = []
    for task in tasks.values():
        card = {"type": "task_card", "task_id": task["id"], "title": task["title"], "status": task["status"]}
        for name in ("details", "output"):
            if task.get(name):
                card[name] = _rich_text(task[name])
        if task.get("sources"):
            card["sources"] = task["sources"]
        cards.append(card)
    return {"type": "plan", "title": title, "tasks": cards}


def _rich_text(text: str) -> dict[str, Any]:
    section = {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
    return {"type": "rich_text", "elements": [section]}
