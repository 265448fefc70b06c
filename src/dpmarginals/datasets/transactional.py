"""Transactional (market-basket / click-stream) data: one record per line, integer items.

Formats read here:

* FIMI ``.dat`` / ``.dat.gz`` (Kosarak, T10I4D100K): one transaction per line, item ids
  separated by spaces (``parse_transactions``).
* UCI MSNBC ``msnbc990928.seq`` (plain, ``.gz`` or inside a ``.zip``): a header of a few
  lines starting with ``%`` (the second of them lists the 17 category names), then one
  session per line as the sequence of category ids 1..17 (``parse_msnbc``).

Parsing is vectorized over the raw bytes with numpy (no per-token Python loop): MSNBC's
~4.7 million tokens parse in well under a second.  The result is a compressed sparse row
(CSR) pair ``(indptr, items)``: record ``i`` holds ``items[indptr[i]:indptr[i + 1]]`` in
file order, repeats included.

The binary view used by the papers (CALM §5.1: "We treat each item as a binary
attribute ... include only the top d most frequent items") is
:meth:`Transactions.to_dataset`: attribute ``j`` is "the record contains the j-th most
frequent item", frequency counted as the number of records containing the item (ties
broken by the smaller item id).

>>> t = parse_transactions(b"1 2 3\\n2 3\\n3 3\\n\\n")
>>> t.n, t.indptr.tolist(), t.items.tolist()
(4, [0, 3, 5, 7, 7], [1, 2, 3, 2, 3, 3, 3])
>>> t.top_items(2).tolist(), t.item_counts()[[1, 2, 3]].tolist()
([3, 2], [1, 2, 3])
>>> t.to_dataset(2).codes.tolist()
[[1, 1], [1, 1], [1, 0], [0, 0]]
"""

from __future__ import annotations

import gzip
import zipfile
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = [
    "MSNBC_CATEGORIES",
    "Transactions",
    "parse_msnbc",
    "parse_transactions",
    "read_bytes",
    "read_msnbc",
    "read_transactions",
]

#: The 17 MSNBC page categories, for ids 1..17 (UCI msnbc990928.seq header).
MSNBC_CATEGORIES: tuple[str, ...] = (
    "frontpage", "news", "tech", "local", "opinion", "on-air", "misc", "weather",
    "msn-news", "health", "living", "business", "msn-sports", "sports", "summary",
    "bbs", "travel",
)

_DENSE_LIMIT = 1 << 26  # cells of a dense record x item bitmap worth building
_ALLOWED = np.zeros(256, dtype=bool)
_ALLOWED[[ord(c) for c in "0123456789 \t\r\n"]] = True


