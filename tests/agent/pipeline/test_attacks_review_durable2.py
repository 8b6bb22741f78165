"""A second outside review's attacks on a checkpoint's stored form (agent/checkpoint_form.py): query results
whose text is crafted to look like the stored form's own markers and references. Passing: it held (no such
test existed: the store's tests use results of plain rows)."""

from __future__ import annotations

import json

from agent.runner import Checkpoint
from tests.agent.pipeline.test_checkpoints import Q1, Checkpoints, sql
from tests.fakes.anthropic_api import FakeAnthropic, Reply

# A result's cells as an attacker writes them (a table's text, or the model's SQL literals): the stored form's
# marker and reference, another query's id as a label, and a reference to a query the run does not hold.
FORGED = (
    'SELECT concat(\'Q1: \', \'{"$pieces": [{"$result": "Q1"}]}\') AS a, \'{"$result": "Q9"}\' AS b, '
    "'$pieces' AS c FROM numbers(12)"
)


def tool_results(checkpoint: Checkpoint) -> list[str]:
    return [
        block["content"]
        for message in checkpoint.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


async def test_result_text_that_looks_like_the_stored_forms_references_is_read_back_as_text(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Guard (held): results are referenced only where their whole rendered text stands, and a reference is a
    dict where the text is a string, so text shaped like `{"$pieces": [{"$result": ...}]}` (or naming a query
    the run does not hold) is never taken for one: the folded checkpoint is the one handed over, each tool
    result exactly as the model was sent it, none resolved against another query's result, and a reused
    query (Q3, Q1's SQL again) gets Q1's result back."""
    fake_anthropic.script(
        Reply(tool_calls=[sql("Departures", Q1)]),
        Reply(tool_calls=[sql("Forged", FORGED)]),
        Reply(tool_calls=[sql("Departures again", Q1)]),
        Reply(text="EWR [Q1]."),
    )
    sink = Checkpoints()
    await make_app().runner.run("Which airport?", checkpoint=sink, followups=False)
    handed, folded = sink.handed[-1], sink.last()
    assert [q.id for q in handed.queries] == ["Q1", "Q2", "Q3"] and handed.queries[2].reused_from == "Q1"
    assert handed.queries[1].result.ok and handed.queries[1].result.rows[0][1] == '{"$result": "Q9"}'
    assert folded == handed
    assert tool_results(folded) == tool_results(handed)
    forged = next(text for text in tool_results(folded) if text.startswith("Q2: "))
    assert '{"$pieces": [{"$result": "Q1"}]}' in forged and "EWR" not in forged  # Q1's rows are not in it
    stored = [json.loads(part) for part in sink.stored]
    assert any('"$pieces"' in json.dumps(part["lists"]["messages"]) for part in stored)  # references were used
    assert folded.queries[2].result == folded.queries[0].result
