"""Dataset: n users' records as integer codes over a :class:`Domain`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .domain import Domain
from .errors import DPMarginalsError
from .randomness import RNGLike, simulation_rng
from .table import MarginalTable

__all__ = ["Dataset", "code_dtype"]


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

    ``labels`` optionally maps an attribute to the human-readable name of each code.

    >>> ds = Dataset(np.array([[0, 1], [1, 1], [1, 0]]), Domain(("a", "b"), (2, 2)))
    >>> ds.marginal(["b"]).values
    array([0.33333333, 0.66666667])
    """

    codes: np.ndarray
    domain: Domain
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    name: str = "data"

    def __post_init__(self) -> None:
        codes = np.asarray(self.codes)
        if codes.ndim != 2 or codes.shape[1] != len(self.domain):
            raise DPMarginalsError(
                f"codes must be an (n, {len(self.domain)}) array, got shape {codes.shape}"
            )
        integral = np.issubdtype(codes.dtype, np.integer)
        if codes.size and not integral and not np.array_equal(codes, np.round(codes)):
            raise DPMarginalsError("codes must be integers")
        self.domain.validate_codes(codes)
        object.__setattr__(self, "codes", codes.astype(code_dtype(self.domain.sizes), copy=False))

    # -- basic properties --------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.codes.shape[0])

    @property
    def d(self) -> int:
        return len(self.domain)

    def __len__(self) -> int:
        return self.n

    def column(self, attr: str) -> np.ndarray:
        return self.codes[:, self.domain.index(attr)]

    # -- marginals --------------------------------------------------------------
    def cell_indices(self, attrs: Sequence[str]) -> np.ndarray:
        """Each user's flat cell index in the marginal over ``attrs`` (C order)."""
        idx = self.domain.indices(attrs)
        sizes = [self.domain.sizes[i] for i in idx]
        flat = np.zeros(self.n, dtype=np.int64)
        for i, s in zip(idx, sizes, strict=True):
            flat *= s
            flat += self.codes[:, i]
        return flat

    def counts(self, attrs: Sequence[str]) -> np.ndarray:
        """Exact counts of the marginal over ``attrs``, shaped by their sizes."""
        sub = self.domain.project(attrs)
        return np.bincount(self.cell_indices(attrs), minlength=sub.cells()).reshape(sub.shape)

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        """The exact (non-private) marginal table over ``attrs``."""
        if self.n == 0:
            raise DPMarginalsError("the data set has no rows")
        return MarginalTable(self.domain.project(attrs), self.counts(attrs) / self.n)

    # -- selection ---------------------------------------------------------------
    def project(self, attrs: Sequence[str]) -> Dataset:
        """Keep only the columns ``attrs`` (in that order)."""
        idx = list(self.domain.indices(attrs))
        labels = {a: v for a, v in self.labels.items() if a in attrs}
        return Dataset(self.codes[:, idx], self.domain.project(attrs), labels, self.name)

    def take(self, rows: np.ndarray) -> Dataset:
        return Dataset(self.codes[rows], self.domain, self.labels, self.name)

    def sample(self, n: int, *, rng: RNGLike = None, replace: bool = True) -> Dataset:
        """``n`` users drawn from the rows (with replacement by default)."""
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        if not replace and n > self.n:
            raise DPMarginalsError(f"cannot draw n={n} rows without replacement from {self.n}")
        gen = simulation_rng(rng)
        rows = gen.integers(0, self.n, size=n) if replace else gen.permutation(self.n)[:n]
        return self.take(rows)

    # -- conversion --------------------------------------------------------------
    def to_frame(self, *, labels: bool = False) -> pd.DataFrame:
        """Integer codes as a DataFrame (or their labels where known, with ``labels=True``)."""
        frame = pd.DataFrame(self.codes, columns=list(self.domain.attributes))
        if labels:
            for a, names in self.labels.items():
                frame[a] = np.asarray(names, dtype=object)[frame[a].to_numpy()]
        return frame

    @classmethod
    def from_frame(
        cls, frame: pd.DataFrame, domain: Domain | Mapping | None = None, *, name: str = "data"
    ) -> Dataset:
        """From a DataFrame.

        With a ``domain`` the columns it names must hold integer codes ``0..size-1``.
        Without one, integer columns keep their codes (size = max + 1, negatives refused)
        and other columns (strings, categories, booleans) are encoded by their sorted
        distinct values, which become the ``labels``.  Missing values are refused.
        """
        if domain is not None:
            dom = domain if isinstance(domain, Domain) else Domain.from_dict(domain)
            missing = [a for a in dom.attributes if a not in frame.columns]
            if missing:
                raise DPMarginalsError(
                    f"columns {missing} of the domain are not in the data "
                    f"(columns: {list(frame.columns)[:20]})"
                )
            sub = frame[list(dom.attributes)]
            _refuse_missing(sub)
            for a in dom.attributes:
                if not pd.api.types.is_numeric_dtype(sub[a]):
                    raise DPMarginalsError(
                        f"column {a!r} must hold integer codes, got {sub[a].dtype}")
            return cls(sub.to_numpy(), dom, name=name)
        _refuse_missing(frame)
        columns, sizes, labels = [], [], {}
        for a in frame.columns:
            col = frame[a]
            if pd.api.types.is_integer_dtype(col) and not pd.api.types.is_bool_dtype(col):
                if len(col) and col.min() < 0:
                    raise DPMarginalsError(
                        f"column {a!r} has negative value {int(col.min())}; give a domain or labels"
                    )
                columns.append(col.to_numpy(np.int64))
                sizes.append(int(col.max()) + 1 if len(col) else 1)
            else:
                codes, uniques = pd.factorize(col, sort=True)
                columns.append(codes.astype(np.int64))
                sizes.append(max(len(uniques), 1))
                labels[str(a)] = [str(u) for u in uniques]
        dom = Domain(tuple(str(c) for c in frame.columns), tuple(sizes))
        codes = np.column_stack(columns) if columns else np.zeros((len(frame), 0), np.int64)
        return cls(codes, dom, labels, name)

    @classmethod
    def from_csv(
        cls, csv: str | Path, domain_json: str | Path | Mapping | Domain | None = None
    ) -> Dataset:
        """Read a CSV (plain or compressed) and its domain JSON.

        The domain may be private-pgm style ``{"attr": size}`` or the PrivMRF style
        ``{"0": {"domain": 2}}``; its keys must name the CSV's columns.
        """
        path = Path(csv)
        if not path.exists():
            raise DPMarginalsError(f"data file not found: {str(csv)!r}")
        try:
            frame = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DPMarginalsError(f"cannot parse CSV {str(csv)!r}: {exc}") from None
        frame.columns = [str(c) for c in frame.columns]
        if domain_json is None:
            return cls.from_frame(frame, name=path.stem)
        return cls.from_frame(frame, _as_domain(domain_json), name=path.name.split(".")[0])

    @classmethod
    def from_file(
        cls, path: str | Path, domain_json: str | Path | Mapping | Domain | None = None
    ) -> Dataset:
        """A CSV (plain or compressed) or Parquet file, with an optional domain JSON."""
        path = Path(path)
        if path.suffix.lower() not in (".parquet", ".pq"):
            return cls.from_csv(path, domain_json)
        if not path.exists():
            raise DPMarginalsError(f"data file not found: {str(path)!r}")
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise DPMarginalsError(f"cannot read Parquet file {str(path)!r}: {exc}") from None
        frame.columns = [str(c) for c in frame.columns]
        dom = None if domain_json is None else _as_domain(domain_json)
        return cls.from_frame(frame, dom, name=path.stem)

    def to_csv(self, path: str | Path, domain_path: str | Path | None = None) -> None:
        self.to_frame().to_csv(path, index=False)
        if domain_path is not None:
            self.domain.save(domain_path)


def _refuse_missing(frame: pd.DataFrame) -> None:
    missing = frame.isna().any()
    if missing.any():
        col = str(missing[missing].index[0])
        row = int(np.flatnonzero(frame[col].isna().to_numpy())[0])
        raise DPMarginalsError(f"column {col!r} has a missing value (row {row})")


def _as_domain(spec: str | Path | Mapping | Domain) -> Domain:
    """A Domain from a Domain, a mapping, or the path of a domain JSON file."""
    if isinstance(spec, Domain):
        return spec
    if isinstance(spec, Mapping):
        return Domain.from_dict(spec)
    return Domain.load(spec)
