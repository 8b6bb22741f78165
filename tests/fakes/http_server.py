"""The HTTP server under every fake: a deep listen backlog, and a client that hangs up is not an error.

A real API server does not print a traceback when its client goes away mid-answer (a cancelled run
does exactly that), so neither do the fakes; any other failure still prints.

A request whose client hung up before the fake read its reply takes no scripted reply: a cancelled run's
last request can reach the server's thread after the test has cancelled it, reset the fake and scripted
the next run, and on a loaded machine it did, taking that run's first reply (issue 27).
"""

from __future__ import annotations

import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default listen backlog of 5 stalls bursts of connections in SYN retries

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


HUNG_UP = object()  # `_next`'s answer to a request whose client has gone


def hung_up(client: socket.socket) -> bool:
    """The client closed its end: its request is read whole (the handler's buffer holds it), so the socket
    has nothing more to read but the end, where a live client's is empty and waiting."""
    try:
        return client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset by the peer
        return True


class ScriptedFake:
    """A fake model API's control side: replies scripted in order, per model, or one default for whatever
    the script leaves; every request body it was sent. Its handler reads the reply with `_next`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self.requests: list[dict[str, Any]] = []
        self.hung_up = 0  # requests whose client had gone before its reply was taken (not in `requests`)
        self._script: list[Any] = []
        self._per_model: dict[str, Any] = {}
        self._default: Any = None
        self._lock = threading.Lock()
        self._server = FakeServer(("127.0.0.1", 0), type("Handler", (handler,), {"fake": self}))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, *replies: Any) -> None:
        with self._lock:
            self._script.extend(replies)

    def for_model(self, model: str, reply: Any) -> None:
        """Every request for `model` gets `reply` (None: back to the script), e.g. a persistent overload."""
        with self._lock:
            if reply is None:
                self._per_model.pop(model, None)
            else:
                self._per_model[model] = reply

    def always(self, reply: Any) -> None:
        """A reply used whenever the script is empty (for load tests)."""
        self._default = reply

    @property
    def remaining(self) -> int:
        return len(self._script)

    def _clear(self) -> None:
        """Forget the script and the requests (the caller holds the lock)."""
        self._script.clear()
        self._per_model.clear()
        self.requests.clear()
        self.hung_up = 0
        self._default = None

    def _next(self, body: dict[str, Any], client: socket.socket | None = None) -> Any:
        """The reply to `body`, or HUNG_UP when `client` has gone already (nobody reads a reply): checked
        under the lock `reset` takes, so a request either came before the reset or takes nothing."""
        with self._lock:
            if client is not None and hung_up(client):
                self.hung_up += 1
                return HUNG_UP
            self.requests.append(body)
            if body.get("model") in self._per_model:
                return self._per_model[body["model"]]
            if self._script:
                return self._script.pop(0)
        return self._default if self._default is not None else self._no_reply()

    def _no_reply(self) -> Any:
        raise NotImplementedError
