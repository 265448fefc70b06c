"""Single-use signed tickets: one report per assignment.

``GET /assignment`` hands each user a group and a ticket; the report must carry the ticket
(its ``"ticket"`` field, removed before the report is stored).  A ticket is 54 bytes in
base64url (72 characters)::

    version (1 byte: 2) | 0 (1) | campaign (8) | group (4; 0xFFFFFFFF: any group)
    | expires (8, Unix seconds) | masked serial (8) | random (8, from the OS)
    | HMAC-SHA256(server secret, "dpmarginals-ticket-v1" + the above), first 16 bytes

The server keeps no record of the tickets it hands out; it verifies the MAC (constant
time), the campaign, the group and the expiry, and spends the serial in the same
transaction as the report (a bit of the store's ``tickets`` bitmap: a serial admits one
report, ever). Serials are unique per store: each server process reserves a range of
them from the store (``Store.reserve_serials``), so tickets handed out together have
nearby serials and a batch spends them in one or two bitmap rows. So a source cannot
post more reports than it was handed tickets, and cannot choose the group of a ticket
bound to one: to concentrate reports on one marginal it must ask for about ``m`` times
as many assignments, which the per-source ticket rate limit bounds.

The serial is masked (version 2, issue #33): XORed with the first 8 bytes of
``HMAC-SHA256(secret, "dpmarginals-ticket-serial" + campaign + random)``, a pad that only
the server can compute and that differs for every ticket, so a ticket's bytes do not tell
its serial: anyone who took two tickets could otherwise read off how many were handed out
between them (everyone's traffic).  Version-1 tickets (the serial in clear, from before)
are still accepted until they expire (a day).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from .errors import ServiceError

__all__ = ["ANY_GROUP", "TICKET_TTL", "TicketMint"]

ANY_GROUP = 0xFFFFFFFF
TICKET_TTL = 86_400
"""Seconds a ticket stays valid."""
_LAYOUT = struct.Struct(">BBQIQQ8s")
_BODY = _LAYOUT.size  # 38
_MAC = 16
_SIZE = _BODY + _MAC  # 54: 72 base64 characters, no padding
_TEXT = 4 * _SIZE // 3
_VERSION = 2
_VERSIONS = (1, 2)  # 1: the serial in clear (tickets issued before issue #33)
_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_CONTEXT = b"dpmarginals-ticket-v1"
_SERIAL_CONTEXT = b"dpmarginals-ticket-serial"
_RESERVE = 1 << 20  # serials reserved from the store at a time


def _forbidden(code: str, reason: str, index: int | None) -> ServiceError:
    extra = {} if index is None else {"index": index}
    prefix = "" if index is None else f"report {index}: "
    return ServiceError(403, code, prefix + reason, **extra)


class TicketMint:
    """Issues and verifies the tickets of one store: its secret, and ``reserve(count)``,
    which returns the first of ``count`` serials no one else hands out."""

    def __init__(self, secret: bytes, reserve: Callable[[int], int], *,
                 ttl: int = TICKET_TTL) -> None:
        if len(secret) < 16:
            raise ValueError("the ticket secret must have at least 16 bytes")
        self._secret = secret
        self._reserve = reserve
        self._next = self._end = 0
        self._lock = threading.Lock()
        self.ttl = ttl

    def _serials(self, count: int) -> int:
        with self._lock:
            if self._next + count > self._end:
                self._next = self._reserve(max(count, _RESERVE))
                self._end = self._next + max(count, _RESERVE)
            start = self._next
            self._next += count
            return start

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self._secret, _CONTEXT + body, "sha256")[:_MAC]

    def _pad(self, campaign: bytes, noise: bytes) -> int:
        """The mask of a ticket's serial: from its campaign and random bytes, by the
        server's secret (see the module docstring)."""
        digest = hmac.digest(self._secret, _SERIAL_CONTEXT + campaign + noise, "sha256")
        return int.from_bytes(digest[:8], "big")

    def issue(self, campaign: int, groups: Sequence[int | None]) -> list[str]:
        """A fresh ticket for each group (None: valid for any group)."""
        expires = int(time.time()) + self.ttl
        first = self._serials(len(groups))
        noise = os.urandom(8 * len(groups))
        out = []
        number = campaign.to_bytes(8, "big")
        for i, g in enumerate(groups):
            rand = noise[8 * i : 8 * i + 8]
            body = _LAYOUT.pack(_VERSION, 0, campaign, ANY_GROUP if g is None else int(g),
                                expires, (first + i) ^ self._pad(number, rand), rand)
            out.append(base64.urlsafe_b64encode(body + self._mac(body)).decode("ascii"))
        return out

    def verify(self, campaign: int, tickets: Sequence[object], groups: Sequence[int], *,
               indexed: bool = True) -> np.ndarray:
        """The serials of valid tickets for reports of ``groups``; the first bad ticket
        raises a 403 :class:`ServiceError` (``ticket_required``, ``invalid_ticket``,
        ``ticket_expired``) naming its report's position when ``indexed``.

        Checked as arrays: one base64 decode of all tickets, one MAC each (C), numpy
        comparisons of the fields.
        """
        n = len(tickets)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if n == 1:  # one report: the same checks without numpy's overhead
            return np.asarray([self._verify_one(campaign, tickets[0], groups[0], indexed)],
                              dtype=np.int64)
        wellformed = [type(t) is str and len(t) == _TEXT for t in tickets]
        joined = "".join(t for t, ok in zip(tickets, wellformed, strict=True) if ok)
        if not all(wellformed) or not _CHARS.issuperset(joined):
            first = next(i for i, t in enumerate(tickets)
                         if not (type(t) is str and len(t) == _TEXT and _CHARS.issuperset(t)))
            code = "ticket_required" if tickets[first] is None else "invalid_ticket"
            raise self._refusal(code, first, indexed)
        try:
            raw = base64.urlsafe_b64decode(joined)
        except (binascii.Error, ValueError):  # (cannot happen for the characters checked)
            raise self._refusal("invalid_ticket", 0, indexed) from None
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(n, _SIZE)
        secret, context = self._secret, _CONTEXT
        expected = b"".join([hmac.digest(secret, context + raw[i : i + _BODY], "sha256")[:_MAC]
                             for i in range(0, n * _SIZE, _SIZE)])
        macs = rows[:, _BODY:]
        bad = np.zeros(n, dtype=bool)
        if not hmac.compare_digest(expected, macs.tobytes()):
            bad |= (np.frombuffer(expected, dtype=np.uint8).reshape(n, _MAC) != macs).any(1)
        fields = rows[:, :_BODY].copy().view(np.dtype([
            ("version", "u1"), ("zero", "u1"), ("campaign", ">u8"), ("group", ">u4"),
            ("expires", ">u8"), ("serial", ">u8"), ("noise", "V8")])).ravel()
        bad |= ~np.isin(fields["version"], _VERSIONS) | (fields["zero"] != 0)
        foreign = fields["campaign"] != campaign
        wrong = (fields["group"] != ANY_GROUP) & (fields["group"] != np.asarray(groups))
        expired = fields["expires"] < int(time.time())
        failed = bad | foreign | wrong | expired
        if failed.any():
            first = int(np.flatnonzero(failed)[0])
            if bad[first]:
                raise self._refusal("invalid_ticket", first, indexed)
            if foreign[first]:
                raise self._refusal("invalid_ticket", first, indexed, "the ticket is for "
                                    "another campaign")
            if wrong[first]:
                raise self._refusal("invalid_ticket", first, indexed, f"the ticket was "
                                    f"issued for group {int(fields['group'][first])}, not "
                                    f"group {groups[first]}")
            raise self._refusal("ticket_expired", first, indexed)
        serials = fields["serial"].astype(np.uint64)
        number = int(campaign).to_bytes(8, "big")
        masked = np.flatnonzero(fields["version"] == 2)
        if len(masked):
            noise = rows[:, _BODY - 8:_BODY]
            pads = np.asarray([self._pad(number, noise[i].tobytes()) for i in masked],
                              dtype=np.uint64)
            serials[masked] ^= pads
        return serials.astype(np.int64)

    def _verify_one(self, campaign: int, ticket: object, group: int, indexed: bool) -> int:
        if type(ticket) is not str or len(ticket) != _TEXT or not _CHARS.issuperset(ticket):
            code = "ticket_required" if ticket is None else "invalid_ticket"
            raise self._refusal(code, 0, indexed)
        raw = base64.urlsafe_b64decode(ticket)
        body, mac = raw[:_BODY], raw[_BODY:]
        version, zero, num, bound, expires, serial, rand = _LAYOUT.unpack(body)
        if not hmac.compare_digest(mac, self._mac(body)) or version not in _VERSIONS or zero:
            raise self._refusal("invalid_ticket", 0, indexed)
        if num != campaign:
            raise self._refusal("invalid_ticket", 0, indexed, "the ticket is for another "
                                "campaign")
        if bound not in (ANY_GROUP, group):
            raise self._refusal("invalid_ticket", 0, indexed, f"the ticket was issued for "
                                f"group {bound}, not group {group}")
        if expires < int(time.time()):
            raise self._refusal("ticket_expired", 0, indexed)
        if version == 2:
            serial ^= self._pad(int(num).to_bytes(8, "big"), rand)
        return int(serial)

    @staticmethod
    def _refusal(code: str, index: int, indexed: bool, reason: str | None = None
                 ) -> ServiceError:
        text = reason or {
            "ticket_required": "a report must carry the ticket its assignment came with "
                               "(GET /assignment)",
            "invalid_ticket": "the ticket is not one this service issued",
            "ticket_expired": "the ticket has expired; ask /assignment for another"}[code]
        return _forbidden(code, text, index if indexed else None)
