"""People's records read from a file into integer codes over a declared domain: the one
reader of `release`, `run` and the deployment client (issue #33).

:func:`read_records` takes a CSV (plain or compressed: ``.gz``, ``.bz2``, ``.xz``,
``.zip``) or a Parquet file and a :class:`~dpmarginals.core.domain.Domain` (labels,
numeric bins or plain codes, :mod:`.encoding`) and returns :class:`Records`: the codes in
the domain's order, and the file's values as read.  Its errors are one line that names
the file, where in it (for a CSV the **file line**, counted as an editor counts them: the
header is line 1, blank lines and the lines of a quoted value that spans several count;
for Parquet the record, from 1), the column and the value::

    people.csv line 1236, column 'sex': value 'x' is not in the declared domain (['f', 'm'])
    people.csv line 1: column 'sex' appears twice (columns 2 and 5)
    people.csv line 7, column 'age': the cell is empty (numbers in [0, 120])

Labelled columns are read as text (so "007" stays "007" and a label "NA" is a label: only
an empty cell is missing).

>>> import tempfile, pathlib
>>> from dpmarginals.core.domain import Domain
>>> path = pathlib.Path(tempfile.mkdtemp()) / "people.csv"
>>> _ = path.write_text("sex,age\\nf,34\\nm,70\\n")
>>> dom = Domain.from_dict({"sex": ["f", "m"], "age": {"bins": [0, 40, 120]}})
>>> read_records(path, dom).codes.tolist()
[[0, 0], [1, 1]]
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from .domain import Domain
from .encoding import encode_frame
from .errors import DPMarginalsError

__all__ = ["PARQUET_SUFFIXES", "Records", "csv_lines", "read_frame", "read_records"]

PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True, eq=False)
class Records:
    """What :func:`read_records` read: ``codes[i, j]`` is record i's code of
    ``domain.attributes[j]``; ``frame`` holds the file's own values of those columns
    (``frame.iloc[i]`` is record i); ``source`` names the file in messages.
    :meth:`where` says where record i is in the file."""

    codes: np.ndarray
    frame: pd.DataFrame
    domain: Domain
    source: str
    path: Path = field(repr=False)

    @property
    def n(self) -> int:
        return int(self.codes.shape[0])

    def where(self, i: int) -> str:
        """``"people.csv line 1236"`` (CSV) or ``"people.parquet record 1235"``."""
        return _locator(self.path, self.source, self.n)(i)


def read_records(path: str | Path, domain: Domain | Mapping[str, Any], *,
                 extra_columns: str = "error") -> Records:
    """Read every record of ``path`` (CSV or Parquet) and encode it over ``domain``.

    ``extra_columns``: columns the domain does not name are an error (``"error"``, what
    `release` does: a domain naming 2 of 6 columns must not silently drop 4) or skipped
    (``"ignore"``: `release --ignore-extra-columns`, and a device's file that holds more
    than the plan asks).  Every error is a :class:`DPMarginalsError` of one line naming
    the file, the line (or record), the column and the value.
    """
    if isinstance(domain, Mapping):
        domain = Domain.from_dict(domain)
    elif not isinstance(domain, Domain):
        raise DPMarginalsError(f"read_records needs the domain (a Domain, Domain.load(FILE), "
                               f"or a dict), got {type(domain).__name__}")
    path = Path(path)
    source = path.name
    frame = read_frame(path, domain)
    if len(frame) == 0:
        raise DPMarginalsError(f"{source} has no rows (only a header)")
    codes = encode_frame(frame, domain, extra_columns=extra_columns,
                         locate=_cell_locator(path, source, len(frame)))
    return Records(codes, frame[list(domain.attributes)], domain, source, path)


def read_frame(path: str | Path, domain: Domain | None = None) -> pd.DataFrame:
    """The file's table as pandas reads it, a duplicated column refused (pandas would
    rename the second 'sex' to 'sex.1'); with a ``domain``, its labelled columns as text
    and only empty cells missing.  (:func:`read_records` encodes it.)"""
    path = Path(path)
    if path.is_dir():
        raise DPMarginalsError(f"{str(path)!r} is a directory, not a data file")
    if not path.exists():
        raise DPMarginalsError(f"data file not found: {str(path)!r}")
    if _is_parquet(path):
        frame = _read_parquet(path)
        duplicated = _first_duplicate(list(frame.columns))
        if duplicated is not None:
            name, first, second = duplicated
            raise DPMarginalsError(f"{path.name}: column {name!r} appears twice (columns "
                                   f"{first} and {second})")
    else:
        frame = _read_csv(path, domain)
    frame.columns = [str(c) for c in frame.columns]
    return frame


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in PARQUET_SUFFIXES


def _read_parquet(path: Path) -> pd.DataFrame:
    from .extras import require

    require("pyarrow", extra="engines", what="reading a Parquet file")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DPMarginalsError(f"cannot read Parquet file {str(path)!r}: {exc}") from None


def _read_csv(path: Path, domain: Domain | None) -> pd.DataFrame:
    header_line, header = _header(path)
    duplicated = _first_duplicate(header)
    if duplicated is not None:
        name, first, second = duplicated
        raise DPMarginalsError(f"{path.name} line {header_line}: column {name!r} appears "
                               f"twice (columns {first} and {second})")
    options: dict[str, Any] = {}
    if domain is not None:
        text = {a: "string" for a, lab in zip(domain.attributes, domain.labels, strict=True)
                if lab is not None and lab.bins is None and a in header}
        options = {"dtype": text or None, "keep_default_na": False, "na_values": [""]}
    try:
        return pd.read_csv(path, **options)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
            OSError, ValueError) as exc:
        reason = str(exc).strip().replace("\n", " ")
        raise DPMarginalsError(f"cannot parse CSV {str(path)!r}: {reason}") from None


def _first_duplicate(columns: list[Any]) -> tuple[str, int, int] | None:
    """The first column name that appears twice, and its two positions (from 1)."""
    seen: dict[str, int] = {}
    for j, name in enumerate(columns, 1):
        key = str(name)
        if key in seen:
            return key, seen[key], j
        seen[key] = j
    return None


@contextmanager
def _text(path: Path) -> Iterator[IO[str]]:
    """The file as text, decompressed by its suffix as pandas does ("infer")."""
    suffix = path.suffix.lower()
    if suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
            with archive.open(names[0]) as raw, io.TextIOWrapper(
                    raw, encoding="utf-8-sig", newline="") as fh:
                yield fh
        return
    opener: Any = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open,
                   ".lzma": lzma.open}.get(suffix, open)
    with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
        yield fh


def _blank(record: list[str]) -> bool:
    """A line pandas skips (``skip_blank_lines``): nothing, or only whitespace."""
    return len(record) == 0 or (len(record) == 1 and not record[0].strip())


def _header(path: Path) -> tuple[int, list[str]]:
    """The header's line number and its column names (as the file spells them)."""
    try:
        with _text(path) as fh:
            reader = csv.reader(fh)
            before = 0
            for record in reader:
                if not _blank(record):
                    return before + 1, record
                before = reader.line_num
    except (OSError, UnicodeDecodeError, csv.Error, EOFError, zipfile.BadZipFile,
            lzma.LZMAError, IndexError) as exc:
        raise DPMarginalsError(f"cannot parse CSV {str(path)!r}: {exc}") from None
    raise DPMarginalsError(f"{path.name} is empty: no header line naming the columns")


