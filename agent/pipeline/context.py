"""What goes into the model's context: earlier turns, trimmed tool results, cache breakpoints.

- History: the most recent turns keep their whole transcript (so their bytes, and the prompt
  cache, match the previous request); older turns keep the question, the final answer and a
  compact list of the SQL that ran. Caps on turns and characters drop the oldest first.
- Within a run, near the context limit, old tool results are cut to head and tail, then replaced
  by a placeholder. The newest result and the model's own text are never touched.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from agent.runner import Turn

Message = dict[str, Any]
CHARS_PER_TOKEN = 4  # a deliberately cautious estimate for English and SQL
TRIM_AT = 0.70  # share of the context window at which old results are cut to head and tail
DROP_AT = 0.85  # ... and at which they are replaced by a placeholder
HEAD_CHARS, TAIL_CHARS = 1_200, 400
PLACEHOLDER = "[Result removed to save context. Re-run the query if you need it again.]"
EPHEMERAL = {"type": "ephemeral"}


def user_text(text: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(content: list[dict[str, Any]]) -> Message:
    return {"role": "assistant", "content": content}


def append_text(message: Message, text: str) -> None:
    """Add a text block to a user message (after any tool results, as the API requires)."""
    message["content"].append({"type": "text", "text": text})


def history_messages(turns: Sequence[Turn], *, max_turns: int, full_turns: int, max_chars: int) -> list[Message]:
    """Messages for earlier turns, oldest first, within the turn and character caps."""
    kept = list(turns)[-max_turns:] if max_turns else []
    blocks: list[list[Message]] = []
    for index, turn in enumerate(kept):
        recent = index >= len(kept) - full_turns
        blocks.append(copy.deepcopy(turn.transcript) if recent and turn.transcript else _compact_turn(turn))
    while blocks and sum(_chars(m) for block in blocks for m in block) > max_chars:
        blocks.pop(0)
    return [message for block in blocks for message in block]


def _compact_turn(turn: Turn) -> list[Message]:
    answer = turn.answer or "(no answer)"
    if turn.queries:
        sql = "\n".join(f"- {q.id} ({q.question}): {' '.join(q.sql.split())[:300]}" for q in turn.queries)
        answer = f"{answer}\n\n[SQL run for this answer:\n{sql}]"
    return [user_text(turn.question), assistant([{"type": "text", "text": answer}])]


def _chars(message: Message) -> int:
    return len(json.dumps(message["content"], ensure_ascii=False))


def estimate_tokens(system: list[dict[str, Any]], tools: list[dict[str, Any]], messages: list[Message]) -> int:
    chars = sum(len(block["text"]) for block in system) + len(json.dumps(tools)) + sum(map(_chars, messages))
    return chars // CHARS_PER_TOKEN


def trim_tool_results(messages: list[Message], budget_tokens: int, fixed_tokens: int, *, force: bool = False) -> int:
    """Shrink old tool results in place when near the budget; returns how many were touched.

    `force` (after a context-overflow error) replaces every old result with the placeholder.
    """
    results = [
        block
        for message in messages[:-1]
        if message["role"] == "user"
        for block in message["content"]
        if block["type"] == "tool_result" and isinstance(block.get("content"), str)
    ]
    touched = 0

    def used() -> int:
        return fixed_tokens + sum(map(_chars, messages)) // CHARS_PER_TOKEN

    if force or used() > budget_tokens * TRIM_AT:
        for block in results:
            text = block["content"]
            if len(text) > HEAD_CHARS + TAIL_CHARS + 100 and not force:
                cut = len(text) - HEAD_CHARS - TAIL_CHARS
                block["content"] = f"{text[:HEAD_CHARS]}\n…[{cut} characters trimmed]…\n{text[-TAIL_CHARS:]}"
                touched += 1
    if force or used() > budget_tokens * DROP_AT:
        for block in results:
            if block["content"] != PLACEHOLDER:
                block["content"] = PLACEHOLDER
                touched += 1
    return touched


def with_rolling_breakpoint(messages: list[Message]) -> list[Message]:
    """A copy with one cache breakpoint on the last block of the last message, so the next round
    reads everything up to here from the cache. Stored messages are never marked."""
    if not messages:
        return messages
    marked = [*messages[:-1], copy.deepcopy(messages[-1])]
    marked[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return marked
