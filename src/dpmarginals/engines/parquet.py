"""Reports in Parquet: the schemas, the directory layout, the writers.

**Reports of a local-DP campaign** (one directory per campaign, one per group)::

    ROOT/campaign=<id>/_plan.json                      the plan (with its hash)
    ROOT/campaign=<id>/group=<g>/part-<uuid>.parquet   reports of group g (plan.groups[g])

Every part file holds the reports of one group, one row per report, in the schema of
the group's oracle (all columns ``int64``, non-null; "native" is the in-memory format of
:mod:`dpmarginals.oracles`):

=========  ===========================  ==================================================
oracle     columns                      meaning
=========  ===========================  ==================================================
``grr``,   ``value``                    the reported value, 0..L-1 (matrix: the output o,
matrix                                  0..m-1)
``oue``,   ``word0`` .. ``word{W-1}``   the L-bit vector in W = ceil(L/64) little-endian
``sue``                                 64-bit words: bit v is bit v mod 64 of word
                                        v div 64 (two's complement); bits >= L are 0.
                                        (The native packed bytes, read as '<i8' words.)
``olh``    ``seed``, ``y``              seed = a * 2^32 + b of H(v) = ((a v + b) mod
                                        (2^31 - 1)) mod g, and the reported hash y in 0..g-1
``hr``     ``j``, ``bit``               Hadamard coefficient index j in 0..K-1, bit in {0, 1}
``ht``,    ``j``, ``bit``               the index i of the report [i, b] (coefficient;
``cms``                                 sketch row and column j w + l) and the bit b
``em``     ``v0`` .. ``v{d-1}``         the reported class of each of the group's d
                                        attributes (``dpmarginals.protocol.formats``)
=========  ===========================  ==================================================

Each file's key-value metadata ``dpmarginals`` holds JSON with the plan hash, campaign,
group, oracle, epsilon and cells; the engines refuse a file made under another plan or
for another group.  Files whose name starts with ``.`` or ``_`` are not read (a part file
is written under a hidden name and renamed when complete), so a reader never sees half a
file.  The layout is Hive-style, so DuckDB (``hive_partitioning``) and Spark (partition
discovery) read ``group`` as a column.

Sparse records for the central-DP extraction have their own layout
(:mod:`dpmarginals.datasets.records_store`).

>>> import tempfile
>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("a",), (4,)), (GroupSpec(("a",), "grr", 1.0, 4),))
>>> root = tempfile.mkdtemp()
>>> write_reports(plan, root, "c1", {0: np.array([0, 3, 3])})
{0: 3}
>>> [p.name for p in sorted(campaign_path(root, "c1").iterdir())]
['_plan.json', 'group=0']
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.hashing import PRIME
from ..core.parquet_parts import pa, write_part
from ..protocol.formats import INTEGER_PAYLOADS, plan_oracles
from ..protocol.plan import Plan

__all__ = [
    "FORMAT_VERSION",
    "ROWS_PER_FILE",
    "ReportWriter",
    "campaign_path",
    "export_reports",
    "from_table",
    "group_files",
    "read_manifest",
    "report_columns",
    "report_schema",
    "resolve_campaign",
    "to_table",
    "words",
    "write_reports",
]

FORMAT_VERSION = 1
METADATA_KEY = b"dpmarginals"
ROWS_PER_FILE = 1 << 22
"""Reports per part file (4 Mi: about 32 MiB of int64 before compression)."""
MANIFEST = "_plan.json"
_CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


# -- schemas ------------------------------------------------------------------------------
def words(oracle: Any) -> int:
    """W = ceil(L / 64): the 64-bit words of a unary-encoding report."""
    return (oracle.size + 63) // 64


def report_columns(oracle: Any) -> list[str]:
    """The Parquet columns of ``oracle``'s reports (see the module docstring)."""
    name = oracle.name
    if name in INTEGER_PAYLOADS:
        return ["value"]
    if name in ("oue", "sue"):
        return [f"word{i}" for i in range(words(oracle))]
    if name == "olh":
        return ["seed", "y"]
    if name in ("hr", "ht", "cms"):
        return ["j", "bit"]
    if name == "em":
        return [f"v{i}" for i in range(oracle.d)]
    raise DPMarginalsError(f"oracle {name!r} has no Parquet report schema")