class Transactions:
    """Records as CSR arrays: record ``i`` is ``items[indptr[i]:indptr[i + 1]]``.

    ``item_names`` optionally maps item id -> name (e.g. the MSNBC categories).
    The arrays are read-only: a parsed file is cached and shared between callers.
    """

    def __init__(
        self,
        indptr: np.ndarray,
        items: np.ndarray,
        item_names: dict[int, str] | None = None,
        name: str = "transactions",
    ) -> None:
        indptr = np.asarray(indptr, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or indptr[-1] != items.size:
            raise DPMarginalsError("indptr must start at 0 and end at len(items)")
        if (np.diff(indptr) < 0).any():
            raise DPMarginalsError("indptr must be non-decreasing")
        if items.size and items.min() < 0:
            raise DPMarginalsError(f"item ids must be >= 0, got {int(items.min())}")
        indptr.flags.writeable = False
        items.flags.writeable = False
        self.indptr = indptr
        self.items = items
        self.item_names = dict(item_names or {})
        self.name = name

    @classmethod
    def from_lists(cls, records: Sequence[Sequence[int]], **kwargs: object) -> Transactions:
        """From a list of item lists (small data, tests)."""
        lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        items = np.fromiter((i for r in records for i in r), dtype=np.int64, count=indptr[-1])
        return cls(indptr, items, **kwargs)  # type: ignore[arg-type]

    # -- basic views -----------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of records (users)."""
        return int(self.indptr.size - 1)

    def __len__(self) -> int:
        return self.n

    def lengths(self) -> np.ndarray:
        """Number of items (repeats included) of each record."""
        return np.diff(self.indptr)

    def record(self, i: int) -> list[int]:
        return self.items[self.indptr[i] : self.indptr[i + 1]].tolist()

    def to_lists(self) -> list[list[int]]:
        """Per-record item lists (a Python list per record: slow for millions of rows)."""
        return [x.tolist() for x in np.split(self.items, self.indptr[1:-1])]

    def rows(self) -> np.ndarray:
        """The record index of every entry of ``items``."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.lengths())

    @cached_property
    def num_items(self) -> int:
        """One more than the largest item id (the width of the dense item space)."""
        return int(self.items.max()) + 1 if self.items.size else 0

    @cached_property
    def _distinct(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of each record's *distinct* items, sorted within the record."""
        return distinct_csr(self.indptr, self.items, self.num_items)

    def distinct(self) -> Transactions:
        """The same records with repeats removed and items sorted (a set per record)."""
        indptr, items = self._distinct
        return Transactions(indptr, items, self.item_names, self.name)

    def item_counts(self) -> np.ndarray:
        """``counts[j]`` = number of records containing item ``j`` (length ``num_items``)."""
        return np.bincount(self._distinct[1], minlength=self.num_items)

    def top_items(self, d: int) -> np.ndarray:
        """The ``d`` most frequent item ids, most frequent first (ties: smaller id first)."""
        counts = self.item_counts()
        present = np.flatnonzero(counts)
        if not 1 <= d <= present.size:
            raise DPMarginalsError(
                f"d={d} is out of range: {self.name} has {present.size} distinct items "
                f"(choose 1..{present.size})"
            )
        order = np.lexsort((present, -counts[present]))
        return present[order[:d]]

    def item_name(self, item: int) -> str:
        return self.item_names.get(int(item), f"item_{int(item)}")

    def to_binary(self, items: Sequence[int] | np.ndarray) -> np.ndarray:
        """``(n, len(items))`` uint8 matrix: 1 where the record contains the item."""
        items = np.asarray(items, dtype=np.int64)
        column = np.full(max(self.num_items, int(items.max(initial=-1)) + 1), -1, np.int64)
        column[items] = np.arange(items.size)
        indptr, distinct = self._distinct
        cols = column[distinct]
        keep = cols >= 0
        rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(indptr))
        out = np.zeros((self.n, items.size), dtype=np.uint8)
        out[rows[keep], cols[keep]] = 1
        return out

    def to_dataset(self, d: int, *, name: str | None = None) -> Dataset:
        """Binary Dataset over the top-``d`` items (attribute j = "has the j-th top item")."""
        top = self.top_items(d)
        attrs = tuple(self.item_name(i) for i in top)
        domain = Domain(attrs, (2,) * len(attrs))
        return Dataset(self.to_binary(top), domain, name=name or self.name)

    def __repr__(self) -> str:
        return f"Transactions(name={self.name!r}, n={self.n}, entries={self.items.size})"


# -- parsing ------------------------------------------------------------------------------
def distinct_csr(
    indptr: np.ndarray, items: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR of each record's distinct items (ids in ``0..width-1``), sorted within the record."""
    n = indptr.size - 1
    width = max(width, 1)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    if n * width <= _DENSE_LIMIT:  # small item space (MSNBC): a dense bitmap is fastest
        present = np.zeros((n, width), dtype=bool)
        present[rows, items] = True
        rows, out = np.nonzero(present)
    else:
        keys = np.unique(rows * width + items)
        rows, out = np.divmod(keys, width)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=out_ptr[1:])
    return out_ptr, out.astype(np.int64, copy=False)


