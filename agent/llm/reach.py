"""Whether the model API can be reached at all, and how often to try: one retry policy, the SDKs' own.

The SDKs retry a failed connection like any transient error, with backoff, up to `max_retries`, and each
provider asked again on top of that: a refused connection on a dead API cost 25 attempts and 38 s of
spinner before "Could not reach the model API". A connection that cannot be made (refused, a failed DNS
lookup, a TLS handshake refused) says the API is not there: it is retried once (a server restarting),
then reported, inside each SDK's retry loop: Anthropic's middleware (`anthropic.connect_once`), OpenAI's
HTTP client (`openai_chat.ConnectOnceAioHttpClient`). What is worth retrying (overloaded, rate limited,
5xx) keeps the SDK's retries; a reply cut off mid-stream is the providers' own retry (the SDKs retry
only before a response starts).
"""

from __future__ import annotations

import functools
import socket
import ssl

import aiohttp
import httpx2

from agent.llm.turns import ModelUnreachable

CONNECT_RETRIES = 1  # a connection that cannot be made is tried this many more times, then reported
# Root causes that mean no connection was made: the socket's refusal, the resolver's failure, and aiohttp's
# connect-time errors (DNS, refused, unreachable, TLS). Not httpx2.ConnectError alone: a vendored transport
# maps a server closing a kept-alive connection (worth asking again) to it too.
_NOT_CONNECTED = (ConnectionRefusedError, socket.gaierror, aiohttp.ClientConnectorError)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context every model client of this process shares: the SDKs' own default
    (SSL_CERT_FILE/SSL_CERT_DIR honoured), built once. Each client built its own, reading the system's CA
    bundle again: 20-30 ms of CPU per client (py-spy), two per app built."""
    return httpx2.create_ssl_context()


def could_not_connect(exc: BaseException) -> bool:
    """`exc`, or an error it came from, says no connection to the API could be made."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _NOT_CONNECTED):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def unreachable(exc: BaseException) -> ModelUnreachable:
    """What a person is told: the API is not there, in words that name no secret."""
    why = "connection refused"
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, socket.gaierror | aiohttp.ClientConnectorDNSError):
            why = "its address could not be resolved"
            break
        if isinstance(current, aiohttp.ClientSSLError):
            why = "the secure connection failed"
            break
        current = current.__cause__ or current.__context__
    return ModelUnreachable(f"Could not reach the model API ({why}); check its address and the network.")
