"""Running the aggregator under uvicorn with connection limits and timeouts.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but waits
forever for the headers of a request (a connection that sends nothing, or a header a byte
at a time), and does not bound their size or the number of connections.
:func:`hardened_protocol` subclasses uvicorn's HTTP protocol (httptools) to add:

* a **header timeout**: a connection must deliver a request's complete headers within
  ``header_timeout`` seconds of opening, or of the previous answer, else it is closed;
* a **header size limit** (``max_header_bytes``, 64 KiB): more before the headers end is
  answered 431 ``headers_too_large`` and the connection closed (counted as the bytes
  arrive, before the parser reads them);
* a **connection limit** (``max_connections``): beyond it, a new connection is closed at
  once (no answer: the client sees a reset and retries).

The **body timeout** and size limit are the app's (:class:`~.limits.BodyReader`), the
**idle timeout** is uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.errors import DPMarginalsError

__all__ = ["Timeouts", "hardened_protocol", "run"]


@dataclass(frozen=True)
class Timeouts:
    """Connection limits: seconds for the headers, idle keep-alive, and the body (the
    app's), header bytes, and concurrent connections."""

    header: float = 10.0
    keep_alive: float = 5.0
    body: float = 60.0
    max_header_bytes: int = 64 << 10
    max_connections: int = 1000

    def __post_init__(self) -> None:
        for name in ("header", "keep_alive", "body"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise DPMarginalsError(f"the {name.replace('_', '-')} timeout must be a "
                                       f"number of seconds > 0, got {value!r}")
        if self.max_header_bytes < 1024 or self.max_connections < 1:
            raise DPMarginalsError("max_header_bytes must be >= 1024 and max_connections >= 1")


def hardened_protocol(timeouts: Timeouts) -> type:
    """uvicorn's httptools protocol with a header timeout, header size and connection
    limits (see the module's docstring)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HardenedProtocol(HttpToolsProtocol):  # type: ignore[misc]
        limits = timeouts

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._header_task: Any = None
            self._header_bytes = 0
            if len(self.connections) > self.limits.max_connections:
                transport.close()
                return
            self._await_headers()

        def _await_headers(self) -> None:
            self._cancel_header_timer()
            self._header_bytes = 0
            self._tail = b""
            self._header_task = self.loop.call_later(self.limits.header,
                                                     self._header_timeout)

        def _cancel_header_timer(self) -> None:
            task = getattr(self, "_header_task", None)
            if task is not None:
                task.cancel()
                self._header_task = None

        def _header_timeout(self) -> None:
            self._header_task = None
            busy = self.cycle is not None and not self.cycle.response_complete
            if not busy and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            # Counted before the parser sees them: headers that end inside this chunk
            # (70 KiB in one read) were never counted, and were answered (issue #33).
            if self._header_task is not None:  # waiting for a request's headers
                seen = self._tail + data
                ends = [i + len(mark) for mark in (b"\r\n\r\n", b"\n\n")
                        if (i := seen.find(mark)) >= 0]
                part = min(ends) - len(self._tail) if ends else len(data)
                self._header_bytes += max(part, 0)
                if self._header_bytes > self.limits.max_header_bytes:
                    self._cancel_header_timer()
                    self._refuse_headers()
                    return
                self._tail = seen[-3:]
            super().data_received(data)

        def _refuse_headers(self) -> None:
            """431 with the service's error body, then the connection is closed."""
            body = (b'{"error":"headers_too_large","reason":"the request\'s headers pass '
                    + f"{self.limits.max_header_bytes:,}".encode() + b' bytes"}')
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + body)
            self.transport.close()

        def on_headers_complete(self) -> None:
            self._cancel_header_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self.pipeline:
                self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

    return HardenedProtocol


def run(app: Any, host: str, port: int, *, timeouts: Timeouts, log_level: str = "warning"
        ) -> None:
    """Serve ``app`` with uvicorn (no access log, no server header) under ``timeouts``."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                server_header=False, http=hardened_protocol(timeouts),
                timeout_keep_alive=timeouts.keep_alive, timeout_graceful_shutdown=10)