def report_schema(oracle: Any, metadata: Mapping[str, Any] | None = None
                  ) -> pa.Schema:
    """The Arrow schema of ``oracle``'s report files (all int64, non-null)."""
    fields = [pa.field(c, pa.int64(), nullable=False) for c in report_columns(oracle)]
    meta = None if metadata is None else {METADATA_KEY: json.dumps(dict(metadata)).encode()}
    return pa.schema(fields, metadata=meta)


def _check_native(oracle: Any, native: Any) -> np.ndarray:
    """Validate a native report array (as ``oracle.perturb`` returns) without counting it."""
    name, size = oracle.name, oracle.size
    arr = np.asarray(native)
    if name in ("oue", "sue"):
        width = (size + 7) // 8
        if arr.ndim != 2 or arr.shape[1] != width or arr.dtype != np.uint8:
            raise DPMarginalsError(f"{name} reports must be packed uint8 of shape (n, {width}), "
                                   f"got {arr.dtype} {arr.shape}")
        if size % 8 and arr.size and (arr[:, -1] >> (size % 8)).any():
            i = int(np.flatnonzero(arr[:, -1] >> (size % 8))[0])
            raise DPMarginalsError(f"{name} report {i} sets bits beyond value {size - 1}")
        return arr
    if arr.size and arr.dtype.kind not in "iu":
        raise DPMarginalsError(f"{name} reports must be integers, got {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)

    def check(col: np.ndarray, high: int, what: str) -> None:
        bad = (col < 0) | (col >= high)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DPMarginalsError(f"{what} {int(col[i])} of report {i} is outside 0..{high - 1}")

    if name in INTEGER_PAYLOADS:
        if arr.ndim != 1:
            raise DPMarginalsError(f"{name} reports must be 1-D, got shape {arr.shape}")
        check(arr, size, f"{name} value")
        return arr
    if name == "em":
        if arr.ndim != 2 or arr.shape[1] != oracle.d:
            raise DPMarginalsError(f"em reports must have shape (n, {oracle.d}), got {arr.shape}")
        for a, c in enumerate(oracle.classes):
            check(arr[:, a], c, f"em class of attribute {a}")
        return arr
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise DPMarginalsError(f"{name} reports must have shape (n, 2), got {arr.shape}")
    if name == "olh":
        a, b = arr[:, 0] >> 32, arr[:, 0] & 0xFFFFFFFF
        bad = (arr[:, 0] < 0) | (a < 1) | (a >= PRIME) | (b >= PRIME)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DPMarginalsError(f"olh seed {int(arr[i, 0])} of report {i} is not in the "
                                   "hash family")
        check(arr[:, 1], oracle.g, "olh hashed value")  # type: ignore[attr-defined]
    else:
        check(arr[:, 0], oracle.K, f"{name} index")
        check(arr[:, 1], 2, f"{name} bit")
    return arr


def to_table(oracle: Any, native: Any,
             metadata: Mapping[str, Any] | None = None) -> pa.Table:
    """Native reports (validated) -> an Arrow table in the oracle's Parquet schema."""
    arr = _check_native(oracle, native)
    schema = report_schema(oracle, metadata)
    if oracle.name in INTEGER_PAYLOADS:
        cols = [arr]
    elif oracle.name in ("oue", "sue"):
        w = words(oracle)
        padded = np.zeros((arr.shape[0], 8 * w), dtype=np.uint8)
        padded[:, : arr.shape[1]] = arr
        as_words = padded.view("<i8")
        cols = [np.ascontiguousarray(as_words[:, i]) for i in range(w)]
    else:
        cols = [np.ascontiguousarray(arr[:, i]) for i in range(arr.shape[1])]
    return pa.Table.from_arrays([pa.array(c, type=pa.int64()) for c in cols], schema=schema)


def from_table(oracle: Any, table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """An Arrow table/batch in the oracle's schema -> native reports (nulls raise)."""
    cols = []
    for name in report_columns(oracle):
        col = table.column(name)
        if col.null_count:
            raise DPMarginalsError(f"{oracle.name} reports: column {name!r} has null values")
        cols.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64))
    if oracle.name in INTEGER_PAYLOADS:
        return cols[0]
    if oracle.name in ("oue", "sue"):
        stacked = np.ascontiguousarray(np.column_stack(cols).astype("<i8", copy=False))
        packed = stacked.view(np.uint8).reshape(len(stacked), 8 * len(cols))
        width = (oracle.size + 7) // 8
        if (packed[:, width:] != 0).any():
            i = int(np.flatnonzero((packed[:, width:] != 0).any(axis=1))[0])
            raise DPMarginalsError(f"{oracle.name} report {i} sets bits beyond value "
                                   f"{oracle.size - 1}")
        return np.ascontiguousarray(packed[:, :width])
    return np.column_stack(cols)


