"""Talking to a ``dpmarginals serve`` aggregator over HTTP (numpy + stdlib only).

:class:`ServiceClient` keeps one HTTP/1.1 connection to one campaign: the plan, the
assignment and its single-use ticket, reports one by one or in batches, with retries on a
lost connection or a 429/502-504 answer (the report ids make that safe: a retried batch the
service already stored comes back as duplicates, which counts as delivered).  Its
:meth:`ServiceClient.submit` is the device path: the :class:`~.device.Device` checks,
charges and randomizes, the client only carries the report.
"""

from __future__ import annotations

import http.client
import io
import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ..core.errors import DPMarginalsError
from .checks import parse_plan
from .device import Device
from .ledger import PlanRefused
from .phases import check_next_phase, next_phase_name
from .plan import Plan
from .reports import MAX_BATCH_REPORTS

__all__ = ["DEFAULT_TIMEOUT", "ServiceClient", "ServiceError", "origin_of"]

DEFAULT_TIMEOUT = 30.0
_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_MAX_RETRY_AFTER = 60.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(server: str) -> str:
    """The server's origin, ``scheme://host[:port]`` (lower case, default port dropped): a
    device pins campaigns per origin.

    >>> origin_of("HTTPS://Stats.Example.org:443/api/")
    'https://stats.example.org'
    """
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DPMarginalsError(f"server must be an http(s) URL, got {server!r}")
    port = parts.port
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    keep = port is not None and port != _DEFAULT_PORTS[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if keep else "")


