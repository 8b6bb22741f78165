"""The model client keeps the event loop free: the SDK's parsers are built before the first question, and
a long streamed reply yields to the loop while the SDK works through its events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import RawContentBlockDeltaEvent, RawContentBlockStartEvent, RawContentBlockStopEvent

from agent.config import DEFAULT_MODEL
from agent.llm import LLMUnavailable, ModelTurn
from agent.llm.anthropic import _to_turn, _TurnBuilder
from tests.fakes.anthropic_api import CutOff, FakeAnthropic, Hang, Reply
from tests.fakes.clients import make_llm
from tests.timing import LoopSteps

ROOT = Path(__file__).resolve().parents[3]
LONGEST_SQL = "SELECT 1 IN (" + ",".join(["1"] * 29_000) + ")"  # near the 60,000 characters a statement may take
PARTS = 5  # the loop's longest step stays under a fifth of the work it is measured against (CPU time)


def _request() -> dict[str, Any]:
    return {
        "model": DEFAULT_MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "How many flights?"}],
    }


async def _ignore(*_: Any) -> None:
    return None


async def test_a_long_tool_input_streams_without_holding_the_loop(fake_anthropic: FakeAnthropic) -> None:
    """The fake sends a tool input as 40-character deltas, as the API does in small pieces: ~1,500
    events per statement, which a buffered socket hands the SDK without a pause."""
    queries = [{"question": f"q{i}", "sql": LONGEST_SQL} for i in range(2)]
    fake_anthropic.script(Reply(tool_calls=[("execute_sql", {"queries": queries})]))
    llm = make_llm(fake_anthropic)
    try:
        with LoopSteps() as steps:
            turn = await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **_request())
    finally:
        await llm.close()
    assert turn.tool_calls[0]["input"] == {"queries": queries}
    # Read in one go, the reply would be the loop's one long step; read yielding, a small part of its work.
    assert steps.longest < steps.total / PARTS, f"one step took {steps.longest:.3f} s of {steps.total:.3f} s"


async def test_the_turn_built_from_raw_events_is_the_message_the_sdk_builds(fake_anthropic: FakeAnthropic) -> None:
    """Text around a tool call, whitespace-only text dropped, usage with cache counts: the turn read from
    the raw stream equals the one read from the same reply as a whole message."""
    reply = Reply(
        text="Counting the airlines.", tool_calls=[("execute_sql", {"queries": [{"question": "q", "sql": "SELECT 1"}]})]
    )
    fake_anthropic.script(reply, reply)
    llm = make_llm(fake_anthropic)
    texts: list[str] = []

    async def collect(text: str) -> None:
        texts.append(text)

    try:
        streamed = await llm.stream_turn(on_text=collect, on_restart=_ignore, **_request())
        whole = _to_turn(await llm._providers["anthropic"]._client.messages.create(**_request()), 0.0)  # type: ignore[attr-defined]
    finally:
        await llm.close()

    def without_ids(turn: ModelTurn) -> list[dict[str, Any]]:
        return [{key: value for key, value in block.items() if key != "id"} for block in turn.content]

    assert without_ids(streamed) == without_ids(whole) and [b["type"] for b in streamed.content] == ["text", "tool_use"]
    assert streamed.tool_calls[0]["id"].startswith("toolu_") and streamed.stop_reason == whole.stop_reason == "tool_use"
    assert streamed.usage == whole.usage and streamed.usage.input_tokens > 0
    assert "".join(texts) == "Counting the airlines."


async def test_a_stream_cut_off_before_its_end_is_asked_again(fake_anthropic: FakeAnthropic) -> None:
    """A reply that ends without message_stop (a proxy or the network broke it) is not a whole answer."""
    cut = Hang()
    cut.release.set()  # message_start, then the stream ends
    fake_anthropic.script(cut, Reply(text="There are 16 airlines."))
    llm = make_llm(fake_anthropic)
    try:
        turn = await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **_request())
    finally:
        await llm.close()
    assert turn.text == "There are 16 airlines." and len(fake_anthropic.requests) == 2


async def test_a_stream_cut_off_every_time_fails_clearly(fake_anthropic: FakeAnthropic) -> None:
    cuts = [Hang() for _ in range(4)]
    for cut in cuts:
        cut.release.set()
    fake_anthropic.script(*cuts)
    llm = make_llm(fake_anthropic)
    try:
        with pytest.raises(LLMUnavailable, match="cut off"):
            await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **_request())
    finally:
        await llm.close()
    assert len(fake_anthropic.requests) == 4  # the first call and make_llm's three retries


def _tool_call_cut_at(partial_json: str) -> Any:
    builder = _TurnBuilder()
    start = {"type": "tool_use", "id": "toolu_1", "name": "execute_sql", "input": {}}
    builder.add(RawContentBlockStartEvent(type="content_block_start", index=0, content_block=start))
    delta = {"type": "input_json_delta", "partial_json": partial_json}
    builder.add(RawContentBlockDeltaEvent(type="content_block_delta", index=0, delta=delta))
    builder.add(RawContentBlockStopEvent(type="content_block_stop", index=0))
    return builder.turn(0.0).tool_calls[0]["input"]


def test_a_tool_call_cut_off_by_max_tokens_keeps_only_what_is_whole() -> None:
    """As the SDK's own accumulation does: whole values stay, a half-written string is dropped (never run
    as a shorter statement), and the pipeline's input checks tell the model what is missing."""
    cut = '{"queries": [{"question": "a", "sql": "SELECT 1"}, {"question": "b", "sql": "SELECT count() FROM fl'
    assert _tool_call_cut_at(cut) == {"queries": [{"question": "a", "sql": "SELECT 1"}, {"question": "b"}]}
    assert _tool_call_cut_at("not json at all") == {}


