"""Sparse records: each record is a set of (column, value) items with distinct columns.

Two kinds of input become the same :class:`SparseRecords`:

* **transactional** files (Kosarak, T10I4D100K, MSNBC): one record per line, item ids
  separated by spaces, plain or gzip (or a zip holding one file).  Every item is a binary
  column ("the record has item j"), so a tuple is a set of items.  MSNBC's ``.seq`` format
  (a ``%`` header naming the categories, then one session per line) is recognised.
* **tabular** files (CSV / Parquet) where an empty cell (NaN) means "no value": item =
  (column, value) for every non-empty cell.

Items get compact ids ``0..n_items-1``, grouped by column, so a record's items, sorted, are
also sorted by column.  Parsing is vectorized (numpy on the raw bytes; pandas for CSV).

>>> r = parse_transactions(b"3 1 3\\n\\n7 1\\n")
>>> r.n, r.lengths().tolist(), [r.item_label(i) for i in range(r.n_items)]
(3, [2, 0, 2], ['1', '3', '7'])
>>> t = SparseRecords.from_frame(pd.DataFrame({"a": ["x", None, "y"], "b": [1.0, 2.0, None]}))
>>> t.lengths().tolist(), t.item_label(int(t.items[0]))
([2, 1, 1], 'a=x')
"""

from __future__ import annotations

import gzip
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import DPMarginalsError
from .transactional import distinct_csr, split_msnbc, tokenize

__all__ = ["DATASET_FILES", "SparseRecords", "parse_transactions", "read_records"]

#: Data set names ``--data`` accepts, with their file under the data home.
DATASET_FILES: dict[str, str] = {
    "msnbc": "msnbc/msnbc990928.zip",
    "kosarak-prefix": "kosarak-prefix/kosarak-prefix.dat.gz",
    "t10i4d100k": "t10i4d100k/T10I4D100K.dat.gz",
    "kosarak": "kosarak/kosarak.dat.gz",
}
_CUT_LAST_LINE = {"kosarak-prefix"}  # the stored prefix ends in a cut line



