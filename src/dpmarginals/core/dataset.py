"""Dataset: n users' records as integer codes over a :class:`Domain`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .domain import Domain
from .encoding import domain_from_data, encode_frame
from .errors import DPMarginalsError
from .randomness import RNGLike, simulation_rng
from .table import MarginalTable

__all__ = ["Dataset", "cell_indices", "code_dtype", "take_rows"]


def code_dtype(sizes: Sequence[int]) -> np.dtype:
    """The smallest unsigned integer type that holds every value of the domain."""
    top = max(sizes, default=1) - 1
    for dt in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


@dataclass(frozen=True, eq=False)
class Dataset:
    """``codes[i, j]`` is user i's value of attribute ``domain.attributes[j]``.

    ``labels`` optionally maps an attribute to the human-readable name of each code; they
    join the domain (``domain.labels``), and ``labels`` reads them back from it.

    Codes are validated once, when a Dataset is made from them; its subsets, projections
    and samples are trusted.  Users drawn from a smaller table (:meth:`sample`, or any
    :meth:`take` of more rows than there are) are kept as that table and the drawn row
    numbers (:attr:`drawn_from`): 4 bytes a user instead of d; ``codes`` is built only if
    asked for, and counting reads the small table.

    >>> ds = Dataset(np.array([[0, 1], [1, 1], [1, 0]]), Domain(("a", "b"), (2, 2)))
    >>> ds.marginal(["b"]).values
    array([0.33333333, 0.66666667])
    >>> big = ds.sample(1000, rng=0)
    >>> big.drawn_from is not None, big.n, big.counts(["a", "b"]).sum()
    (True, 1000, np.int64(1000))
    """

    codes: np.ndarray = field(repr=False)
    domain: Domain
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    name: str = "data"
    domain_from_data: bool = False
    """True when the domain was read off these records (it then reveals their values)."""

    def __post_init__(self) -> None:
        codes = np.asarray(self.__dict__["_codes"])
        if codes.ndim != 2 or codes.shape[1] != len(self.domain):
            raise DPMarginalsError(
                f"codes must be an (n, {len(self.domain)}) array, got shape {codes.shape}"
            )
        integral = np.issubdtype(codes.dtype, np.integer)
        if codes.size and not integral and not np.array_equal(codes, np.round(codes)):
            raise DPMarginalsError("codes must be integers")
        self.domain.validate_codes(codes)
        self.__dict__["_codes"] = codes.astype(code_dtype(self.domain.sizes), copy=False)
        self.__dict__["_drawn"] = None
        if self.labels:  # value names given apart from the domain join it
            object.__setattr__(self, "domain", self.domain.with_labels(self.labels))
        object.__setattr__(self, "labels", _labels_of(self.domain))

    @classmethod
    def _derived(cls, codes: np.ndarray | None, domain: Domain, of: Dataset,
                 drawn: tuple[np.ndarray, np.ndarray] | None = None) -> Dataset:
        """A subset, projection or sample of the validated Dataset ``of``: trusted, not
        checked again row by row.  ``codes`` None: the users are ``drawn = (table, rows)``."""
        ds = object.__new__(cls)
        ds.__dict__.update(_codes=codes, _drawn=drawn)
        for key, value in (("domain", domain), ("labels", _labels_of(domain)),
                           ("name", of.name), ("domain_from_data", of.domain_from_data)):
            object.__setattr__(ds, key, value)
        return ds

    @property
    def drawn_from(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(table, rows)`` when these users are rows drawn from a smaller table (user u's
        codes are ``table[rows[u]]``), else None."""
        return self.__dict__["_drawn"]

    # -- basic properties --------------------------------------------------------
    @property
    def n(self) -> int:
        codes = self.__dict__["_codes"]
        return int(len(self.drawn_from[1]) if codes is None else codes.shape[0])  # type: ignore[index]

    @property
    def d(self) -> int:
        return len(self.domain)

    def __len__(self) -> int:
        return self.n

    def column(self, attr: str) -> np.ndarray:
        j = self.domain.index(attr)
        if self.__dict__["_codes"] is None:
            table, rows = self.drawn_from  # type: ignore[misc]
            return table[:, j][rows]
        return self.codes[:, j]

    # -- marginals --------------------------------------------------------------
    def cell_indices(self, attrs: Sequence[str]) -> np.ndarray:
        """Each user's flat cell index in the marginal over ``attrs`` (C order)."""
        columns = self.domain.indices(attrs)
        if self.__dict__["_codes"] is None:
            table, rows = self.drawn_from  # type: ignore[misc]
            return cell_indices(table, columns, self.domain.sizes, dtype=np.int64)[rows]
        return cell_indices(self.codes, columns, self.domain.sizes, dtype=np.int64)

    def counts(self, attrs: Sequence[str]) -> np.ndarray:
        """Exact counts of the marginal over ``attrs``, shaped by their sizes."""
        sub = self.domain.project(attrs)
        columns = self.domain.indices(attrs)
        drawn = self.drawn_from
        if drawn is not None and len(drawn[0]) < self.n:  # count each table row once
            cells = cell_indices(drawn[0], columns, self.domain.sizes)
            counts = np.bincount(cells, self._draws(), minlength=sub.cells())
            return counts.astype(np.int64).reshape(sub.shape)
        cells = cell_indices(self.codes, columns, self.domain.sizes)
        return np.bincount(cells, minlength=sub.cells()).reshape(sub.shape)

    def _draws(self) -> np.ndarray:
        """How many times each row of :attr:`drawn_from`'s table was drawn (kept)."""
        draws = self.__dict__.get("_draw_counts")
        if draws is None:
            table, rows = self.drawn_from  # type: ignore[misc]
            draws = np.bincount(rows, minlength=len(table)).astype(np.float64)
            self.__dict__["_draw_counts"] = draws
        return draws

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        """The exact (non-private) marginal table over ``attrs``."""
        if self.n == 0:
            raise DPMarginalsError("the data set has no rows")
        return MarginalTable(self.domain.project(attrs), self.counts(attrs) / self.n)

    # -- selection ---------------------------------------------------------------
    def project(self, attrs: Sequence[str]) -> Dataset:
        """Keep only the columns ``attrs`` (in that order)."""
        idx = list(self.domain.indices(attrs))
        sub = self.domain.project(attrs)
        if self.__dict__["_codes"] is None:
            table, rows = self.drawn_from  # type: ignore[misc]
            return Dataset._derived(None, sub, self, (table[:, idx], rows))
        return Dataset._derived(self.codes[:, idx], sub, self)

    def take(self, rows: np.ndarray) -> Dataset:
        """The users ``rows`` (indices or a boolean mask), in that order."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        drawn = self.drawn_from
        if drawn is not None:  # still drawn from the same table
            return Dataset._derived(None, self.domain, self, (drawn[0], drawn[1][rows]))
        if len(rows) > self.n:  # more users than rows: keep the rows and their numbers
            return Dataset._derived(None, self.domain, self, (self.codes, rows))
        return Dataset._derived(take_rows(self.codes, rows), self.domain, self)

    def sample(self, n: int, *, rng: RNGLike = None, replace: bool = True) -> Dataset:
        """``n`` users drawn from the rows (with replacement by default)."""
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        if not replace and n > self.n:
            raise DPMarginalsError(f"cannot draw n={n} rows without replacement from {self.n}")
        gen = simulation_rng(rng)
        rows = gen.integers(0, self.n, size=n) if replace else gen.permutation(self.n)[:n]
        return self.take(rows.astype(np.int32 if self.n < 2**31 else np.int64))

    # -- conversion --------------------------------------------------------------
    def to_frame(self, *, labels: bool = False) -> pd.DataFrame:
        """Integer codes as a DataFrame (or their labels where known, with ``labels=True``)."""
        frame = pd.DataFrame(self.codes, columns=list(self.domain.attributes))
        if labels:
            for a, names in self.labels.items():
                frame[a] = pd.Categorical.from_codes(frame[a].to_numpy(), list(names))
        return frame

    @classmethod
    def from_frame(
        cls, frame: pd.DataFrame, domain: Domain | Mapping | str | Path | None = None, *,
        name: str = "data", extra_columns: str = "error",
    ) -> Dataset:
        """From a DataFrame of the user's own values over a declared domain.

        The domain (a :class:`Domain`, a domain dict or a JSON path) says each column's
        values: labels, numeric bins or codes ``0..size-1``
        (:func:`dpmarginals.core.encoding.encode_frame`); a value outside it is an error naming
        the column, the row and the value.  Without a domain, it is read off the data with
        a :class:`~dpmarginals.core.errors.PrivacyLeakWarning`.
        """
        if len(frame) == 0:
            raise DPMarginalsError("the data has no rows")
        dom = domain_from_data(frame) if domain is None else _as_domain(domain)
        return cls(encode_frame(frame, dom, extra_columns=extra_columns), dom, name=name,
                   domain_from_data=domain is None)

    @classmethod
    def from_file(
        cls, path: str | Path, domain: str | Path | Mapping | Domain | None = None, *,
        extra_columns: str = "error",
    ) -> Dataset:
        """A CSV (plain or compressed) or Parquet file of the user's values over a domain.

        The domain JSON may be private-pgm style ``{"attr": size}``, labelled
        ``{"attr": ["a", "b"]}``, binned ``{"attr": {"bins": [0, 18, 65]}}`` or PrivMRF
        style ``{"0": {"domain": 2}}``; its keys must name the file's columns.  Labelled
        columns are read as text, so "007" stays "007".  Read by
        :func:`~dpmarginals.core.records.read_records`: errors name the file line.
        """
        from .records import read_frame, read_records

        path = Path(path)
        if domain is None:  # the domain is read off the data (with a warning)
            return cls.from_frame(read_frame(path), None, name=path.name.split(".")[0],
                                  extra_columns=extra_columns)
        dom = _as_domain(domain)
        records = read_records(path, dom, extra_columns=extra_columns)
        return cls(records.codes, dom, name=path.name.split(".")[0])

    from_csv = from_file

    def to_csv(self, path: str | Path, domain_path: str | Path | None = None) -> None:
        self.to_frame().to_csv(path, index=False)
        if domain_path is not None:
            self.domain.save(domain_path)


def _get_codes(self: Dataset) -> np.ndarray:
    codes = self.__dict__["_codes"]
    if codes is None:  # users drawn from a table: build their rows once, when asked
        table, rows = self.drawn_from  # type: ignore[misc]
        codes = self.__dict__["_codes"] = take_rows(table, rows)
    return codes


def _set_codes(self: Dataset, codes: np.ndarray) -> None:
    self.__dict__["_codes"] = codes  # only the constructor sets it (the class is frozen)


#: ``codes`` is stored in ``_codes``, and built on first use for drawn users.
Dataset.codes = property(_get_codes, _set_codes)  # type: ignore[assignment]


def cell_indices(codes: np.ndarray, columns: Sequence[int], sizes: Sequence[int], *,
                 dtype: type[np.integer] | None = None) -> np.ndarray:
    """Each row's flat (C-order) cell index in the marginal over ``columns`` of ``codes``.

    ``dtype`` None: the smallest unsigned type that holds every index (for counting; less
    memory traffic than int64 on large data).

    >>> cell_indices(np.array([[0, 1, 2], [1, 0, 1]]), [2, 0], [2, 2, 3]).tolist()
    [4, 3]
    """
    dims = [int(sizes[i]) for i in columns]
    if dtype is None:
        cells = math.prod(dims)
        dtype = np.uint8 if cells <= 2**8 else np.uint16 if cells <= 2**16 else \
            np.uint32 if cells <= 2**32 else np.int64
    flat = np.zeros(len(codes), dtype=dtype)
    for i, s in zip(columns, dims, strict=True):
        if s > 1:
            flat *= dtype(s)
            np.add(flat, codes[:, i], out=flat, casting="unsafe")  # codes < s: no overflow
    return flat


def take_rows(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``codes[rows]`` for a C-contiguous ``(n, d)`` array, each row moved as one item
    (numpy's fancy indexing moves a 2-D array element by element: 2-3x slower).

    >>> take_rows(np.arange(6, dtype=np.uint8).reshape(3, 2), np.array([2, 0])).tolist()
    [[4, 5], [0, 1]]
    """
    if codes.ndim != 2 or not codes.flags.c_contiguous or codes.shape[1] == 0:
        return codes[rows]
    as_items = codes.view(np.dtype((np.void, codes.shape[1] * codes.itemsize))).reshape(-1)
    return as_items[rows].view(codes.dtype).reshape(-1, codes.shape[1])


def _labels_of(domain: Domain) -> dict[str, tuple[str, ...]]:
    return {a: lab.names for a, lab in zip(domain.attributes, domain.labels, strict=True)
            if lab is not None}


def _as_domain(spec: str | Path | Mapping | Domain) -> Domain:
    """A Domain from a Domain, a mapping, or the path of a domain JSON file."""
    if isinstance(spec, Domain):
        return spec
    if isinstance(spec, Mapping):
        return Domain.from_dict(spec)
    return Domain.load(spec)