# -- layout -------------------------------------------------------------------------------
def _check_campaign(campaign: str) -> str:
    campaign = str(campaign)
    if not _CAMPAIGN_ID.match(campaign):
        raise DPMarginalsError(f"campaign id must be 1-128 letters, digits, '_', '.' or '-' "
                               f"(starting with a letter or digit), got {campaign!r}")
    return campaign


def campaign_path(root: str | Path, campaign: str) -> Path:
    """``ROOT/campaign=<id>``."""
    return Path(root) / f"campaign={_check_campaign(campaign)}"


def resolve_campaign(path: str | Path, campaign: str | None = None) -> Path:
    """The campaign directory of ``path``: the directory itself if it is named
    ``campaign=<id>`` (or holds ``group=<g>`` directories), else ``path/campaign=<id>``
    (``campaign`` may be omitted when ``path`` holds exactly one campaign)."""
    p = Path(path)
    if not p.is_dir():
        raise DPMarginalsError(f"no such reports directory: {str(p)!r}")
    if campaign is not None:
        if p.name == f"campaign={campaign}":
            return p
        found = campaign_path(p, campaign)
        if not found.is_dir():
            raise DPMarginalsError(f"campaign {campaign!r} not found under {str(p)!r}")
        return found
    if p.name.startswith("campaign=") or (p / MANIFEST).is_file() or any(
            c.name.startswith("group=") for c in p.iterdir()):
        return p
    campaigns = sorted(c.name for c in p.iterdir()
                       if c.is_dir() and c.name.startswith("campaign="))
    if len(campaigns) == 1:
        return p / campaigns[0]
    if not campaigns:
        raise DPMarginalsError(f"{str(p)!r} holds no campaign=<id> directory of reports")
    names = [c.split("=", 1)[1] for c in campaigns]
    raise DPMarginalsError(f"{str(p)!r} holds several campaigns {names}: name one")


def group_files(campaign_dir: str | Path, group: int) -> list[Path]:
    """The complete part files of one group (sorted by name)."""
    d = Path(campaign_dir) / f"group={int(group)}"
    if not d.is_dir():
        return []
    return sorted(f for f in d.iterdir() if f.suffix == ".parquet" and f.is_file()
                  and not f.name.startswith((".", "_")))


def read_manifest(campaign_dir: str | Path) -> Plan | None:
    """The plan stored with a campaign's reports (``None`` if there is no ``_plan.json``)."""
    path = Path(campaign_dir) / MANIFEST
    if not path.is_file():
        return None
    return Plan.load(path)