@dataclass(frozen=True, eq=False)
class SparseRecords:
    """``n`` records in CSR form: record ``i`` holds ``items[indptr[i]:indptr[i+1]]``.

    Within a record the items are distinct, sorted, and of distinct columns.
    ``item_column[j]`` is the column of item ``j``; ``item_value[j]`` its value label
    (``None`` for transactional data, where every item is its own binary column).
    """

    indptr: np.ndarray
    items: np.ndarray
    item_column: np.ndarray
    columns: tuple[str, ...]
    item_value: tuple[str, ...] | None = None
    name: str = "records"

    def __post_init__(self) -> None:
        indptr = np.asarray(self.indptr, dtype=np.int64)
        items = np.asarray(self.items, dtype=np.int64)
        item_column = np.asarray(self.item_column, dtype=np.int64)
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or indptr[-1] != items.size:
            raise DPMarginalsError("indptr must start at 0 and end at len(items)")
        if items.size and (items.min() < 0 or items.max() >= item_column.size):
            raise DPMarginalsError(f"item ids must be in 0..{item_column.size - 1}")
        if item_column.size and (item_column.min() < 0 or item_column.max() >= len(self.columns)):
            raise DPMarginalsError("item_column refers to a column that does not exist")
        if self.item_value is not None and len(self.item_value) != item_column.size:
            raise DPMarginalsError("item_value must label every item")
        if items.size > 1:
            same_row = np.ones(items.size - 1, dtype=bool)
            same_row[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < items.size)] - 1] = False
            cols = item_column[items]
            if (same_row & ((items[1:] <= items[:-1]) | (cols[1:] == cols[:-1]))).any():
                raise DPMarginalsError(
                    "a record's items must be distinct, sorted and of distinct columns"
                )
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "item_column", item_column)
        object.__setattr__(self, "columns", tuple(str(c) for c in self.columns))

    # -- views --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of records (users)."""
        return int(self.indptr.size - 1)

    @property
    def n_items(self) -> int:
        return int(self.item_column.size)

    @property
    def binary(self) -> bool:
        """True for transactional data (each item a binary column)."""
        return self.item_value is None

    def lengths(self) -> np.ndarray:
        """``wt(X)``: the number of non-empty columns of each record."""
        return np.diff(self.indptr)

    def rows(self) -> np.ndarray:
        """The record index of every entry of ``items``."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.lengths())

    def item_label(self, item: int) -> str:
        """``"column"`` for a binary item, ``"column=value"`` otherwise."""
        col = self.columns[int(self.item_column[item])]
        return col if self.item_value is None else f"{col}={self.item_value[item]}"

    def item_value_label(self, item: int) -> str:
        return "1" if self.item_value is None else self.item_value[item]

    def __repr__(self) -> str:
        return (f"SparseRecords(name={self.name!r}, n={self.n}, items={self.n_items}, "
                f"entries={self.items.size})")

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_transactions(
        cls,
        indptr: np.ndarray,
        items: np.ndarray,
        item_names: dict[int, str] | None = None,
        name: str = "transactions",
    ) -> SparseRecords:
        """From raw CSR transactions (any non-negative ids, repeats allowed)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        ids, compact = np.unique(np.asarray(items, dtype=np.int64), return_inverse=True)
        out_ptr, items_out = distinct_csr(indptr, compact.reshape(-1), int(ids.size))
        names = item_names or {}
        columns = tuple(names.get(int(i), str(int(i))) for i in ids)
        return cls(out_ptr, items_out, np.arange(ids.size), columns, None, name)

    @classmethod
    def from_lists(cls, records: Sequence[Sequence[int]], name: str = "records") -> SparseRecords:
        """Transactional records from item lists (small data, tests)."""
        lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        flat = np.fromiter((i for r in records for i in r), dtype=np.int64, count=int(indptr[-1]))
        return cls.from_transactions(indptr, flat, name=name)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str = "table") -> SparseRecords:
        """Tabular records: item = (column, value) of every non-empty (non-NaN) cell."""
        if frame.shape[1] == 0:
            raise DPMarginalsError(f"{name}: the table has no columns")
        if frame.columns.duplicated().any():
            dup = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise DPMarginalsError(f"{name}: column names repeat: {dup}")
        codes = np.empty(frame.shape, dtype=np.int64)
        labels: list[str] = []
        item_column: list[int] = []
        for j, col in enumerate(frame.columns):
            series = frame[col]
            if series.dtype == object or pd.api.types.is_string_dtype(series.dtype):
                blank = series.astype(str).str.strip().eq("") & series.notna()
                series = series.where(~blank)  # blank strings are empty cells too
            code, uniques = pd.factorize(series, sort=True, use_na_sentinel=True)
            codes[:, j] = np.where(code >= 0, code + len(labels), -1)
            labels.extend(_value_label(v) for v in uniques)
            item_column.extend([j] * len(uniques))
        rows, cols = np.nonzero(codes >= 0)
        items = codes[rows, cols]
        indptr = np.zeros(frame.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=frame.shape[0]), out=indptr[1:])
        return cls(indptr, items, np.asarray(item_column, dtype=np.int64),
                   tuple(str(c) for c in frame.columns), tuple(labels), name)