def csv_lines(path: str | Path) -> np.ndarray:
    """The file line (from 1) on which each data record of a CSV starts, in the order
    pandas reads them (the header and blank lines skipped; a quoted value spanning lines
    counts them all)."""
    lines: list[int] = []
    with _text(Path(path)) as fh:
        reader = csv.reader(fh)
        before = 0
        header = False
        for record in reader:
            if not _blank(record):
                if header:
                    lines.append(before + 1)
                header = True
            before = reader.line_num
    return np.asarray(lines, dtype=np.int64)


def _locator(path: Path, source: str, n: int) -> Any:
    """``i -> "SOURCE line L"`` (CSV, lines counted once, when first asked) or
    ``"SOURCE record i+1"`` (Parquet).  Should the count of lines differ from the ``n``
    records pandas read (a file neither reader expects), the record is named by its
    number after the header instead of a line that could be wrong."""
    if _is_parquet(path):
        return lambda i: f"{source} record {i + 1}"
    cache: dict[str, np.ndarray] = {}

    def where(i: int) -> str:
        if "lines" not in cache:
            try:
                cache["lines"] = csv_lines(path)
            except (OSError, UnicodeDecodeError, csv.Error) as exc:  # pragma: no cover
                raise DPMarginalsError(f"cannot parse CSV {str(path)!r}: {exc}") from None
        lines = cache["lines"]
        if len(lines) == n and 0 <= i < n:
            return f"{source} line {int(lines[i])}"
        return f"{source} record {i + 1} after the header"

    return where


def _cell_locator(path: Path, source: str, n: int) -> Any:
    where = _locator(path, source, n)
    return lambda i, column: f"{where(i)}, column {column!r}"
