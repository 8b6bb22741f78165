"""A fake of the Anthropic Messages API: a real HTTP server that validates requests the way the API
does and answers in its wire format (JSON, or SSE when `stream` is true).

Tests script the replies (`fake.script(Reply(...), ...)`) or give a model a behaviour of its own
(`fake.for_model("claude-x", Failure(529, "overloaded_error"))`: a model that is persistently
overloaded while the others answer from the script); every request is recorded. Prompt
caching is simulated from the request's `cache_control` breakpoints, one cache per model, so usage
figures (`cache_read_input_tokens`, `cache_creation_input_tokens`) behave like the real thing.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.http_server import HUNG_UP, ScriptedFake

# Claude on Vertex AI (https://docs.anthropic.com/en/api/claude-on-vertex-ai): the model is in the path,
# `:streamRawPredict` streams, `:rawPredict` does not, and the API version goes in the body.
_VERTEX_PATH = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/publishers/anthropic/models/"
    r"(?P<model>[^/:]+):(?P<specifier>streamRawPredict|rawPredict)$"
)
MIN_CACHEABLE_TOKENS = 1024
MAX_CACHE_BREAKPOINTS = 4
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


@dataclass
class Reply:
    """One assistant turn: optional thinking (only when the request enables it), optional text, then tool
    calls as (name, input) pairs. `pauses`: streamed, the text stalls after its n-th piece (a word and its
    space) until the event is set (at most 30 s). `usage`: fields of the usage object sent as given, over
    the fake's own counts, as a hostile server or a buggy gateway might report them (`{"output_tokens":
    -100000000}`): the Messages API's usage object (input_tokens, output_tokens, cache_read_input_tokens,
    cache_creation_input_tokens; https://docs.anthropic.com/en/api/messages), in the whole message, in a
    stream's message_start and, for output_tokens, its message_delta (whose counts are cumulative)."""

    text: str = ""
    thinking: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    output_tokens: int = 20
    pauses: dict[int, threading.Event] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass
class Failure:
    """An HTTP error response (overload 529, rate limit 429, bad request 400, ...)."""

    status: int
    error_type: str
    message: str = "error"
    retry_after_ms: int | None = 1


@dataclass
class MidStreamFailure:
    """A 200 stream that sends some text, then an `error` event (e.g. overloaded_error)."""

    error_type: str = "overloaded_error"
    partial_text: str = "Partial "


class _Dropped(Exception):
    """The fake broke the connection on purpose (CutOff)."""


@dataclass
class CutOff:
    """A 200 stream that sends some text, then the connection breaks (a proxy or the network dropped it):
    no error event, no last chunk."""

    partial_text: str = "Partial "


@dataclass
class Hang:
    """Start a stream and stall until `release` is set or the client goes away."""

    release: threading.Event = field(default_factory=threading.Event)


Scripted = Reply | Failure | MidStreamFailure | CutOff | Hang | Callable[[dict[str, Any]], Any]


class ValidationError(Exception):
    pass


class FakeAnthropic(ScriptedFake):
    def __init__(self, *, latency_s: float = 0.0, api_key: str = "test-key") -> None:
        super().__init__(_Handler, "fake-anthropic")
        self.latency_s = self._latency_s = latency_s
        self.api_key = api_key
        self.disconnects = 0
        self._cache: dict[str, int] = {}

    # --- control ---

    @property
    def base_url(self) -> str:
        return self.address

    def reset(self) -> None:
        with self._lock:
            self._clear()
            self._cache.clear()
            self.disconnects = 0
            self.latency_s = self._latency_s

    def _no_reply(self) -> Scripted:
        return Failure(500, "api_error", "fake: no scripted reply left for this request")

    # --- validation, as the real API does it ---

    def validate(self, headers: Any, body: Any) -> None:
        # Current SDKs send the key as a bearer token; older ones as x-api-key. The API takes both.
        bearer = (headers.get("authorization") or "").removeprefix("Bearer ")
        if self.api_key not in (headers.get("x-api-key"), bearer):
            raise PermissionError("invalid x-api-key")
        if not isinstance(body, dict):
            raise ValidationError("request body must be a JSON object")
        if not headers.get("anthropic-version") and "_vertex" not in body:  # Vertex: the version is in the body
            raise ValidationError("anthropic-version: header is required")
        for name, kind in (("model", str), ("max_tokens", int), ("messages", list)):
            if not isinstance(body.get(name), kind):
                raise ValidationError(f"{name}: Field required")
        if body["max_tokens"] < 1:
            raise ValidationError("max_tokens: must be greater than or equal to 1")
        _validate_thinking(body.get("thinking"), body["max_tokens"])
        _validate_system(body.get("system"))
        _validate_tools(body.get("tools", []), body.get("tool_choice"))
        _validate_messages(body["messages"])
        if (body.get("thinking") or {}).get("type") == "enabled":
            _validate_thinking_turns(body["messages"])
        breakpoints = len(_cache_points(body))
        if breakpoints > MAX_CACHE_BREAKPOINTS:
            raise ValidationError(
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
            )

    # --- prompt caching, simulated ---

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        units = _prefix_units(body)
        total = sum(tokens for _, tokens in units)
        points = _cache_points(body)
        with self._lock:
            read = 0
            # A cache belongs to one model: another model reads none of it
            # (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
            running, digest = 0, hashlib.sha256(str(body.get("model")).encode())
            prefix_at: dict[int, tuple[str, int]] = {}
            for index, (text, tokens) in enumerate(units):
                digest.update(text.encode())
                running += tokens
                prefix_at[index] = (digest.copy().hexdigest(), running)
            for index in points:
                key, tokens = prefix_at[index]
                if key in self._cache:
                    read = max(read, tokens)
            written = 0
            for index in points:
                key, tokens = prefix_at[index]
                if tokens >= MIN_CACHEABLE_TOKENS and key not in self._cache:
                    self._cache[key] = tokens
                    written = max(written, tokens - read)
        return {
            "input_tokens": total - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4)


def _strip_cache(block: Any) -> Any:
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


def _blocks(body: dict[str, Any]) -> list[tuple[str, int, bool]]:
    """The request in cache order (tools, system, messages): per block, its canonical text, its
    token estimate, and whether it carries a cache breakpoint."""
    blocks: list[tuple[str, Any]] = [("tool", tool) for tool in body.get("tools", [])]
    system = body.get("system") or []
    blocks += [("system", b) for b in ([{"type": "text", "text": system}] if isinstance(system, str) else system)]
    for message in body.get("messages", []):
        content = message["content"]
        blocks += [
            (message["role"], b) for b in ([{"type": "text", "text": content}] if isinstance(content, str) else content)
        ]
    return [
        (
            where + json.dumps(_strip_cache(block), sort_keys=True),
            _tokens(_strip_cache(block)),
            bool(block.get("cache_control")),
        )
        for where, block in blocks
    ]


def _prefix_units(body: dict[str, Any]) -> list[tuple[str, int]]:
    return [(text, tokens) for text, tokens, _ in _blocks(body)]


def _cache_points(body: dict[str, Any]) -> list[int]:
    return [index for index, (_, _, marked) in enumerate(_blocks(body)) if marked]


def _validate_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise ValidationError("system: Input should be a valid list")
    for index, block in enumerate(system):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise ValidationError(f"system.{index}: Input tag does not match expected 'text'")
        if not block["text"].strip():
            raise ValidationError(f"system.{index}.text: text content blocks must be non-empty")


def _validate_thinking(thinking: Any, max_tokens: int) -> None:
    """https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking: budget_tokens at least 1,024
    and below max_tokens."""
    if thinking is None or thinking.get("type") in ("disabled", "adaptive"):
        return
    if thinking.get("type") != "enabled":
        raise ValidationError("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        raise ValidationError("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if budget >= max_tokens:
        raise ValidationError("`max_tokens` must be greater than `thinking.budget_tokens`")


def _validate_thinking_turns(messages: list[Any]) -> None:
    """With thinking on, the assistant turn whose tool calls the last user message answers must start with its
    thinking block, passed back unchanged (extended-thinking docs, "Preserving thinking blocks")."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last is None or isinstance(last["content"], str):
        return
    kinds = [block.get("type") for block in last["content"]]
    if "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking"):
        raise ValidationError(
            f"messages.{messages.index(last)}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{kinds[0]}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block."
        )
    for block in last["content"]:
        if block.get("type") == "thinking" and not (isinstance(block.get("signature"), str) and block["signature"]):
            raise ValidationError("thinking blocks must be passed back with their signature")


def _validate_tools(tools: Any, tool_choice: Any) -> None:
    if not isinstance(tools, list):
        raise ValidationError("tools: Input should be a valid list")
    for index, tool in enumerate(tools):
        if not isinstance(tool.get("name"), str) or not _TOOL_NAME.match(tool["name"]):
            raise ValidationError(f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ValidationError(f"tools.{index}.input_schema: JSON schema is invalid - type must be 'object'")
        for key in schema.get("required", []):
            if key not in schema.get("properties", {}):
                raise ValidationError(f"tools.{index}.input_schema: required property {key!r} is not defined")
        unknown = set(tool) - {"name", "description", "input_schema", "cache_control", "type"}
        if unknown:
            raise ValidationError(f"tools.{index}.{sorted(unknown)[0]}: Extra inputs are not permitted")
    if tool_choice is not None and tool_choice.get("type") not in ("auto", "any", "tool", "none"):
        raise ValidationError("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")


def _validate_messages(messages: list[Any]) -> None:
    if not messages:
        raise ValidationError("messages: at least one message is required")
    if messages[0].get("role") != "user":
        raise ValidationError('messages: first message must use the "user" role')
    previous_tool_uses: set[str] = set()
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise ValidationError(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            raise ValidationError(f"messages.{index}: content must be a non-empty string or list")
        tool_uses, tool_results, seen_other = set(), set(), False
        for position, block in enumerate(blocks):
            kind = block.get("type")
            where = f"messages.{index}.content.{position}"
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"].strip():
                    raise ValidationError(f"{where}.text: text content blocks must be non-empty")
                seen_other = True
            elif kind == "tool_use":
                if role != "assistant":
                    raise ValidationError(f"{where}: tool_use blocks are only allowed in assistant messages")
                if not isinstance(block.get("input"), dict):
                    raise ValidationError(f"{where}.input: Input should be a valid dictionary")
                tool_uses.add(block["id"])
            elif kind in ("thinking", "redacted_thinking"):
                if role != "assistant":
                    raise ValidationError(f"{where}: thinking blocks are only allowed in assistant messages")
            elif kind == "tool_result":
                if role != "user":
                    raise ValidationError(f"{where}: tool_result blocks are only allowed in user messages")
                if seen_other:
                    raise ValidationError(f"messages.{index}: tool_result blocks must come before any other content")
                if block.get("tool_use_id") not in previous_tool_uses:
                    raise ValidationError(
                        f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
                result_content = block.get("content")
                if isinstance(result_content, list):
                    for inner in result_content:
                        if inner.get("type") == "text" and not inner.get("text", "").strip():
                            raise ValidationError(f"{where}.content: text content blocks must be non-empty")
                tool_results.add(block["tool_use_id"])
            else:
                raise ValidationError(f"{where}.type: unknown content block type {kind!r}")
        if previous_tool_uses - tool_results:
            missing = ", ".join(sorted(previous_tool_uses - tool_results))
            raise ValidationError(
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{missing}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
            )
        previous_tool_uses = tool_uses
    if previous_tool_uses:
        raise ValidationError(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks immediately after"
        )


def _from_vertex(route: re.Match[str], body: Any) -> dict[str, Any]:
    """A Vertex request as the Messages API request it stands for (its model taken from the path)."""
    if not isinstance(body, dict):
        raise ValidationError("request body must be a JSON object")
    if "model" in body:
        raise ValidationError("model: Extra inputs are not permitted (on Vertex AI the model is in the URL)")
    if not isinstance(body.pop("anthropic_version", None), str):
        raise ValidationError("anthropic_version: Field required")
    if (route["specifier"] == "streamRawPredict") != bool(body.get("stream")):
        raise ValidationError("stream: streamRawPredict streams and rawPredict does not")
    return {**body, "model": route["model"], "_vertex": {"project": route["project"], "region": route["region"]}}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event leaves when written, as from the real service

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        vertex = _VERTEX_PATH.match(path)
        if path != "/v1/messages" and vertex is None:
            return self._error(404, "not_found_error", f"Not found: {self.path}")
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            if vertex is not None:
                body = _from_vertex(vertex, body)
            self.fake.validate(self.headers, body)
        except PermissionError as exc:
            return self._error(401, "authentication_error", str(exc))
        except (ValidationError, json.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
            return self._error(400, "invalid_request_error", str(exc))
        reply = self.fake._next(body, self.connection)
        if reply is HUNG_UP:  # its client is gone: nothing to answer, and the script keeps its reply
            self.close_connection = True
            return None
        if callable(reply) and not isinstance(reply, Reply | Failure | MidStreamFailure | CutOff | Hang):
            try:
                reply = reply(body)
            except Exception as exc:  # a script with no reply for this call: refused at once, never retried
                return self._error(400, "invalid_request_error", f"fake: the scripted reply failed: {exc!r}")
        if self.fake.latency_s:
            time.sleep(self.fake.latency_s)
        if isinstance(reply, Failure):
            return self._error(reply.status, reply.error_type, reply.message, reply.retry_after_ms)
        if body.get("stream"):
            return self._stream(body, reply)
        if isinstance(reply, Hang):
            reply.release.wait(60)
            reply = Reply(text="[]")
        if not isinstance(reply, Reply):
            return self._error(500, "api_error", "fake: this reply only works with stream=true")
        self._json(200, _message(body, reply, self.fake.usage(body)))

    # --- responses ---

    def _json(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, kind: str, message: str, retry_after_ms: int | None = None) -> None:
        extra = {"retry-after-ms": str(retry_after_ms)} if retry_after_ms is not None else {}
        if status in (429, 529, 500):
            extra["x-should-retry"] = "true"
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}}, extra)

    def _stream(self, body: dict[str, Any], reply: Any) -> None:
        # The API streams over a kept-alive HTTP/1.1 connection in chunked transfer coding (RFC 9112 §7.1),
        # so a client reuses its connection for the next call; a fake that closed each stream would make
        # every call pay a new connection the real service never asks for.
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        self.end_headers()
        try:
            self._events(body, reply)
            self.wfile.write(b"0\r\n\r\n")  # the last chunk: the response ends, the connection stays
            self.wfile.flush()
        except _Dropped:
            pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            with self.fake._lock:
                self.fake.disconnects += 1

    def _events(self, body: dict[str, Any], reply: Any) -> None:
        usage = self.fake.usage(body)
        if isinstance(reply, Hang):
            self._send("message_start", {"type": "message_start", "message": _message(body, Reply(), usage, [])})
            while not reply.release.wait(0.05):
                self._send("ping", {"type": "ping"})
            return
        if isinstance(reply, CutOff):
            self._send("message_start", {"type": "message_start", "message": _message(body, Reply(), usage, [])})
            self._text_block(0, reply.partial_text)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # EOF inside the chunked body
            raise _Dropped
        if isinstance(reply, MidStreamFailure):
            self._send("message_start", {"type": "message_start", "message": _message(body, Reply(), usage, [])})
            self._text_block(0, reply.partial_text)
            self._send("error", {"type": "error", "error": {"type": reply.error_type, "message": "Overloaded"}})
            return
        message = _message(body, reply, usage)
        start_usage = {**message["usage"], "output_tokens": reply.usage.get("output_tokens", 1)}
        start = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        self._send("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                self._text_block(index, block["text"], reply.pauses)
            elif block["type"] == "thinking":
                self._thinking_block(index, block)
            else:
                self._tool_block(index, block)
        self._send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
        self._send("message_stop", {"type": "message_stop"})

    def _text_block(self, index: int, text: str, pauses: dict[int, threading.Event] | None = None) -> None:
        self._send(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        for number, piece in enumerate(re.findall(r"\S+\s*|\s+", text) or [text], start=1):
            self._send(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
            )
            if pauses and number in pauses:
                pauses[number].wait(30)
        self._send("content_block_stop", {"type": "content_block_stop", "index": index})

    def _thinking_block(self, index: int, block: dict[str, Any]) -> None:
        """https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#streaming-thinking: thinking_delta
        events, then one signature_delta before the block stops."""
        start = {"type": "thinking", "thinking": "", "signature": ""}
        self._send("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        for piece in re.findall(r"\S+\s*|\s+", block["thinking"]):
            delta = {"type": "thinking_delta", "thinking": piece}
            self._send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        delta = {"type": "signature_delta", "signature": block["signature"]}
        self._send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        self._send("content_block_stop", {"type": "content_block_stop", "index": index})

    def _tool_block(self, index: int, block: dict[str, Any]) -> None:
        self._send(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
        )
        raw = json.dumps(block["input"])
        for start in range(0, len(raw), 40):
            self._send(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": raw[start : start + 40]},
                },
            )
        self._send("content_block_stop", {"type": "content_block_stop", "index": index})

    def _send(self, event: str, data: dict[str, Any]) -> None:
        frame = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.flush()


def _message(body: dict[str, Any], reply: Reply, usage: dict[str, int], content: Any = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking and (body.get("thinking") or {}).get("type") == "enabled":
        signature = hashlib.sha256(f"{body['model']}:{reply.thinking}".encode()).hexdigest()
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for name, tool_input in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": tool_input})
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": blocks if content is None else content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": reply.output_tokens, **reply.usage},
    }