def _value_label(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- parsing ------------------------------------------------------------------------------
def parse_transactions(
    data: bytes, *, name: str = "transactions", item_names: dict[int, str] | None = None,
    drop_incomplete_last: bool = False,
) -> SparseRecords:
    """Whitespace-separated non-negative integer ids, one record per line (vectorized).

    Every line is a record (a blank line is an empty record); ``drop_incomplete_last``
    drops a last line without its newline (a file cut mid-line).
    """
    indptr, values = tokenize(
        data, name=name, drop_incomplete_last=drop_incomplete_last,
        expected="a transactional file has integer item ids separated by spaces "
        "(use .csv/.parquet for tables)",
    )
    return SparseRecords.from_transactions(indptr, values, item_names, name)


def _parse_msnbc(data: bytes, name: str) -> SparseRecords:
    names, body = split_msnbc(data, name)
    return parse_transactions(body, name=name, item_names={i + 1: c for i, c in enumerate(names)})


def _read_bytes(path: Path) -> tuple[bytes, str]:
    """The file's bytes (gunzipped / unzipped) and the name of the inner file."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read(), path.name[: -len(".gz")]
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                members = [m for m in zf.namelist() if not m.endswith("/")
                           and not m.startswith("__MACOSX/") and "/." not in "/" + m]
                if len(members) != 1:
                    raise DPMarginalsError(
                        f"{str(path)!r} must hold exactly one data file, found {members}"
                    )
                return zf.read(members[0]), Path(members[0]).name
        return path.read_bytes(), path.name
    except (OSError, EOFError, zipfile.BadZipFile, gzip.BadGzipFile) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None


def read_records(
    path: str | Path, *, name: str | None = None, drop_incomplete_last: bool = False
) -> SparseRecords:
    """Read a transactional file (``.dat``, ``.txt``, ``.seq``; plain, ``.gz`` or ``.zip``)
    or a table (``.csv``/``.tsv`` (``.gz``), ``.parquet``) into :class:`SparseRecords`."""
    path = Path(path)
    label = name or path.name.split(".")[0]
    if not path.is_file():
        raise DPMarginalsError(f"no such data file: {str(path)!r}")
    if path.suffix in (".parquet", ".pq"):
        from ..core.extras import require

        require("pyarrow", extra="engines", what="reading a Parquet file")
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types
            raise DPMarginalsError(f"cannot read Parquet file {str(path)!r}: {exc}") from None
        return _checked(SparseRecords.from_frame(frame, label), path)
    data, inner = _read_bytes(path)
    if not data.strip():
        raise DPMarginalsError(f"{str(path)!r} is empty: no records to release")
    suffix = Path(inner).suffix.lower()
    if suffix in (".csv", ".tsv"):
        try:
            frame = pd.read_csv(io.BytesIO(data), sep="\t" if suffix == ".tsv" else ",",
                                low_memory=False)
        except (ValueError, pd.errors.ParserError) as exc:
            raise DPMarginalsError(f"cannot parse CSV {str(path)!r}: {exc}") from None
        return _checked(SparseRecords.from_frame(frame, label), path)
    if suffix == ".seq" or b"% Sequences:" in data[:4096]:
        return _checked(_parse_msnbc(data, label), path)
    records = parse_transactions(data, name=label, drop_incomplete_last=drop_incomplete_last)
    return _checked(records, path)


def _checked(records: SparseRecords, path: Path) -> SparseRecords:
    if records.n == 0 or records.items.size == 0:
        raise DPMarginalsError(f"{str(path)!r} has no non-empty records: nothing to release")
    return records


def resolve_data(spec: str, data_home: str | None = None) -> SparseRecords:
    """A file path, or a data set name of :mod:`dpmarginals.datasets` (``msnbc``,
    ``kosarak-prefix``, ``t10i4d100k`` as raw transactions; a coded table such as
    ``adult`` as records with every column non-empty), found in the data home
    (``$DPMARGINALS_DATA``, then the user cache) or downloaded when online."""
    path = Path(spec).expanduser()
    if path.is_dir():
        raise DPMarginalsError(f"{spec!r} is a directory, not a data file")
    if path.exists():
        return read_records(path)
    try:
        from ..datasets import get_info, load, load_transactions
    except ImportError:  # pragma: no cover - the datasets package is optional here
        if spec.lower() in DATASET_FILES:
            key = spec.lower()
            found = _find_dataset_file(DATASET_FILES[key], data_home)
            return read_records(found, name=key, drop_incomplete_last=key in _CUT_LAST_LINE)
        return read_records(path)
    if path.suffix or "/" in spec:  # looks like a file name: say the file is missing
        return read_records(path)
    info = get_info(spec)  # unknown names: an error listing the known ones
    if info.transactional:
        t = load_transactions(info.name, data_home=data_home)
        return SparseRecords.from_transactions(t.indptr, t.items, t.item_names, name=spec)
    ds = load(info.name, data_home=data_home)
    frame = pd.DataFrame(np.asarray(ds.codes), columns=list(ds.domain.attributes))
    return SparseRecords.from_frame(frame, name=spec)


def _find_dataset_file(relpath: str, data_home: str | None) -> Path:
    try:
        from ..datasets.files import find_file, search_dirs
    except ImportError:  # pragma: no cover - the datasets package is optional here
        import os

        dirs = [Path(d) for d in (data_home, os.environ.get("DPMARGINALS_DATA")) if d]
        for d in dirs:
            if (d / relpath).is_file():
                return d / relpath
        raise DPMarginalsError(f"data file {relpath!r} not found in {dirs}") from None
    found = find_file(relpath, data_home)
    if found is None:
        where = ", ".join(str(d) for d in search_dirs(data_home))
        raise DPMarginalsError(
            f"data file {relpath!r} not found in {where}; set $DPMARGINALS_DATA to the "
            "directory holding it, or pass the file's path to --data"
        )
    return found
