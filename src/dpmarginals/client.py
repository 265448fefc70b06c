"""The client: randomize one user's record on her own device and send the report.

Needs only numpy and the standard library (no pandas, scipy or web framework), so it
can ship inside an app.  The flow of one user:

1. get the campaign's public plan (``ServiceClient.plan()``, checked against its hash);
2. take the group the server assigns (``ServiceClient.assignment()``) or pick one
   uniformly with OS entropy (:func:`choose_group`);
3. :func:`make_report`: project the record onto the group's marginal and randomize the
   cell with the group's frequency oracle, drawing from the OS CSPRNG;
4. ``ServiceClient.send(report)``.  Only the report leaves the device.

>>> from dpmarginals.domain import Domain
>>> from dpmarginals.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("sex", "age"), (2, 3)),
...             (GroupSpec(("sex", "age"), "oue", 1.0, 6),))
>>> report = make_report(plan, {"sex": 1, "age": 2})
>>> report["group"], len(report["payload"]), len(report["report_id"])
(0, 4, 32)

:func:`make_reports` does the same for many users at once (tests, demos, the
``dpmarginals client`` command, which plays every row of a CSV file as one user).
"""

from __future__ import annotations

import csv
import gzip
import http.client
import io
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import numpy as np

from .errors import DPMarginalsError
from .plan import Plan
from .randomness import RNGLike, client_rng
from .reports import MAX_BATCH_REPORTS, PlanCodec, ReportError

__all__ = [
    "ServiceClient",
    "ServiceError",
    "choose_group",
    "load_plan",
    "make_report",
    "make_reports",
    "play",
    "read_records",
]

DEFAULT_TIMEOUT = 30.0
_RETRY_STATUSES = frozenset({502, 503, 504})
_codecs: dict[str, PlanCodec] = {}


def _codec(plan: Plan) -> PlanCodec:
    key = plan.hash
    codec = _codecs.get(key)
    if codec is None:
        if len(_codecs) > 64:
            _codecs.clear()
        codec = _codecs[key] = PlanCodec(plan)
    return codec


def load_plan(source: Plan | Mapping[str, Any] | str | os.PathLike[str]) -> Plan:
    """A plan from a Plan, a plan dict, a JSON string, or a JSON file path."""
    if isinstance(source, Plan):
        return source
    if isinstance(source, Mapping):
        return Plan.from_dict(source)
    text = str(source)
    if text.lstrip().startswith("{"):
        try:
            return Plan.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise DPMarginalsError(f"plan is not valid JSON: {exc}") from None
    return Plan.load(text)


def choose_group(plan: Plan, *, rng: RNGLike = None) -> int:
    """A uniformly random group (OS entropy unless ``rng`` is given)."""
    if rng is None:
        return secrets.randbelow(plan.m)
    return int(np.asarray(client_rng(rng).integers(0, plan.m, size=1))[0])


def _record_row(plan: Plan, record: Mapping[str, Any] | Sequence[int] | np.ndarray,
                attributes: Sequence[str]) -> np.ndarray:
    """The record as one row in domain order (only ``attributes`` need to be known)."""
    dom = plan.domain
    row = np.zeros(len(dom), dtype=np.int64)
    if isinstance(record, Mapping):
        missing = [a for a in attributes if a not in record]
        if missing:
            raise DPMarginalsError(f"the record lacks the attributes {missing}")
        items = [(dom.index(a), record[a]) for a in attributes]
    else:
        values = list(np.asarray(record).ravel())
        if len(values) != len(dom):
            raise DPMarginalsError(f"a record needs {len(dom)} values in the domain's order "
                                   f"{list(dom.attributes)}, got {len(values)}")
        items = [(dom.index(a), values[dom.index(a)]) for a in attributes]
    for i, value in items:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise DPMarginalsError(f"attribute {dom.attributes[i]!r} must be an integer code, "
                                   f"got {value!r}")
        row[i] = int(value)
    return row


def make_report(
    plan: Plan, record: Mapping[str, Any] | Sequence[int] | np.ndarray, *,
    group: int | None = None, rng: RNGLike = None,
) -> dict[str, Any]:
    """One user's report: pick (or take) her group, randomize her cell, fresh report id.

    ``record`` maps attribute names to integer codes (only the group's attributes are
    read) or lists every attribute's code in the domain's order.  ``rng=None`` draws all
    randomness from the OS CSPRNG; a seed is for tests only.
    """
    codec = _codec(plan)
    g = choose_group(plan, rng=rng) if group is None else _check_group(plan, group)
    row = _record_row(plan, record, plan.groups[g].attributes)
    cell = codec.cells(g, row[None, :])
    native = codec.oracle(g).perturb(cell, rng=client_rng(rng))
    return codec.reports(g, native)[0]


