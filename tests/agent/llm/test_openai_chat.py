"""The OpenAI-compatible provider: the pipeline's Messages-API-shaped conversation goes out as Chat
Completions the strict fake accepts, and the streamed reply comes back as the same `ModelTurn`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.llm import ContextOverflow, LLMConfigError, LLMUnavailable
from agent.llm.openai_chat import chat_request
from tests.fakes.clients import openai_provider
from tests.fakes.openai_api import Failure, FakeOpenAI, MidStreamError, Reply, overloaded, rate_limited

TOOLS = [
    {
        "name": "execute_sql",
        "description": "Run SQL.",
        "input_schema": {"type": "object", "properties": {"queries": {"type": "array"}}, "required": ["queries"]},
    },
    {"name": "think", "description": "Think.", "input_schema": {"type": "object", "properties": {}}},
]
EPHEMERAL = {"type": "ephemeral"}
# Two rounds of the pipeline, as it keeps them: a narration and two calls, their results (one failed), a nudge.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "How many flights?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "text", "text": "Counting."},
            {"type": "tool_use", "id": "toolu_01", "name": "think", "input": {"content": "plan"}},
            {"type": "tool_use", "id": "toolu_02", "name": "execute_sql", "input": {"queries": [{"sql": "SELECT 1"}]}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "syntax error", "is_error": True},
            {"type": "text", "text": "Wrap up soon.", "cache_control": EPHEMERAL},
        ],
    },
]


async def _ignore(*_: Any) -> None:
    return None


def request(**extra: Any) -> dict[str, Any]:
    system = [{"type": "text", "text": "Rules."}, {"type": "text", "text": "Schema.", "cache_control": EPHEMERAL}]
    return {"max_tokens": 512, "system": system, "tools": TOOLS, "messages": CONVERSATION, **extra}


def test_the_conversation_is_translated_to_chat_completions() -> None:
    params = chat_request("m", request(tool_choice={"type": "none"}))
    assert params["messages"] == [
        {"role": "system", "content": "Rules.\n\nSchema."},
        {"role": "user", "content": "How many flights?"},
        {
            "role": "assistant",
            "content": "Counting.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "think", "arguments": '{"content": "plan"}'},
                },
                {
                    "id": "toolu_02",
                    "type": "function",
                    "function": {"name": "execute_sql", "arguments": '{"queries": [{"sql": "SELECT 1"}]}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "ok"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "Error: syntax error"},
        {"role": "user", "content": "Wrap up soon."},
    ]
    assert params["tools"][0] == {
        "type": "function",
        "function": {"name": "execute_sql", "description": "Run SQL.", "parameters": TOOLS[0]["input_schema"]},
    }
    assert params["tool_choice"] == "none" and params["max_tokens"] == 512


async def test_a_streamed_reply_becomes_the_turn_the_pipeline_reads(fake_openai: FakeOpenAI) -> None:
    queries = {"queries": [{"question": "n", "sql": "SELECT count() FROM nycflights13.flights " + "x" * 200}]}
    fake_openai.script(Reply(text="Let me count.", tool_calls=[("execute_sql", queries), ("think", {"content": "y"})]))
    provider, texts = openai_provider(fake_openai), []

    async def collect(text: str) -> None:
        texts.append(text)

    try:
        turn = await provider.stream("m", request(), collect, _ignore)
    finally:
        await provider.close()
    assert [b["type"] for b in turn.content] == ["text", "tool_use", "tool_use"] and turn.stop_reason == "tool_use"
    assert turn.tool_calls[0]["input"] == queries and turn.tool_calls[0]["id"].startswith("call_")
    assert "".join(texts) == "Let me count." == turn.text
    assert turn.usage.output_tokens == 20 and turn.usage.input_tokens > 0
    sent = fake_openai.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert "cache_control" not in json.dumps(sent)


async def test_cached_prompt_tokens_are_counted_as_cache_reads(fake_openai: FakeOpenAI) -> None:
    long = request(system=[{"type": "text", "text": "schema " * 2_000}])
    fake_openai.script(Reply(text="a"), Reply(text="b"))
    provider = openai_provider(fake_openai)
    try:
        first = await provider.stream("m", long, _ignore, _ignore)
        second = await provider.stream("m", long, _ignore, _ignore)
    finally:
        await provider.close()
    assert first.usage.cache_read_tokens == 0 and second.usage.cache_read_tokens >= 1024
    total = first.usage.input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_tokens == total


async def test_a_stream_that_fails_midway_is_asked_again(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(MidStreamError(), Reply(text="Complete."))
    provider, restarts = openai_provider(fake_openai), []

    async def restarted() -> None:
        restarts.append(1)

    try:
        turn = await provider.stream("m", request(), _ignore, restarted)
    finally:
        await provider.close()
    assert turn.text == "Complete." and restarts == [1] and len(fake_openai.requests) == 2


@pytest.mark.parametrize(
    ("failure", "error", "reason"),
    [
        (rate_limited(), LLMUnavailable, "rate_limited"),
        (overloaded(), LLMUnavailable, "overloaded"),
        (Failure(502, "server_error", "Bad gateway"), LLMUnavailable, "unavailable"),
        (Failure(408, "timeout", "Request timed out"), LLMUnavailable, "unavailable"),
        (Failure(400, "invalid_request_error", "bad", "context_length_exceeded"), ContextOverflow, None),
        # llama.cpp's server: "the request exceeds the available context size, try increasing it"
        (
            Failure(400, "exceed_context_size_error", "request exceeds the available context size"),
            ContextOverflow,
            None,
        ),
        (Failure(400, "invalid_request_error", "Invalid 'tools'"), LLMConfigError, None),
        (Failure(401, "invalid_request_error", "Incorrect API key provided", "invalid_api_key"), LLMConfigError, None),
    ],
)
async def test_errors_become_ours(
    fake_openai: FakeOpenAI, failure: Failure, error: type[Exception], reason: Any
) -> None:
    fake_openai.for_model("m", failure)
    provider = openai_provider(fake_openai, max_retries=0)
    try:
        with pytest.raises(error) as caught:
            await provider.stream("m", request(), _ignore, _ignore)
    finally:
        await provider.close()
    assert getattr(caught.value, "reason", None) == reason


async def test_a_plain_call_reads_the_whole_completion(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(text='["Which month was busiest?"]'))
    provider = openai_provider(fake_openai)
    plain = {"max_tokens": 100, "system": "Suggest.", "messages": [{"role": "user", "content": "p"}]}
    try:
        turn = await provider.complete("small", plain)
    finally:
        await provider.close()
    assert turn.text == '["Which month was busiest?"]' and turn.stop_reason == "end_turn"
    assert "stream" not in fake_openai.requests[0] and fake_openai.requests[0]["messages"][0]["role"] == "system"


def test_a_server_that_repeats_the_name_in_every_delta_calls_the_tool_once() -> None:
    from openai.types.chat import ChatCompletionChunk

    from agent.llm.openai_chat import _ChunkBuilder

    def chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return ChatCompletionChunk.model_validate(
            {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
        )

    builder = _ChunkBuilder()
    for piece in ('{"content"', ': "x"}'):
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "think", "arguments": piece}}
        builder.add(chunk({"tool_calls": [call]}))
    builder.add(chunk({}, "tool_calls"))
    turn = builder.turn(0.0)
    assert turn.tool_calls == [{"type": "tool_use", "id": "call_1", "name": "think", "input": {"content": "x"}}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> Any:
    from openai.types.chat import ChatCompletionChunk

    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return ChatCompletionChunk.model_validate(
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
    )


def test_parallel_calls_all_at_index_0_stay_apart() -> None:
    """Ollama streams every call of a parallel batch at index 0 (ollama/ollama#15457), each with its own id."""
    from agent.llm.openai_chat import _ChunkBuilder

    builder = _ChunkBuilder()
    for call_id, statement in (("call_a", "SELECT 1"), ("call_b", "SELECT 2")):
        arguments = json.dumps({"queries": [{"sql": statement}]})
        call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": "execute_sql", "arguments": arguments},
        }
        builder.add(_chunk({"tool_calls": [call]}))
    builder.add(_chunk({}, "tool_calls"))
    calls = builder.turn(0.0).tool_calls
    assert [(c["id"], c["input"]["queries"][0]["sql"]) for c in calls] == [
        ("call_a", "SELECT 1"),
        ("call_b", "SELECT 2"),
    ]


