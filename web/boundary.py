"""The HTTP boundary: bearer auth, per-client rate limit, capped JSON bodies, JSON errors."""

from __future__ import annotations

import hmac
import json
import math
import time
from collections import defaultdict, deque
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

MAX_BODY_BYTES = 64 * 1024


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status, headers=self.headers)


class ChatRequest(BaseModel):
    message: str
    conversation_id: str | None = None


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())):
        raise HttpError(
            401, "This server needs an access token (Authorization: Bearer ...).", {"WWW-Authenticate": "Bearer"}
        )


async def read_chat_request(request: Request, max_message_chars: int) -> ChatRequest:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HttpError(413, f"The request body is larger than {MAX_BODY_BYTES // 1024} KB.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HttpError(413, f"The request body is larger than {MAX_BODY_BYTES // 1024} KB.")
    try:
        payload: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HttpError(400, 'The body must be JSON: {"message": "...", "conversation_id": null}.') from None
    try:
        chat = ChatRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise HttpError(400, f"{field}: {first['msg']}") from None
    if not chat.message.strip():
        raise HttpError(400, "message: must not be empty")
    if len(chat.message) > max_message_chars:
        raise HttpError(413, f"message: longer than {max_message_chars} characters ({len(chat.message)}).")
    return chat


class RateLimiter:
    """At most `per_minute` requests per client in any sliding 60-second window."""

    def __init__(self, per_minute: int) -> None:
        self._per_minute = per_minute
        self._seen: defaultdict[str, deque[float]] = defaultdict(deque)

    def check(self, client: str) -> None:
        now = time.monotonic()
        seen = self._seen[client]
        while seen and now - seen[0] >= 60:
            seen.popleft()
        if len(seen) >= self._per_minute:
            retry = max(1, math.ceil(60 - (now - seen[0])))
            raise HttpError(429, f"Too many questions; try again in {retry} s.", {"Retry-After": str(retry)})
        seen.append(now)
        if len(self._seen) > 10_000:  # forget idle clients so memory stays bounded
            for key in [k for k, v in self._seen.items() if not v or now - v[-1] >= 60]:
                del self._seen[key]