def _check_group(plan: Plan, group: object) -> int:
    if isinstance(group, bool) or not isinstance(group, int | np.integer):
        raise DPMarginalsError(f"group must be an integer, got {group!r}")
    if not 0 <= group < plan.m:
        raise DPMarginalsError(f"group {group} is not one of the plan's groups 0..{plan.m - 1}")
    return int(group)


def make_reports(
    plan: Plan, records: np.ndarray, *, groups: Sequence[int] | np.ndarray | None = None,
    rng: RNGLike = None,
) -> list[dict[str, Any]]:
    """Reports of many users at once: ``records`` is (n, d) in the domain's order.

    Each user is randomized independently, exactly as :func:`make_report` would; groups
    are drawn uniformly (OS entropy) unless given.  The reports come in the rows' order.
    """
    codec = _codec(plan)
    arr = np.asarray(records)
    if arr.ndim != 2:
        raise DPMarginalsError(f"records must be a 2-D array (n, d), got shape {arr.shape}")
    n = arr.shape[0]
    source = client_rng(rng)
    if groups is None:
        grp = np.asarray(source.integers(0, plan.m, size=n), dtype=np.int64)
    else:
        grp = np.asarray(groups)
        if grp.shape != (n,) or (grp.size and grp.dtype.kind not in "iu"):
            raise DPMarginalsError(f"groups must be {n} integers, got {grp.dtype} {grp.shape}")
        if grp.size and (grp.min() < 0 or grp.max() >= plan.m):
            raise DPMarginalsError(f"groups must lie in 0..{plan.m - 1}")
    out: list[dict[str, Any]] = [{}] * n
    for g in np.unique(grp):
        members = np.flatnonzero(grp == g)
        cells = codec.cells(int(g), arr[members])
        native = codec.oracle(int(g)).perturb(cells, rng=source)
        for i, report in zip(members, codec.reports(int(g), native), strict=True):
            out[i] = report
    return out


# -- reading users' records ---------------------------------------------------------------
def read_records(path: str | os.PathLike[str], plan: Plan) -> np.ndarray:
    """The rows of a CSV file (plain or .gz) as an (n, d) int64 array in the plan's domain order.

    The header must name every attribute of the plan's domain (other columns are ignored);
    cells hold integer codes 0..size-1.
    """
    dom = plan.domain
    p = Path(path)
    if not p.is_file():
        raise DPMarginalsError(f"data file not found: {str(path)!r}")
    opener: Callable[..., Any] = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader, [])]
            missing = [a for a in dom.attributes if a not in header]
            if missing:
                raise DPMarginalsError(f"{p.name}: columns {missing} of the plan's domain are "
                                       f"missing (columns: {header[:20]})")
            idx = [header.index(a) for a in dom.attributes]
            rows = []
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                try:
                    rows.append([int(row[i]) for i in idx])
                except (ValueError, IndexError):
                    raise DPMarginalsError(f"{p.name} line {line}: expected integer codes in "
                                           f"columns {list(dom.attributes)}") from None
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, len(dom))
    dom.validate_codes(arr)
    return arr


