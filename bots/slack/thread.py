"""A thread's history, indexed by the thread itself, so a restart loses nothing.

Each answer the bot posts carries message metadata (event type `analyst_answer`): its run id and
part number and, on its last part, the question and every query's id, question and SQL. Reading
the thread back (`conversations.replies` with metadata) names the earlier turns and their run ids;
the caller reads each turn whole from the conversation store by that id, and falls back to what the
thread shows (Slack may translate an answer's markdown block into other blocks on storage, and a
posted answer's `text` is only a preview). Only this bot's own messages are believed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent.runner import Turn, TurnQuery

ANSWER_EVENT = "analyst_answer"
MAX_QUESTION_CHARS = 1_000
MAX_QUERY_QUESTION_CHARS = 200
MAX_PAYLOAD_CHARS = 7_000  # metadata is for small facts; the whole SQL stays in the store (Show SQL)
MIN_SQL_CHARS = 200  # with very many queries the budget is exceeded rather than the SQL lost
MAX_PAGES = 10


def part_metadata(run_id: str, part: int) -> dict[str, Any]:
    """The metadata of one message of a split answer, before its last."""
    return {"event_type": ANSWER_EVENT, "event_payload": {"run_id": run_id, "part": part}}


def answer_metadata(
    run_id: str, part: int, *, question: str, asked_ts: str, queries: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The metadata of an answer's last message (`asked_ts`: the question's message). SQL is shortened
    to fit the payload budget."""
    shown = [{"id": q["id"], "question": q["question"][:MAX_QUERY_QUESTION_CHARS], "sql": ""} for q in queries]
    payload = {
        "run_id": run_id,
        "part": part,
        "final": True,
        "question": question[:MAX_QUESTION_CHARS],
        "asked_ts": asked_ts,
    }
    fixed = len(json.dumps({**payload, "queries": shown}))
    budget = max(MIN_SQL_CHARS, (MAX_PAYLOAD_CHARS - fixed) // max(1, len(shown)))
    for query, source in zip(shown, queries, strict=True):
        sql = source["sql"]
        query["sql"] = sql if len(sql) <= budget else sql[: budget - 1] + "…"
    return {"event_type": ANSWER_EVENT, "event_payload": {**payload, "queries": shown}}


async def read_history(
    client: AsyncWebClient, channel: str, thread_ts: str, *, before_ts: str, bot_id: str
) -> list[tuple[str, Turn]]:
    """The turns of this thread asked before the message at `before_ts` (and answered by now), each with
    its run id, as the thread shows them."""
    messages: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.conversations_replies(
            channel=channel, ts=thread_ts, include_all_metadata=True, limit=200, cursor=cursor
        )
        messages += page.get("messages") or []
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page.get("has_more") or not cursor:
            break
    return thread_turns(messages, bot_id=bot_id, before_ts=before_ts)


def turns(messages: list[dict[str, Any]], *, bot_id: str, before_ts: str) -> list[Turn]:
    return [turn for _, turn in thread_turns(messages, bot_id=bot_id, before_ts=before_ts)]


def thread_turns(messages: list[dict[str, Any]], *, bot_id: str, before_ts: str) -> list[tuple[str, Turn]]:
    """An answer belongs to the history of every message sent after its question, even one sent while
    it was being written (the thread's messages are answered one at a time, so it is finished)."""
    parts: dict[str, list[tuple[int, str]]] = {}
    finals: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for message in messages:
        if message.get("bot_id") != bot_id:
            continue
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        run_id = payload.get("run_id")
        if metadata.get("event_type") != ANSWER_EVENT or not isinstance(run_id, str):
            continue
        parts.setdefault(run_id, []).append((int(payload.get("part") or 0), message_text(message)))
        if payload.get("final"):
            asked = payload.get("asked_ts")  # answers posted before it was recorded: their own ts
            finals[run_id] = (ts_key(asked if isinstance(asked, str) else message.get("ts", "0")), payload)
    history = []
    for run_id, (asked_at, payload) in sorted(finals.items(), key=lambda item: item[1][0]):
        if asked_at >= ts_key(before_ts):
            continue
        answer = "".join(text for _, text in sorted(parts[run_id]))
        queries = [
            TurnQuery(id=str(q.get("id", "")), question=str(q.get("question", "")), sql=str(q.get("sql", "")))
            for q in payload.get("queries") or []
            if isinstance(q, dict)
        ]
        history.append((run_id, Turn(question=str(payload.get("question") or ""), answer=answer, queries=queries)))
    return history


def message_text(message: dict[str, Any]) -> str:
    """What a message says: its markdown blocks (a posted answer), else the rich text Slack translated
    them into, else its text (a streamed answer; a posted one's is a preview)."""
    blocks = message.get("blocks") or []
    markdown = [b["text"] for b in blocks if b.get("type") == "markdown" and "text" in b]
    if markdown:
        return "".join(markdown)
    rich = [_rich_text(b) for b in blocks if b.get("type") == "rich_text"]
    text = str(message.get("text") or "")
    translated = "\n\n".join(rich)
    # The longer of the two: a posted answer's text is a preview, a streamed one's is the whole Markdown.
    return translated if len(translated) > len(text) else text


def _rich_text(block: dict[str, Any]) -> str:
    """The characters of a rich_text block (styles are lost: the store keeps the answer's Markdown)."""
    pieces = []
    for element in block.get("elements") or []:
        inner = element.get("elements") or []
        if element.get("type") == "rich_text_list":
            pieces.append("\n".join("- " + _rich_text({"elements": [item]}) for item in inner))
        else:
            pieces.append("".join(str(e.get("text") or e.get("url") or "") for e in inner))
    return "\n".join(pieces)


def ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    try:
        return int(seconds), int(micros.ljust(6, "0")[:6] or 0)
    except ValueError:
        return 0, 0


def ts_micros(ts: str) -> int:
    """A message's ts as one whole number of microseconds: it orders messages exactly."""
    seconds, micros = ts_key(ts)
    return seconds * 1_000_000 + micros
