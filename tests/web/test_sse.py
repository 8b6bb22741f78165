"""web/sse.py: a run's events on the wire, one write for every batch of events ready together."""

from __future__ import annotations

import json
from pathlib import Path

from chats.runs import RunRegistry
from chats.state import ChatState
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from web.sse import live, replayed


def parsed(chunk: bytes) -> list[tuple[int, str, dict]]:
    """(id, event, data) of every event in one body chunk, read as an EventSource reads it."""
    events = []
    for block in chunk.decode().split("\r\n\r\n"):
        if not block:
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\r\n"))
        events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


async def test_events_ready_together_go_out_in_one_write_and_read_back_as_separate_events(
    tmp_path: Path, make_app, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Reply(text="Hello."))
    state = ChatState(tmp_path / "state.sqlite3")
    store = state.conversations
    runs = RunRegistry(make_app().runner, store)
    handle = runs.start("c", "hi", [], platform="web", interface="web", followups=False)
    one_by_one = [event.as_dict() async for event in runs.follow(handle)]  # the run is over after this

    chunks = [chunk async for chunk in live(runs.follow_batches(handle))]

    assert len(chunks) == 1
    assert parsed(chunks[0]) == [(e["id"], e["event"], e["data"]) for e in one_by_one]
    assert [chunk async for chunk in replayed(one_by_one, after=1)] == [chunks[0][chunks[0].index(b"id: 2") :]]
    assert [chunk async for chunk in replayed(one_by_one, after=len(one_by_one))] == []  # nothing new: no write
    state.close()