# -- talking to the service ----------------------------------------------------------------
class ServiceError(DPMarginalsError):
    """The service refused a request (``status`` and the service's ``code`` and reason)."""

    def __init__(self, status: int, code: str, reason: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {reason}")
        self.status, self.code, self.reason, self.body = status, code, reason, body


class ServiceClient:
    """A connection to one campaign of a ``dpmarginals serve`` aggregator.

    Keeps one HTTP/1.1 connection open.  Posts are retried on a lost connection or a 502-504
    answer (up to ``retries`` times); the report ids make that safe: a retried batch that
    the service had already stored comes back as all duplicates, which counts as success.
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
                raise DPMarginalsError("this request needs the admin token (--token or "
                                       "DPMARGINALS_ADMIN_TOKEN)")
            headers["Authorization"] = f"Bearer {self.token}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            if resp.status in _RETRY_STATUSES and attempt < self.retries:
                last = ServiceError(resp.status, "unavailable", payload[:200].decode("latin-1"))
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
    def plan(self, *, refresh: bool = False) -> Plan:
        """The campaign's public plan (its hash is checked against its content)."""
        if self._plan is None or refresh:
            _, body = self.request("GET", self._path("/plan"))
            self._plan = Plan.from_dict(body)
        return self._plan

    def assignment(self, count: int | None = None) -> int | list[int]:
        """The group the service assigns to this user (``count`` users: a list)."""
        query = None if count is None else {"count": int(count)}
        _, body = self.request("GET", self._path("/assignment", query))
        return body["group"] if count is None else list(body["groups"])

    def send(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """Post one report; returns the service's acknowledgement."""
        return self.request("POST", self._path("/reports"), dict(report))[1]

    def send_batch(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Post reports in batches of at most 10,000 (each batch stored atomically)."""
        accepted = stored = 0
        for start in range(0, len(reports), MAX_BATCH_REPORTS):
            chunk = [dict(r) for r in reports[start : start + MAX_BATCH_REPORTS]]
            body = self.request("POST", self._path("/reports/batch"), {"reports": chunk})[1]
            accepted += int(body.get("accepted", 0))
            stored += int(body.get("already_stored", 0))
        return {"accepted": accepted, "already_stored": stored}

    def submit(self, record: Mapping[str, Any] | Sequence[int], *,
               group: int | None = None) -> dict[str, Any]:
        """The whole path for one user: plan, assigned group, randomize, send."""
        plan = self.plan()
        g = self.assignment() if group is None else group
        report = make_report(plan, record, group=int(g))  # type: ignore[arg-type]
        self.send(report)
        return report

    def status(self) -> dict[str, Any]:
        return self.request("GET", self._path("/status"))[1]

    def marginal(self, attributes: Sequence[str]) -> dict[str, Any]:
        query = {"attributes": ",".join(attributes)}
        return self.request("GET", self._path("/marginals", query))[1]

    # -- admin ---------------------------------------------------------------------------
    def create_campaign(self, plan: Plan) -> dict[str, Any]:
        """Create this campaign from ``plan`` (admin token)."""
        body = {"id": self.campaign, "plan": plan.to_dict()}
        return self.request("POST", f"{self._base}/campaigns", body, admin=True)[1]

    def export_reports(self) -> list[dict[str, Any]]:
        """Every stored report of the campaign (admin token)."""
        _, text = self.request("GET", self._path("/reports"), admin=True, raw=True)
        return [json.loads(line) for line in io.StringIO(text) if line.strip()]


def _count(body: Any) -> int:
    if isinstance(body, dict) and isinstance(body.get("reports"), list):
        return len(body["reports"])
    return 1


def _all_duplicates(err: ServiceError, body: Any) -> bool:
    if err.status != 409 or err.code != "duplicate_report" or not isinstance(err.body, dict):
        return False
    return len(err.body.get("duplicates", [])) == _count(body)


# -- playing many users ---------------------------------------------------------------------
def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def play(
    client: ServiceClient, records: np.ndarray, *, batch: int = 1000, assign: str = "server",
    save: str | os.PathLike[str] | None = None, rng: RNGLike = None,
) -> dict[str, Any]:
    """Every row of ``records`` (domain order) as one user: assign, randomize, send.

    ``batch`` reports per request (1: one request per user); ``assign="server"`` asks the
    service for groups, ``"local"`` draws them uniformly on the "device".  ``save``
    writes the acknowledged reports as JSON lines (for an in-process check).
    """
    if assign not in ("server", "local"):
        raise DPMarginalsError(f"assign must be 'server' or 'local', got {assign!r}")
    if batch < 1:
        raise DPMarginalsError(f"batch must be >= 1, got {batch}")
    plan = client.plan()
    arr = np.asarray(records)
    sink = open(save, "w", encoding="utf-8") if save is not None else None  # noqa: SIM115
    sent = 0
    start = time.perf_counter()
    try:
        for part in _chunks(arr.shape[0], min(batch, MAX_BATCH_REPORTS)):
            rows = arr[part]
            groups = (np.asarray(client.assignment(count=len(rows)), dtype=np.int64)
                      if assign == "server" else None)
            reports = make_reports(plan, rows, groups=groups, rng=rng)
            if batch == 1:
                for report in reports:
                    client.send(report)
            else:
                client.send_batch(reports)
            sent += len(reports)
            if sink is not None:
                sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in reports)
    except ReportError as exc:  # a local validation error: report it as a user error
        raise DPMarginalsError(str(exc)) from None
    finally:
        if sink is not None:
            sink.close()
    seconds = time.perf_counter() - start
    return {"campaign": client.campaign, "plan_hash": plan.hash, "sent": sent,
            "seconds": seconds, "reports_per_second": sent / seconds if seconds > 0 else None}
