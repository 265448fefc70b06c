"""UCI Adult from the raw files: cleaning and the three discretisations the papers use.

Raw input: ``adult.data`` (32,561 rows) and ``adult.test`` (16,281 rows; its first line
is a comment and its labels end with ``.``), 15 comma-separated columns.  Rows with a
missing value (``?``, in workclass, occupation or native-country) are dropped, leaving
**45,222** rows, as CALM §5.1 does ("After removing missing values ... around 50
thousands records").  All 15 attributes are kept in the UCI order (CALM's Figure 5/6
use d = 15), the income label last.

``adult`` -- CALM §5.1, "numerical attributes are bucketized" (the paper gives no bins;
these are ours):

=================  =========================================================  =====
attribute          values                                                     size
=================  =========================================================  =====
age                decades: 17-19, 20-29, 30-39, 40-49, 50-59, 60-69, 70+     7
workclass          categories, sorted by name                                 7
fnlwgt             5 equal-frequency bins (quintiles of the cleaned data)     5
education          the 16 levels, ordered by education-num (Preschool first)  16
education-num      1..16                                                      16
marital-status     categories, sorted                                         7
occupation         categories, sorted                                         14
relationship       categories, sorted                                         6
race               categories, sorted                                         5
sex                Female, Male                                               2
capital-gain       0 / >0                                                     2
capital-loss       0 / >0                                                     2
hours-per-week     1-24, 25-39, 40, 41-49, 50+                                5
native-country     categories, sorted                                         41
income             <=50K, >50K                                                2
=================  =========================================================  =====

``adult3`` -- CALM §5.3 "pre-process all attributes to contain at most 3 categories"
(the paper does not say how; our rule):

* ordered attributes (age, fnlwgt, education-num, hours-per-week) -> 3 equal-frequency
  bins, cut between distinct raw values at the cumulative shares closest to 1/3 and 2/3
  (ties kept together: hours-per-week becomes <=39 / 40 / >=41); education follows the
  bins of education-num;
* capital-gain, capital-loss -> 0 / >0; sex, income unchanged (2 values);
* nominal attributes with more than 3 values (workclass, marital-status, occupation,
  relationship, race, native-country) -> their 2 most frequent values, the rarer ones
  merged into ``other``.

``adult2`` -- CALM §5.4 "binary partition" of every attribute (again our rule): ordered
attributes split at the median (the cut between distinct values closest to 1/2), capital
gain/loss 0 / >0, nominal attributes the most frequent value vs ``other``; income stays
the label (``<=50K`` / ``>50K``), sex unchanged.

Bins are computed on the cleaned 45,222 rows, so they are a fixed public preprocessing
of this data set (as in the papers), not part of any private computation.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = [
    "ADULT_COLUMNS",
    "adult_dataset",
    "equal_frequency_codes",
    "read_adult_raw",
]

ADULT_COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)
_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
_NOMINAL = ("workclass", "marital-status", "occupation", "relationship", "race",
            "native-country")
_ORDERED = ("age", "fnlwgt", "education-num", "hours-per-week")
_AGE_EDGES = (20, 30, 40, 50, 60, 70)  # lower bounds of the bins after the first
_HOURS_EDGES = (25, 40, 41, 50)


def _read_one(path: Path, *, skip_comment: bool) -> pd.DataFrame:
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
            text = fh.read()
    except (OSError, EOFError) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
    if skip_comment and text.startswith(b"|"):
        text = text[text.find(b"\n") + 1 :]
    try:
        frame = pd.read_csv(
            io.BytesIO(text), header=None, names=list(ADULT_COLUMNS), skipinitialspace=True,
            na_values=["?"], keep_default_na=False, dtype={c: str for c in ADULT_COLUMNS},
        )
    except (pd.errors.ParserError, ValueError) as exc:
        raise DPMarginalsError(f"cannot parse the Adult file {str(path)!r}: {exc}") from None
    return frame


def read_adult_raw(data_path: str | Path, test_path: str | Path | None = None) -> pd.DataFrame:
    """The raw UCI rows (train, then test) without missing values, typed and cleaned.

    Numeric columns become int64, strings are stripped, the test labels lose their
    trailing ``.``.  Rows with ``?`` anywhere are dropped.
    """
    parts = [_read_one(Path(data_path), skip_comment=False)]
    if test_path is not None:
        parts.append(_read_one(Path(test_path), skip_comment=True))
    frame = pd.concat(parts, ignore_index=True)
    frame = frame.dropna(how="all")
    frame = frame.dropna().reset_index(drop=True)
    for c in ADULT_COLUMNS:
        frame[c] = frame[c].astype(str).str.strip()
    frame["income"] = frame["income"].str.rstrip(".")
    for c in _NUMERIC:
        try:
            frame[c] = frame[c].astype(np.int64)
        except ValueError:
            raise DPMarginalsError(f"Adult column {c!r} has a non-integer value") from None
    bad = sorted(set(frame["income"]) - {"<=50K", ">50K"})
    if bad:
        raise DPMarginalsError(f"Adult income labels must be <=50K or >50K, found {bad[:3]}")
    return frame


# -- discretisation helpers -----------------------------------------------------------
def equal_frequency_codes(
    values: np.ndarray | pd.Series, k: int
) -> tuple[np.ndarray, list[str]]:
    """Codes 0..k'-1 (k' <= k) of ``k`` equal-frequency bins over ordered ``values``.

    Cuts fall between distinct values (equal values share a bin), each at the cumulative
    share closest to j/k.  Labels give each bin's observed range, e.g. ``"17-33"``.

    >>> codes, labels = equal_frequency_codes(np.array([1, 1, 2, 3, 3, 3, 4, 5, 6]), 3)
    >>> codes.tolist(), labels
    ([0, 0, 0, 1, 1, 1, 2, 2, 2], ['1-2', '3', '4-6'])
    """
    arr = np.asarray(values)
    distinct, inverse, counts = np.unique(arr, return_inverse=True, return_counts=True)
    share = np.cumsum(counts) / arr.size
    cuts: list[int] = []  # bin j ends after distinct[cuts[j]]
    for j in range(1, k):
        lo = cuts[-1] + 1 if cuts else 0
        if lo >= distinct.size - 1:
            break
        i = lo + int(np.argmin(np.abs(share[lo : distinct.size - 1] - j / k)))
        cuts.append(i)
    bounds = np.array(cuts, dtype=np.int64)
    codes = np.searchsorted(bounds, np.arange(distinct.size), side="left")[inverse]
    starts = [0, *(c + 1 for c in cuts)]
    ends = [*cuts, distinct.size - 1]
    labels = [
        _fmt(distinct[s]) if s == e else f"{_fmt(distinct[s])}-{_fmt(distinct[e])}"
        for s, e in zip(starts, ends, strict=True)
    ]
    return codes.astype(np.int64), labels


def _fmt(v: object) -> str:
    return str(int(v)) if isinstance(v, int | np.integer) else str(v)


def _edges_codes(values: pd.Series, edges: Sequence[int]) -> np.ndarray:
    return np.searchsorted(np.asarray(edges), values.to_numpy(), side="right").astype(np.int64)


def _edges_labels(lo: int, edges: Sequence[int]) -> list[str]:
    bounds = [lo, *edges]
    out = []
    for i, b in enumerate(bounds):
        if i + 1 == len(bounds):
            out.append(f"{b}+")
        elif bounds[i + 1] - 1 == b:
            out.append(str(b))
        else:
            out.append(f"{b}-{bounds[i + 1] - 1}")
    return out


def _categories(values: pd.Series, order: Sequence[str] | None = None) -> tuple[np.ndarray, list]:
    cats = list(order) if order is not None else sorted(values.unique())
    codes = pd.Categorical(values, categories=cats).codes.astype(np.int64)
    if (codes < 0).any():
        raise DPMarginalsError(f"unexpected value in Adult column {values.name!r}")
    return codes, [str(c) for c in cats]


def _top_and_other(values: pd.Series, keep: int) -> tuple[np.ndarray, list[str]]:
    counts = values.value_counts()
    ranked = sorted(counts.index, key=lambda v: (-counts[v], v))
    if len(ranked) <= keep + 1:
        return _categories(values, ranked)
    top = ranked[:keep]
    mapping = {v: i for i, v in enumerate(top)}
    codes = values.map(mapping).fillna(keep).to_numpy(np.int64)
    return codes, [*top, "other"]


def _nonzero(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    return (values.to_numpy() > 0).astype(np.int64), ["0", ">0"]


def _education_order(frame: pd.DataFrame) -> list[str]:
    pairs = frame[["education", "education-num"]].drop_duplicates()
    if pairs["education"].duplicated().any() or pairs["education-num"].duplicated().any():
        raise DPMarginalsError("Adult education and education-num are not one-to-one")
    return pairs.sort_values("education-num")["education"].tolist()


def adult_dataset(frame: pd.DataFrame, variant: str = "full", *, name: str = "adult") -> Dataset:
    """Discretise cleaned raw Adult rows: ``variant`` is ``"full"``, ``"3"`` or ``"2"``.

    See the module docstring for the rules of each variant.
    """
    if variant not in ("full", "3", "2"):
        raise DPMarginalsError(f"Adult variant must be 'full', '3' or '2', got {variant!r}")
    columns: dict[str, tuple[np.ndarray, list[str]]] = {}
    k = {"3": 3, "2": 2}.get(variant)
    for c in ADULT_COLUMNS:
        col = frame[c]
        if c in ("capital-gain", "capital-loss"):
            columns[c] = _nonzero(col)
        elif c in ("sex", "income"):
            columns[c] = _categories(col)
        elif k is not None and c in _ORDERED:
            columns[c] = equal_frequency_codes(col.to_numpy(), k)
        elif k is not None and c == "education":
            continue  # follows education-num, filled in below
        elif k is not None:
            columns[c] = _top_and_other(col, k - 1)
        elif c == "age":
            labels = ["17-19", *_edges_labels(20, _AGE_EDGES[1:])]
            columns[c] = _edges_codes(col, _AGE_EDGES), labels
        elif c == "hours-per-week":
            labels = ["1-24", *_edges_labels(25, _HOURS_EDGES[1:])]
            columns[c] = _edges_codes(col, _HOURS_EDGES), labels
        elif c == "fnlwgt":
            columns[c] = equal_frequency_codes(col.to_numpy(), 5)
        elif c == "education-num":
            columns[c] = col.to_numpy(np.int64) - 1, [str(v) for v in range(1, 17)]
        elif c == "education":
            columns[c] = _categories(col, _education_order(frame))
        else:
            columns[c] = _categories(col)
    if k is not None:
        order = _education_order(frame)
        num_codes, num_labels = columns["education-num"]
        level = frame["education-num"].to_numpy(np.int64)
        names = []
        for b in range(len(num_labels)):
            levels = sorted(set(level[num_codes == b]))
            names.append(f"{order[levels[0] - 1]}..{order[levels[-1] - 1]}" if len(levels) > 1
                         else order[levels[0] - 1])
        columns["education"] = num_codes.copy(), names
    attrs = ADULT_COLUMNS
    codes = np.column_stack([columns[a][0] for a in attrs])
    sizes = tuple(len(columns[a][1]) for a in attrs)
    labels = {a: tuple(columns[a][1]) for a in attrs}
    return Dataset(codes, Domain(attrs, sizes), labels, name)
