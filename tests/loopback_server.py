"""The base of the tests' own loopback HTTP servers (model APIs, an OTLP backend)."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server for which a client that gave up mid-request (a reset, a broken pipe) is no error:
    socketserver printed a traceback for each into the suite's output, where real errors must stand out."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
