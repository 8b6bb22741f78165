"""The fake Messages API rejects what the real API rejects, seen through the real SDK."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import anthropic
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply

TOOL = {"name": "think", "description": "d", "input_schema": {"type": "object", "properties": {}}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "think", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
EPHEMERAL = {"type": "ephemeral"}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": [CALL]},
                    {"role": "user", "content": [text("no result")]},
                ]
            },
            "`tool_use` ids were found without `tool_result` blocks",
        ),
        ({"messages": [{"role": "user", "content": [RESULT]}]}, "unexpected `tool_use_id`"),
        ({"messages": [{"role": "user", "content": [text("")]}]}, "text content blocks must be non-empty"),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": [CALL]},
                    {"role": "user", "content": [text("first"), RESULT]},
                ]
            },
            "tool_result blocks must come before any other content",
        ),
        (
            {
                "system": [
                    text("a", cache_control=EPHEMERAL),
                    text("b", cache_control=EPHEMERAL),
                    text("c", cache_control=EPHEMERAL),
                ],
                "messages": [
                    {
                        "role": "user",
                        "content": [text("d", cache_control=EPHEMERAL), text("e", cache_control=EPHEMERAL)],
                    }
                ],
            },
            "A maximum of 4 blocks with cache_control",
        ),
        ({"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}, "tools.0.name"),
        ({"tools": [{"name": "t", "input_schema": {"type": "string"}}]}, "JSON schema is invalid"),
        ({"tools": [{"name": "t", "input_schema": {"type": "object", "required": ["x"]}}]}, "required property"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, 'first message must use the "user" role'),
    ],
)
async def test_invalid_requests_are_rejected_like_the_api(
    fake_anthropic: FakeAnthropic, request_fields: dict[str, Any], message: str
) -> None:
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0)
    request = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "q"}],
        **request_fields,
    }
    try:
        with pytest.raises(anthropic.BadRequestError, match=message):
            await client.messages.create(**request)
    finally:
        await client.close()


async def test_a_valid_tool_round_trip_is_accepted_and_streamed(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(Reply(text="Done."))
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0)
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [CALL]},
        {"role": "user", "content": [RESULT, text("and more")]},
    ]
    try:
        async with client.messages.stream(model="m", max_tokens=10, tools=[TOOL], messages=messages) as stream:
            chunks = [event.text async for event in stream if event.type == "text"]
            final = await stream.get_final_message()
    finally:
        await client.close()
    assert "".join(chunks) == "Done." and final.stop_reason == "end_turn"


async def test_a_request_whose_client_has_gone_takes_no_reply_from_the_script(fake_anthropic: FakeAnthropic) -> None:
    """A cancelled run's last request can reach the fake's thread late, after the test has reset the fake and
    scripted the next run (issue 27: on a loaded machine it took the resumed report's first reply)."""
    fake_anthropic.script(Reply(text="For the next run."))
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "q"}]}).encode()
    address = urlsplit(fake_anthropic.base_url)
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: {address.netloc}\r\nx-api-key: test-key\r\n"
        f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    # The fake's thread comes to the request only once its client has gone (it waits for the lock held here).
    with fake_anthropic._lock, socket.create_connection((address.hostname, address.port)) as cancelled:
        cancelled.sendall(head.encode() + body)
    for _ in range(600):
        if fake_anthropic.hung_up or fake_anthropic.requests:
            break
        await asyncio.sleep(0.05)
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0)
    try:
        reply = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}])
    finally:
        await client.close()
    assert [block.text for block in reply.content if block.type == "text"] == ["For the next run."]
    assert fake_anthropic.hung_up == 1 and len(fake_anthropic.requests) == 1


async def test_a_wrong_key_is_refused(fake_anthropic: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(api_key="wrong", base_url=fake_anthropic.base_url, max_retries=0)
    try:
        with pytest.raises(anthropic.AuthenticationError):
            await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}])
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("thinking", "last_turn", "message"),
    [
        ({"type": "enabled", "budget_tokens": 512}, [CALL], "greater than or equal to 1024"),
        ({"type": "enabled", "budget_tokens": 4096}, [CALL], "must be greater than `thinking.budget_tokens`"),
        ({"type": "enabled", "budget_tokens": 1024}, [CALL], "must start with a thinking block"),
        (
            {"type": "enabled", "budget_tokens": 1024},
            [{"type": "thinking", "thinking": "t", "signature": ""}, CALL],
            "passed back with their signature",
        ),
    ],
)
async def test_thinking_is_checked_like_the_api(
    fake_anthropic: FakeAnthropic, thinking: dict[str, Any], last_turn: list[dict[str, Any]], message: str
) -> None:
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_anthropic.base_url, max_retries=0)
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": last_turn},
        {"role": "user", "content": [RESULT]},
    ]
    try:
        with pytest.raises(anthropic.BadRequestError, match=message):
            await client.messages.create(
                model="m",
                max_tokens=2048,
                thinking=thinking,
                tools=[TOOL],
                messages=messages,  # type: ignore[arg-type]
            )
    finally:
        await client.close()
