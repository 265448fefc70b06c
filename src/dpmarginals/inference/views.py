"""Plain-array views: ``(attrs, table)`` pairs and the projection helper.

A *view* is a marginal table over a set of attributes: ``attrs`` is a tuple of sorted,
distinct attribute indices and ``table`` an array of shape ``tuple(sizes[a] for a in attrs)``
that holds fractions (for noisy estimates cells may be negative and the total need not be 1).
:class:`View` is a ``NamedTuple``, so a plain ``(attrs, table)`` tuple works wherever a view
is expected.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dpmarginals.core.errors import DPMarginalsError

__all__ = ["NoisyView", "View", "as_view", "check_sizes", "project"]


class View(NamedTuple):
    """A marginal table over the sorted attribute indices ``attrs``."""

    attrs: tuple[int, ...]
    table: np.ndarray


def check_sizes(sizes: Sequence[int] | np.ndarray) -> tuple[int, ...]:
    """Validate per-attribute cardinalities (integers >= 1) and return them as a tuple."""
    out = []
    for a, c in enumerate(sizes):
        if int(c) != c or int(c) < 1:
            raise DPMarginalsError(f"sizes[{a}] must be an integer >= 1, got {c!r}")
        out.append(int(c))
    return tuple(out)


def _attr_tuple(attrs: Iterable[Any], field: str) -> tuple[int, ...]:
    try:
        out = tuple(int(a) for a in attrs)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"{field} must be a sequence of attribute indices, "
                               f"got {attrs!r}") from None
    if len(set(out)) != len(out):
        raise DPMarginalsError(f"{field} has a repeated attribute: {out!r}")
    return out


def as_view(view: Any, sizes: Sequence[int], *, index: int | None = None,
            copy: bool = True) -> View:
    """Validate ``view = (attrs, table)`` against ``sizes`` and return a :class:`View`.

    The table is converted to float64 (copied unless ``copy=False`` and it already is).  If
    ``attrs`` is not sorted, the table's axes are permuted so that the returned view has sorted
    attrs.

    >>> v = as_view(((2, 0), np.arange(6.0).reshape(3, 2)), sizes=[2, 5, 3])
    >>> v.attrs, v.table.shape
    ((0, 2), (2, 3))
    """
    name = "view" if index is None else f"views[{index}]"
    try:
        attrs, table = view
    except (TypeError, ValueError):
        raise DPMarginalsError(f"{name} must be an (attrs, table) pair") from None
    attrs = _attr_tuple(attrs, f"{name} attrs")
    for a in attrs:
        if not 0 <= a < len(sizes):
            raise DPMarginalsError(f"{name} attrs: attribute {a} is out of range "
                                   f"0..{len(sizes) - 1}")
    table = np.array(table, dtype=np.float64, copy=copy or None)
    shape = tuple(int(sizes[a]) for a in attrs)
    if table.shape != shape:
        raise DPMarginalsError(f"{name} table has shape {table.shape}, expected {shape} "
                               f"for attrs {attrs}")
    if not np.isfinite(table).all():
        raise DPMarginalsError(f"{name} table has non-finite cells")
    order = sorted(range(len(attrs)), key=attrs.__getitem__)
    if order != list(range(len(attrs))):
        table = np.ascontiguousarray(table.transpose(order))
        attrs = tuple(attrs[i] for i in order)
    return View(attrs, table)


def project(attrs: Sequence[int], table: np.ndarray, onto: Sequence[int]) -> np.ndarray:
    """Marginalize ``table`` (axes = ``attrs``) onto ``onto``, with axes in the order of ``onto``.

    ``onto`` must be a subset of ``attrs``; it may be empty (the result is then the total as a
    0-d array) and need not be sorted.

    >>> t = np.arange(8.0).reshape(2, 2, 2)        # attrs (0, 1, 2)
    >>> project((0, 1, 2), t, (2, 0)).tolist()
    [[2.0, 10.0], [4.0, 12.0]]
    """
    attrs = tuple(int(a) for a in attrs)
    onto = _attr_tuple(onto, "onto")
    table = np.asarray(table)
    if table.ndim != len(attrs):
        raise DPMarginalsError(f"table has {table.ndim} axes but attrs {attrs} has {len(attrs)}")
    pos = {a: i for i, a in enumerate(attrs)}
    missing = [a for a in onto if a not in pos]
    if missing:
        raise DPMarginalsError(f"cannot project attrs {attrs} onto {onto}: "
                               f"{missing} not in the table")
    keep = sorted(pos[a] for a in onto)
    drop = tuple(i for i in range(len(attrs)) if i not in set(keep))
    out = table.sum(axis=drop) if drop else table
    # out's axes are the kept axes in their original order; permute to the order of `onto`.
    kept_attrs = [attrs[i] for i in keep]
    perm = [kept_attrs.index(a) for a in onto]
    if perm != list(range(len(perm))):
        out = out.transpose(perm)
    return np.asarray(out)


@dataclass(frozen=True)
class NoisyView:
    """An unbiased noisy marginal of one group of users, as fractions (cells may be
    negative): what the estimate step hands to inference."""

    attributes: tuple[str, ...]
    table: np.ndarray
    users: int
    variance: float  # per-cell variance of the estimate (CALM eq. 3 with this group's n)
    #: The table is its group's own users' (a sample of the population), so inference told
    #: the population adds their sampling error (``eb_shrink(population=...)``).  False: the
    #: population's own marginal, or one whose ``variance`` already claims that error (the
    #: error split's clean views, :mod:`dpmarginals.local.error_sources`).
    sampled: bool = True