def check_manifest(campaign_dir: str | Path, plan: Plan) -> None:
    """Raise if the campaign's reports were written under another plan."""
    stored = read_manifest(campaign_dir)
    if stored is not None and stored.hash != plan.hash:
        raise DPMarginalsError(f"the reports in {str(campaign_dir)!r} were made under plan "
                               f"{stored.hash[:12]}..., not the given plan {plan.hash[:12]}...")


def check_file_metadata(path: str | Path, meta: bytes | None, plan: Plan, group: int) -> None:
    """Raise if a part file's metadata names another plan or group (none: accepted)."""
    if meta is None:
        return
    try:
        info = json.loads(meta)
    except ValueError:
        raise DPMarginalsError(f"{str(path)!r}: unreadable dpmarginals metadata") from None
    if info.get("plan_hash") not in (None, plan.hash):
        raise DPMarginalsError(f"{str(path)!r} holds reports made under plan "
                               f"{str(info['plan_hash'])[:12]}..., not {plan.hash[:12]}...")
    if info.get("group") not in (None, group):
        raise DPMarginalsError(f"{str(path)!r} holds reports of group {info['group']}, "
                               f"but lies in the directory of group {group}")


# -- writing reports ----------------------------------------------------------------------
class ReportWriter:
    """Appends reports of one campaign to the Parquet layout, a part file at a time.

    ``write(group, native)`` buffers; every ``rows_per_file`` reports of a group become a
    part file; ``close()`` (or leaving the ``with`` block) writes the rest.  Writing to a
    campaign directory made under another plan raises.
    """

    def __init__(self, plan: Plan, root: str | Path, campaign: str, *,
                 rows_per_file: int = ROWS_PER_FILE) -> None:
        if not isinstance(plan, Plan):
            raise DPMarginalsError(f"expected a Plan, got {type(plan).__name__}")
        if int(rows_per_file) < 1:
            raise DPMarginalsError(f"rows_per_file must be >= 1, got {rows_per_file!r}")
        self.plan = plan
        self.campaign = _check_campaign(campaign)
        self.dir = campaign_path(root, campaign)
        self.rows_per_file = int(rows_per_file)
        self.oracles = plan_oracles(plan)
        self.counts: dict[int, int] = {}
        self._buffer: dict[int, list[np.ndarray]] = {}
        self._buffered: dict[int, int] = {}
        self.dir.mkdir(parents=True, exist_ok=True)
        stored = read_manifest(self.dir)
        if stored is None:
            tmp = self.dir / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
            tmp.write_text(plan.to_json())
            os.replace(tmp, self.dir / MANIFEST)
        else:
            check_manifest(self.dir, plan)

    def _metadata(self, group: int) -> dict[str, Any]:
        spec = self.plan.groups[group]
        return {"format": "dpmarginals.reports", "version": FORMAT_VERSION,
                "plan_hash": self.plan.hash, "campaign": self.campaign, "group": group,
                "oracle": spec.oracle, "epsilon": spec.epsilon, "cells": spec.cells}

    def _group(self, group: object) -> int:
        if isinstance(group, bool) or not isinstance(group, int | np.integer) or not (
                0 <= int(group) < self.plan.m):
            raise DPMarginalsError(f"group must be one of 0..{self.plan.m - 1}, got {group!r}")
        return int(group)

    def write(self, group: int, native: Any) -> None:
        """Buffer native reports of ``group`` (validated now)."""
        g = self._group(group)
        arr = _check_native(self.oracles[g], native)
        if len(arr) == 0:
            return
        self._buffer.setdefault(g, []).append(arr)
        self._buffered[g] = self._buffered.get(g, 0) + len(arr)
        if self._buffered[g] >= self.rows_per_file:
            self._flush(g)

    def _flush(self, g: int) -> None:
        parts = self._buffer.pop(g, [])
        self._buffered.pop(g, None)
        if not parts:
            return
        arr = np.concatenate(parts)
        for start in range(0, len(arr), self.rows_per_file):
            chunk = arr[start : start + self.rows_per_file]
            write_part(to_table(self.oracles[g], chunk, self._metadata(g)),
                          self.dir / f"group={g}")
            self.counts[g] = self.counts.get(g, 0) + len(chunk)

    def flush(self) -> None:
        for g in sorted(self._buffer):
            self._flush(g)

    def close(self) -> dict[int, int]:
        """Write what is buffered; returns the reports written per group."""
        self.flush()
        return dict(sorted(self.counts.items()))

    def __enter__(self) -> ReportWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()


