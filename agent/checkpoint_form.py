"""A checkpoint's stored form (agent/runner.py `Checkpoint`): each query result once, written in parts.

A run checkpoints after every round, and a checkpoint holds everything the run gathered so far. Stored
whole each round, a run of n rounds would write its results n²/2 times over; and each result is in it
twice, as the model was sent it (a tool result's text, agent/db/result.py `format_for_model`) and as the
result itself (its `queries`: the answer's tables, charts and figure checks need the rows). So:

- The text is a function of the result: the stored form keeps a reference where a result's text was,
  and reading it back renders that text again. A reference replaces only characters that rendering gives
  back exactly (a result trimmed to save context stays as it is), so the round trip is exact by
  construction. A query that reused another's identical SQL keeps no copy of its result either.
- A store writes each checkpoint as a `CheckpointPart`: its counters (a few hundred bytes) and, of each
  list (messages, queries, charts, thinking), how many items of the checkpoint before it stay and the
  items after them. A round appends; trimming an old result or adding to the last message rewrites from
  that message on. `fold` puts the parts back together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

LISTS = ("messages", "queries", "charts", "thinking")  # the parts of a checkpoint that grow round by round
PIECES = "$pieces"  # a tool result's content stored as its text's pieces: strings and {RESULT: query id}
RESULT = "$result"
MIN_CHARS = 200  # a result's text shorter than this is kept as it is (a reference would save little)


class ListPart(BaseModel):
    keep: int  # the items of the checkpoint before that stay
    items: list[Any]  # the items after them


class CheckpointPart(BaseModel):
    """What one checkpoint adds to the one before it (the first: all of it), as a store appends it."""

    header: dict[str, Any]  # every field but the lists: the counters, the question, the policy
    lists: dict[str, ListPart]

    @property
    def rounds(self) -> int:
        return int(self.header.get("rounds", 0))


def part_between(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> CheckpointPart:
    """The part that turns the stored form `before` (None: nothing yet) into `after`."""
    lists = {}
    for name in LISTS:
        old, new = (before or {}).get(name, []), after.get(name, [])
        keep = 0
        while keep < min(len(old), len(new)) and old[keep] == new[keep]:
            keep += 1
        lists[name] = ListPart(keep=keep, items=new[keep:])
    return CheckpointPart(header={k: v for k, v in after.items() if k not in LISTS}, lists=lists)


def fold(parts: Iterable[CheckpointPart]) -> dict[str, Any] | None:
    """The stored form the parts make, in the order they were written; None for no parts. ValueError when
    a part keeps more than the ones before it hold (a part is missing)."""
    form: dict[str, Any] | None = None
    for part in parts:
        lists = {name: (form or {}).get(name, []) for name in LISTS}
        for name, change in part.lists.items():
            if name not in lists or change.keep > len(lists[name]):
                raise ValueError(f"a checkpoint part keeps {change.keep} {name} of {len(lists.get(name, []))}")
            lists[name] = lists[name][: change.keep] + change.items
        form = {**part.header, **lists}
    return form


def with_references(messages: list[dict[str, Any]], texts: Mapping[str, str]) -> list[dict[str, Any]]:
    """`messages` with each query's result text (`texts`, by query id) replaced by a reference wherever the
    tool results hold it exactly. Messages without one are the very same objects."""
    texts = {qid: text for qid, text in texts.items() if len(text) >= MIN_CHARS}
    if not texts:
        return messages
    return [_message_with_references(message, texts) for message in messages]


def has_references(messages: list[dict[str, Any]]) -> bool:
    return any(
        _has_pieces(block)
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )


def without_references(messages: list[dict[str, Any]], texts: Mapping[str, str]) -> list[dict[str, Any]]:
    """`messages` with every reference rendered back (`texts`: each query's result text, by id). ValueError
    for a reference to a query the checkpoint does not hold."""
    return [_message_without_references(message, texts) for message in messages]


def _message_with_references(message: dict[str, Any], texts: Mapping[str, str]) -> dict[str, Any]:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return message
    blocks = [_block_with_references(block, texts) for block in content]
    if all(new is old for new, old in zip(blocks, content, strict=True)):
        return message
    return {**message, "content": blocks}


def _block_with_references(block: Any, texts: Mapping[str, str]) -> Any:
    if not isinstance(block, dict) or block.get("type") != "tool_result" or not isinstance(block.get("content"), str):
        return block
    text: str = block["content"]
    pieces: list[Any] = []
    at = 0
    for query_id, rendered in texts.items():
        label = text.find(f"{query_id}: ", at)  # each result follows its query's id (agent/pipeline/tools.py)
        found = -1 if label < 0 else text.find(rendered, label)
        if found < 0:
            continue
        pieces += [text[at:found], {RESULT: query_id}]
        at = found + len(rendered)
    if not pieces:
        return block
    pieces.append(text[at:])
    return {**block, "content": {PIECES: [piece for piece in pieces if piece != ""]}}


def _message_without_references(message: dict[str, Any], texts: Mapping[str, str]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list) or not any(_has_pieces(block) for block in content):
        return message
    return {**message, "content": [_block_without_references(block, texts) for block in content]}


def _has_pieces(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("content"), dict) and PIECES in block["content"]


def _block_without_references(block: Any, texts: Mapping[str, str]) -> Any:
    if not _has_pieces(block):
        return block
    text = []
    for piece in block["content"][PIECES]:
        if isinstance(piece, str):
            text.append(piece)
        elif isinstance(piece, dict) and isinstance(piece.get(RESULT), str) and piece[RESULT] in texts:
            text.append(texts[piece[RESULT]])
        else:
            raise ValueError(f"a checkpoint's tool result refers to a result it does not hold: {piece!r}")
    return {**block, "content": "".join(text)}


def reused_once(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored queries (JSON form) with a reused query's result left out where it is its original's."""
    by_id = {query["id"]: query for query in queries}
    return [
        {**query, "result": None}
        if (original := by_id.get(query.get("reused_from") or "")) is not None
        and original.get("result") == query.get("result")
        else query
        for query in queries
    ]


def reused_restored(queries: list[Any]) -> list[Any]:
    """`reused_once` undone: a reused query without a result gets its original's. Ids that are not strings
    (a torn or tampered form) name nothing: validation then refuses the form, never a TypeError here."""
    by_id = {query["id"]: query for query in queries if isinstance(query, dict) and isinstance(query.get("id"), str)}
    return [
        {**query, "result": by_id[query["reused_from"]].get("result")}
        if isinstance(query, dict)
        and query.get("result") is None
        and isinstance(query.get("reused_from"), str)
        and query["reused_from"] in by_id
        else query
        for query in queries
    ]
