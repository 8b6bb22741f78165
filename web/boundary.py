"""The HTTP boundary: the Host check, bearer auth, JSON-only POSTs, same-origin changes under a cookie,
per-client rate limits, capped and validated JSON bodies, well-formed Last-Event-IDs, JSON errors."""

from __future__ import annotations

import hmac
import ipaddress
import json
import math
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chats.rate_limits import RateLimit

MAX_BODY_BYTES = 64 * 1024
MAX_EVENT_ID_DIGITS = 18
CLIENT_CLOSED = 499  # nginx's status for a client that went away before it was answered: a 4xx, not a fault
IPV6_CLIENT_PREFIX = 64  # what one IPv6 subscriber or cloud machine holds (RFC 6177); it counts as one client
M = TypeVar("M", bound=BaseModel)


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        # A message may quote client input; a lone surrogate in it could not be encoded as UTF-8.
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status, headers=self.headers)


_HOST_PASSED = "agent.host_passed"


class TrustedHosts(TrustedHostMiddleware):
    """Starlette's Host check (a DNS-rebinding page gets 400, not the API), refusing in JSON like every
    other error: Starlette's own refusal is plain text. Its check decides; only the response changes."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        async def passed(scope: Scope, receive: Receive, send: Send) -> None:
            scope[_HOST_PASSED] = True
            await app(scope, receive, send)

        super().__init__(passed, allowed_hosts=allowed_hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return

        async def unless_refused(message: Message) -> None:
            if scope.get(_HOST_PASSED):
                await send(message)

        await super().__call__(scope, receive, unless_refused)
        if not scope.get(_HOST_PASSED):
            message = (
                "This server does not answer to that host name (the Host header); use the address it is served at."
            )
            await HttpError(400, message).response()(scope, receive, send)


class FeedbackRequest(BaseModel):
    """A thumb on an answer; a thumbs-down may say what was wrong."""

    value: Literal["up", "down"]
    reason: str | None = Field(None, max_length=1_000)


class ChatRequest(BaseModel):
    message: str
    conversation_id: str | None = Field(None, max_length=64)

    @field_validator("message", "conversation_id")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        # JSON can carry lone surrogates ("\ud800"); they are not text and cannot be stored.
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
        return value


def has_token(request: Request, token: str) -> bool:
    given = request.headers.get("authorization", "")
    return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    if not has_token(request, token):
        raise HttpError(
            401, "This server needs an access token (Authorization: Bearer ...).", {"WWW-Authenticate": "Bearer"}
        )


def check_json_content_type(request: Request) -> None:
    """A POST must say it is JSON. A cross-site HTML form can only send form encodings or text/plain,
    and a page that wants to send application/json elsewhere needs a CORS preflight we never grant."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise HttpError(415, "The body must be sent as Content-Type: application/json.")


def check_same_origin(request: Request) -> None:
    """A change made with a credential the browser sends by itself (the sign-in cookie, a proxy's sign-in)
    must come from this site's own pages: its Origin (or, where a browser sends none, its Referer) names
    the host the request was sent to. A page elsewhere cannot set either."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        raise HttpError(403, "This request must come from the chat's own pages (it has no Origin header).")
    if _netloc(origin) != _host(request.headers.get("host", "")):
        raise HttpError(403, "This request must come from the chat's own pages (its Origin is another site).")


_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def _netloc(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or "@" in parts.netloc:
        return None
    return parts.netloc.lower().removesuffix(_DEFAULT_PORTS[parts.scheme])


def _host(host: str) -> str:
    host = host.strip().lower()
    return host.removesuffix(":443").removesuffix(":80")


async def read_json_body(request: Request, model: type[M], example: str) -> M:
    """The body, at most MAX_BODY_BYTES of JSON, validated as `model`; 400 or 413 saying what is wrong."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and (len(declared) > 9 or int(declared) > MAX_BODY_BYTES):
        raise HttpError(413, f"The request body is larger than {MAX_BODY_BYTES // 1024} KB.")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise HttpError(413, f"The request body is larger than {MAX_BODY_BYTES // 1024} KB.")
    except ClientDisconnect:  # a closed tab or a dropped network: nobody reads the answer, nothing is kept
        raise HttpError(CLIENT_CLOSED, "The client closed the connection before sending its request.") from None
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError):  # bad JSON or encoding, integers past 4300 digits, deep nesting
        raise HttpError(400, f"The body must be JSON: {example}.") from None
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise HttpError(400, f"{field}: {first['msg']}") from None


async def read_chat_request(request: Request, max_message_chars: int) -> ChatRequest:
    chat = await read_json_body(request, ChatRequest, '{"message": "...", "conversation_id": null}')
    if not chat.message.strip():
        raise HttpError(400, "message: must not be empty")
    if len(chat.message) > max_message_chars:
        raise HttpError(413, f"message: longer than {max_message_chars} characters ({len(chat.message)}).")
    return chat


def read_last_event_id(request: Request) -> int:
    """The event id a reattaching client has seen (Last-Event-ID, or ?after=); 0 when absent."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not (raw.isascii() and raw.isdigit() and len(raw) <= MAX_EVENT_ID_DIGITS):
        raise HttpError(400, "Last-Event-ID must be an event id: a whole number written in ASCII digits.")
    return int(raw)


def client_key(request: Request) -> str:
    """Who a request counts against: the socket's peer, or the forwarded client when uvicorn was told to
    trust the proxy it came through (AGENT_WEB_TRUSTED_PROXIES). An IPv6 client counts by its /64: one
    machine holds 2^64 addresses, and a budget per address would be none."""
    return address_key(request.client.host) if request.client else "unknown"


def address_key(host: str) -> str:
    """An IPv4 address as itself (also when written IPv4-mapped, `::ffff:a.b.c.d`), an IPv6 one as its /64;
    anything else (a Unix socket's peer, a test client's name) as given."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # without an IPv6 zone (`fe80::1%eth0`)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))
    return str(address)


async def check_rate(limit: RateLimit, client: str, what: str) -> None:
    """Count the request against `client`'s budget, or refuse it with 429 and when to come back."""
    if (wait_s := await limit.take(client)) is not None:
        retry = max(1, math.ceil(wait_s))
        raise HttpError(429, f"Too many {what}; try again in {retry} s.", {"Retry-After": str(retry)})
