"""Primes the model SDKs' response parsers (anthropic, and openai for `openai:` models) once per process,
before the first question.

The SDK builds its pydantic validators lazily: the first streamed reply, the first plain reply and
the first error body each cost 80-250 ms of CPU (py-spy: `TypeAdapter.__init__`,
`BaseModel.model_rebuild`, `create_generic_submodel`). Run on the event loop, that froze every
other chat and /healthz during the first question. Here the SDK's own public path parses one canned
exchange served by an in-memory transport, so every cache it fills is the one it will use later.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

import anthropic
import httpx2

log = logging.getLogger(__name__)
_primed = False
_openai_primed = False
_lock = threading.Lock()

_MODEL = "claude-priming"  # never sent anywhere: the transport below answers in memory
_USAGE = {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
_MESSAGE = {"id": "msg_prime", "type": "message", "role": "assistant", "model": _MODEL, "stop_sequence": None}

# The event sequence of a streamed reply with text then a tool call, as documented at
# https://docs.anthropic.com/en/api/messages-streaming (message_start ... message_stop, with ping).
_STREAM_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {**_MESSAGE, "content": [], "stop_reason": None, "usage": _USAGE}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "priming"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_prime", "name": "execute_sql", "input": {}},
    },
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"sql":"1"}'}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 2},
    },
    {"type": "message_stop"},
]
_PLAIN = {**_MESSAGE, "content": [{"type": "text", "text": "priming"}], "stop_reason": "end_turn", "usage": _USAGE}
_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _answer(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        frames = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in _STREAM_EVENTS)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=frames.encode())
    if body.get("max_tokens") == 2:
        return httpx2.Response(529, json=_OVERLOADED)
    return httpx2.Response(200, json=_PLAIN)


def prime_sdk_parsers() -> None:
    """Parse a streamed reply, a plain reply and an error body once in this process; later calls return at once."""
    global _primed
    with _lock:
        if _primed:
            return
        http = httpx2.Client(transport=httpx2.MockTransport(_answer))
        client = anthropic.Anthropic(
            api_key="priming",
            base_url="http://priming.invalid",
            http_client=http,
            max_retries=0,
            open_telemetry=False,  # no spans for calls that never happened
        )
        request: dict[str, Any] = {"model": _MODEL, "messages": [{"role": "user", "content": "prime"}]}
        try:
            _exchange(client, request)
        except Exception as exc:  # a later SDK may parse differently; the first question then pays, nothing breaks
            log.warning("could not prime the model SDK's parsers: %r", exc)
        finally:
            client.close()
        _primed = True


def _exchange(client: anthropic.Anthropic, request: dict[str, Any]) -> None:
    with client.messages.stream(max_tokens=1, **request) as stream:
        for _ in stream:
            pass
        stream.get_final_message()
    client.messages.create(max_tokens=1, **request)
    with contextlib.suppress(anthropic.APIStatusError):
        client.messages.create(max_tokens=2, **request)


# A streamed Chat Completions reply with text, a tool call and the usage chunk, as documented at
# https://platform.openai.com/docs/api-reference/chat-streaming (tests/fakes/openai_api.py serves the same).
_CHUNK = {"id": "chatcmpl-prime", "object": "chat.completion.chunk", "created": 0, "model": _MODEL}
_CHUNKS: list[dict[str, Any]] = [
    {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "priming"}, "finish_reason": None}]},
    {
        **_CHUNK,
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_prime",
                            "type": "function",
                            "function": {"name": "think", "arguments": "{}"},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {
        **_CHUNK,
        "choices": [],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "total_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    },
]
_COMPLETION = {
    "id": "chatcmpl-prime",
    "object": "chat.completion",
    "created": 0,
    "model": _MODEL,
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "priming"}, "finish_reason": "stop", "logprobs": None}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def _answer_openai(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        frames = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in _CHUNKS) + "data: [DONE]\n\n"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=frames.encode())
    if body.get("max_tokens") == 2:
        error = {"message": "Rate limit reached", "type": "requests", "param": None, "code": "rate_limit_exceeded"}
        return httpx2.Response(429, json={"error": error})
    return httpx2.Response(200, json=_COMPLETION)


def prime_openai_parsers() -> None:
    """The same for the openai SDK (its first streamed reply costs about 60 ms of CPU otherwise)."""
    global _openai_primed
    import openai  # here, not at the top: a process on Anthropic's models never loads the openai SDK (1 s of CPU)

    with _lock:
        if _openai_primed:
            return
        http = httpx2.Client(transport=httpx2.MockTransport(_answer_openai))
        client = openai.OpenAI(api_key="priming", base_url="http://priming.invalid/v1", http_client=http, max_retries=0)
        messages: Any = [{"role": "user", "content": "prime"}]
        try:
            stream = client.chat.completions.create(
                model=_MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
            )
            for _ in stream:
                pass
            client.chat.completions.create(model=_MODEL, messages=messages, max_tokens=1)
            with contextlib.suppress(openai.APIStatusError):
                client.chat.completions.create(model=_MODEL, messages=messages, max_tokens=2)
        except Exception as exc:  # a later SDK may parse differently; the first question then pays, nothing breaks
            log.warning("could not prime the openai SDK's parsers: %r", exc)
        finally:
            client.close()
        _openai_primed = True
