"""The report format: what one user's device sends to the aggregator (numpy + stdlib only).

A report is one JSON object with exactly these five fields (no other field is accepted,
so nothing that identifies the user can ride along)::

    {"version": 1,                       # REPORT_VERSION
     "plan_hash": "<64 hex digits>",     # Plan.hash of the plan the client used
     "group": 3,                         # index of the user's group in plan.groups
     "payload": ...,                     # the oracle's randomized output, see below
     "report_id": "<32 hex digits>"}     # 128 random bits from the OS; deduplication only

There is no user identifier and no timestamp.  The payload depends on the group's oracle
(:mod:`dpmarginals.oracles` names the native formats):

=========  ==========================  ===============================================
oracle     payload                     valid when
=========  ==========================  ===============================================
``grr``    integer ``y``               0 <= y < cells
``oue``    base64 string of the        canonical base64 of exactly ceil(cells / 8)
``sue``    packed bits (little bit     bytes; padding bits beyond ``cells`` are 0
           order, as ``perturb``)
``olh``    ``[seed, y]``               seed = a * 2^32 + b with 1 <= a < 2^31 - 1 and
                                       0 <= b < 2^31 - 1; 0 <= y < g
``hr``     ``[j, b]``                  0 <= j < K, b in {0, 1}
``ht``     ``[i, b]``                  0 <= i < |T| (the plan's coefficient set), b in
                                       {0, 1}
``cms``    ``[i, b]``                  0 <= i < g w (i = j w + l), b in {0, 1}
``em``     ``[y_0, ..., y_{d-1}]``     one integer per attribute of the group, each
                                       below the attribute's number of classes
matrix     integer ``o``               0 <= o < m, the rows of the plan's strategy
=========  ==========================  ===============================================

``ht``, ``cms``, ``em`` and ``matrix`` are the report formats of
:mod:`dpmarginals.protocol.formats` (InpHT/FT and MargHT, InpHTCMS, EM and InpEM, WFM);
their parameters come from the plan.

A batch is ``{"reports": [report, ...]}`` with at most :data:`MAX_BATCH_REPORTS` reports.
:class:`PlanCodec` validates reports against a plan (one bad report rejects the whole
batch, with its index and the reason), converts payloads to the compact rows the store
keeps, and counts the support of a set of reports per group; the client uses it to encode.

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("a", "b"), (2, 3)),
...             (GroupSpec(("a", "b"), "grr", 1.0, 6),))
>>> codec = PlanCodec(plan)
>>> report = codec.report(0, 4, "00" * 16)
>>> sorted(report)
['group', 'payload', 'plan_hash', 'report_id', 'version']
>>> batch = codec.decode([report])
>>> [int(c) for c in codec.tally(batch)[0][2]]
[0, 0, 0, 0, 1, 0]
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.hashing import PRIME as _PRIME
from ..oracles import ORACLES
from .counts import Counts
from .formats import INTEGER_PAYLOADS, MAX_GROUP_SUPPORT, group_oracle
from .plan import Plan

__all__ = [
    "BATCH_SCHEMA",
    "MAX_BATCH_REPORTS",
    "MAX_GROUP_CELLS",
    "MAX_GROUP_SUPPORT",
    "REPORT_KEYS",
    "REPORT_SCHEMA",
    "REPORT_VERSION",
    "DecodedReports",
    "PlanCodec",
    "ReportError",
    "new_report_id",
    "support_counts",
]

REPORT_VERSION = 1
REPORT_KEYS = frozenset({"version", "plan_hash", "group", "payload", "report_id"})
MAX_BATCH_REPORTS = 10_000
MAX_GROUP_CELLS = 1 << 20
"""The largest marginal a group may report (a count tensor of 8 MiB)."""

_ID_BYTES = 16
_HEX = frozenset("0123456789abcdef")
_INT64 = np.dtype("<i8")

REPORT_SCHEMA: dict[str, Any] = {
    "title": "Report",
    "type": "object",
    "description": "One user's randomized report (see docs/deployment.md).",
    "required": sorted(REPORT_KEYS),
    "additionalProperties": False,
    "properties": {
        "version": {"type": "integer", "enum": [REPORT_VERSION]},
        "plan_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "group": {"type": "integer", "minimum": 0},
        "payload": {
            "description": "grr, matrix: an integer; oue/sue: base64 packed bits; olh: "
            "[seed, y]; hr: [j, b]; ht, cms: [i, b]; em: one class per attribute",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string"},
                {"type": "array", "items": {"type": "integer", "minimum": 0},
                 "minItems": 1},
            ],
        },
        "report_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    },
}
BATCH_SCHEMA: dict[str, Any] = {
    "title": "ReportBatch",
    "type": "object",
    "required": ["reports"],
    "additionalProperties": False,
    "properties": {
        "reports": {"type": "array", "items": REPORT_SCHEMA, "minItems": 1,
                    "maxItems": MAX_BATCH_REPORTS},
    },
}


class ReportError(DPMarginalsError):
    """A report (or batch) the aggregator must refuse; ``code`` says why, ``index`` where.

    Codes: ``invalid_report`` (malformed or out of range), ``plan_mismatch`` (made under
    another plan), ``duplicate_report`` (its report id was already seen).
    """

    def __init__(self, reason: str, *, code: str = "invalid_report", index: int | None = None,
                 duplicates: Sequence[int] = ()) -> None:
        prefix = "" if index is None else f"report {index}: "
        super().__init__(prefix + reason)
        self.reason = reason
        self.code = code
        self.index = index
        self.duplicates = list(duplicates)


def new_report_id() -> str:
    """A fresh report id: 128 bits from the OS CSPRNG, as 32 lowercase hex digits."""
    return os.urandom(_ID_BYTES).hex()


def _is_int(x: object) -> bool:
    return type(x) is int  # rejects bool, float and numpy scalars alike


_PAIRS = ("hr", "ht", "cms")  # payload [index, bit]


@dataclass(frozen=True)
class _GroupCodec:
    """Payload <-> stored row <-> native report array for one group's oracle or format."""

    oracle: Any  # a FrequencyOracle, or a report format of .formats
    width: int  # bytes of a stored row
    attributes: tuple[str, ...] = ()

    @classmethod
    def of(cls, oracle: Any, attributes: Sequence[str] = ()) -> _GroupCodec:
        name = oracle.name
        if name in ("oue", "sue"):
            return cls(oracle, (oracle.size + 7) // 8, tuple(attributes))
        if name in INTEGER_PAYLOADS:
            return cls(oracle, 8, tuple(attributes))
        if name == "olh" or name in _PAIRS:
            return cls(oracle, 16, tuple(attributes))
        if name == "em":
            return cls(oracle, 8 * oracle.d, tuple(attributes))
        raise DPMarginalsError(f"oracle {name!r} has no report encoding")

    # -- validation: JSON payload -> stored row bytes ------------------------------------
    def row(self, payload: object) -> bytes:
        """The stored row of a JSON payload; raises ReportError (without index) if invalid."""
        name, size = self.oracle.name, self.oracle.size
        if name in INTEGER_PAYLOADS:
            if not _is_int(payload):
                raise ReportError(f"{name} payload must be an integer, got {_short(payload)}")
            if not 0 <= payload < size:  # type: ignore[operator]
                raise ReportError(f"{name} payload {payload} is outside 0..{size - 1}")
            return payload.to_bytes(8, "little")  # type: ignore[union-attr]
        if name in ("oue", "sue"):
            return self._bits_row(payload)
        if name == "em":
            return self._classes_row(payload)
        if (not isinstance(payload, list) or len(payload) != 2
                or not _is_int(payload[0]) or not _is_int(payload[1])):
            what = {"olh": "[seed, y]", "hr": "[j, b]"}.get(name, "[i, b]")
            raise ReportError(f"{name} payload must be two integers {what}, "
                              f"got {_short(payload)}")
        first, second = payload
        if name == "olh":
            a, b = first >> 32, first & 0xFFFFFFFF
            if first < 0 or not (1 <= a < _PRIME and b < _PRIME):
                raise ReportError(f"olh seed {first} is not in the hash family "
                                  f"(a = seed >> 32 in 1..{_PRIME - 1}, "
                                  f"b = seed & 0xFFFFFFFF in 0..{_PRIME - 1})")
            g = self.oracle.g
            if not 0 <= second < g:
                raise ReportError(f"olh hashed value {second} is outside 0..{g - 1}")
        else:
            k = self.oracle.K
            if not 0 <= first < k:
                raise ReportError(f"{name} index {first} is outside 0..{k - 1}")
            if second not in (0, 1):
                raise ReportError(f"{name} bit must be 0 or 1, got {second}")
        return first.to_bytes(8, "little") + second.to_bytes(8, "little")

    def _classes_row(self, payload: object) -> bytes:
        """em: one reported class per attribute, each below the attribute's classes."""
        classes = self.oracle.classes
        if (not isinstance(payload, list) or len(payload) != len(classes)
                or not all(_is_int(y) for y in payload)):
            raise ReportError(f"em payload must be {len(classes)} integers (one reported "
                              f"class per attribute), got {_short(payload)}")
        for j, (y, c) in enumerate(zip(payload, classes, strict=True)):
            if not 0 <= y < c:
                attr = self.attributes[j] if j < len(self.attributes) else j
                raise ReportError(f"em class {y} of attribute {attr!r} is outside 0..{c - 1}")
        return np.asarray(payload, dtype=_INT64).tobytes()

    def _bits_row(self, payload: object) -> bytes:
        name, size, width = self.oracle.name, self.oracle.size, self.width
        expected = 4 * ((width + 2) // 3)
        if not isinstance(payload, str) or len(payload) != expected:
            raise ReportError(f"{name} payload must be a base64 string of {width} bytes "
                              f"({expected} characters), got {_short(payload)}")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ReportError(f"{name} payload is not valid base64") from None
        if len(raw) != width or base64.b64encode(raw).decode("ascii") != payload:
            raise ReportError(f"{name} payload is not the canonical base64 of {width} bytes")
        pad = size % 8
        if pad and raw[-1] >> pad:
            raise ReportError(f"{name} payload sets bits beyond value {size - 1}")
        return raw

    def rows(self, payloads: list[Any]) -> list[bytes] | None:
        """The stored rows of many payloads, checked as arrays; None if any is invalid
        (exactly when :meth:`row` would raise for one of them)."""
        name, size, width = self.oracle.name, self.oracle.size, self.width
        if name in ("oue", "sue"):
            expected = 4 * ((width + 2) // 3)
            if {type(p) for p in payloads} != {str} or {len(p) for p in payloads} != {expected}:
                return None
            raws = [base64.b64decode(p, validate=True) for p in payloads]
            if {len(r) for r in raws} != {width}:
                return None
            if [base64.b64encode(r).decode("ascii") for r in raws] != payloads:
                return None
            pad = size % 8
            if pad:
                last = np.frombuffer(b"".join(raws), dtype=np.uint8)[width - 1 :: width]
                if (last >> pad).any():
                    return None
            return raws
        if name in INTEGER_PAYLOADS:
            if {type(p) for p in payloads} != {int}:
                return None
            arr = np.array(payloads, dtype=np.int64)
            if arr.min() < 0 or arr.max() >= size:
                return None
            return _split(arr.astype(_INT64).tobytes(), 8)
        columns = len(self.oracle.classes) if name == "em" else 2
        if {type(p) for p in payloads} != {list} or {len(p) for p in payloads} != {columns}:
            return None
        if {type(x) for p in payloads for x in p} != {int}:
            return None
        if name == "olh":
            if any(p[0] < 0 or p[0] >= 1 << 63 for p in payloads):
                return None  # (outside int64: not in the family anyway)
            arr = np.array(payloads, dtype=np.int64)
            a, b = arr[:, 0] >> 32, arr[:, 0] & 0xFFFFFFFF
            g = self.oracle.g
            if ((a < 1) | (a >= _PRIME) | (b >= _PRIME) | (arr[:, 1] < 0)
                    | (arr[:, 1] >= g)).any():
                return None
        elif name == "em":
            arr = np.array(payloads, dtype=np.int64)
            if ((arr < 0) | (arr >= np.asarray(self.oracle.classes, np.int64))).any():
                return None
        else:
            arr = np.array(payloads, dtype=np.int64)
            k = self.oracle.K
            if ((arr[:, 0] < 0) | (arr[:, 0] >= k) | (arr[:, 1] < 0) | (arr[:, 1] > 1)).any():
                return None
        return _split(arr.astype(_INT64).tobytes(), self.width)

    # -- stored rows <-> native arrays <-> JSON payloads ----------------------------------
    def native(self, rows: bytes) -> np.ndarray:
        """Concatenated stored rows -> the oracle's native report array."""
        if self.oracle.name in ("oue", "sue"):
            return np.frombuffer(rows, dtype=np.uint8).reshape(-1, self.width)
        arr = np.frombuffer(rows, dtype=_INT64).astype(np.int64)
        return arr if self.oracle.name in INTEGER_PAYLOADS else arr.reshape(-1, self.width // 8)

    def payloads(self, native: np.ndarray) -> list[Any]:
        """Native report array (as ``oracle.perturb`` returns) -> JSON payloads."""
        if self.oracle.name in ("oue", "sue"):
            packed = np.ascontiguousarray(native, dtype=np.uint8)
            return [base64.b64encode(row).decode("ascii") for row in packed]
        return np.asarray(native, dtype=np.int64).tolist()

    def payload_of_row(self, row: bytes) -> Any:
        return self.payloads(self.native(row))[0]

    def support(self, rows: bytes) -> np.ndarray:
        """Support counts (length ``oracle.size``, int64) of concatenated stored rows."""
        if not rows:
            return np.zeros(self.oracle.size, dtype=np.int64)
        return np.asarray(self.oracle.support(self.native(rows)), dtype=np.int64)


def _split(buf: bytes, width: int) -> list[bytes]:
    return [buf[i : i + width] for i in range(0, len(buf), width)]


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class DecodedReports:
    """Validated reports: ids (16 bytes each), groups, stored rows, in the batch's order."""

    ids: list[bytes] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    rows: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


class PlanCodec:
    """Validates, encodes and counts the reports of one plan.

    Construction checks that the plan can be collected: every group's attributes are in
    the domain, ``cells`` equals the marginal's size, its oracle (or report format, built
    from the plan alone: :func:`~.formats.group_oracle`) has a report encoding, and its
    support fits (a frequency oracle's marginal: at most :data:`MAX_GROUP_CELLS` cells;
    a format's support: at most :data:`~.formats.MAX_GROUP_SUPPORT` counts).
    """

    def __init__(self, plan: Plan) -> None:
        if not isinstance(plan, Plan):
            raise DPMarginalsError(f"expected a Plan, got {type(plan).__name__}")
        if not plan.groups:
            raise DPMarginalsError(f"plan of method {plan.method!r} has no groups: its users "
                                   "report nothing, so it cannot be collected")
        codecs = []
        for g, spec in enumerate(plan.groups):
            cells = plan.domain.project(spec.attributes).cells()
            if cells != spec.cells:
                raise DPMarginalsError(f"plan group {g}: cells = {spec.cells} but the marginal "
                                       f"over {list(spec.attributes)} has {cells} cells")
            if spec.oracle in ORACLES and cells > MAX_GROUP_CELLS:
                raise DPMarginalsError(f"plan group {g}: {cells} cells exceed the limit of "
                                       f"{MAX_GROUP_CELLS} per group")
            oracle = group_oracle(plan, g)
            if spec.oracle not in ORACLES and not 0 < oracle.size <= MAX_GROUP_SUPPORT:
                raise DPMarginalsError(f"plan group {g}: its {spec.oracle} reports have a "
                                       f"support of {oracle.size:,} counts, outside 1.."
                                       f"{MAX_GROUP_SUPPORT:,}")
            codecs.append(_GroupCodec.of(oracle, spec.attributes))
        self.plan = plan
        self.hash = plan.hash
        self.groups: tuple[_GroupCodec, ...] = tuple(codecs)
        self.sizes: list[int] = [int(c.oracle.size) for c in codecs]
        self._shapes = [plan.domain.project(s.attributes).shape for s in plan.groups]
        self._positions = [plan.domain.indices(s.attributes) for s in plan.groups]

    @property
    def m(self) -> int:
        return len(self.groups)

    def oracle(self, group: int) -> Any:
        """Group ``group``'s frequency oracle or report format."""
        return self.groups[group].oracle

    # -- client side ----------------------------------------------------------------------
    def _values(self, group: int, records: np.ndarray) -> np.ndarray:
        """The group's attribute values of each record (rows in domain order), checked."""
        arr = np.asarray(records)
        d = len(self.plan.domain)
        if arr.ndim != 2 or arr.shape[1] != d or (arr.size and arr.dtype.kind not in "iu"):
            raise DPMarginalsError(f"records must be an integer array of shape (n, {d}) in the "
                                   f"domain's order, got {arr.dtype} {arr.shape}")
        cols = arr[:, list(self._positions[group])].astype(np.int64)
        attrs = self.plan.groups[group].attributes
        for j, (attr, size) in enumerate(zip(attrs, self._shapes[group], strict=True)):
            bad = (cols[:, j] < 0) | (cols[:, j] >= size)
            if bad.any():
                raise DPMarginalsError(f"value {int(cols[bad, j][0])} of attribute {attr!r} "
                                       f"is out of its domain 0..{size - 1}")
        return cols

    def cells(self, group: int, records: np.ndarray) -> np.ndarray:
        """Flat cell index of each record (rows in domain order) in the group's marginal."""
        cols = self._values(group, records)
        return np.ravel_multi_index(tuple(cols.T), self._shapes[group]).astype(np.int64)

    def inputs(self, group: int, records: np.ndarray) -> np.ndarray:
        """What the group's randomizer takes from each record: its cell of the marginal
        (frequency oracles) or the format's input (``oracle.encode``)."""
        if self.plan.groups[group].oracle in ORACLES:
            return self.cells(group, records)
        return self.oracle(group).encode(self._values(group, records))

    def report(self, group: int, payload: Any, report_id: str | None = None) -> dict[str, Any]:
        """A report dict (payload already in JSON form)."""
        return {"version": REPORT_VERSION, "plan_hash": self.hash, "group": int(group),
                "payload": payload, "report_id": report_id or new_report_id()}

    def reports(self, group: int, native: np.ndarray) -> list[dict[str, Any]]:
        """Reports (fresh ids) for a native array of the group's oracle outputs."""
        return [self.report(group, p) for p in self.groups[group].payloads(native)]

    # -- server side ----------------------------------------------------------------------
    def decode(self, items: object, *, indexed: bool = True) -> DecodedReports:
        """Validate a list of report objects; the first bad one raises :class:`ReportError`.

        Its message starts with "report i: " unless ``indexed`` is false (single reports).
        """
        if not isinstance(items, list):
            raise ReportError(f"reports must be a JSON array, got {type(items).__name__}")
        fast = self._decode_batch(items)
        if fast is not None:
            return fast
        # Some report is invalid: find the first one and say why, report by report.
        out = DecodedReports()
        seen: set[bytes] = set()
        for i, item in enumerate(items):
            try:
                rid, group, row = self._decode_one(item)
            except ReportError as exc:
                if not indexed:
                    raise
                raise ReportError(str(exc), code=exc.code, index=i) from None
            if rid in seen:
                first = out.ids.index(rid)
                raise ReportError(f"report_id {rid.hex()} repeats report {first} of the batch",
                                  index=i)
            seen.add(rid)
            out.ids.append(rid)
            out.groups.append(group)
            out.rows.append(row)
        return out

    def _decode_batch(self, items: list[Any]) -> DecodedReports | None:
        """The whole batch validated column by column with numpy (no per-report branch);
        None when any report is invalid (then :meth:`decode` finds the first and says
        why).  Accepts exactly the batches the report-by-report path accepts."""
        n = len(items)
        if n == 0:
            return DecodedReports()
        try:
            if {type(it) for it in items} != {dict} or any(it.keys() != REPORT_KEYS
                                                          for it in items):
                return None
            versions = [it["version"] for it in items]
            if {type(v) for v in versions} != {int} or set(versions) != {REPORT_VERSION}:
                return None
            hashes = [it["plan_hash"] for it in items]
            if {type(h) for h in hashes} != {str} or set(hashes) != {self.hash}:
                return None
            groups = [it["group"] for it in items]
            if {type(g) for g in groups} != {int}:
                return None
            grp = np.array(groups, dtype=np.int64)
            if grp.min() < 0 or grp.max() >= len(self.groups):
                return None
            rids = [it["report_id"] for it in items]
            if {type(r) for r in rids} != {str} or {len(r) for r in rids} != {2 * _ID_BYTES}:
                return None
            joined = "".join(rids)
            if not _HEX.issuperset(joined):
                return None
            raw_ids = bytes.fromhex(joined)
            ids = [raw_ids[i : i + _ID_BYTES] for i in range(0, n * _ID_BYTES, _ID_BYTES)]
            if len(set(ids)) != n:
                return None
            rows: list[bytes] = [b""] * n
            payloads = [it["payload"] for it in items]
            for g in np.unique(grp).tolist():
                at = np.flatnonzero(grp == g)
                got = self.groups[g].rows([payloads[i] for i in at.tolist()])
                if got is None:
                    return None
                for i, row in zip(at.tolist(), got, strict=True):
                    rows[i] = row
        except (OverflowError, TypeError, ValueError, binascii.Error):
            return None
        return DecodedReports(ids, groups, rows)

    def _decode_one(self, item: object) -> tuple[bytes, int, bytes]:
        if not isinstance(item, dict):
            raise ReportError(f"a report must be a JSON object, got {type(item).__name__}")
        if item.keys() != REPORT_KEYS:
            extra = sorted(str(k) for k in item.keys() - REPORT_KEYS)
            missing = sorted(REPORT_KEYS - item.keys())
            parts = ([f"unknown fields {extra}"] if extra else []) + (
                [f"missing fields {missing}"] if missing else [])
            raise ReportError("; ".join(parts))
        version = item["version"]
        if not _is_int(version) or version != REPORT_VERSION:
            raise ReportError(f"report version {_short(version)} is not supported "
                              f"(this aggregator reads version {REPORT_VERSION})")
        if item["plan_hash"] != self.hash:
            raise ReportError(f"plan_hash {_short(item['plan_hash'])} is not the campaign's "
                              f"plan {self.hash}; fetch the plan again", code="plan_mismatch")
        group = item["group"]
        if not _is_int(group) or not 0 <= group < len(self.groups):
            raise ReportError(f"group {_short(group)} is not one of 0..{len(self.groups) - 1}")
        rid = item["report_id"]
        if not isinstance(rid, str) or len(rid) != 2 * _ID_BYTES or not _HEX.issuperset(rid):
            raise ReportError(f"report_id must be {2 * _ID_BYTES} lowercase hex digits, "
                              f"got {_short(rid)}")
        return bytes.fromhex(rid), group, self.groups[group].row(item["payload"])

    def tally(self, reports: DecodedReports) -> list[tuple[int, int, np.ndarray]]:
        """(group, users, support counts) for every group present in ``reports``."""
        if not len(reports):
            return []
        grp = np.asarray(reports.groups, dtype=np.int64)
        widths = np.array([c.width for c in self.groups], dtype=np.int64)[grp]
        starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
        buf = np.frombuffer(b"".join(reports.rows), dtype=np.uint8)
        out = []
        for g in np.unique(grp).tolist():  # one numpy gather per group
            at = np.flatnonzero(grp == g)
            w = self.groups[g].width
            rows = buf[starts[at][:, None] + np.arange(w)].tobytes()
            out.append((g, int(at.size), self.groups[g].support(rows)))
        return out

    def report_of_row(self, report_id: bytes, group: int, row: bytes) -> dict[str, Any]:
        """The JSON report of a stored (report id, group, row)."""
        return self.report(group, self.groups[group].payload_of_row(row), report_id.hex())

    def empty_counts(self) -> Counts:
        return Counts.zeros(self.sizes)


def support_counts(
    plan: Plan | PlanCodec, reports: Iterable[Mapping[str, Any]] | Sequence[Mapping[str, Any]]
) -> Counts:
    """Support counts per group and users per group of JSON reports (validated).

    Raises :class:`ReportError` on an invalid report or a repeated report id.
    """
    codec = plan if isinstance(plan, PlanCodec) else PlanCodec(plan)
    decoded = codec.decode(list(reports))
    supports, users = codec.empty_counts()
    for g, n, support in codec.tally(decoded):
        supports[g] = supports[g] + support
        users[g] += n
    return Counts(supports, users)
