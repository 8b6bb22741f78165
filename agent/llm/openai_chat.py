"""The OpenAI-compatible provider: Chat Completions through the `openai` SDK (OpenAI itself, vLLM, Ollama,
any server that speaks it), streamed, with tool calls and usage, turned into the same `ModelTurn` the
Messages API gives. The pipeline's Messages-API-shaped request is translated here, both ways:

- system text blocks -> one `system` message; tools -> `function` tools with the same JSON schema;
- an assistant turn's text and `tool_use` blocks -> one assistant message with `tool_calls`;
- a user turn's `tool_result` blocks -> `tool` messages (first, as Chat Completions wants them right
  after the assistant message that called), its text -> a user message after them;
- thinking blocks and cache hints have no counterpart and are left out (agent/llm/capabilities.py).

Reference: https://platform.openai.com/docs/api-reference/chat/create and .../chat-streaming.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from agent.llm.anthropic import _tool_input
from agent.llm.priming import prime_openai_parsers
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
    bad_usage,
    ignore_usage,
    usage_count,
    usage_object,
)

# finish_reason -> the Messages API's stop_reason, which the pipeline reads.
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
_YIELD_EVERY_S = 0.005
_TOOL_ID = re.compile(r"[^a-zA-Z0-9_-]")  # the Messages API's tool_use id pattern, should a later model be Claude
# OpenAI's reasoning models (o-series, gpt-5) refuse `max_tokens` ("not compatible with o-series models":
# the API reference, Create chat completion) and any temperature but the default; vLLM and Ollama take
# `max_tokens` (Ollama only that one), so the others keep it.
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")
# How servers word a context overflow: OpenAI and vLLM ("maximum context length"), llama.cpp ("exceeds
# the available context size"), others ("context window").
_CONTEXT_OVERFLOW = ("maximum context length", "context size", "context window", "context length")


class ConnectOnceAioHttpClient(openai.DefaultAioHttpClient):  # type: ignore[misc,valid-type]
    """The SDK's aiohttp client, retrying a connection that cannot be made only CONNECT_RETRIES times
    (agent/llm/reach.py): the SDK retries any transport error raised while sending, and passes an
    `OpenAIError` raised there on as it is."""

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            return await super().send(request, **kwargs)  # type: ignore[no-any-return]
        except httpx2.TransportError as exc:
            retries_taken = int(request.headers.get("x-stainless-retry-count") or 0)
            if retries_taken >= CONNECT_RETRIES and could_not_connect(exc):
                raise openai.APIConnectionError(message=str(unreachable(exc)), request=request) from exc
            raise


def openai_client(*, api_key: str, base_url: str | None, max_retries: int, timeout_s: float) -> AsyncOpenAI:
    """The SDK's client over its aiohttp transport, as the Anthropic client is (agent/llm/anthropic.py)."""
    return AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout_s,
        http_client=ConnectOnceAioHttpClient(timeout=timeout_s, verify=tls_context()),
    )


def _connection_error(exc: openai.APIConnectionError) -> LLMUnavailable:
    """The SDK's retries are spent (it raises a connection error only then)."""
    if could_not_connect(exc):
        return unreachable(exc)
    return LLMUnavailable(f"Could not reach the model server: {type(exc).__name__}")


