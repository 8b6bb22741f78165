"""Security headers on every response: a Content-Security-Policy that allows only this origin's
scripts, styles, images (and data: images) and connections, plus no sniffing, no referrer, no framing;
and `Cache-Control: no-store` on every API response.

Pure ASGI, so streamed responses (SSE, CSV) pass through untouched; it only adds headers to
`http.response.start`.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' data:",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


# Answers, conversations and downloads are one person's data: no cache (a browser's, a proxy's) keeps them.
API_PREFIX = "/api/"
NO_STORE = ("cache-control", "no-store")


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        private = str(scope.get("path", "")).startswith(API_PREFIX)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if private:
                    headers[NO_STORE[0]] = NO_STORE[1]
            await send(message)

        await self.app(scope, receive, send_with_headers)
