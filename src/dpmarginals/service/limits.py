"""Resource limits of the aggregator: request bodies, and rates per source.

:class:`BodyReader` reads a request body under three bounds, before anything is parsed:

* its size: a ``Content-Length`` over the limit is refused (413) before a byte is read;
  without one, the count of bytes streamed so far is checked chunk by chunk;
* the bytes buffered by all requests together (``max_buffered``): a body that would pass it
  is refused with 503 and ``Retry-After`` instead of being read, so twelve concurrent 8 MiB
  bodies cannot take the server's memory (the reservation is held until the request has
  been handled, parsing included);
* time: the whole body must arrive within ``body_timeout`` seconds (408 and the
  connection closed), so a slow body cannot hold a connection and its buffer.

:class:`RateLimiter` is a token bucket per source (the client's address): ``rate`` tokens a
second up to ``burst``; an empty bucket is a 429 with ``Retry-After`` (the seconds until
enough tokens are back).  The aggregator keeps one for requests and one for tickets.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..core.errors import DPMarginalsError
from .errors import ServiceError

__all__ = ["BodyReader", "RateLimiter", "source_of"]

_MAX_SOURCES = 100_000
_log = logging.getLogger("dpmarginals.service")


class BodyReader:
    """Reads request bodies within a size limit, a shared buffer budget and a deadline."""

    def __init__(self, max_body: int, *, max_buffered: int | None = None,
                 body_timeout: float = 60.0) -> None:
        if max_body < 1024:
            raise DPMarginalsError(f"max_body_bytes must be at least 1024, got {max_body}")
        if not (math.isfinite(body_timeout) and body_timeout > 0):
            raise DPMarginalsError(f"body_timeout must be a number of seconds > 0, got "
                                   f"{body_timeout!r}")
        self.max_body = max_body
        self.max_buffered = max(max_body, max_buffered if max_buffered is not None
                                else 4 * max_body)
        self.body_timeout = body_timeout
        self.buffered = 0  # bytes reserved by requests in progress (one event loop)

    def _reserve(self, size: int) -> None:
        if self.buffered + size > self.max_buffered:
            raise ServiceError(503, "busy", "the service is reading other large bodies; retry "
                               "shortly", headers={"Retry-After": "1", "Connection": "close"})
        self.buffered += size

    @asynccontextmanager
    async def read(self, request: Any) -> AsyncIterator[bytearray]:
        """``async with reader.read(request) as body:`` the body, reserved until the block
        ends."""
        limit = self.max_body
        length = request.headers.get("content-length")
        declared: int | None = None
        if length is not None:
            if not length.isdigit() or len(length) > 18:
                raise ServiceError(400, "bad_length", "Content-Length is not a number",
                                   headers={"Connection": "close"})
            declared = int(length)
            if declared > limit:
                raise ServiceError(413, "body_too_large", f"the body has {declared} bytes; "
                                   f"the limit is {limit}", headers={"Connection": "close"})
        reserved = 0
        try:
            if declared is not None:
                self._reserve(declared)
                reserved = declared
            body = bytearray()
            size = 0
            from starlette.requests import ClientDisconnect

            try:
                async with asyncio.timeout(self.body_timeout):
                    async for chunk in request.stream():
                        size += len(chunk)
                        if size > limit or (declared is not None and size > declared):
                            raise ServiceError(413, "body_too_large", f"the body exceeds "
                                               f"{min(limit, declared or limit)} bytes",
                                               headers={"Connection": "close"})
                        if size > reserved:
                            self._reserve(size - reserved)
                            reserved = size
                        body += chunk
            except TimeoutError:
                raise ServiceError(408, "body_timeout", f"the body did not arrive within "
                                   f"{self.body_timeout:g} s", headers={"Connection": "close"}
                                   ) from None
            except ClientDisconnect:
                # Nobody is left to answer: one line in the log, not a 500 and tracebacks.
                expected = "" if declared is None else f" of {declared:,}"
                _log.warning("client hung up before its body was complete (%s%s bytes) on "
                             "%s %s", f"{size:,}", expected, request.method,
                             request.url.path[:200])
                raise ServiceError(400, "client_disconnected", "the client hung up before "
                                   "the body was complete", headers={"Connection": "close"}
                                   ) from None
            yield body  # (a bytearray: no second copy of the body)
        finally:
            self.buffered -= reserved


def source_of(request: Any, *, forwarded: bool = False) -> str:
    """The source a request is counted against: the client's address, or with
    ``forwarded`` (behind a trusted proxy) the last address in ``X-Forwarded-For``."""
    if forwarded:
        header = request.headers.get("x-forwarded-for", "")
        last = header.rsplit(",", 1)[-1].strip()
        if last:
            return last[:64]
    client = request.client
    return client.host if client is not None else "unknown"


class RateLimiter:
    """A token bucket per source: ``rate`` per second, at most ``burst`` saved up.

    ``rate=None`` (or 0) disables it.  Thread-safe (the service's threads share it).

    >>> limiter = RateLimiter(rate=1.0, burst=2, what="requests")
    >>> limiter.take("10.0.0.1", now=0.0), limiter.take("10.0.0.1", now=0.0)
    (0.0, 0.0)
    >>> limiter.take("10.0.0.1", now=0.0)     # empty: retry in one second
    1.0
    >>> limiter.take("10.0.0.1", now=1.0), limiter.take("10.0.0.2", now=0.0)
    (0.0, 0.0)
    """

    def __init__(self, rate: float | None, burst: float | None = None, *,
                 what: str = "requests") -> None:
        if rate is not None and not (math.isfinite(rate) and rate >= 0):
            raise DPMarginalsError(f"a rate limit must be a number >= 0 per second, got {rate!r}")
        self.rate = rate or None
        self.burst = float(burst if burst is not None else max(1.0, rate or 1.0))
        if not (math.isfinite(self.burst) and self.burst >= 1):
            raise DPMarginalsError(f"a burst must be a number >= 1, got {burst!r}")
        self.what = what
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, source: str, count: float = 1.0, *, now: float | None = None) -> float:
        """Take ``count`` tokens for ``source``: 0.0 if granted, else the seconds to wait
        (nothing is taken then)."""
        if self.rate is None:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(source, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if count > self.burst:
                return math.inf
            if tokens < count:
                self._buckets[source] = (tokens, now)
                return (count - tokens) / self.rate
            self._buckets[source] = (tokens - count, now)
            if len(self._buckets) > _MAX_SOURCES:
                self._prune(now)
        return 0.0

    def _prune(self, now: float) -> None:
        """Forget sources whose bucket has refilled (they would start full anyway)."""
        rate, burst = self.rate or 0.0, self.burst
        self._buckets = {s: (t, last) for s, (t, last) in self._buckets.items()
                         if t + (now - last) * rate < burst}

    def check(self, source: str, count: float = 1.0) -> None:
        """:meth:`take`, raising the 429 answer (with ``Retry-After``) when refused."""
        wait = self.take(source, count)
        if wait:
            if math.isinf(wait):
                raise ServiceError(429, "rate_limited", f"{count:g} {self.what} at once is "
                                   f"more than this source may ever have ({self.burst:g}); "
                                   "ask for fewer", headers={"Retry-After": "60"})
            seconds = max(1, math.ceil(wait))
            raise ServiceError(429, "rate_limited", f"too many {self.what} from this source "
                               f"(at most {self.rate:g}/s, bursts of {self.burst:g}); retry "
                               f"in {seconds} s", headers={"Retry-After": str(seconds)})
