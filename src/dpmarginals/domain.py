"""Domain: the ordered attributes of a data set and the number of values of each.

Values are integers ``0..size-1``.  Modelled on private-pgm's ``mbi.Domain``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DPMarginalsError

__all__ = ["Domain"]


@dataclass(frozen=True)
class Domain:
    """Ordered attribute names with their sizes (numbers of values).

    >>> dom = Domain(("sex", "age"), (2, 3))
    >>> dom.cells(), dom.index_of((1, 2)), dom.values_of(5)
    (6, 5, (1, 2))
    >>> dom.project(["age"])
    Domain(attributes=('age',), sizes=(3,))
    """

    attributes: tuple[str, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        attrs = tuple(str(a) for a in self.attributes)
        try:
            sizes = tuple(int(s) for s in self.sizes)
        except (TypeError, ValueError):
            raise DPMarginalsError(f"domain sizes must be integers, got {self.sizes!r}") from None
        if len(attrs) != len(sizes):
            raise DPMarginalsError(
                f"domain has {len(attrs)} attributes but {len(sizes)} sizes"
            )
        if len(set(attrs)) != len(attrs):
            dup = sorted({a for a in attrs if attrs.count(a) > 1})
            raise DPMarginalsError(f"domain attribute names repeat: {dup}")
        for a, s in zip(attrs, sizes, strict=True):
            if s < 1:
                raise DPMarginalsError(f"attribute {a!r} must have size >= 1, got {s}")
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "sizes", sizes)

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Domain:
        """From ``{"attr": size}`` (private-pgm) or ``{"0": {"domain": size, ...}}`` (PrivMRF)."""
        if not isinstance(spec, Mapping) or not spec:
            raise DPMarginalsError("domain JSON must be a non-empty object {attribute: size}")
        attrs, sizes = [], []
        for name, value in spec.items():
            if isinstance(value, Mapping):
                if "domain" not in value:
                    raise DPMarginalsError(
                        f"domain entry {name!r} is an object without a 'domain' size: {value!r}"
                    )
                value = value["domain"]
            if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
                raise DPMarginalsError(
                    f"domain size of attribute {name!r} must be an integer, got {value!r}"
                )
            attrs.append(str(name))
            sizes.append(int(value))
        return cls(tuple(attrs), tuple(sizes))

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        """Read a domain JSON file (either style accepted by :meth:`from_dict`)."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise DPMarginalsError(
                f"cannot read domain file {str(path)!r}: {exc.strerror}") from None
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DPMarginalsError(f"domain file {str(path)!r} is not valid JSON: {exc}") from None
        return cls.from_dict(spec)

    def to_dict(self) -> dict[str, int]:
        """private-pgm style ``{"attr": size}``."""
        return dict(zip(self.attributes, self.sizes, strict=True))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    # -- queries ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.attributes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.attributes)

    def __contains__(self, attr: object) -> bool:
        return attr in self.attributes

    def size(self, attr: str) -> int:
        return self.sizes[self.index(attr)]

    def index(self, attr: str) -> int:
        """Position of an attribute; unknown names are an error that names them."""
        try:
            return self.attributes.index(attr)
        except ValueError:
            raise DPMarginalsError(
                f"unknown attribute {attr!r}; the domain has {list(self.attributes)}"
            ) from None

    def indices(self, attrs: Iterable[str]) -> tuple[int, ...]:
        return tuple(self.index(a) for a in attrs)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.sizes

    def cells(self) -> int:
        """Number of cells of the full contingency table."""
        return math.prod(self.sizes)

    def project(self, attrs: Sequence[str]) -> Domain:
        """The sub-domain over ``attrs`` (in the order given)."""
        attrs = tuple(attrs)
        if len(set(attrs)) != len(attrs):
            raise DPMarginalsError(f"attributes repeat in {list(attrs)}")
        return Domain(attrs, tuple(self.size(a) for a in attrs))

    def is_binary(self) -> bool:
        return all(s == 2 for s in self.sizes)

    # -- cell index <-> value tuples (C order: last attribute varies fastest) ------
    def index_of(self, values: Sequence[int] | np.ndarray) -> Any:
        """Flat cell index of value tuple(s); ``values`` may be an (n, d) array."""
        arr = np.asarray(values, dtype=np.int64)
        self._check_values(arr)
        if arr.ndim == 1:
            return int(np.ravel_multi_index(tuple(arr), self.sizes))
        return np.ravel_multi_index(tuple(arr.T), self.sizes)

    def values_of(self, index: int | np.ndarray) -> Any:
        """Value tuple(s) of flat cell index(es); inverse of :meth:`index_of`."""
        idx = np.asarray(index, dtype=np.int64)
        if ((idx < 0) | (idx >= self.cells())).any():
            raise DPMarginalsError(f"cell index out of range 0..{self.cells() - 1}: {index!r}")
        out = np.stack(np.unravel_index(idx, self.sizes), axis=-1)
        return tuple(int(v) for v in out) if idx.ndim == 0 else out

    def _check_values(self, arr: np.ndarray) -> None:
        cols = arr.reshape(-1, len(self.sizes)) if arr.size else arr.reshape(0, len(self))
        if cols.shape[1] != len(self.sizes):
            raise DPMarginalsError(f"expected {len(self)} values per row, got {cols.shape[1]}")
        for j, (a, s) in enumerate(zip(self.attributes, self.sizes, strict=True)):
            bad = (cols[:, j] < 0) | (cols[:, j] >= s)
            if bad.any():
                raise DPMarginalsError(
                    f"value {int(cols[bad, j][0])} of attribute {a!r} "
                    f"is out of its domain 0..{s - 1}"
                )

    def validate_codes(self, codes: np.ndarray) -> None:
        """Raise a :class:`DPMarginalsError` naming the attribute of any out-of-domain value."""
        self._check_values(np.asarray(codes))
