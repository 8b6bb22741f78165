"""The fake Chat Completions API rejects what the real API rejects and streams what it streams, seen
through the real `openai` SDK."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.fakes.openai_api import FakeOpenAI, Reply, overloaded, rate_limited, server_error

TOOL = {"type": "function", "function": {"name": "think", "description": "d", "parameters": {"type": "object"}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "think", "arguments": "{}"}}


@pytest.fixture
async def client(fake_openai: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(api_key=fake_openai.api_key, base_url=fake_openai.base_url, max_retries=0)
    yield sdk
    await sdk.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"messages": []}, "'messages' must contain at least one message"),
        ({"messages": [{"role": "robot", "content": "q"}]}, "messages[0].role"),
        ({"frequency": 1}, "Unrecognized request argument supplied: frequency"),
        ({"stream_options": {"include_usage": True}}, "only allowed when 'stream' is enabled"),
        ({"max_tokens": 0}, "integer below minimum value"),
        ({"temperature": 3}, "must be between 0 and 2"),
        ({"tool_choice": "auto"}, "only allowed when 'tools' are specified"),
        ({"parallel_tool_calls": False}, "'parallel_tool_calls' is only allowed when 'tools' are specified"),
        ({"tools": [{**TOOL, "function": {"name": "bad name!"}}]}, "does not match pattern"),
        ({"tools": [{**TOOL, "function": {"name": "t", "parameters": {"type": "array"}}}]}, 'type: "object"'),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [CALL]}]},
            "must be followed by tool messages responding to each 'tool_call_id'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "tool", "tool_call_id": "call_9", "content": "x"},
                ]
            },
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        ({"messages": [{"role": "assistant", "content": None}]}, "expected a string, got null"),
    ],
)
async def test_invalid_requests_are_rejected_like_the_api(
    client: openai.AsyncOpenAI, fake_openai: FakeOpenAI, fields: dict[str, Any], message: str
) -> None:
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "q"}], **fields}
    extra = {k: request.pop(k) for k in ("frequency",) if k in request}  # not an SDK parameter: sent in the body
    with pytest.raises(openai.BadRequestError, match=re.escape(message)) as caught:
        await client.chat.completions.create(**request, extra_body=extra or None)
    assert caught.value.body["type"] == "invalid_request_error" and "param" in caught.value.body  # type: ignore[index]
    assert fake_openai.requests == []


async def test_a_streamed_reply_with_text_tool_calls_and_usage(
    client: openai.AsyncOpenAI, fake_openai: FakeOpenAI
) -> None:
    arguments = {"queries": [{"question": "n", "sql": "SELECT count() FROM nycflights13.flights WHERE origin = 'EWR'"}]}
    fake_openai.script(
        Reply(text="Counting now.", tool_calls=[("execute_sql", arguments), ("think", {"content": "x"})])
    )
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    stream = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=[TOOL],
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    text, calls, finish, usage, empty_choices = "", {}, None, None, 0
    async with stream:
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            empty_choices += not chunk.choices
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                    entry["name"] += (call.function and call.function.name) or ""
                    entry["arguments"] += (call.function and call.function.arguments) or ""
                finish = choice.finish_reason or finish
    assert text == "Counting now." and finish == "tool_calls" and empty_choices == 1
    assert [c["name"] for c in calls.values()] == ["execute_sql", "think"]
    assert json.loads(calls[0]["arguments"]) == arguments and calls[0]["id"].startswith("call_")
    assert usage is not None and usage.completion_tokens == 20 and usage.prompt_tokens > 0


async def test_without_include_usage_no_usage_chunk_comes(client: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(text="Hi."))
    stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(chunk.choices and chunk.usage is None for chunk in chunks)


async def test_a_long_prompt_asked_again_reads_from_the_prompt_cache(
    client: openai.AsyncOpenAI, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Reply(text="a"), Reply(text="b"))
    messages = [{"role": "system", "content": "schema " * 2_000}, {"role": "user", "content": "q"}]
    first = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    second = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert first.usage and first.usage.prompt_tokens_details and first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached and cached % 128 == 0 and cached >= 1024 and second.choices[0].message.content == "b"


@pytest.mark.parametrize(
    ("failure", "error", "kind"),
    [
        (rate_limited(), openai.RateLimitError, "requests"),
        (server_error(), openai.InternalServerError, "server_error"),
        (overloaded(), openai.InternalServerError, "server_error"),
    ],
)
async def test_errors_come_in_the_apis_shape(
    client: openai.AsyncOpenAI, fake_openai: FakeOpenAI, failure: Any, error: type[Exception], kind: str
) -> None:
    fake_openai.script(failure)
    with pytest.raises(error) as caught:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    body = caught.value.body  # type: ignore[attr-defined]
    assert (
        body["type"] == kind
        and body["message"] == failure.message
        and set(body) == {"message", "type", "param", "code"}
    )


async def test_a_wrong_key_is_refused(fake_openai: FakeOpenAI) -> None:
    sdk = openai.AsyncOpenAI(api_key="wrong", base_url=fake_openai.base_url, max_retries=0)
    try:
        with pytest.raises(openai.AuthenticationError) as caught:
            await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    finally:
        await sdk.close()
    assert caught.value.body["code"] == "invalid_api_key"  # type: ignore[index]


async def test_the_sdk_retries_a_429_as_it_does_against_the_api(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(rate_limited(), Reply(text="Fine."))
    sdk = openai.AsyncOpenAI(api_key=fake_openai.api_key, base_url=fake_openai.base_url, max_retries=2)
    try:
        reply = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    finally:
        await sdk.close()
    assert reply.choices[0].message.content == "Fine." and len(fake_openai.requests) == 2


async def test_a_model_can_be_persistently_rate_limited(client: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    fake_openai.for_model("busy", rate_limited())
    fake_openai.script(Reply(text="from the other"))
    for _ in range(3):
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="busy", messages=[{"role": "user", "content": "q"}])
    other = await client.chat.completions.create(model="free", messages=[{"role": "user", "content": "q"}])
    assert other.choices[0].message.content == "from the other"
