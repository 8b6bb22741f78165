"""The Messages API provider: Anthropic's own API, Bedrock and Vertex, each through the anthropic SDK's
async client (AsyncAnthropic, AsyncAnthropicBedrock, AsyncAnthropicVertex), streaming, with honest errors.

The SDK already retries 408/409/429/5xx/529 responses (honouring retry-after) and failed connections
(a connection that cannot be made, only once: `connect_once`, agent/llm/reach.py); what it cannot
retry is a 200 SSE stream that fails after it started (an `overloaded_error` event, a connection
broken mid-body, a stream that ends without `message_stop`), so that retry, and only that one, lives
here, with a restart signal so callers can discard text they already showed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import anthropic
import httpx2
import jiter
from anthropic import AsyncAnthropic

from agent.llm.priming import prime_sdk_parsers
from agent.llm.reach import CONNECT_RETRIES, could_not_connect, tls_context, unreachable
from agent.llm.turns import (
    ContextOverflow,
    FallbackReason,
    LLMConfigError,
    LLMError,
    LLMUnavailable,
    ModelTurn,
    RestartSink,
    TextSink,
    Usage,
    UsageSink,
    ignore_usage,
    usage_count,
    usage_not_below,
    usage_object,
)

_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error"}
# Bedrock's stream carries AWS's own exception codes in the error event the SDK's decoder builds
# (anthropic/lib/bedrock/_stream_decoder.py: `{"type": "error", "error": {"type": <Code>}}`); the codes
# are the InvokeModelWithResponseStream errors in Bedrock's API reference.
_BEDROCK_STREAM_ERRORS: dict[str, FallbackReason] = {
    "throttlingException": "rate_limited",
    "serviceUnavailableException": "unavailable",
    "internalServerException": "unavailable",
    "modelStreamErrorException": "unavailable",
    "modelTimeoutException": "unavailable",
}
# How providers word a context overflow: the Messages API ("prompt is too long"), Bedrock ("Input is
# too long for requested model"), and others ("... exceeds the context window").
_CONTEXT_OVERFLOW = ("prompt is too long", "input is too long", "context window", "context length")
# The SDK spends ~0.4 ms of CPU per stream event, and a buffered socket hands it thousands without
# waiting (a long tool input arrives as 40-character deltas): yield to the loop at least this often.
_YIELD_EVERY_S = 0.005


def anthropic_client(*, api_key: str, base_url: str | None, max_retries: int, timeout_s: float) -> AsyncAnthropic:
    """The SDK's client over its aiohttp transport. Its default (httpx2) pool checks every connection
    on each request: 200 streamed calls at once cost 7.1 ms of CPU each over it, 3.1 ms over aiohttp
    (benchmarks/bench_llm.py)."""
    return AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout_s,
        http_client=anthropic.DefaultAioHttpClient(timeout=timeout_s, verify=tls_context()),
    )


async def connect_once(request: anthropic.APIRequest, call_next: anthropic.AsyncCallNext) -> Any:
    """SDK middleware (run once per attempt, inside the SDK's retry loop): past CONNECT_RETRIES, a
    connection that cannot be made ends the call. What middleware raises reaches the caller as it is;
    `from None`, as the SDK retries any error whose cause is a connection error."""
    try:
        return await call_next(request)
    except anthropic.APIConnectionError as exc:
        if request.retries_taken >= CONNECT_RETRIES and could_not_connect(exc):
            raise unreachable(exc) from None
        raise


def _connection_error(exc: anthropic.APIConnectionError) -> LLMUnavailable:
    """The SDK's retries are spent (it raises a connection error only then)."""
    if could_not_connect(exc):
        return unreachable(exc)
    return LLMUnavailable(f"Could not reach the model API ({type(exc).__name__}); try again shortly.")


class AnthropicProvider:
    """One Messages API endpoint. `request` is already in this API's terms (agent/llm/capabilities.py)."""

    def __init__(
        self,
        client: AsyncAnthropic | Any,
        *,
        key_setting: str = "ANTHROPIC_API_KEY",
        stream_retries: int = 4,
        retry_base_delay_s: float = 0.5,
        fallback_retries: int | None = None,
    ) -> None:
        prime_sdk_parsers()  # once per process, before any event loop depends on this client
        if hasattr(client, "with_middleware"):  # the SDK's clients for Anthropic, Bedrock and Vertex all have it
            client = client.with_middleware(connect_once)
        self._client = client
        self._key_setting = key_setting
        self._stream_retries = stream_retries
        self._retry_base_delay_s = retry_base_delay_s
        # When another model follows in the list: fewer retries (the SDK's and ours), the same connections.
        self._fallback_retries = stream_retries if fallback_retries is None else fallback_retries
        self._quick = client if fallback_retries is None else client.with_options(max_retries=fallback_retries)

    async def stream(
        self,
        model: str,
        request: dict[str, Any],
        on_text: TextSink,
        on_restart: RestartSink,
        *,
        last: bool = True,
        on_usage: UsageSink = ignore_usage,
    ) -> ModelTurn:
        """One streamed model call; text deltas go to `on_text` as they arrive. An attempt that does not
        finish (cancelled, failed, retried) hands what it was billed so far to `on_usage`."""
        client, retries = (self._client, self._stream_retries) if last else (self._quick, self._fallback_retries)
        for attempt in range(retries + 1):
            started = time.perf_counter()
            builder = _TurnBuilder()
            finished = False
            try:
                # The raw event stream, not `messages.stream()`: its helper rebuilds every event and the
                # message so far in Python (`BaseModel.construct`, a Protocol check per object on 3.11):
                # 8.2 ms of CPU a call against 4.8 ms raw (benchmarks/bench_llm.py). The turn is built here.
                stream = await client.messages.create(model=model, stream=True, **request)
                async with stream:
                    yielded = time.perf_counter()
                    async for event in stream:
                        text = builder.add(event)
                        if text:
                            await on_text(text)
                        if time.perf_counter() - yielded > _YIELD_EVERY_S:
                            await asyncio.sleep(0)
                            yielded = time.perf_counter()
                if builder.stopped:
                    finished = True
                    return builder.turn(time.perf_counter() - started)
                if attempt == retries:  # the stream ended before message_stop: cut off
                    raise LLMUnavailable("The model's reply was cut off before it ended; try again shortly.")
            except anthropic.APIStatusError as exc:
                if not _retryable_in_stream(exc) or attempt == retries:
                    raise _translate(exc, self._key_setting) from None
            except anthropic.APIConnectionError as exc:  # before the reply began: the SDK has retried it
                raise _connection_error(exc) from None
            except httpx2.TransportError as exc:  # the connection broke mid-stream: the SDK retries only before it
                if attempt == retries:
                    raise LLMUnavailable(f"The model's reply was cut off ({type(exc).__name__}); try again.") from None
            finally:
                if not finished and builder.usage.total:  # the input was billed when message_start said so
                    on_usage(builder.usage)
            if builder.sent_text:
                await on_restart()
            await asyncio.sleep(self._retry_base_delay_s * 2**attempt * (0.5 + random.random() / 2))
        raise AssertionError("unreachable")

    async def complete(self, model: str, request: dict[str, Any], *, last: bool = True) -> ModelTurn:
        """A plain, non-streamed call (follow-ups, example questions)."""
        started = time.perf_counter()
        try:
            message = await (self._client if last else self._quick).messages.create(model=model, **request)
        except anthropic.APIStatusError as exc:
            raise _translate(exc, self._key_setting) from None
        except anthropic.APIConnectionError as exc:
            raise _connection_error(exc) from None
        return _to_turn(message, time.perf_counter() - started)

    async def close(self) -> None:
        await self._client.close()


def _to_turn(message: Any, elapsed_s: float) -> ModelTurn:
    content: list[dict[str, Any]] = []
    for block in message.content:
        if block.type == "text" and block.text.strip():
            content.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
        elif block.type == "thinking":
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
    return ModelTurn(content=content, stop_reason=message.stop_reason, usage=_usage(message.usage), elapsed_s=elapsed_s)


# Our count -> the Messages API's usage field (https://docs.anthropic.com/en/api/messages, "usage").
_USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
    "cache_creation_tokens": "cache_creation_input_tokens",
}


