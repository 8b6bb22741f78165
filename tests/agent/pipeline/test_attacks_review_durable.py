"""An outside review's attacks on the library's checkpoints (agent/pipeline/loop.py): how many bytes a run
of many rounds with big results has its host write, and whether that is bounded.

Measured (8 rounds, each one query of 5,000 rows, the results capped as the model is sent them): checkpoints
of 0.8, 15.6, 30.2, ... 117.7 KB, one per round, 534 KB written in all; each checkpoint holds every result
twice (in `messages` as the model was sent it, and in `queries`).

Fixed (agent/checkpoint_form.py; chats/durable.py writes the parts): each round's part holds what it added,
0.9 then about 8.8 KB a round, 72 KB written in all for a last checkpoint of 64 KB, which holds each result
once. `pytest -s` on this file prints the figures."""

from __future__ import annotations

import json

from agent.runner import CheckpointSink
from tests.agent.pipeline.test_checkpoints import Checkpoints, sql
from tests.fakes.anthropic_api import FakeAnthropic, Reply

ROUNDS = 8
BIG = "SELECT * FROM nycflights13.flights WHERE month = {m} ORDER BY time_hour, flight LIMIT 5000"


async def long_run(make_app, fake_anthropic: FakeAnthropic, sink: CheckpointSink, **settings: object) -> None:
    """The review's run: ROUNDS rounds of one query of 5,000 rows each, then the answer."""
    fake_anthropic.script(
        *[Reply(tool_calls=[sql(f"Flights of month {m}", BIG.format(m=m))]) for m in range(1, ROUNDS + 1)],
        Reply(text="Done [Q1]."),
    )
    await make_app(**settings).runner.run("Show me the flights month by month.", checkpoint=sink, followups=False)


async def _checkpoints_of_a_long_run(make_app, fake_anthropic: FakeAnthropic) -> Checkpoints:
    sink = Checkpoints()
    await long_run(make_app, fake_anthropic, sink)
    assert sink.rounds() == list(range(ROUNDS + 1))
    assert sink.last() == sink.handed[-1]  # read back exactly as it was handed over
    return sink


async def test_the_bytes_a_run_checkpoints_grow_with_its_rounds_not_their_square(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Finding: every round's checkpoint holds the whole run so far and the store rewrites the row whole
    (chats/durable.py `save`), so a run of n rounds writes ~n²/2 rounds' worth: 534 KB for 8 rounds whose
    last checkpoint is 118 KB (4.5x), growing with AGENT_MAX_ROUNDS and a report's rounds. Safe: a round
    writes what it added (an append-only log of rounds, or only the new messages), so all a run writes stays
    within a small multiple of its last checkpoint."""
    sink = await _checkpoints_of_a_long_run(make_app, fake_anthropic)
    sizes = [len(part.encode()) for part in sink.stored]
    last = len(sink.last().model_dump_json().encode())
    print(f"checkpoint parts of {sizes} bytes: {sum(sizes)} written in all; the last checkpoint is {last}")
    assert sum(sizes) <= 1.25 * last, f"checkpoint parts of {sizes} bytes: {sum(sizes)} written in all, the last {last}"


async def test_a_checkpoint_holds_each_result_once(make_app, fake_anthropic: FakeAnthropic) -> None:
    """Finding: a checkpoint keeps each query's rows twice, in the messages the model was sent and again in
    `queries` (their results): half of every checkpoint is a copy. Safe: a result kept once (the other
    rebuilt from it on resume), so a checkpoint is not much bigger than its messages."""
    last = (await _checkpoints_of_a_long_run(make_app, fake_anthropic)).last()
    messages = len(json.dumps(last.messages).encode())
    whole = len(last.model_dump_json().encode())
    print(f"a checkpoint of {whole} bytes whose messages are {messages}")
    assert whole <= 1.2 * messages, f"a checkpoint of {whole} bytes whose messages are {messages}"
    stored = last.model_dump_json()
    for query in last.queries:  # its rows once, as data; never again as the text the model was sent
        row = query.result.rows[0]
        assert stored.count(json.dumps(row, separators=(",", ":"))) == 1
        assert "| " + " | ".join(map(str, row)) + " |" not in stored
        assert ("| " + " | ".join(map(str, row)) + " |") in str(last.messages)
