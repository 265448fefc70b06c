"""Domain: the ordered attributes of a data set, the number of values of each, their labels.

Values are integers ``0..size-1``.  Modelled on private-pgm's ``mbi.Domain``, plus the
public names of the values (:class:`Labels`) so that every answer can show the user's own
values.  The domain is public: it is declared, never read off private data silently.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DPMarginalsError

__all__ = ["Domain", "Labels"]

OTHER = "other"
"""The default name of a declared catch-all value (``"other": true`` in a domain JSON)."""


@dataclass(frozen=True)
class Labels:
    """The public names of one attribute's values, code ``i`` named ``names[i]``.

    ``bins`` (numeric columns): code ``i`` holds ``bins[i] <= x < bins[i+1]``, the last bin
    closed on the right, as :func:`numpy.histogram`.  ``other``: the last name is a declared
    catch-all that takes every value not listed (or outside the bins).

    >>> Labels.from_spec("age", {"bins": [0, 18, 65, 120]}).names
    ('[0, 18)', '[18, 65)', '[65, 120]')
    >>> Labels.from_spec("color", {"labels": ["red", "blue"], "other": True}).names
    ('red', 'blue', 'other')
    """

    names: tuple[str, ...]
    bins: tuple[float, ...] | None = None
    other: bool = False

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise DPMarginalsError(f"value labels repeat: {dup}")
        if self.bins is not None and len(self.bins) - 1 + self.other != len(self.names):
            raise DPMarginalsError(f"{len(self.bins)} bin edges need "
                                   f"{len(self.bins) - 1 + self.other} labels, "
                                   f"got {len(self.names)}")

    @classmethod
    def from_spec(cls, attr: str, spec: Any) -> Labels:
        """From a list of names, or ``{"labels": [...], "bins": [...], "other": bool|str}``."""
        if isinstance(spec, list | tuple):
            spec = {"labels": spec}
        unknown = sorted(set(spec) - {"labels", "bins", "other"})
        if unknown:
            raise DPMarginalsError(f"attribute {attr!r}: unknown keys {unknown} (an attribute "
                                   "has 'labels', 'bins' and 'other')")
        other = spec.get("other", False)
        if not (isinstance(other, bool) or (isinstance(other, str) and other.strip())):
            raise DPMarginalsError(f"attribute {attr!r}: 'other' must be true, false or the "
                                   f"name of the catch-all value, got {other!r}")
        bins = spec.get("bins")
        names = spec.get("labels")
        if bins is not None:
            edges = _edges(attr, bins)
            if names is None:
                names = [f"[{a:g}, {b:g})" for a, b in itertools.pairwise(edges)]
                names[-1] = names[-1][:-1] + "]"
            bins = edges
        if not isinstance(names, list | tuple) or not names:
            raise DPMarginalsError(f"attribute {attr!r}: labels must be a non-empty list, "
                                   f"got {names!r}")
        names = [_label(attr, x) for x in names]
        if other:
            names.append(OTHER if other is True else _label(attr, other))
        try:
            return cls(tuple(names), bins, bool(other))
        except DPMarginalsError as exc:
            raise DPMarginalsError(f"attribute {attr!r}: {exc}") from None

    def code_of(self, attr: str, value: Any) -> int:
        """The code of one raw value (a label; for binned attributes a number, or the
        name of its bin); an unlisted value goes to ``other`` where declared, else it is an
        error naming it."""
        code = None
        if self.bins is not None:
            if (isinstance(value, int | float | np.integer | np.floating)
                    and not isinstance(value, bool | np.bool_)):  # pandas gives np.int64
                try:
                    x = float(value)
                except OverflowError:  # an integer beyond the floats: outside every bin
                    x = math.inf if value > 0 else -math.inf
                edges = self.bins
                if edges[0] <= x <= edges[-1]:
                    code = min(bisect.bisect_right(edges, x) - 1, len(edges) - 2)
            elif isinstance(value, str) and value in self.names:
                code = self.names.index(value)
        elif str(value) in self.names:
            code = self.names.index(str(value))
        if code is None and self.other:
            code = len(self.names) - 1
        if code is None:
            raise DPMarginalsError(f"attribute {attr!r}: value {value!r} is not in the "
                                   f"declared domain {list(self.names)[:10]}")
        return code

    def to_spec(self) -> list[str] | dict[str, Any]:
        """The JSON form :meth:`from_spec` reads back (a plain list when that says it all)."""
        listed = list(self.names[:-1] if self.other else self.names)
        if self.bins is None and not self.other:
            return listed
        out: dict[str, Any] = {"labels": listed}
        if self.bins is not None:
            out["bins"] = list(self.bins)
        if self.other:
            out["other"] = self.names[-1]
        return out


def _edges(attr: str, bins: Any) -> tuple[float, ...]:
    try:
        edges = tuple(float(b) for b in bins)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"attribute {attr!r}: bins must be numbers, got {bins!r}") from None
    ok = len(edges) >= 2 and all(math.isfinite(e) for e in edges)
    if not ok or any(b <= a for a, b in itertools.pairwise(edges)):
        raise DPMarginalsError(f"attribute {attr!r}: bins must be at least 2 finite, strictly "
                               f"increasing edges, got {list(bins)!r}")
    return edges


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys do not repeat (json keeps the last one silently)."""
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise DPMarginalsError(f"domain JSON names {repeated} more than once")
    return dict(pairs)


