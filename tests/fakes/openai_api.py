"""A fake of OpenAI's Chat Completions API (what vLLM, Ollama and OpenAI itself serve): a real HTTP server
that validates requests as the API does and answers in its wire format (JSON, or SSE when `stream` is
true, ending in `data: [DONE]`).

Tests script the replies (`fake.script(Reply(...), ...)`) or give a model a behaviour of its own
(`fake.for_model("m", Failure(...))`); every request is recorded.

Sources, cited rule by rule below: the API reference for Create chat completion
(https://platform.openai.com/docs/api-reference/chat/create), the chunk object
(https://platform.openai.com/docs/api-reference/chat-streaming/streaming), the error codes guide
(https://platform.openai.com/docs/guides/error-codes), and the `openai` SDK's own generated types
(openai/types/chat/completion_create_params.py, chat_completion_chunk.py, completion_usage.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.http_server import HUNG_UP, ScriptedFake

# Prompt caching: automatic for prompts of 1,024 tokens or more, in 128-token steps
# (https://platform.openai.com/docs/guides/prompt-caching).
MIN_CACHED_TOKENS, CACHE_STEP = 1024, 128
# tools[].function.name: "a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64"
# (FunctionDefinition.name in the reference); at most 128 tools.
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOLS = 128
# The request body's fields (CompletionCreateParamsBase in completion_create_params.py). Anything else is
# refused: "Unrecognized request argument supplied: <name>".
KNOWN_FIELDS = {
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
    "safety_identifier", "seed", "service_tier", "stop", "store", "stream", "stream_options", "temperature",
    "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
}  # fmt: skip
ROLES = ("developer", "system", "user", "assistant", "tool", "function")


@dataclass
class Reply:
    """One assistant message: optional text, then tool calls as (name, arguments) pairs. `usage`: fields of
    the usage object sent as given, over the fake's own counts, as a hostile server or a buggy gateway might
    report them (`{"completion_tokens": -100000000}`): CompletionUsage's prompt_tokens, completion_tokens,
    total_tokens and prompt_tokens_details (openai/types/completion_usage.py), in a whole completion and in
    a stream's last chunk."""

    text: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int = 20
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass
class Failure:
    """An HTTP error in the API's shape: {"error": {"message", "type", "param", "code"}}."""

    status: int
    type: str
    message: str = "error"
    code: str | None = None
    retry_after_ms: int | None = 1


# The error codes guide's cases (https://platform.openai.com/docs/guides/error-codes):
def rate_limited() -> Failure:  # 429 - Rate limit reached for requests
    return Failure(429, "requests", "Rate limit reached for requests", "rate_limit_exceeded")


def server_error() -> Failure:  # 500 - The server had an error while processing your request
    return Failure(500, "server_error", "The server had an error while processing your request. Sorry about that!")


def overloaded() -> Failure:  # 503 - The engine is currently overloaded, please try again later
    return Failure(503, "server_error", "The engine is currently overloaded, please try again later.")


@dataclass
class MidStreamError:
    """A 200 stream that sends some text, then an error object in a `data:` line, as the SDK's stream
    reader expects one (openai/_streaming.py raises APIError on a chunk with an `error` key)."""

    partial_text: str = "Partial "
    type: str = "server_error"


@dataclass
class CutOff:
    """A 200 stream that sends some text, then the connection breaks (a proxy or the network dropped it):
    no finish_reason, no `data: [DONE]`, no last chunk."""

    partial_text: str = "Partial "


Scripted = Reply | Failure | MidStreamError | CutOff | Callable[[dict[str, Any]], Any]