class OpenAIProvider:
    def __init__(
        self,
        client: AsyncOpenAI,
        *,
        stream_retries: int = 4,
        retry_base_delay_s: float = 0.5,
        fallback_retries: int | None = None,
    ) -> None:
        prime_openai_parsers()  # once per process: its first parse costs ~40 ms of CPU, better at start-up
        self._client = client
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
        params = chat_request(model, request)
        client, retries = (self._client, self._stream_retries) if last else (self._quick, self._fallback_retries)
        for attempt in range(retries + 1):
            started = time.perf_counter()
            builder = _ChunkBuilder()
            stream = None
            finished = False
            try:
                stream = await client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True}
                )
                async with stream:
                    yielded = time.perf_counter()
                    async for chunk in stream:
                        text = builder.add(chunk)
                        if text:
                            await on_text(text)
                        if time.perf_counter() - yielded > _YIELD_EVERY_S:
                            await asyncio.sleep(0)
                            yielded = time.perf_counter()
                if builder.finished:
                    finished = True
                    return builder.turn(time.perf_counter() - started)
                if attempt == retries:  # no finish_reason: the stream was cut off
                    raise LLMUnavailable("The model's reply was cut off before it ended; try again shortly.")
            except openai.APIStatusError as exc:  # the SDK has already retried 408/409/429/5xx
                raise _translate(exc) or _rejected(exc) from None
            except openai.APIConnectionError as exc:
                if stream is None:  # before the reply began: the SDK has retried it
                    raise _connection_error(exc) from None
                if (
                    attempt == retries
                ):  # the connection broke mid-stream (the SDK wraps it): the SDK retries only before
                    raise LLMUnavailable(f"The model's reply was cut off ({type(exc).__name__}); try again.") from None
            except openai.APIError as exc:  # an `error` object inside a 200 stream
                if attempt == retries or _stream_error(exc) is None:
                    failed = LLMConfigError(f"The model server failed the request: {exc.message}")
                    raise _stream_error(exc) or failed from None
            finally:
                if not finished and builder.usage.total:  # a usage chunk came, the reply did not end
                    on_usage(builder.usage)
            if builder.sent_text:
                await on_restart()
            await asyncio.sleep(self._retry_base_delay_s * 2**attempt * (0.5 + random.random() / 2))
        raise AssertionError("unreachable")

    async def complete(self, model: str, request: dict[str, Any], *, last: bool = True) -> ModelTurn:
        started = time.perf_counter()
        try:
            client = self._client if last else self._quick
            completion = await client.chat.completions.create(**chat_request(model, request))
        except openai.APIStatusError as exc:
            raise _translate(exc) or _rejected(exc) from None
        except openai.APIConnectionError as exc:
            raise _connection_error(exc) from None
        choice = completion.choices[0]
        content: list[dict[str, Any]] = []
        if choice.message.content and choice.message.content.strip():
            content.append({"type": "text", "text": choice.message.content})
        for call in choice.message.tool_calls or []:
            if call.type == "function":
                content.append(_tool_use(call.id, call.function.name, call.function.arguments))
        return ModelTurn(
            content=content,
            stop_reason=_STOP_REASONS.get(choice.finish_reason, choice.finish_reason),
            usage=_usage(completion.usage),
            elapsed_s=time.perf_counter() - started,
        )

    async def close(self) -> None:
        await self._client.close()


# --- the request, Messages API shape -> Chat Completions ---


def chat_request(model: str, request: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions parameters for a request already through `capabilities.translate`."""
    unknown = set(request) - {"max_tokens", "temperature", "system", "tools", "tool_choice", "messages"}
    if unknown:
        raise LLMConfigError(f"The OpenAI-compatible provider cannot send {sorted(unknown)}")
    messages: list[dict[str, Any]] = []
    system = request.get("system")
    if system:
        text = system if isinstance(system, str) else "\n\n".join(block["text"] for block in system)
        messages.append({"role": "system", "content": text})
    for message in request["messages"]:
        messages += _messages(message)
    params: dict[str, Any] = {"model": model, "messages": messages}
    reasoning = _REASONING_MODEL.match(model) is not None
    if "max_tokens" in request:
        params["max_completion_tokens" if reasoning else "max_tokens"] = request["max_tokens"]
    if request.get("temperature") is not None and not reasoning:
        params["temperature"] = request["temperature"]
    if request.get("tools"):
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool["input_schema"],
                },
            }
            for tool in request["tools"]
        ]
        if choice := request.get("tool_choice"):
            params["tool_choice"] = _tool_choice(choice)
    return params


def _tool_choice(choice: dict[str, Any]) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"any": "required", "none": "none"}.get(kind or "auto", "auto")


def _messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    texts = [block["text"] for block in blocks if block["type"] == "text" and block["text"].strip()]
    if message["role"] == "assistant":
        calls = [
            {
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": json.dumps(block["input"], ensure_ascii=False)},
            }
            for block in blocks
            if block["type"] == "tool_use"
        ]
        out: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
        if calls:
            out["tool_calls"] = calls
        return [out] if out["content"] or calls else []
    results = [
        {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result_text(block)}
        for block in blocks
        if block["type"] == "tool_result"
    ]
    return results + ([{"role": "user", "content": "\n\n".join(texts)}] if texts else [])


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    text = content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content)
    return f"Error: {text}" if block.get("is_error") else text


# --- the reply, Chat Completions stream -> a Messages-API-shaped turn ---


class _ChunkBuilder:
    """A streamed completion's text, tool calls (whose id and name come in the first delta of their
    index, their arguments in pieces after it), finish reason and usage (in a last chunk with no choices,
    asked for with `stream_options.include_usage`)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._current: dict[int | None, dict[str, Any]] = {}  # the call a delta's index continues
        self._finish: str | None = None
        self._usage = Usage()
        self.sent_text = False
        self.finished = False

    def add(self, chunk: Any) -> str:
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        text = ""
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self._text.append(delta.content)
                text += delta.content
            for call in delta.tool_calls or []:
                entry = self._entry(call.index, call.id)
                if call.function is not None:
                    # OpenAI sends the name whole in a call's first delta; some servers repeat it in every delta.
                    if call.function.name and call.function.name != entry["name"]:
                        entry["name"] += call.function.name
                    if call.function.arguments:
                        entry["arguments"].append(call.function.arguments)
            if choice.finish_reason:
                self._finish, self.finished = choice.finish_reason, True
        self.sent_text = self.sent_text or bool(text)
        return text

    def _entry(self, index: int | None, call_id: str | None) -> dict[str, Any]:
        """The call a delta belongs to. A new id at an index already in use is a new call: Ollama streams
        every call of a parallel batch at index 0 (ollama/ollama#15457), and some servers send no index."""
        entry = self._current.get(index)
        if entry is None or (call_id and entry["id"] and call_id != entry["id"]):
            entry = {"id": call_id or "", "name": "", "arguments": []}
            self._calls.append(entry)
            self._current[index] = entry
        elif call_id:
            entry["id"] = call_id
        return entry

    def turn(self, elapsed_s: float) -> ModelTurn:
        content: list[dict[str, Any]] = []
        text = "".join(self._text)
        if text.strip():
            content.append({"type": "text", "text": text})
        seen: set[str] = set()
        for call in self._calls:
            block = _tool_use(call["id"], call["name"], "".join(call["arguments"]))
            if block["id"] in seen:
                block["id"] = _new_call_id()
            seen.add(block["id"])
            content.append(block)
        stop = _STOP_REASONS.get(self._finish or "", self._finish)
        return ModelTurn(content=content, stop_reason=stop, usage=self._usage, elapsed_s=elapsed_s)

    @property
    def usage(self) -> Usage:
        return self._usage


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _tool_use(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    """A Messages-API `tool_use` block. A call without an id gets a unique one: an id repeated in a later
    round (`call_0` each time) is refused by the Messages API should a Claude model read this history."""
    tool_input = _tool_input(arguments)
    return {
        "type": "tool_use",
        "id": _TOOL_ID.sub("_", call_id) if call_id else _new_call_id(),
        "name": name,
        "input": tool_input if isinstance(tool_input, dict) else {},
    }


def _usage(usage: Any) -> Usage:
    """prompt_tokens counts the cached ones too (prompt_tokens_details.cached_tokens). Each count is checked
    (the SDK builds the object without validating the JSON): a server's bad count is refused here."""
    if usage_object("usage", usage) is None:
        return Usage()
    details = usage_object("prompt_tokens_details", getattr(usage, "prompt_tokens_details", None))
    cached = usage_count("prompt_tokens_details.cached_tokens", getattr(details, "cached_tokens", None))
    prompt = usage_count("prompt_tokens", getattr(usage, "prompt_tokens", None))
    completion = usage_count("completion_tokens", getattr(usage, "completion_tokens", None))
    total = usage_count("total_tokens", getattr(usage, "total_tokens", None))
    if total and getattr(usage, "prompt_tokens", None) is None and getattr(usage, "completion_tokens", None) is None:
        raise bad_usage("total_tokens", f"{total} with no prompt or completion tokens")  # would count as 0
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=completion, cache_read_tokens=cached)