def test_calls_without_ids_get_ids_unique_across_rounds() -> None:
    """A server that sends no id: `call_0` every round would repeat in the history, which the Messages API
    refuses ("tool_use ids must be unique") should a Claude model read it after a fallback."""
    from agent.llm.openai_chat import _ChunkBuilder

    ids = []
    for _ in range(2):
        builder = _ChunkBuilder()
        builder.add(_chunk({"tool_calls": [{"index": 0, "function": {"name": "think", "arguments": "{}"}}]}))
        builder.add(_chunk({}, "tool_calls"))
        ids += [c["id"] for c in builder.turn(0.0).tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


async def test_openai_reasoning_models_get_max_completion_tokens_and_no_temperature(fake_openai: FakeOpenAI) -> None:
    """o-series and gpt-5 refuse `max_tokens` and any temperature but the default; the fake refuses them too."""
    params = chat_request("gpt-5", request(temperature=0.2))
    assert params["max_completion_tokens"] == 512 and "max_tokens" not in params and "temperature" not in params
    assert chat_request("llama3.1:8b", request(temperature=0.2))["max_tokens"] == 512  # Ollama takes only this one
    fake_openai.script(Reply(text="ok"))
    provider = openai_provider(fake_openai, max_retries=0)
    try:
        turn = await provider.stream("gpt-5", request(temperature=0.2), _ignore, _ignore)
    finally:
        await provider.close()
    assert turn.text == "ok"


async def test_the_fake_refuses_max_tokens_for_a_reasoning_model(fake_openai: FakeOpenAI) -> None:
    import openai as sdk

    client = sdk.AsyncOpenAI(api_key=fake_openai.api_key, base_url=fake_openai.base_url, max_retries=0)
    try:
        with pytest.raises(sdk.BadRequestError, match="max_completion_tokens"):
            await client.chat.completions.create(
                model="o3-mini", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
    finally:
        await client.close()