async def test_a_connection_broken_mid_stream_is_asked_again(fake_anthropic: FakeAnthropic) -> None:
    """No error event, no last chunk: the SDK retries only before the response starts, so this is ours.
    Text already shown is withdrawn (on_restart) before the second try."""
    fake_anthropic.script(CutOff(partial_text="There are "), Reply(text="There are 16 airlines."))
    restarts: list[bool] = []

    async def restarted() -> None:
        restarts.append(True)

    llm = make_llm(fake_anthropic)
    try:
        turn = await llm.stream_turn(on_text=_ignore, on_restart=restarted, **_request())
    finally:
        await llm.close()
    assert turn.text == "There are 16 airlines." and restarts == [True] and len(fake_anthropic.requests) == 2


async def test_a_connection_broken_every_time_fails_clearly(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(*[CutOff() for _ in range(4)])
    llm = make_llm(fake_anthropic)
    try:
        with pytest.raises(LLMUnavailable, match="cut off"):
            await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **_request())
    finally:
        await llm.close()


FIRST_QUESTION = """
import asyncio, json, sys, time
from types import SimpleNamespace
from tests.agent.llm.test_anthropic import _ignore, _request
from tests.fakes.clients import make_llm
from tests.timing import LoopSteps

async def main():
    started = time.thread_time()
    llm = make_llm(SimpleNamespace(base_url=sys.argv[1]))
    prepared = time.thread_time() - started
    with LoopSteps() as steps:
        turn = await llm.stream_turn(on_text=_ignore, on_restart=_ignore, **_request())
    await llm.close()
    print(json.dumps({"longest": steps.longest, "prepared": prepared, "text": turn.text}))

asyncio.run(main())
"""


def test_the_first_reply_in_a_fresh_process_does_not_hold_the_loop(fake_anthropic: FakeAnthropic) -> None:
    """The SDK builds its pydantic validators on first use (~250 ms of CPU); a fresh process shows whether
    they were built before the loop needed them."""
    fake_anthropic.script(Reply(text="There are 336,776 flights."))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", FIRST_QUESTION, fake_anthropic.base_url]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["text"] == "There are 336,776 flights."
    # Built on the first reply, the validators would be its longest step, and the client's start-up cheap.
    longest, prepared = result["longest"], result["prepared"]
    # Primed: about 1/25 of the start-up; left to the first reply: about 1/5 (measured: 5 ms of 131, 9 ms of 50).
    assert longest < prepared / 10, f"the first reply held the loop {longest:.3f} s (start-up: {prepared:.3f} s)"


async def test_vertex_streams_through_the_sdks_own_client(fake_anthropic: FakeAnthropic) -> None:
    """`vertex:` models: the same provider over AsyncAnthropicVertex, which puts the model in the path."""
    import anthropic

    from agent.llm import AnthropicProvider, LLMClient

    fake_anthropic.script(Reply(text="From Vertex.", tool_calls=[("think", {"content": "x"})]))
    vertex = anthropic.AsyncAnthropicVertex(
        region="europe-west1", project_id="analytics", access_token="test-key", base_url=f"{fake_anthropic.base_url}/v1"
    )
    llm = LLMClient({"vertex": AnthropicProvider(vertex, stream_retries=0)})
    try:
        turn = await llm.stream_turn(
            model="vertex:claude-sonnet-5-5",
            on_text=_ignore,
            on_restart=_ignore,
            max_tokens=64,
            messages=[{"role": "user", "content": "q"}],
        )
    finally:
        await llm.close()
    assert turn.model == "vertex:claude-sonnet-5-5" and turn.text == "From Vertex." and turn.tool_calls
    (sent,) = fake_anthropic.requests
    assert sent["model"] == "claude-sonnet-5-5" and sent["_vertex"] == {
        "project": "analytics",
        "region": "europe-west1",
    }