class ServiceError(DPMarginalsError):
    """The service refused a request (``status`` and the service's ``code`` and reason)."""

    def __init__(self, status: int, code: str, reason: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {reason}")
        self.status, self.code, self.reason, self.body = status, code, reason, body


class ServiceClient:
    """A connection to one campaign of a ``dpmarginals serve`` aggregator.

    Keeps one HTTP/1.1 connection open.  Requests are retried on a lost connection or a
    429 or 502-504 answer (up to ``retries`` times, after the answer's ``Retry-After`` when
    it says, up to a minute); the report ids make that safe: a retried batch that the
    service had already stored comes back as all duplicates, which counts as success.

    Tickets: :meth:`assignment` keeps the single-use ticket of each group it is handed;
    :meth:`send` and :meth:`send_batch` attach one to each report that has none (one of
    its group's, else any kept one, which a campaign whose tickets are not bound to groups
    accepts).  A campaign without tickets gets reports without them.
    """

    def __init__(self, server: str, campaign: str, *, token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = 3) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DPMarginalsError(f"server must be an http(s) URL, got {server!r}")
        self.server = server.rstrip("/")
        self.campaign = campaign
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._base = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None
        self._plan: Plan | None = None
        self._tickets: dict[int, list[str]] = {}
        self.last_headers: dict[str, str] = {}

    # -- plumbing ------------------------------------------------------------------------
    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (http.client.HTTPSConnection if self._scheme == "https"
                   else http.client.HTTPConnection)
            self._conn = cls(self._host, self._port, timeout=self.timeout)
        return self._conn

    def _path(self, suffix: str = "", query: Mapping[str, Any] | None = None) -> str:
        path = f"{self._base}/campaigns/{quote(self.campaign, safe='')}{suffix}"
        return path + ("?" + urlencode(query) if query else "")

    def request(self, method: str, path: str, body: Any = None, *, admin: bool = False,
                raw: bool = False) -> tuple[int, Any]:
        """One request with retries; returns (status, parsed JSON or text)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if admin:
            if not self.token:
                raise DPMarginalsError("this request needs the admin token (--token-file or "
                                       "DPMARGINALS_ADMIN_TOKEN)")
            headers["Authorization"] = f"Bearer {self.token}"
        last: Exception | None = None
        wait = 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(wait or min(0.2 * 2 ** (attempt - 1), 2.0))
                wait = 0.0
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                self.last_headers = {k.lower(): v for k, v in resp.getheaders()}
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            if resp.status in _RETRY_STATUSES and attempt < self.retries:
                last = ServiceError(resp.status, "unavailable", payload[:200].decode("latin-1"))
                wait = _retry_after(self.last_headers.get("retry-after"))
                if wait <= _MAX_RETRY_AFTER:  # (429: too many requests; 503: busy)
                    continue
            text = payload.decode("utf-8", "replace")
            if raw and resp.status < 400:
                return resp.status, text
            try:
                parsed: Any = json.loads(text) if text else None
            except ValueError:
                parsed = text
            if resp.status >= 400:
                err = ServiceClient._error(resp.status, parsed)
                if attempt and _all_duplicates(err, body):
                    return 200, {"accepted": 0, "already_stored": _count(body)}
                raise err
            return resp.status, parsed
        raise DPMarginalsError(f"cannot reach {self.server}: {last}")

    @staticmethod
    def _error(status: int, parsed: Any) -> ServiceError:
        if isinstance(parsed, dict) and "error" in parsed:
            return ServiceError(status, str(parsed["error"]), str(parsed.get("reason", "")),
                                parsed)
        if isinstance(parsed, dict) and "detail" in parsed:
            return ServiceError(status, "invalid_request", json.dumps(parsed["detail"])[:500],
                                parsed)
        return ServiceError(status, "error", str(parsed)[:500], parsed)

    # -- the campaign --------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """The server's origin (:func:`origin_of`): a device pins campaigns per origin."""
        return origin_of(self.server)

    def plan(self, *, refresh: bool = False) -> Plan:
        """The campaign's public plan (its hash must be present and match its content)."""
        if self._plan is None or refresh:
            _, body = self.request("GET", self._path("/plan"))
            if not isinstance(body, Mapping):
                raise PlanRefused(f"plan refused: the server's plan is not a JSON object: "
                                  f"{str(body)[:80]!r}")
            self._plan = parse_plan(body)
        return self._plan

    def assignment(self, count: int | None = None) -> int | list[int]:
        """The group the service assigns to this user (``count`` users: a list); the
        tickets that come with them are kept for :meth:`send` and :meth:`send_batch`."""
        query = None if count is None else {"count": int(count)}
        _, body = self.request("GET", self._path("/assignment", query))
        key = "group" if count is None else "groups"
        value = body.get(key) if isinstance(body, dict) else None
        groups = [value] if count is None else value
        if not isinstance(groups, list) or not all(
                isinstance(g, int) and not isinstance(g, bool) for g in groups) or (
                count is not None and len(groups) != count):
            raise ServiceError(200, "bad_assignment", f"the server's assignment is not "
                               f"{'an integer group' if count is None else f'{count} groups'}: "
                               f"{str(body)[:200]}", body)
        tickets = body.get("ticket" if count is None else "tickets")
        if tickets is not None:
            tickets = [tickets] if count is None else tickets
            if not isinstance(tickets, list) or len(tickets) != len(groups) or not all(
                    isinstance(t, str) and len(t) <= 256 for t in tickets):
                raise ServiceError(200, "bad_assignment", f"the server's tickets are not "
                                   f"{len(groups)} strings: {str(tickets)[:200]}", body)
            for g, ticket in zip(groups, tickets, strict=True):
                self._tickets.setdefault(g, []).append(ticket)
        return groups[0] if count is None else groups

    def _take_ticket(self, group: object) -> str | None:
        """A kept ticket for ``group`` (else any kept one), or None."""
        pool = self._tickets.get(group) if isinstance(group, int) else None
        if not pool:
            pool = next((p for p in self._tickets.values() if p), None)
        return pool.pop() if pool else None

    def _ticketed(self, report: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(report)
        if "ticket" not in out:
            ticket = self._take_ticket(out.get("group"))
            if ticket is not None:
                out["ticket"] = ticket
        return out

    def with_tickets(self, reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``reports``, each given a kept ticket if it has none (to keep a report
        with its ticket, e.g. in an outbox for a later retry)."""
        return [self._ticketed(r) for r in reports]

    def send(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """Post one report (with a kept ticket); returns the service's acknowledgement."""
        return self.request("POST", self._path("/reports"), self._ticketed(report))[1]

    def send_batch(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Post reports (each with a kept ticket) in batches of at most 10,000 (each batch
        stored atomically)."""
        accepted = stored = 0
        for start in range(0, len(reports), MAX_BATCH_REPORTS):
            chunk = [self._ticketed(r) for r in reports[start : start + MAX_BATCH_REPORTS]]
            body = self.request("POST", self._path("/reports/batch"), {"reports": chunk})[1]
            accepted += int(body.get("accepted", 0))
            stored += int(body.get("already_stored", 0))
        return {"accepted": accepted, "already_stored": stored}

    def submit(self, record: Mapping[str, Any] | Sequence[Any], device: Device, *,
               assign: str = "server") -> dict[str, Any]:
        """The whole path for one device: the plan, the device's checks, a ticket, the
        report (made, charged and stored by ``device``), the send; returns the report.

        The device refuses (one line, nothing drawn, no assignment asked) a plan it will
        not report under or a report its caps cannot pay for.  A campaign it already
        reported sends the stored report again, with the ticket the ledger kept for it (a
        duplicate answer counts as delivered).
        Every fresh report asks the service for an assignment, whose single-use ticket
        goes with the report; its group is taken unless the device keeps another for the
        plan, or ``assign="local"`` (a uniform draw on the device).
        """
        if assign not in ("server", "local"):
            raise DPMarginalsError(f"assign must be 'server' or 'local', got {assign!r}")
        plan = device.accept(self.plan(), origin=self.origin, campaign=self.campaign)
        stored = device.stored_report(origin=self.origin, campaign=self.campaign)
        if stored is not None:  # sent again with the ticket it was first sent with
            self._deliver(stored)
            return {k: v for k, v in stored.items() if k != "ticket"}
        kept = device.ledger.group_of(plan.hash)
        device.check_charge(plan, kept, origin=self.origin)  # before the assignment
        assigned = self.assignment()  # its ticket is kept for the send
        group = assigned if assign == "server" and kept is None else None
        report = device.report(plan, record, origin=self.origin, campaign=self.campaign,
                               group=group)  # type: ignore[arg-type]
        sendable = self._ticketed(report)
        if "ticket" in sendable:  # kept before it leaves: a later resend carries it again
            with device.ledger.locked():
                device.ledger.keep_ticket(f"{self.origin}|{self.campaign}", sendable["ticket"])
        self._deliver(sendable)
        return report

    def _deliver(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """Send one report; the service already holding it counts as delivered."""
        try:
            return self.send(report)
        except ServiceError as exc:
            if exc.status == 409 and exc.code == "duplicate_report":
                return {"accepted": 0, "already_stored": 1}
            raise

    def status(self) -> dict[str, Any]:
        """The campaign's status (with the token, if this client has one: analyst or
        admin; a public campaign needs none)."""
        return self.request("GET", self._path("/status"), admin=bool(self.token))[1]

    def marginal(self, attributes: Sequence[str]) -> dict[str, Any]:
        """A marginal of the campaign's current release (token as for :meth:`status`)."""
        query = {"attributes": ",".join(attributes)}
        return self.request("GET", self._path("/marginals", query), admin=bool(self.token))[1]

    def close_campaign(self) -> dict[str, Any]:
        """Close the campaign: no more assignments or reports (admin token)."""
        return self.request("POST", self._path("/close"), admin=True)[1]

    def next_phase(self) -> ServiceClient:
        """A client of the phase after this adaptive campaign's (``{phase 1's id}.phase{j}``,
        named from this campaign's plan), with the same server, token and timeouts."""
        plan = self.plan()
        check_next_phase(self.campaign, plan)
        return ServiceClient(self.server, next_phase_name(self.campaign, plan),
                             token=self.token, timeout=self.timeout, retries=self.retries)

    # -- admin ---------------------------------------------------------------------------
    def open_next_phase(self, users: int | None = None,
                        settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Close this phase of an adaptive campaign and open the next, planned by the
        service from every phase's reports so far (admin token); ``users``: how many will
        report in it; ``settings``: changes to this phase's settings, which it inherits."""
        body: dict[str, Any] = {} if users is None else {"users": int(users)}
        if settings:
            body["settings"] = dict(settings)
        return self.request("POST", self._path("/next-phase"), body, admin=True)[1]

    def create_campaign(self, plan: Plan, settings: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
        """Create this campaign from ``plan`` and optional ``settings`` (admin token)."""
        body: dict[str, Any] = {"id": self.campaign, "plan": plan.to_dict()}
        if settings:
            body["settings"] = dict(settings)
        return self.request("POST", f"{self._base}/campaigns", body, admin=True)[1]

    def export_reports(self) -> list[dict[str, Any]]:
        """A snapshot of the campaign's stored reports (admin token); its count is checked
        against the service's ``X-Report-Count``."""
        _, text = self.request("GET", self._path("/reports"), admin=True, raw=True)
        reports = [json.loads(line) for line in io.StringIO(text) if line.strip()]
        stated = self.last_headers.get("x-report-count")
        if stated is not None and stated.isdigit() and int(stated) != len(reports):
            raise DPMarginalsError(f"the export was cut short: {len(reports):,} of "
                                   f"{int(stated):,} reports arrived")
        return reports


def _retry_after(value: str | None) -> float:
    """Seconds of a ``Retry-After`` header (0 when absent or not a number of seconds)."""
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0


def _count(body: Any) -> int:
    if isinstance(body, dict) and isinstance(body.get("reports"), list):
        return len(body["reports"])
    return 1


def _all_duplicates(err: ServiceError, body: Any) -> bool:
    if err.status != 409 or err.code != "duplicate_report" or not isinstance(err.body, dict):
        return False
    return len(err.body.get("duplicates", [])) == _count(body)