def tokenize(
    data: bytes, *, name: str = "transactions", drop_incomplete_last: bool = False,
    expected: str = "expected integer item ids separated by spaces",
) -> tuple[np.ndarray, np.ndarray]:
    """The CSR ``(indptr, items)`` of whitespace-separated non-negative integers, one record
    per line, in file order, repeats included (the one parser of transactional text).

    Every line is a record (an empty line is a record with no items); a final line
    without a newline counts too, unless ``drop_incomplete_last`` (a file cut mid-line,
    like the Kosarak prefix).  ``\\r`` and tabs are treated as spaces.  ``expected`` ends
    the error naming a character that is not allowed.
    """
    if drop_incomplete_last and data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    if data and not data.endswith(b"\n"):
        data += b"\n"  # the last line counts as a record; a trailing non-digit ends tokens
    buf = np.frombuffer(data, dtype=np.uint8)
    bad = ~_ALLOWED[buf]
    if bad.any():
        pos = int(np.argmax(bad))
        line = data.count(b"\n", 0, pos) + 1
        raise DPMarginalsError(
            f"{name}: unexpected character {chr(buf[pos])!r} on line {line}: {expected}"
        )
    line_no = np.cumsum(buf == 10, dtype=np.int64)
    n = int(line_no[-1]) if buf.size else 0
    digit = (buf >= 48) & (buf <= 57)
    first = digit.copy()
    first[1:] &= ~digit[:-1]
    last = digit.copy()
    last[:-1] &= ~digit[1:]
    starts = np.flatnonzero(first)
    lengths = np.flatnonzero(last) + 1 - starts
    longest = int(lengths.max(initial=0))
    if longest > 18:
        raise DPMarginalsError(f"{name}: an item id has more than 18 digits")
    values = buf[starts].astype(np.int64) - 48
    for j in range(1, longest):
        nxt = buf[np.minimum(starts + j, buf.size - 1)].astype(np.int64) - 48
        values = np.where(lengths > j, values * 10 + nxt, values)
    line_of = line_no[starts]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(line_of, minlength=n), out=indptr[1:])
    return indptr, values


def parse_transactions(
    data: bytes, *, drop_incomplete_last: bool = False, name: str = "transactions"
) -> Transactions:
    """Parse whitespace-separated non-negative integers, one record per line
    (:func:`tokenize`)."""
    indptr, values = tokenize(data, name=name, drop_incomplete_last=drop_incomplete_last)
    return Transactions(indptr, values, name=name)


def split_msnbc(data: bytes, name: str = "msnbc") -> tuple[list[str], bytes]:
    """The category names of an MSNBC ``.seq`` header (empty if it names none) and the
    sessions after the ``% Sequences:`` line (blank lines before the first skipped)."""
    marker = data.find(b"% Sequences:")
    if marker < 0:
        raise DPMarginalsError(f"{name}: no '% Sequences:' line: not an MSNBC .seq file")
    header = data[:marker].decode("utf-8", errors="replace").splitlines()
    named = [ln for ln in header if ln.strip() and not ln.lstrip().startswith("%")]
    eol = data.find(b"\n", marker)
    body = data[eol + 1:].lstrip(b"\r\n") if eol >= 0 else b""
    return (named[0].split() if named else []), body


def parse_msnbc(data: bytes, *, name: str = "msnbc") -> Transactions:
    """Parse the UCI MSNBC ``.seq`` text: the ``%`` header, then one session per line.

    The header names the categories (the 17 of ``MSNBC_CATEGORIES`` if it names none).
    """
    names, body = split_msnbc(data, name)
    t = parse_transactions(body, name=name)
    return Transactions(
        t.indptr, t.items, {i + 1: c for i, c in enumerate(names or MSNBC_CATEGORIES)},
        name=name,
    )


def read_bytes(path: str | Path, member: str | None = None) -> bytes:
    """The bytes of a plain, ``.gz`` or ``.zip`` file (the zip member ``member``, or the
    one whose name ends like ``path`` without ``.zip``, or its only non-metadata file)."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                return zf.read(_zip_member(zf, path, member))
        return path.read_bytes()
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None


def _zip_member(zf: zipfile.ZipFile, path: Path, member: str | None) -> str:
    names = [
        n for n in zf.namelist()
        if not n.endswith("/") and not n.startswith("__MACOSX/") and "/." not in "/" + n
    ]
    if member is not None:
        if member not in zf.namelist():
            raise DPMarginalsError(f"{str(path)!r} has no member {member!r} (members: {names})")
        return member
    if len(names) == 1:
        return names[0]
    stem = path.stem
    for n in names:
        if Path(n).stem == stem or Path(n).name.startswith(stem):
            return n
    raise DPMarginalsError(f"{str(path)!r} holds several files {names}: name the member")


def read_transactions(
    path: str | Path, *, drop_incomplete_last: bool = False, name: str | None = None
) -> Transactions:
    """Read a FIMI-style ``.dat`` / ``.dat.gz`` (or a ``.zip`` holding one)."""
    path = Path(path)
    return parse_transactions(
        read_bytes(path),
        drop_incomplete_last=drop_incomplete_last,
        name=name or path.name.split(".")[0],
    )


def read_msnbc(path: str | Path, *, name: str = "msnbc") -> Transactions:
    """Read ``msnbc990928.seq`` (plain, ``.gz``, or inside a ``.zip``)."""
    return parse_msnbc(read_bytes(path), name=name)
