"""A checkpoint's stored form (agent/checkpoint_form.py): each result once, written in parts, read back exactly,
whatever the loop did to its messages between two checkpoints (a wrap-up note added to the last one, an old
result trimmed to save context)."""

from __future__ import annotations

import json

import pytest

from agent.checkpoint_form import CheckpointPart, fold, part_between
from agent.db.result import QueryResult, format_for_model
from agent.pipeline.context import append_text, trim_tool_results, user_text
from agent.runner import Checkpoint, ExecutedQuery

CAP = 10_000


def query(n: int, reused_from: str | None = None) -> ExecutedQuery:
    month = int(reused_from[1:]) if reused_from else n
    rows = [[f"2013-{month:02d}-{day:02d}", f"N{month}{day:03d}", str(day * 17)] for day in range(1, 101)]
    result = QueryResult(
        query_id=f"x{month}", sql="SELECT ...", columns=["day", "tailnum", "n"], types=["Date", "String", "UInt64"],
        rows=rows, elapsed_ms=3,
    )  # fmt: skip
    question = f"Month {month}"
    return ExecutedQuery(id=f"Q{n}", question=question, sql="SELECT ...", result=result, reused_from=reused_from)


def tool_round(n: int, queries: list[ExecutedQuery]) -> list[dict]:
    """One round's call and the results the model was sent, as agent/pipeline/tools.py words them."""
    note = "(the same SQL as before)\n"
    text = "\n\n".join(
        f"{q.id}: {q.question}\n{note if q.reused_from else ''}{format_for_model(q.result, CAP)}" for q in queries
    )
    call = {"type": "tool_use", "id": f"t{n}", "name": "execute_sql", "input": {}}
    return [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": text}]},
    ]


def checkpoint(rounds: int, messages: list[dict], queries: list[ExecutedQuery]) -> Checkpoint:
    return Checkpoint(
        question="Flights by month?", rounds=rounds, messages=messages, queries=queries, thinking=["t"] * rounds,
        query_ids_taken=len(queries), result_chars=CAP,
    )  # fmt: skip


def test_a_checkpoint_reads_back_exactly_and_holds_each_result_once() -> None:
    queries = [query(1), query(2), query(3, reused_from="Q1")]
    messages = [user_text("Flights by month?"), *tool_round(1, queries[:2]), *tool_round(2, queries[2:])]
    saved = checkpoint(2, messages, queries)
    stored = saved.model_dump_json()
    assert Checkpoint.model_validate_json(stored) == saved
    assert "| 2013-01-01 | N1001 | 17 |" not in stored  # the model's text of it: rendered again on reading
    assert stored.count('["2013-01-01","N1001","17"]') == 1  # Q3 reused Q1's result: no copy of it either
    assert len(stored) < 0.6 * len(json.dumps(saved.messages)) + len(json.dumps([q.model_dump() for q in queries]))


def test_a_result_the_model_was_sent_trimmed_is_kept_as_it_was_sent() -> None:
    queries = [query(1)]
    messages = [user_text("q"), *tool_round(1, queries)]
    trim_tool_results([*messages, user_text("next")], budget_tokens=1_000, fixed_tokens=0)
    assert "characters trimmed" in messages[-1]["content"][0]["content"]
    saved = checkpoint(1, messages, queries)
    assert Checkpoint.model_validate_json(saved.model_dump_json()) == saved


def test_parts_fold_back_to_every_checkpoint_whatever_changed_between_them() -> None:
    queries: list[ExecutedQuery] = []
    messages = [user_text("Flights by month?")]
    written: dict | None = None
    parts: list[CheckpointPart] = []
    lengths: list[int] = []  # of the messages, at each checkpoint
    for rounds in range(1, 9):
        if rounds == 6:
            append_text(messages[-1], "Wrap up: one more round.")  # the last message changes in place
        if rounds == 7:
            assert trim_tool_results([*messages, user_text("next")], budget_tokens=5_000, fixed_tokens=0) == 6
        queries.append(query(rounds))
        messages += tool_round(rounds, queries[-1:])
        saved = checkpoint(rounds, messages, queries).model_copy(deep=True)
        form = saved.model_dump(mode="json")
        parts.append(CheckpointPart.model_validate_json(part_between(written, form).model_dump_json()))
        written = form
        lengths.append(len(messages))
        assert Checkpoint.of_parts(parts) == saved
    whole = len(saved.model_dump_json())
    assert sum(len(part.model_dump_json()) for part in parts) <= 1.5 * whole
    assert parts[5].lists["messages"].keep == lengths[4] - 1  # round 6 rewrote round 5's last message, no more


def test_parts_missing_one_are_refused_not_read_wrong() -> None:
    one = checkpoint(1, [user_text("q"), *tool_round(1, [query(1)])], [query(1)]).model_dump(mode="json")
    two = checkpoint(2, [user_text("q"), *tool_round(1, [query(1)]), *tool_round(2, [query(2)])], [query(1), query(2)])
    later = part_between(one, two.model_dump(mode="json"))
    with pytest.raises(ValueError, match="keeps"):
        fold([later])
    assert fold([]) is None


def test_a_reference_to_a_result_the_checkpoint_does_not_hold_is_refused() -> None:
    stored = checkpoint(1, [user_text("q"), *tool_round(1, [query(1)])], [query(1)]).model_dump(mode="json")
    stored["queries"] = []
    with pytest.raises(ValueError, match="does not hold"):
        Checkpoint.model_validate(stored)


@pytest.mark.parametrize("field", ["id", "reused_from"])
def test_a_query_id_that_is_not_a_name_is_refused_not_a_type_error(field: str) -> None:
    """A torn or tampered stored form whose query id (or `reused_from`) is a list is refused as any form this
    release cannot read (a ValueError a store turns into "not resumed"), never a TypeError out of the read."""
    stored = checkpoint(1, [user_text("q"), *tool_round(1, [query(1)])], [query(1)]).model_dump(mode="json")
    stored["queries"] = [{**stored["queries"][0], field: ["Q1"], "result": None}]
    with pytest.raises(ValueError):
        Checkpoint.model_validate(stored)