# --- errors (https://platform.openai.com/docs/guides/error-codes) ---


def _body_error(body: object) -> dict[str, Any]:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return error
    return {}


def _translate(exc: openai.APIStatusError) -> LLMError | None:
    """The error as one of ours, or None for a request fault `_rejected` words."""
    error = _body_error(exc.body)
    code, message = str(error.get("code") or ""), str(error.get("message") or exc.message)
    reason: FallbackReason | None = None
    if exc.status_code in (429, 503) and (code == "server_is_overloaded" or "overloaded" in message.lower()):
        reason = "overloaded"  # 503 server_is_overloaded; older servers say so with a 429
    elif exc.status_code == 429:
        reason = "rate_limited"
    elif exc.status_code >= 500 or exc.status_code in (408, 409):  # a timeout or a conflict: transient
        reason = "unavailable"
    if reason is not None:
        return LLMUnavailable(
            f"The model is overloaded or rate limited ({exc.status_code}); try again shortly.", reason
        )
    if exc.status_code in (401, 403):
        return LLMConfigError(f"The model server refused the key ({exc.status_code}): check OPENAI_API_KEY.")
    if code == "context_length_exceeded" or any(words in message.lower() for words in _CONTEXT_OVERFLOW):
        return ContextOverflow(f"The conversation is longer than the model's context window: {message}")
    return None


def _rejected(exc: openai.APIStatusError) -> LLMError:
    error = _body_error(exc.body)
    message = str(error.get("message") or exc.message)
    return LLMConfigError(f"The model server rejected the request ({exc.status_code}): {message}")


def _stream_error(exc: openai.APIError) -> LLMError | None:
    """An error object in a 200 stream: a server error is worth asking again; anything else is not."""
    error = _body_error(exc.body)
    code = error.get("code")
    server_code = isinstance(code, int) and not isinstance(code, bool) and code >= 500  # vLLM: {"code": 500}
    kind = str(error.get("type") or "")
    if (
        kind in ("server_error", "internal_error", "InternalServerError")
        or server_code
        or "overloaded" in exc.message.lower()
    ):
        return LLMUnavailable(f"The model server failed mid-reply: {exc.message}")
    return None