def _usage(usage: Any) -> Usage:
    """The usage object, each count checked (the SDK builds it without validating the JSON)."""
    usage = usage_object("usage", usage)
    return Usage(**{ours: usage_count(theirs, getattr(usage, theirs, None)) for ours, theirs in _USAGE_FIELDS.items()})


class _TurnBuilder:
    """A streamed reply's blocks, stop reason and usage, from its raw events
    (https://docs.anthropic.com/en/api/messages-streaming). Thinking blocks are kept with their
    signature (the API wants them back beside the tool calls they led to); other block types (server
    tools) are left out, as `_to_turn` leaves them out of a whole message."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._stop_reason: str | None = None
        self._usage = Usage()
        self.sent_text = False
        self.stopped = False  # message_stop arrived: the reply is whole

    def add(self, event: Any) -> str:
        """Take one event; return the text it adds to the answer (or "")."""
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and event.index in self._blocks:
                self._blocks[event.index]["text"] += delta.text
                self.sent_text = self.sent_text or bool(delta.text)
                return str(delta.text)
            if delta.type == "input_json_delta" and event.index in self._json:
                self._json[event.index].append(delta.partial_json)
            elif delta.type == "thinking_delta" and event.index in self._blocks:
                self._blocks[event.index]["thinking"] += delta.thinking
            elif delta.type == "signature_delta" and event.index in self._blocks:
                self._blocks[event.index]["signature"] += delta.signature
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self._blocks[event.index] = {"type": "text", "text": block.text}
            elif block.type == "tool_use":
                self._blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
                self._json[event.index] = []
            elif block.type == "thinking":
                self._blocks[event.index] = {"type": "thinking", "thinking": block.thinking, "signature": ""}
            elif block.type == "redacted_thinking":
                self._blocks[event.index] = {"type": "redacted_thinking", "data": block.data}
        elif kind == "content_block_stop" and event.index in self._json:
            self._blocks[event.index]["input"] = _tool_input("".join(self._json.pop(event.index)))
        elif kind == "message_start":
            self._usage = _usage(event.message.usage)
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "message_delta":
            self._stop_reason = event.delta.stop_reason
            usage = usage_object("usage", event.usage)  # cumulative; input and cache only in newer API versions
            for ours, theirs in _USAGE_FIELDS.items():
                if (value := getattr(usage, theirs, None)) is not None:
                    now = usage_not_below(theirs, getattr(self._usage, ours), usage_count(theirs, value))
                    setattr(self._usage, ours, now)
        return ""

    @property
    def usage(self) -> Usage:
        """The counts reported so far (message_start's, then each message_delta's)."""
        return self._usage

    def turn(self, elapsed_s: float) -> ModelTurn:
        content = [
            block for _, block in sorted(self._blocks.items()) if block["type"] != "text" or block["text"].strip()
        ]
        return ModelTurn(content=content, stop_reason=self._stop_reason, usage=self._usage, elapsed_s=elapsed_s)


def _tool_input(raw: str) -> Any:
    """A tool call's input. A call cut off by max_tokens ends mid-JSON: what is whole of it is kept, as
    the SDK keeps it, so the pipeline's input checks tell the model what is missing."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        try:
            return jiter.from_json(raw.encode(), partial_mode=True)
        except ValueError:
            return {}


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return str(error.get("type", "")) if isinstance(error, dict) else ""