def write_reports(
    plan: Plan, root: str | Path, campaign: str,
    reports: Mapping[int, Any] | Sequence[Any], *, rows_per_file: int = ROWS_PER_FILE,
) -> dict[int, int]:
    """Write native report arrays (``{group: array}`` or one array per group, in plan
    order) to ``ROOT/campaign=<id>/``; returns the reports written per group."""
    items = reports.items() if isinstance(reports, Mapping) else enumerate(reports)
    with ReportWriter(plan, root, campaign, rows_per_file=rows_per_file) as writer:
        for g, native in items:
            writer.write(g, native)
    return writer.close()


def export_reports(
    rows: Iterable[Any], plan: Plan, root: str | Path, campaign: str, *,
    rows_per_file: int = ROWS_PER_FILE, chunk: int = 1 << 16,
) -> dict[int, int]:
    """Export a collection service's reports to the Parquet layout (streaming).

    ``rows`` yields either the store's rows ``(report_id, group, row)`` / ``(group, row)``
    -- ``row`` the stored bytes of :mod:`dpmarginals.protocol.reports` (grr: one little-endian
    int64; olh/hr: two; oue/sue: the packed bits) -- or JSON report objects (dicts, as
    ``GET /campaigns/{id}/reports`` streams them; validated against ``plan``).  Memory
    stays bounded by ``chunk`` reports plus one part file per group.  Returns the reports
    written per group.  Report ids are not exported (the store has deduplicated them).
    """
    from ..protocol.reports import PlanCodec

    codec = PlanCodec(plan)
    pending_rows: dict[int, list[bytes]] = {}
    pending_dicts: list[Any] = []
    size = max(int(chunk), 1)

    def drain_rows(writer: ReportWriter) -> None:
        for g, parts in pending_rows.items():
            if parts:
                writer.write(g, codec.groups[g].native(b"".join(parts)))
        pending_rows.clear()

    def drain_dicts(writer: ReportWriter) -> None:
        decoded = codec.decode(pending_dicts)
        for g, row in zip(decoded.groups, decoded.rows, strict=True):
            pending_rows.setdefault(g, []).append(row)
        pending_dicts.clear()
        drain_rows(writer)

    with ReportWriter(plan, root, campaign, rows_per_file=rows_per_file) as writer:
        held = 0
        for item in rows:
            if isinstance(item, Mapping):
                pending_dicts.append(dict(item))
                if len(pending_dicts) >= size:
                    drain_dicts(writer)
                continue
            if not isinstance(item, tuple | list) or len(item) not in (2, 3):
                raise DPMarginalsError("export rows must be (report_id, group, row), "
                                       f"(group, row) or report dicts, got {type(item).__name__}")
            g, row = item[-2], item[-1]
            g = writer._group(g)
            width = codec.groups[g].width
            if not isinstance(row, bytes | bytearray | memoryview) or len(row) != width:
                raise DPMarginalsError(f"group {g}: a stored row must be {width} bytes")
            pending_rows.setdefault(g, []).append(bytes(row))
            held += 1
            if held >= size:
                drain_rows(writer)
                held = 0
        if pending_dicts:
            drain_dicts(writer)
        drain_rows(writer)
    return writer.close()
