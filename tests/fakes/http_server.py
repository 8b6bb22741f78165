"""The HTTP server under every fake: a deep listen backlog, and a client that hangs up is not an error.

A real API server does not print a traceback when its client goes away mid-answer (a cancelled run
does exactly that), so neither do the fakes; any other failure still prints.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default listen backlog of 5 stalls bursts of connections in SYN retries

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