class ValidationError(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


class FakeOpenAI(ScriptedFake):
    def __init__(self, *, api_key: str = "test-openai-key", context_tokens: int = 128_000) -> None:
        super().__init__(_Handler, "fake-openai")
        self.api_key = api_key
        self.context_tokens = context_tokens
        self._prefixes: set[str] = set()

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL is set to: the SDK appends `/chat/completions`."""
        return f"{self.address}/v1"

    def reset(self) -> None:
        with self._lock:
            self._clear()
            self._prefixes.clear()

    def _no_reply(self) -> Scripted:
        return Failure(500, "server_error", "fake: no scripted reply left for this request")

    # --- usage, with automatic prefix caching simulated ---

    def usage(self, body: dict[str, Any], completion_tokens: int) -> dict[str, Any]:
        prompt = [json.dumps(m, sort_keys=True) for m in body["messages"]]
        tools = json.dumps(body.get("tools", []), sort_keys=True)
        # One cache per model, keyed on the prefix: tools, then the messages in order.
        digest = hashlib.sha256(f"{body['model']}\n{tools}".encode())
        total, cached, running = _tokens(tools), 0, _tokens(tools)
        with self._lock:
            for text in prompt:
                digest.update(text.encode())
                running += _tokens(text)
                key = digest.hexdigest()
                if key in self._prefixes and running >= MIN_CACHED_TOKENS:
                    cached = running - running % CACHE_STEP
                self._prefixes.add(key)
            total = running
        # CompletionUsage: prompt_tokens counts the cached ones; the details say how many were cached.
        return {
            "prompt_tokens": total,
            "completion_tokens": completion_tokens,
            "total_tokens": total + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }

    # --- validation, as the API does it (Create chat completion's request body) ---

    def validate(self, headers: Any, body: Any) -> None:
        # Authentication: "Authorization: Bearer OPENAI_API_KEY" (API reference, Authentication).
        if (headers.get("authorization") or "") != f"Bearer {self.api_key}":
            raise PermissionError("Incorrect API key provided. You can find your API key at the account page.")
        if not isinstance(body, dict):
            raise ValidationError("We could not parse the JSON body of your request.")
        for name in body:
            if name not in KNOWN_FIELDS:
                raise ValidationError(f"Unrecognized request argument supplied: {name}", name)
        # model, messages: Required.
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise ValidationError("you must provide a model parameter", "model")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise ValidationError("'messages' must contain at least one message", "messages", "empty_array")
        _validate_numbers(body)
        _validate_reasoning_model(body)
        # stream_options: "Options for streaming response. Only set this when you set stream: true."
        if body.get("stream_options") is not None:
            if body.get("stream") is not True:
                raise ValidationError(
                    "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
                )
            if set(body["stream_options"]) - {"include_usage", "include_obfuscation"}:
                raise ValidationError("Unrecognized stream_options field", "stream_options")
        # parallel_tool_calls: "Whether to enable parallel function calling during tool use": tools only.
        if body.get("parallel_tool_calls") is not None and body.get("tools") is None:
            raise ValidationError(
                "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are "
                "specified.",
                "parallel_tool_calls",
            )
        _validate_tools(body.get("tools"), body.get("tool_choice"))
        _validate_messages(body["messages"])


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _validate_numbers(body: dict[str, Any]) -> None:
    # max_tokens / max_completion_tokens: integer or null; temperature: "between 0 and 2"; n: "how many
    # chat completion choices" (an integer, 1 to 128).
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValidationError(
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {value} instead.",
                name,
                "integer_below_min_value",
            )
    temperature = body.get("temperature")
    if temperature is not None and not (isinstance(temperature, int | float) and 0 <= temperature <= 2):
        raise ValidationError(f"Invalid 'temperature': must be between 0 and 2, got {temperature}.", "temperature")
    if body.get("n") not in (None, 1):
        raise ValidationError("The fake answers one choice only (n=1)", "n")


# Reasoning models (o-series, gpt-5): `max_tokens` "is not compatible with o-series models" (API reference,
# Create chat completion, max_tokens); they take only the default temperature (the reasoning guide).
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def _validate_reasoning_model(body: dict[str, Any]) -> None:
    if not _REASONING_MODEL.match(body["model"]):
        return
    if body.get("max_tokens") is not None:
        raise ValidationError(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
            "instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    if body.get("temperature") not in (None, 1):
        raise ValidationError(
            f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. Only the "
            "default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )


def _validate_tools(tools: Any, tool_choice: Any) -> None:
    if tools is None:
        # tool_choice: "`none` is the default when no tools are present" and a choice needs tools.
        if tool_choice is not None:
            raise ValidationError(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                "tool_choice",
            )
        return
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise ValidationError(f"Invalid 'tools': expected an array of at most {MAX_TOOLS} tools.", "tools")
    names = []
    for index, tool in enumerate(tools):
        # ChatCompletionFunctionToolParam: {"type": "function", "function": FunctionDefinition}.
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise ValidationError(f"Invalid value for 'tools[{index}].type': expected 'function'.", f"tools[{index}]")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            raise ValidationError(
                f"Invalid 'tools[{index}].function.name': string does not match pattern. Expected a string that "
                "matches the pattern '^[a-zA-Z0-9_-]+$'.",
                f"tools[{index}].function.name",
                "invalid_value",
            )
        # parameters: "described as a JSON Schema object"; its top level must be an object schema.
        parameters = function.get("parameters")
        if parameters is not None and (not isinstance(parameters, dict) or parameters.get("type") != "object"):
            raise ValidationError(
                f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"'.",
                f"tools[{index}].function.parameters",
                "invalid_function_parameters",
            )
        if set(function) - {"name", "description", "parameters", "strict"}:
            raise ValidationError(f"Unrecognized field in 'tools[{index}].function'", f"tools[{index}].function")
        names.append(name)
    # tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
    if tool_choice is None or tool_choice in ("none", "auto", "required"):
        return
    if (
        isinstance(tool_choice, dict)
        and tool_choice.get("type") == "function"
        and isinstance(tool_choice.get("function"), dict)
    ):
        if tool_choice["function"].get("name") not in names:
            raise ValidationError("Invalid 'tool_choice': the named function is not in 'tools'.", "tool_choice")
        return
    raise ValidationError("Invalid value for 'tool_choice'.", "tool_choice")


def _unanswered(pending: set[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(pending))}"
    )


def _validate_messages(messages: list[Any]) -> None:
    pending: set[str] = set()  # tool_call ids of the last assistant message still waiting for a tool message
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ValidationError(f"Invalid value for '{where}.role'.", f"{where}.role")
        role, content = message["role"], message.get("content")
        if pending and role != "tool":
            # "An assistant message with 'tool_calls' must be followed by tool messages responding to each
            # 'tool_call_id'."
            raise ValidationError(
                _unanswered(pending),
                f"{where}.role",
            )
        if role == "tool":
            # ChatCompletionToolMessageParam: content and tool_call_id are Required, and the id must answer a
            # call of the preceding assistant message.
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                raise ValidationError(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'.",
                    f"{where}.role",
                )
            pending.discard(call_id)
            _content(content, where, required=True)
        elif role == "assistant":
            # ChatCompletionAssistantMessageParam: content "Required unless tool_calls or function_call is specified".
            calls = message.get("tool_calls")
            if calls is not None:
                pending = _tool_calls(calls, where)
            _content(content, where, required=not calls)
        else:
            _content(content, where, required=True)
        unknown = set(message) - {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "audio"}
        if unknown:
            raise ValidationError(f"Unrecognized field in '{where}': {sorted(unknown)[0]}", where)
    if pending:
        raise ValidationError(
            _unanswered(pending),
            "messages",
        )


def _content(content: Any, where: str, *, required: bool) -> None:
    if content is None:
        if required:
            raise ValidationError(f"Invalid value for '{where}.content': expected a string, got null.", where)
        return
    if isinstance(content, str):
        return
    # An array of content parts: text parts {"type": "text", "text": ...} (the fake takes text only).
    if not isinstance(content, list) or not content:
        raise ValidationError(f"Invalid '{where}.content': expected a string or an array of content parts.", where)
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ValidationError(f"Invalid '{where}.content': the fake takes text parts only.", where)


def _tool_calls(calls: Any, where: str) -> set[str]:
    if not isinstance(calls, list) or not calls:
        raise ValidationError(f"Invalid '{where}.tool_calls': empty array.", f"{where}.tool_calls")
    ids = set()
    for position, call in enumerate(calls):
        # ChatCompletionMessageFunctionToolCallParam: id, type "function", function {name, arguments (a string)}.
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise ValidationError(f"Invalid '{where}.tool_calls[{position}]'.", f"{where}.tool_calls[{position}]")
        ids.add(call["id"])
    return ids


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/v1/chat/completions":
            return self._error(Failure(404, "invalid_request_error", f"Invalid URL (POST {self.path})"))
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            self.fake.validate(self.headers, body)
        except PermissionError as exc:
            return self._error(Failure(401, "invalid_request_error", str(exc), "invalid_api_key"))
        except ValidationError as exc:
            return self._error(Failure(400, "invalid_request_error", str(exc), exc.code), exc.param)
        except json.JSONDecodeError:
            return self._error(
                Failure(400, "invalid_request_error", "We could not parse the JSON body of your request.")
            )
        reply = self.fake._next(body, self.connection)
        if reply is HUNG_UP:  # its client is gone: nothing to answer, and the script keeps its reply
            self.close_connection = True
            return None
        if callable(reply) and not isinstance(reply, Reply | Failure | MidStreamError | CutOff):
            try:
                reply = reply(body)
            except Exception as exc:  # a script with no reply for this call: refused at once, never retried
                return self._error(Failure(400, "invalid_request_error", f"fake: the scripted reply failed: {exc!r}"))
        if isinstance(reply, Failure):
            return self._error(reply)
        if isinstance(reply, Reply) and self._too_long(body):
            return self._error(
                Failure(
                    400,
                    "invalid_request_error",
                    f"This model's maximum context length is {self.fake.context_tokens} tokens. However, your "
                    "messages resulted in more tokens. Please reduce the length of the messages.",
                    "context_length_exceeded",
                ),
                "messages",
            )
        if body.get("stream"):
            return self._stream(body, reply)
        if not isinstance(reply, Reply):
            return self._error(Failure(500, "server_error", "fake: this reply only works with stream=true"))
        self._json(200, self._completion(body, reply))

    def _too_long(self, body: dict[str, Any]) -> bool:
        return _tokens(json.dumps(body["messages"])) > self.fake.context_tokens

    # --- responses ---

    def _json(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, failure: Failure, param: str | None = None) -> None:
        # The error object: {"error": {"message", "type", "param", "code"}} (error codes guide; the SDK reads
        # `body["error"]`). Retry hints as the API sends them: retry-after-ms, which the SDK honours.
        extra = {"retry-after-ms": str(failure.retry_after_ms)} if failure.retry_after_ms is not None else {}
        error = {"message": failure.message, "type": failure.type, "param": param, "code": failure.code}
        self._json(failure.status, {"error": error}, extra)

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        calls = _calls(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(reply)}],
            "usage": {**self.fake.usage(body, reply.completion_tokens), **reply.usage},
        }

    def _stream(self, body: dict[str, Any], reply: Any) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
            # "usage ... contains a null value except for the last chunk" when include_usage is set.
            data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            self._send({**data, "usage": None} if include_usage else data)

        try:
            chunk({"role": "assistant", "content": "", "refusal": None})
            if isinstance(reply, CutOff):
                chunk({"content": reply.partial_text})
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # EOF inside the chunked body
                return
            if isinstance(reply, MidStreamError):
                chunk({"content": reply.partial_text})
                self._send(
                    {"error": {"message": "The server had an error", "type": reply.type, "param": None, "code": None}}
                )
            else:
                for piece in re.findall(r"\S+\s*|\s+", reply.text):
                    chunk({"content": piece})
                for index, call in enumerate(_calls(reply)):
                    # The first delta of a call carries its index, id, type and name; arguments follow in pieces.
                    head = {"index": index, "id": call["id"], "type": "function"}
                    chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
                    arguments = call["function"]["arguments"]
                    for start in range(0, len(arguments), 40):
                        piece = arguments[start : start + 40]
                        chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                chunk({}, _finish(reply))
                if include_usage:
                    # An extra chunk: "choices" empty, "usage" the whole request's (stream_options.include_usage).
                    usage = {**self.fake.usage(body, reply.completion_tokens), **reply.usage}
                    self._send({**base, "choices": [], "usage": usage})
            self._frame(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send(self, data: dict[str, Any]) -> None:
        self._frame(f"data: {json.dumps(data)}\n\n".encode())

    def _frame(self, frame: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.flush()


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
        }
        for name, arguments in reply.tool_calls
    ]


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
