"""Marginal tables in an orthonormal (Helmert) basis.

Along each axis of size c the basis is the c x c Helmert matrix, whose first row is
constant.  A table's coefficients that are non-constant along *every* axis are its
top-order interaction block: the part its lower-order sub-marginals do not fix.  The
shrinkage of :mod:`dpmarginals.inference.shrinkage` works on these blocks.

>>> import numpy as np
>>> t = np.array([[0.4, 0.1], [0.1, 0.4]])
>>> round(float(top(t).item()), 6)
0.3
>>> with_top(t, np.zeros((1, 1))).round(6).tolist()
[[0.25, 0.25], [0.25, 0.25]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np

__all__ = ["helmert", "project", "top", "transform", "with_top"]


@cache
def helmert(c: int) -> np.ndarray:
    """Orthonormal c x c matrix whose first row is constant (1/sqrt(c))."""
    h = np.zeros((c, c))
    h[0] = 1.0 / math.sqrt(c)
    for i in range(1, c):
        h[i, :i] = 1.0 / math.sqrt(i * (i + 1))
        h[i, i] = -i / math.sqrt(i * (i + 1))
    return h


def transform(table: np.ndarray, inverse: bool = False) -> np.ndarray:
    """The table's coefficients in the Helmert basis (``inverse``: back to cells)."""
    out = np.asarray(table, dtype=np.float64)
    for axis, c in enumerate(out.shape):
        h = helmert(c).T if inverse else helmert(c)
        out = np.moveaxis(np.tensordot(h, out, axes=([1], [axis])), 0, axis)
    return out


def top(table: np.ndarray) -> np.ndarray:
    """The top-order interaction block: coefficients non-constant along every axis."""
    return transform(table)[tuple(slice(1, None) for _ in table.shape)]


def with_top(table: np.ndarray, block: np.ndarray) -> np.ndarray:
    """``table`` with its top-order interaction block replaced by ``block``."""
    coef = transform(table)
    coef[tuple(slice(1, None) for _ in table.shape)] = block
    return transform(coef, inverse=True)


def project(attrs: Sequence[str], table: np.ndarray, onto: Sequence[str]) -> np.ndarray:
    """Marginal of ``table`` (axes ``attrs``) on ``onto`` (axes in that order)."""
    drop = tuple(i for i, a in enumerate(attrs) if a not in onto)
    summed = table.sum(axis=drop) if drop else table
    kept = [a for a in attrs if a in onto]
    return np.transpose(summed, [kept.index(a) for a in onto])
