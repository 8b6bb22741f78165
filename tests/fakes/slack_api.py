"""A fake of Slack's Web API: a real HTTP server that checks tokens and arguments the way Slack does,
keeps an in-memory workspace (channels, threads, metadata, users, files) and answers in Slack's wire
format: HTTP 200 with `ok: false` for errors, 429 with `Retry-After` when a method goes over its rate-limit
tier (slack_limits.py).

Point slack_sdk at it with `AsyncWebClient(token=fake.bot_token, base_url=fake.base_url)`. Every call is
recorded (`fake.calls("chat.postMessage")`); failures are scripted per method (`fake.fail(...)`,
`fake.ratelimit(...)`, `fake.disable(...)`). Socket Mode is served by `FakeSocketMode`, which
apps.connections.open points to when one is attached.

The bot token holds the bot scopes of the app's manifest in docs/slack.md (slack_manifest.py), unless
others are given; a method whose scope it lacks answers `missing_scope` (slack_scopes.py).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes import slack_manifest, slack_scopes
from tests.fakes.http_server import FakeServer
from tests.fakes.slack_limits import RateLimits, sent_at
from tests.fakes.slack_methods import WebApi
from tests.fakes.slack_rules import SlackError
from tests.fakes.slack_socket_mode import Ack, FakeSocketMode
from tests.fakes.slack_workspace import (
    APP_ID,
    BOT_ID,
    BOT_USER_ID,
    DM_ID,
    GENERAL_ID,
    HUMAN_EMAIL,
    HUMAN_ID,
    TEAM_ID,
    Channel,
    Stream,
    UploadedFile,
    User,
    UserGroup,
    Workspace,
    ts_key,
)

__all__ = [
    "APP_ID",
    "BOT_ID",
    "BOT_USER_ID",
    "DM_ID",
    "GENERAL_ID",
    "HUMAN_EMAIL",
    "HUMAN_ID",
    "TEAM_ID",
    "Ack",
    "Call",
    "Channel",
    "Failure",
    "FakeSlack",
    "FakeSocketMode",
    "Stream",
    "UploadedFile",
    "User",
    "UserGroup",
]

APP_TOKEN_METHODS = {"apps.connections.open"}
JSON_ARGS = ("blocks", "attachments", "metadata", "chunks", "prompts", "files", "loading_messages", "view")


@dataclass
class Call:
    """One request as the fake received it. `args` has JSON-string arguments (blocks, metadata, ...)
    decoded, whichever transport carried them; the token is not among them."""

    method: str
    args: dict[str, Any]
    headers: dict[str, str]
    transport: str  # "json", "form", "multipart" or "query"
    status: int
    response: dict[str, Any]
    scopes: tuple[str, ...] = ()  # the bot scopes that each allow this call (none needed: empty)
    refused_scope: bool = False  # refused for a scope the token lacks (not a scripted missing_scope)

    @property
    def ok(self) -> bool:
        return bool(self.response.get("ok"))

    @property
    def error(self) -> str | None:
        return self.response.get("error")


@dataclass
class Failure:
    """A scripted answer for a method: `error` with HTTP `status`, `times` times (None: until reset)."""

    error: str
    status: int = 200
    retry_after: int | None = None
    times: int | None = 1
    extra: dict[str, Any] = field(default_factory=dict)


class FakeSlack:
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-test-token",
        app_token: str = "xapp-1-test-token",
        bot_name: str = "analyst",
        socket_mode: FakeSocketMode | None = None,
        scopes: frozenset[str] | None = None,
        status_expiry_s: float = 120.0,
        rate_window_s: float = 60.0,
    ) -> None:
        """`scopes`: the bot token's; by default those of the manifest in docs/slack.md. `status_expiry_s`:
        how long an assistant thread's status lasts without a message (Slack: two minutes), shorter in tests.
        `rate_window_s`: the window each method's tier is counted over (Slack: a minute; slack_limits.py)."""
        self.bot_token, self.app_token, self.bot_name = bot_token, app_token, bot_name
        self.socket_mode = socket_mode
        self.status_expiry_s = self._status_expiry_s = status_expiry_s
        self.installed_scopes = slack_manifest.bot_scopes() if scopes is None else frozenset(scopes)
        self.scopes = self.installed_scopes
        self.rate_limits = RateLimits(window_s=rate_window_s)
        self.expects_rate_limits = False
        self._rate_window_s = rate_window_s
        self._lock = threading.RLock()
        self._calls: list[Call] = []
        self._failures: dict[str, list[Failure]] = {}
        self._disabled: set[str] = set()
        self._held: dict[str, threading.Event] = {}  # methods whose calls wait for the test (hold)
        self._new_workspace()
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = FakeServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._serve, name="fake-slack", daemon=True)

    def _new_workspace(self) -> None:
        self.workspace = Workspace(bot_name=self.bot_name)
        self.workspace.experience = slack_manifest.experience()
        self.api = WebApi(
            self.workspace, upload_url=self._upload_url, socket_url=self._socket_url, granted=lambda: self.scopes
        )

    # --- control ---

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        """For slack_sdk's `base_url` (it joins method names onto it, so it ends in `/api/`)."""
        return f"{self.root_url}/api/"

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=0.05)  # so stop() returns promptly

    def start(self) -> FakeSlack:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        """Forget calls, scripted failures and disabled methods, and start from a fresh workspace."""
        with self._lock:
            self._calls.clear()
            self._failures.clear()
            self._disabled.clear()
            self._held.clear()
            self.scopes = self.installed_scopes
            self.status_expiry_s = self._status_expiry_s
            self.rate_limits = RateLimits(window_s=self._rate_window_s)
            self.expects_rate_limits = False
            self._new_workspace()

    @property
    def experience(self) -> str:
        """The app's AI messaging experience, as its manifest sets it: `agent_view` (suggested prompts pinned
        on the DM without a thread_ts) or the legacy `assistant_view` (prompts per assistant thread)."""
        return self.workspace.experience

    @experience.setter
    def experience(self, value: str) -> None:
        assert value in ("agent_view", "assistant_view")
        self.workspace.experience = value

    @property
    def clock(self) -> Callable[[], float]:
        """When the fake thinks it is (monotonic seconds): a status expires `status_expiry_s` after it was
        set by this clock; a test moves it on instead of waiting two minutes."""
        return self.workspace.clock

    @clock.setter
    def clock(self, value: Callable[[], float]) -> None:
        self.workspace.clock = value

    # --- identities of the default workspace ---

    @property
    def bot_user_id(self) -> str:
        return self.workspace.bot_user_id

    @property
    def bot_id(self) -> str:
        return self.workspace.bot_id

    @property
    def team_id(self) -> str:
        return self.workspace.team_id

    @property
    def app_id(self) -> str:
        return self.workspace.app_id

    # --- recording ---

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if method is None or c.method == method]

    def last(self, method: str) -> Call:
        calls = self.calls(method)
        assert calls, f"no {method} call was made"
        return calls[-1]

    # --- scripting ---

    def fail(
        self,
        method: str,
        error: str,
        *,
        status: int = 200,
        retry_after: int | None = None,
        times: int | None = 1,
        **extra: Any,
    ) -> None:
        """The next `times` calls of `method` answer `error` (e.g. "not_allowed", "internal_error")."""
        with self._lock:
            self._failures.setdefault(method, []).append(Failure(error, status, retry_after, times, extra))

    def ratelimit(self, method: str, *, retry_after: int = 1, times: int | None = 1) -> None:
        """Answer HTTP 429 `{"ok": false, "error": "ratelimited"}` with a `Retry-After` header."""
        self.fail(method, "ratelimited", status=429, retry_after=retry_after, times=times)

    def expect_rate_limits(self) -> None:
        """This test drives the bot past Slack's tiers on purpose: the `fake_slack` fixture then does not
        fail it for the calls refused with 429 (tests/conftest.py)."""
        self.expects_rate_limits = True

    def over_tiers(self) -> list[str]:
        """The methods of the calls refused for their tier that the test did not drive there on purpose."""
        return [] if self.expects_rate_limits else list(self.rate_limits.refused)

    def throttled(self, method: str | None = None) -> list[Call]:
        """Calls refused with 429 for their method's tier (slack_limits.py) or a scripted rate limit."""
        return [c for c in self.calls(method) if c.status == 429]

    def revoke(self, *scopes: str) -> None:
        """Take scopes from the bot token, as an app installed without them."""
        with self._lock:
            self.scopes = self.scopes - set(scopes)

    def scope_refusals(self) -> list[Call]:
        """Calls Slack would refuse for a scope the token lacks (not scripted failures)."""
        with self._lock:
            return [c for c in self._calls if c.refused_scope]

    def disable(self, *methods: str) -> None:
        """Make methods unknown to this workspace (`unknown_method`), e.g. the streaming methods."""
        with self._lock:
            self._disabled.update(methods)

    def hold(self, method: str) -> threading.Event:
        """Calls of `method` wait (up to 30 s) until the returned event is set: a test makes a moment last,
        say the person pressing Stop before the bot's last write of a stream reaches Slack."""
        release = threading.Event()
        with self._lock:
            self._held[method] = release
        return release

    def stop_by_user(self, channel: str, ts: str) -> None:
        """The person presses Stop under a streaming answer: the stream ends where it is, and appending to
        or stopping it answers `stopped_by_user` (slack_methods.WebApi._open_stream)."""
        with self._lock:
            stream = self.workspace.streams[(channel, ts)]
            stream.open, stream.stopped_by_user = False, True

    def expire_stream(self, channel: str, ts: str) -> None:
        """End a stream server-side; appending to it then answers `message_not_in_streaming_state`."""
        with self._lock:
            self.workspace.streams[(channel, ts)].open = False

    # --- seeding ---

    def add_user(self, id: str, name: str, **fields: Any) -> User:
        with self._lock:
            return self.workspace.add_user(id, name, **fields)

    def add_usergroup(self, id: str, handle: str, users: list[str], **fields: Any) -> UserGroup:
        """E.g. add_usergroup("S0DATA", "data-team", [HUMAN_ID]) for `@data-team`."""
        with self._lock:
            return self.workspace.add_usergroup(id, handle, users, **fields)

    def add_channel(self, id: str, name: str = "", *, members: set[str] | None = None, **fields: Any) -> Channel:
        """E.g. add_channel("C0SALES", "sales"), add_channel("D0BOB", is_im=True, user="U0BOB"),
        add_channel("G0SECRET", "secret", is_private=True, is_member=False)."""
        with self._lock:
            return self.workspace.add_channel(id, name, members=members, **fields)

    def add_message(
        self, channel: str, text: str = "", *, user: str | None = HUMAN_ID, thread_ts: str | None = None, **fields: Any
    ) -> str:
        """Post as someone else (a person, or another bot with bot_id=/subtype="bot_message"); returns its ts."""
        message: dict[str, Any] = {"text": text, **fields}
        if user is not None:
            message["user"] = user
            if "bot_id" not in fields:
                message.setdefault("client_msg_id", str(uuid.uuid4()))
        with self._lock:
            return self.workspace.add_message(channel, message, thread_ts)["ts"]

    def start_assistant_thread(self, channel: str = DM_ID, *, title: str = "New chat") -> str:
        """Open an assistant thread as Slack does when the user opens the app's container: a root message
        from the app (subtype `assistant_app_thread`) whose ts is the thread_ts of assistant_thread_started."""
        root = self.workspace.bot_message("", subtype="assistant_app_thread", assistant_app_thread={"title": title})
        with self._lock:
            return self.workspace.add_message(channel, root)["ts"]

    # --- reading the workspace ---

    def thread_messages(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """The parent and its replies, oldest first, with metadata."""
        with self._lock:
            return [dict(m) for m in self.workspace.thread(channel, thread_ts)]

    def replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self.workspace.replies(channel, thread_ts)]

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.workspace.find_message(channel, ts)
            return dict(found) if found else None

    def bot_messages(self, channel: str) -> list[dict[str, Any]]:
        """Everything this app posted in a channel (top level and in threads), oldest first."""
        with self._lock:
            posted = [m for m in self.workspace.messages.get(channel, {}).values() if m.get("bot_id") == self.bot_id]
            return sorted((dict(m) for m in posted), key=lambda m: ts_key(m["ts"]))

    @property
    def files(self) -> list[UploadedFile]:
        with self._lock:
            return list(self.workspace.files.values())

    @property
    def ephemeral(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.workspace.ephemeral)

    def shown_status(self, channel: str, thread_ts: str) -> str:
        """The status a person sees under an assistant thread now: the last one set, until the app posts in
        the thread or `status_expiry_s` (Slack: two minutes) has passed since it was set."""
        with self._lock:
            thread = self.workspace.assistant_threads.get((channel, thread_ts), {})
            set_at = thread.get("status_set_at")
            if set_at is None or self.workspace.clock() - set_at > self.status_expiry_s:
                return ""
            return str(thread.get("status") or "")

    def pinned_prompts(self, channel: str) -> dict[str, Any] | None:
        """agent_view: the suggested prompts (and their title) pinned on a DM by a call without thread_ts."""
        with self._lock:
            return self.workspace.pinned_prompts.get(channel)

    def markdown(self, channel: str, ts: str) -> str | None:
        """The text of the markdown blocks a message was last sent with (Slack keeps only its translation)."""
        with self._lock:
            return self.workspace.markdown_sent.get((channel, ts))

    def stream(self, channel: str, ts: str) -> Stream | None:
        """A chat.startStream message's stream: whether it is open, and every chunk sent to it."""
        with self._lock:
            return self.workspace.streams.get((channel, ts))

    def assistant_thread(self, channel: str, thread_ts: str) -> dict[str, Any]:
        """What assistant.threads.* set on a thread: status, status_history, prompts, title."""
        with self._lock:
            return dict(self.workspace.assistant_threads.get((channel, thread_ts), {}))

    # --- the request path ---

    def _upload_url(self, ticket: str) -> str:
        return f"{self.root_url}/upload/v1/{ticket}"

    def _socket_url(self) -> str | None:
        return self.socket_mode.issue_url() if self.socket_mode is not None else None

    def handle(self, method: str, headers: Any, query: str, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        args: dict[str, Any] = {}
        transport = "query"
        scopes: tuple[str, ...] = ()
        refused = False
        token: str | None = None
        with self._lock:
            held = self._held.get(method)
        if held is not None:
            held.wait(30)
        try:
            args, transport, token, warnings = _parse(headers, query, body)
            scopes = self._scopes_for(method, args)
            status, response, extra_headers = self._answer(method, args, token, scopes, sent_at(headers))
            if response.get("ok") and warnings:
                response = {
                    **response,
                    "warning": ",".join(warnings),
                    "response_metadata": {**response.get("response_metadata", {}), "warnings": warnings},
                }
        except SlackError as exc:
            status, response, extra_headers = exc.status, exc.body(), exc.headers
            refused = isinstance(exc, _MissingScope)
        if token == self.bot_token:
            # Slack answers a token's every call with the scopes it holds, comma-separated, in `x-oauth-scopes`
            # (what slack-ruby-client#378 reads: "x-oauth-scopes is a list of scopes that the token has").
            extra_headers = {**extra_headers, "x-oauth-scopes": ",".join(sorted(self.scopes))}
        recorded = {k: _decoded(v) if k in JSON_ARGS else v for k, v in args.items()}
        with self._lock:
            self._calls.append(
                Call(method, recorded, dict(headers.items()), transport, status, response, scopes, refused)
            )
        return status, response, extra_headers

    def _scopes_for(self, method: str, args: dict[str, Any]) -> tuple[str, ...]:
        if method in APP_TOKEN_METHODS:
            return ()  # the app-level token is made with connections:write (docs/slack.md)
        if method not in self.api.methods:
            return ()  # answered unknown_method, as Slack answers a method it does not have
        with self._lock:
            channel = self.workspace.channels.get(str(args.get("channel") or ""))
            return slack_scopes.needed(method, slack_scopes.conversation_type(channel))

    def _answer(
        self, method: str, args: dict[str, Any], token: str | None, scopes: tuple[str, ...], sent: float | None
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            if method in self._disabled or method not in self.api.methods:
                extra = {"req_method": method}
                if method not in self._disabled:
                    raise SlackError("unknown_method", "fake: this method is not implemented by FakeSlack", extra=extra)
                raise SlackError("unknown_method", extra=extra)
            _authorize(method, token, self.bot_token, self.app_token)
            if scopes and not self.scopes & set(scopes):
                # Slack's shape: the scope needed and every scope the token has, comma-separated.
                provided = ",".join(sorted(self.scopes))
                raise _MissingScope("missing_scope", extra={"needed": scopes[0], "provided": provided})
            failure = self._next_failure(method)
            if failure is not None:
                headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
                raise SlackError(failure.error, status=failure.status, headers=headers, extra=failure.extra)
            self.rate_limits.check(self.workspace.team_id, method, str(args.get("channel") or ""), sent_at=sent)
            return 200, self.api.methods[method](args), {}

    def _next_failure(self, method: str) -> Failure | None:
        queue = self._failures.get(method) or []
        if not queue:
            return None
        failure = queue[0]
        if failure.times is not None:
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
        return failure

    def receive_upload(self, ticket: str, headers: Any, body: bytes) -> UploadedFile | None:
        data = body
        if (headers.get("content-type") or "").startswith("multipart/form-data"):
            parts = _multipart(headers["content-type"], body)
            data = next((v for v in parts.values() if isinstance(v, bytes)), b"")
        with self._lock:
            file = next((f for f in self.workspace.files.values() if f.ticket == ticket), None)
            if file is not None:
                file.data = data
            self._calls.append(
                Call(
                    "upload",
                    {"ticket": ticket, "length": len(data)},
                    dict(headers.items()),
                    "binary",
                    200 if file else 404,
                    {"ok": file is not None},
                )
            )
            return file


class _MissingScope(SlackError):
    """A refusal for a scope the token lacks, told apart from a scripted one."""


def _authorize(method: str, token: str | None, bot_token: str, app_token: str) -> None:
    if not token:
        raise SlackError("not_authed")
    if token not in (bot_token, app_token):
        raise SlackError("invalid_auth")
    wanted = app_token if method in APP_TOKEN_METHODS else bot_token
    if token != wanted:
        raise SlackError("not_allowed_token_type")


def _parse(headers: Any, query: str, body: bytes) -> tuple[dict[str, Any], str, str | None, list[str]]:
    """Arguments and token as Slack reads them: query string plus a form, multipart or JSON body. A JSON
    body's token must come in `Authorization: Bearer`; form bodies may also carry `token`."""
    args: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
    transport, warnings = "query", []
    content_type = headers.get("content-type") or ""
    kind = content_type.split(";")[0].strip().lower()
    if body:
        if not kind:
            raise SlackError("missing_post_type")
        if kind == "application/json":
            try:
                data = json.loads(body)
            except ValueError:
                raise SlackError("invalid_json") from None
            if not isinstance(data, dict):
                raise SlackError("invalid_json")
            data.pop("token", None)  # ignored in JSON bodies: "send your token as a bearer token"
            args.update(data)
            transport = "json"
            if "charset" not in content_type.lower():
                warnings.append("missing_charset")
        elif kind == "application/x-www-form-urlencoded":
            try:
                args.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True))
            except (UnicodeDecodeError, ValueError):
                raise SlackError("invalid_form_data") from None
            transport = "form"
        elif kind == "multipart/form-data":
            args.update(
                {k: v.decode() if isinstance(v, bytes) else v for k, v in _multipart(content_type, body).items()}
            )
            transport = "multipart"
        else:
            raise SlackError("invalid_post_type")
    bearer = headers.get("authorization") or ""
    token = bearer.removeprefix("Bearer ").strip() if bearer.startswith("Bearer ") else None
    body_token = args.pop("token", None)
    return args, transport, token or (body_token if transport != "json" else None), warnings


def _multipart(content_type: str, body: bytes) -> dict[str, Any]:
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    assert isinstance(message, EmailMessage)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        assert isinstance(part, EmailMessage)
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload if part.get_filename() else payload.decode("utf-8")
    return fields


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class _Handler(BaseHTTPRequestHandler):
    fake: FakeSlack
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._api(b"")

    def do_POST(self) -> None:
        body = self._body()
        path = urlsplit(self.path).path
        if path.startswith("/upload/v1/"):
            file = self.fake.receive_upload(path.removeprefix("/upload/v1/"), self.headers, body)
            text = f"OK - {len(file.data or b'')}" if file else "Not Found"
            return self._send(200 if file else 404, text.encode(), "text/plain; charset=utf-8")
        self._api(body)

    def _api(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        if not parts.path.startswith("/api/"):
            return self._send(404, b"Not Found", "text/plain; charset=utf-8")
        status, response, headers = self.fake.handle(parts.path.removeprefix("/api/"), self.headers, parts.query, body)
        self._send(status, json.dumps(response).encode(), "application/json; charset=utf-8", headers)

    def _body(self) -> bytes:
        if (self.headers.get("transfer-encoding") or "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _send(self, status: int, data: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("x-slack-req-id", uuid.uuid4().hex)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