def _label(attr: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DPMarginalsError(f"attribute {attr!r}: a value label must be a string or a "
                               f"number, got {value!r}")
    return str(value)


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
    labels: tuple[Labels | None, ...] = field(default=(), repr=False)
    """Per attribute, the public names of its values, or None (integer codes)."""

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
        labels = tuple(self.labels) or (None,) * len(attrs)
        if len(labels) != len(attrs):
            raise DPMarginalsError(f"domain has {len(attrs)} attributes but {len(labels)} "
                                   "label entries")
        for a, s, lab in zip(attrs, sizes, labels, strict=True):
            if lab is not None and len(lab.names) != s:
                raise DPMarginalsError(f"attribute {a!r} has size {s} but {len(lab.names)} "
                                       f"labels {list(lab.names)[:10]}")
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "labels", labels)

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Domain:
        """From a domain JSON object, one entry per attribute, in any of these forms:

        ``"a": 3`` (private-pgm: a size, values are codes 0..2); ``"a": ["x", "y"]``
        (labelled values); ``"a": {"bins": [0, 18, 65, 120]}`` (a numeric column cut into
        bins, with optional ``"labels"``); ``"other": true`` or ``"other": "name"`` adds a
        catch-all value for anything not listed; ``"a": {"domain": 3}`` (PrivMRF).

        >>> Domain.from_dict({"sex": ["f", "m"], "age": {"bins": [0, 40, 99]}, "n": 3}).sizes
        (2, 2, 3)
        """
        if not isinstance(spec, Mapping) or not spec:
            raise DPMarginalsError("domain JSON must be a non-empty object {attribute: size}")
        attrs, sizes, labels = [], [], []
        for name, value in spec.items():
            lab = None
            if isinstance(value, Mapping) and not {"labels", "bins"} & set(value):
                known = {"domain", "size"} & set(value)
                if not known:
                    raise DPMarginalsError(f"domain entry {name!r} needs a size ('domain' or "
                                           f"'size'), 'labels' or 'bins': {value!r}")
                value = value[known.pop()]
            elif isinstance(value, Mapping | list | tuple):
                lab = Labels.from_spec(str(name), value)
                value = len(lab.names)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value != int(value)):
                raise DPMarginalsError(
                    f"domain size of attribute {name!r} must be an integer, got {value!r}"
                )
            attrs.append(str(name))
            sizes.append(int(value))
            labels.append(lab)
        return cls(tuple(attrs), tuple(sizes), tuple(labels))

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        """Read a domain JSON file (either style accepted by :meth:`from_dict`)."""
        try:
            text = Path(path).read_text(encoding="utf-8-sig")  # a BOM, as CSV files have
        except OSError as exc:
            raise DPMarginalsError(
                f"cannot read domain file {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise DPMarginalsError(f"domain file {str(path)!r} is not UTF-8 text: {exc}"
                                   ) from None
        try:
            spec = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise DPMarginalsError(f"domain file {str(path)!r} is not valid JSON: {exc}") from None
        return cls.from_dict(spec)

    def to_dict(self) -> dict[str, Any]:
        """private-pgm style ``{"attr": size}``, with the labelled forms where labels exist."""
        return {a: s if lab is None else lab.to_spec()
                for a, s, lab in zip(self.attributes, self.sizes, self.labels, strict=True)}

    def with_labels(self, labels: Mapping[str, Sequence[Any]]) -> Domain:
        """The same domain with value names for the attributes in ``labels``."""
        new = list(self.labels)
        for a, names in labels.items():
            new[self.index(a)] = Labels(tuple(str(x) for x in names))
        return Domain(self.attributes, self.sizes, tuple(new))

    def labels_of(self, attr: str) -> tuple[str, ...] | None:
        """The names of ``attr``'s values, or None where its values are plain codes."""
        lab = self.labels[self.index(attr)]
        return None if lab is None else lab.names

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

    def in_order(self, attrs: Iterable[str]) -> tuple[str, ...]:
        """``attrs`` sorted into the domain's order (the canonical key of a marginal)."""
        return tuple(sorted(attrs, key=self.index))

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
        idx = self.indices(attrs)
        return Domain(attrs, tuple(self.sizes[i] for i in idx),
                      tuple(self.labels[i] for i in idx))

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
        if not len(cols):
            return
        # One pass per bound over the whole array (a reduction along the rows), then the
        # slow search for the first bad value only when there is one.
        high = cols.max(axis=0)
        low = cols.min(axis=0) if not np.issubdtype(cols.dtype, np.unsignedinteger) else None
        for j, (a, s) in enumerate(zip(self.attributes, self.sizes, strict=True)):
            if high[j] >= s or (low is not None and low[j] < 0):
                bad = (cols[:, j] < 0) | (cols[:, j] >= s)
                row = int(np.flatnonzero(bad)[0])
                raise DPMarginalsError(
                    f"value {cols[row, j]} of attribute {a!r} (row {row}) "
                    f"is out of its domain 0..{s - 1}"
                )

    def validate_codes(self, codes: np.ndarray) -> None:
        """Raise a :class:`DPMarginalsError` naming the attribute of any out-of-domain value."""
        self._check_values(np.asarray(codes))
