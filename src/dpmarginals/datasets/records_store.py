"""Sparse records for the central-DP extraction, stored in Parquet, and read back.

The layout (:func:`write_records`)::

    PATH/_records.json                   {"format": "dpmarginals.records", "users": n, ...}
    PATH/items.parquet                   item int64, column int64, value string (null: binary)
    PATH/entries/part-<uuid>.parquet     record int64, item int64   (one row per held item)

Record ``r`` (0..n-1) holds the items of the rows with ``record = r``; within a record
items are distinct and of distinct columns (as :class:`~dpmarginals.datasets.sparse.
SparseRecords`).  Records without items need no rows: ``users`` counts them.
:func:`as_records` reads any of the forms the extraction takes; the engines
(:mod:`dpmarginals.engines`) count a records directory's entries where they lie.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import DPMarginalsError
from ..core.parquet_parts import pa, pq, write_part
from .sparse import SparseRecords, read_records

__all__ = ["RECORDS_MANIFEST", "ROWS_PER_FILE", "RecordsTable", "as_records", "is_records_dir",
           "load_records", "open_records", "write_records"]

FORMAT_VERSION = 1
RECORDS_MANIFEST = "_records.json"
ROWS_PER_FILE = 1 << 22


@dataclass(frozen=True, eq=False)
class RecordsTable:
    """Sparse records stored in Parquet: the (small) item dictionary in memory, the
    (large) ``(record, item)`` entries left on disk for an engine to scan.

    Has the attributes of :class:`~dpmarginals.datasets.sparse.SparseRecords` that the
    extraction reads besides the entries: ``n``, ``columns``, ``item_column``,
    ``item_value``, ``binary``, ``name``, ``n_items``, ``item_value_label``.
    """

    path: str
    n: int
    columns: tuple[str, ...]
    item_column: np.ndarray
    item_value: tuple[str, ...] | None
    name: str = "records"

    @property
    def binary(self) -> bool:
        return self.item_value is None

    @property
    def n_items(self) -> int:
        return int(self.item_column.size)

    @property
    def entries(self) -> str:
        """Directory of the ``(record, item)`` part files."""
        return str(Path(self.path) / "entries")

    def entry_files(self) -> list[str]:
        d = Path(self.entries)
        return sorted(str(f) for f in d.iterdir() if f.suffix == ".parquet"
                      and not f.name.startswith((".", "_"))) if d.is_dir() else []

    def item_value_label(self, item: int) -> str:
        return "1" if self.item_value is None else self.item_value[item]

    def item_label(self, item: int) -> str:
        col = self.columns[int(self.item_column[item])]
        return col if self.item_value is None else f"{col}={self.item_value[item]}"


def is_records_dir(path: str | Path) -> bool:
    return (Path(path) / RECORDS_MANIFEST).is_file()


def write_records(records: Any, path: str | Path, *, rows_per_file: int = ROWS_PER_FILE
                  ) -> RecordsTable:
    """Write :class:`~dpmarginals.datasets.sparse.SparseRecords` to the records layout."""
    out = Path(path)
    if out.exists() and any(out.iterdir()):
        raise DPMarginalsError(f"{str(out)!r} exists and is not empty")
    (out / "entries").mkdir(parents=True, exist_ok=True)
    items = pa.table({
        "item": pa.array(np.arange(records.n_items, dtype=np.int64)),
        "column": pa.array(np.asarray(records.item_column, dtype=np.int64)),
        "value": pa.array(list(records.item_value) if records.item_value is not None
                          else [None] * records.n_items, type=pa.string()),
    })
    pq.write_table(items, out / "items.parquet")
    rows = records.rows()
    entries = np.asarray(records.items, dtype=np.int64)
    step = max(int(rows_per_file), 1)
    for start in range(0, max(entries.size, 1), step):
        table = pa.table({"record": pa.array(rows[start : start + step], type=pa.int64()),
                          "item": pa.array(entries[start : start + step], type=pa.int64())})
        write_part(table, out / "entries")
    manifest = {"format": "dpmarginals.records", "version": FORMAT_VERSION,
                "name": records.name, "users": int(records.n),
                "columns": list(records.columns), "binary": bool(records.binary)}
    (out / RECORDS_MANIFEST).write_text(json.dumps(manifest, indent=1))
    return open_records(out)


def open_records(path: str | Path) -> RecordsTable:
    """The records layout at ``path`` (item dictionary loaded, entries left on disk)."""
    p = Path(path)
    try:
        manifest = json.loads((p / RECORDS_MANIFEST).read_text())
        items = pq.read_table(p / "items.parquet")
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise DPMarginalsError(f"cannot open records {str(p)!r}: {exc}") from None
    if manifest.get("format") != "dpmarginals.records":
        raise DPMarginalsError(f"{str(p)!r} is not a dpmarginals records directory")
    ids = items.column("item").to_numpy()
    if not np.array_equal(ids, np.arange(ids.size)):
        raise DPMarginalsError(f"{str(p)!r}: items.parquet must list items 0..n_items-1 in order")
    binary = bool(manifest.get("binary", False))
    values = None if binary else tuple(str(v) for v in items.column("value").to_pylist())
    return RecordsTable(str(p), int(manifest["users"]), tuple(manifest["columns"]),
                        np.asarray(items.column("column").to_numpy(), dtype=np.int64),
                        values, str(manifest.get("name", p.name)))


def load_records(path: str | Path) -> Any:
    """The records layout at ``path`` read into memory as ``SparseRecords``."""
    table = open_records(path)
    files = table.entry_files()
    if files:
        data = pq.read_table(files, columns=["record", "item"])
        rec = data.column("record").to_numpy().astype(np.int64)
        item = data.column("item").to_numpy().astype(np.int64)
    else:
        rec = item = np.zeros(0, np.int64)
    if rec.size and (rec.min() < 0 or rec.max() >= table.n):
        raise DPMarginalsError(f"{str(path)!r}: record ids must be in 0..{table.n - 1}")
    order = np.lexsort((item, rec))
    rec, item = rec[order], item[order]
    indptr = np.zeros(table.n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rec, minlength=table.n), out=indptr[1:])
    return SparseRecords(indptr, item, table.item_column, table.columns, table.item_value,
                         table.name)


def as_records(data: Any) -> SparseRecords:
    """Records for the central-DP extraction from records, a DataFrame, a records directory
    or a file (:func:`~dpmarginals.datasets.sparse.read_records`)."""
    if isinstance(data, SparseRecords):
        records = data
    elif isinstance(data, pd.DataFrame):
        records = SparseRecords.from_frame(data)
    elif isinstance(data, str | Path) and Path(data).is_dir():
        if not is_records_dir(data):
            raise DPMarginalsError(f"{str(data)!r} is a directory but not a records directory "
                                   "(write one with dpmarginals.datasets.records_store."
                                   "write_records)")
        records = load_records(data)
    elif isinstance(data, str | Path):
        records = read_records(data)
    else:
        raise DPMarginalsError(
            f"data must be SparseRecords, a DataFrame or a file path, got {type(data).__name__}"
        )
    if records.n == 0 or records.items.size == 0:
        raise DPMarginalsError("the data has no non-empty records: nothing to release")
    return records