def _retryable_in_stream(exc: anthropic.APIStatusError) -> bool:
    """An error event inside a 200 stream, which the SDK does not retry."""
    kind = _error_type(exc)
    return exc.status_code == 200 and (kind in _RETRYABLE_STREAM_ERRORS or kind in _BEDROCK_STREAM_ERRORS)


def _unavailable_reason(exc: anthropic.APIStatusError) -> FallbackReason | None:
    kind = _error_type(exc)
    if kind in _BEDROCK_STREAM_ERRORS:
        return _BEDROCK_STREAM_ERRORS[kind]
    if exc.status_code == 529 or kind == "overloaded_error":
        return "overloaded"
    if exc.status_code == 429 or kind == "rate_limit_error":
        return "rate_limited"
    if exc.status_code >= 500 or exc.status_code in (408, 409) or kind == "api_error":
        return "unavailable"
    return None


def _translate(exc: anthropic.APIStatusError, key_setting: str = "ANTHROPIC_API_KEY") -> LLMError:
    kind = _error_type(exc)
    message = _error_message(exc)
    if reason := _unavailable_reason(exc):
        return LLMUnavailable(
            f"The model is overloaded or rate limited ({kind or exc.status_code}); try again shortly.", reason
        )
    if exc.status_code in (401, 403):
        return LLMConfigError(f"The model API refused the key ({exc.status_code}): check {key_setting}.")
    lowered = message.lower()
    if any(words in lowered for words in _CONTEXT_OVERFLOW) or ("context" in lowered and "exceed" in lowered):
        return ContextOverflow(message)
    return LLMConfigError(f"The model API rejected the request ({exc.status_code} {kind}): {message}")


def _error_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", {})
    return str(error.get("message", exc.message)) if isinstance(error, dict) else str(exc.message)
