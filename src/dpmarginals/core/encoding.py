"""From a table of raw values to integer codes over a declared, public :class:`Domain`.

The domain says which values exist (labels, numeric bins, or plain codes ``0..size-1``);
a value outside it is an error naming the column, the row and the value, unless the
domain declares a catch-all ``other`` value.  Reading a domain off the private data is
possible only on request, with a :class:`~dpmarginals.core.errors.PrivacyLeakWarning`: sizes and
labels read off the data reveal its values (diffprivlib warns the same way).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd

from .domain import Domain, Labels
from .errors import DPMarginalsError, PrivacyLeakWarning

__all__ = ["domain_from_data", "encode_frame"]

EXTRA_COLUMNS = ("error", "ignore")


def encode_frame(frame: pd.DataFrame, domain: Domain, *, extra_columns: str = "error",
                 locate: Callable[[int, str], str] | None = None) -> np.ndarray:
    """The (n, d) integer codes of ``frame``'s columns named by ``domain``.

    ``extra_columns``: what to do with data columns the domain does not name ("error",
    the default, so that a domain naming 2 of 6 columns does not silently drop 4, or
    "ignore").  ``locate(row, column)``: how an error names a cell (default
    ``"column 'sex' row 7"``, the frame's row position; :func:`~.records.read_records`
    names the file and its line).

    >>> dom = Domain.from_dict({"sex": ["f", "m"], "age": {"bins": [0, 40, 99]}})
    >>> encode_frame(pd.DataFrame({"sex": ["m", "f"], "age": [39.5, 40]}), dom).tolist()
    [[1, 0], [0, 1]]
    """
    if extra_columns not in EXTRA_COLUMNS:
        raise DPMarginalsError(f"extra_columns must be one of {list(EXTRA_COLUMNS)}, "
                               f"got {extra_columns!r}")
    columns = [str(c) for c in frame.columns]
    seen: set[str] = set()
    for c in columns:
        if c in seen:
            raise DPMarginalsError(f"column {c!r} appears twice in the data")
        seen.add(c)
    missing = [a for a in domain.attributes if a not in columns]
    if missing:
        hint = next((f"; is the file separated by {sep!r}?" for sep in (";", "\t", "|")
                     if len(columns) == 1 and sep in str(columns[0])), "")
        raise DPMarginalsError(f"columns {missing} of the domain are not in the data "
                               f"(columns: {columns[:20]}){hint}")
    extra = [c for c in columns if c not in domain]
    if extra and extra_columns == "error":
        raise DPMarginalsError(
            f"columns {extra[:20]} of the data are not in the domain; declare them in the "
            "domain, or drop them (extra_columns='ignore', --ignore-extra-columns)")
    frame = frame.set_axis(columns, axis=1)
    where = locate or (lambda row, column: f"column {column!r} row {row}")
    codes = np.empty((len(frame), len(domain)), dtype=np.int64)
    for j, (a, size, lab) in enumerate(zip(domain.attributes, domain.sizes, domain.labels,
                                           strict=True)):
        col = frame[a]
        if lab is None:
            codes[:, j] = _plain_codes(a, col, size, where)
        elif lab.bins is not None:
            codes[:, j] = _binned_codes(a, col, lab, where)
        else:
            codes[:, j] = _labelled_codes(a, col, lab, where)
    return codes


def _refuse(attr: str, col: pd.Series, bad: np.ndarray, expected: str,
            where: Callable[[int, str], str]) -> None:
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = col.iloc[row]
        value = value.item() if isinstance(value, np.generic) else value
        if value is None or value is pd.NA or (isinstance(value, float) and value != value):
            raise DPMarginalsError(f"{where(row, attr)}: the cell is empty (the declared "
                                   f"domain: {expected})")
        raise DPMarginalsError(f"{where(row, attr)}: value {value!r} is not in "
                               f"the declared domain ({expected})")


def _plain_codes(attr: str, col: pd.Series, size: int,
                 where: Callable[[int, str], str]) -> np.ndarray:
    expected = f"integer codes 0..{size - 1}"
    numeric = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(numeric) | (numeric != np.round(numeric))
    bad |= (numeric < 0) | (numeric >= size)
    _refuse(attr, col, bad, expected, where)
    return numeric.astype(np.int64)


def _binned_codes(attr: str, col: pd.Series, lab: Labels,
                  where: Callable[[int, str], str]) -> np.ndarray:
    assert lab.bins is not None
    edges = np.asarray(lab.bins)
    x = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    inside = (x >= edges[0]) & (x <= edges[-1])
    codes = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    # A value that is not a number may name its bin ("[45, 65)", as `synthesize` writes
    # it, or the domain's own label): a synthetic table reads back (issue #33).
    text = np.isnan(x) & col.notna().to_numpy()
    if text.any():
        named = pd.Index(lab.names).get_indexer(_as_text(col[text])).astype(np.int64)
        found = np.flatnonzero(text)[named >= 0]
        codes[found] = named[named >= 0]
        inside[found] = True
    if lab.other:
        return np.where(inside, codes, len(lab.names) - 1)
    _refuse(attr, col, ~inside, f"numbers in [{edges[0]:g}, {edges[-1]:g}]; declare "
            "\"other\": true to map the rest to 'other'", where)
    return codes


def _labelled_codes(attr: str, col: pd.Series, lab: Labels,
                    where: Callable[[int, str], str]) -> np.ndarray:
    codes = pd.Index(lab.names).get_indexer(_as_text(col)).astype(np.int64)
    if lab.other:
        return np.where(codes < 0, len(lab.names) - 1, codes)
    shown = list(lab.names[:10]) + (["..."] if len(lab.names) > 10 else [])
    _refuse(attr, col, codes < 0, f"{shown}; declare it, or add \"other\": true to map "
            "unlisted values to 'other'", where)
    return codes


def _as_text(col: pd.Series) -> pd.Series:
    """Values as the strings labels are matched against (1.0 read from a CSV is "1")."""
    if pd.api.types.is_float_dtype(col):
        whole = col.dropna()
        if (whole == np.round(whole)).all():
            col = col.astype("Int64")
    return col.astype("string")


def domain_from_data(frame: pd.DataFrame) -> Domain:
    """A domain read off the data itself, with a :class:`PrivacyLeakWarning`.

    Integer columns keep their codes (size = max + 1, negatives refused); other columns
    (strings, categories, booleans, floats) are labelled by their sorted distinct values.
    """
    warnings.warn("the domain (every attribute's values) is read off the private data and "
                  "is published with the release; declare it in a domain JSON instead",
                  PrivacyLeakWarning, stacklevel=3)
    attrs, sizes, labels = [], [], []
    for a in frame.columns:
        col = frame[a]
        if col.isna().any():
            row = int(np.flatnonzero(col.isna().to_numpy())[0])
            raise DPMarginalsError(f"column {str(a)!r} has a missing value (row {row})")
        lab = None
        if pd.api.types.is_integer_dtype(col) and not pd.api.types.is_bool_dtype(col):
            if len(col) and col.min() < 0:
                raise DPMarginalsError(f"column {str(a)!r} has negative value {int(col.min())};"
                                       " declare its values in a domain JSON")
            size = int(col.max()) + 1 if len(col) else 1
        elif isinstance(col.dtype, pd.CategoricalDtype):
            lab = Labels(tuple(str(c) for c in col.cat.categories))
            size = len(lab.names)
        else:  # sorted by value, named as they will be matched
            uniques = pd.Series(pd.unique(col), dtype=col.dtype)
            try:
                uniques = uniques.sort_values()
            except TypeError:  # mixed types: sort by their text
                uniques = uniques.iloc[np.argsort(uniques.astype(str).to_numpy())]
            lab = Labels(tuple(_as_text(uniques).tolist()) or ("",))
            size = len(lab.names)
        attrs.append(str(a))
        sizes.append(size)
        labels.append(lab)
    return Domain(tuple(attrs), tuple(sizes), tuple(labels))
