"""Single-use signed tickets: one report per assignment.

``GET /assignment`` hands each user a group and a ticket; the report must carry the ticket
(its ``"ticket"`` field, removed before the report is stored).  A ticket is 52 bytes in
unpadded base64url::

    campaign (8 bytes) | group (4; 0xFFFFFFFF: any group) | expires (8, Unix seconds)
    | nonce (16, from the OS) | HMAC-SHA256(server secret, "dpmarginals-ticket-v1" + the
    above), first 16 bytes

The server keeps no record of the tickets it hands out; it verifies the MAC (constant
time), the campaign, the group and the expiry, and spends the nonce in the same
transaction as the report (the store's ``tickets`` table: a nonce admits one report,
ever).  So a source cannot post more reports than it was handed tickets, and cannot choose
the group of a ticket bound to one: to concentrate reports on one marginal it must ask
for about ``m`` times as many assignments, which the per-source ticket rate limit bounds.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import struct
import time
from collections.abc import Sequence

from .errors import ServiceError

__all__ = ["ANY_GROUP", "TICKET_TTL", "TicketMint"]

ANY_GROUP = 0xFFFFFFFF
TICKET_TTL = 86_400
"""Seconds a ticket stays valid."""
_LAYOUT = struct.Struct(">QIQ16s")
_MAC = 16
_SIZE = _LAYOUT.size + _MAC
_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_CONTEXT = b"dpmarginals-ticket-v1"


def _forbidden(code: str, reason: str, index: int | None) -> ServiceError:
    extra = {} if index is None else {"index": index}
    prefix = "" if index is None else f"report {index}: "
    return ServiceError(403, code, prefix + reason, **extra)


class TicketMint:
    """Issues and verifies the tickets of one store (its secret)."""

    def __init__(self, secret: bytes, *, ttl: int = TICKET_TTL) -> None:
        if len(secret) < 16:
            raise ValueError("the ticket secret must have at least 16 bytes")
        self._secret = secret
        self.ttl = ttl

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self._secret, _CONTEXT + body, "sha256")[:_MAC]

    def issue(self, campaign: int, groups: Sequence[int | None]) -> list[str]:
        """A fresh ticket for each group (None: valid for any group)."""
        expires = int(time.time()) + self.ttl
        nonces = os.urandom(16 * len(groups))
        out = []
        for i, g in enumerate(groups):
            body = _LAYOUT.pack(campaign, ANY_GROUP if g is None else int(g), expires,
                                nonces[16 * i : 16 * i + 16])
            raw = body + self._mac(body)
            out.append(base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii"))
        return out

    def verify(self, campaign: int, tickets: Sequence[object], groups: Sequence[int], *,
               indexed: bool = True) -> list[bytes]:
        """The nonces of valid tickets for reports of ``groups``; the first bad ticket
        raises a 403 :class:`ServiceError` (``ticket_required``, ``invalid_ticket``,
        ``ticket_expired``) naming its report's position when ``indexed``."""
        now = int(time.time())
        nonces = []
        for i, (ticket, group) in enumerate(zip(tickets, groups, strict=True)):
            at = i if indexed else None
            if ticket is None:
                raise _forbidden("ticket_required", "a report must carry the ticket its "
                                 "assignment came with (GET /assignment)", at)
            raw = _decode(ticket)
            if raw is None:
                raise _forbidden("invalid_ticket", "the ticket is not one this service "
                                 "issued", at)
            body, mac = raw[: _LAYOUT.size], raw[_LAYOUT.size :]
            if not hmac.compare_digest(mac, self._mac(body)):
                raise _forbidden("invalid_ticket", "the ticket is not one this service "
                                 "issued", at)
            num, bound, expires, nonce = _LAYOUT.unpack(body)
            if num != campaign:
                raise _forbidden("invalid_ticket", "the ticket is for another campaign", at)
            if bound != ANY_GROUP and bound != group:
                raise _forbidden("invalid_ticket", f"the ticket was issued for group {bound}, "
                                 f"not group {group}", at)
            if expires < now:
                raise _forbidden("ticket_expired", "the ticket has expired; ask /assignment "
                                 "for another", at)
            nonces.append(nonce)
        return nonces


def _decode(ticket: object) -> bytes | None:
    if not isinstance(ticket, str) or len(ticket) != 70:
        return None
    data = ticket.encode("ascii", "replace")
    if not _CHARS.issuperset(data):
        return None
    try:
        raw = base64.urlsafe_b64decode(data + b"==")
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == _SIZE else None
