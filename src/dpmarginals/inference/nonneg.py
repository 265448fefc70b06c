"""Non-negativity post-processing of one noisy table: Norm-Sub and Norm-Cut.

Norm-Sub is the method of Wang et al. (NDSS'20, "Locally differentially private frequency
estimation with consistency", code ``vvv214/LDP_Protocols/post-process/norm_sub.py``): zero
the negative cells, spread the difference to the target total evenly over the positive cells,
and repeat until nothing is negative.  Its fixed point is ``max(x - delta, 0)`` with ``delta``
chosen so the total is right, which :func:`norm_sub` computes exactly by sorting.
"""

from __future__ import annotations

import numpy as np

from dpmarginals.core.errors import DPMarginalsError

__all__ = ["norm_cut", "norm_sub", "norm_sub_rows", "project_to_simplex"]


def _check(x: np.ndarray, total: float) -> tuple[np.ndarray, float]:
    arr = np.asarray(x, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise DPMarginalsError("norm_sub/norm_cut: input has non-finite cells")
    total = float(total)
    if not (total >= 0 and np.isfinite(total)):
        raise DPMarginalsError(f"total must be a finite number >= 0, got {total!r}")
    return arr, total


def norm_sub(x: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Norm-Sub: shift ``x`` by a constant and clip at 0 so that it sums to ``total``.

    Returns a new array of the same shape, ``>= 0`` everywhere and summing to ``total``.
    Exact, in O(L log L) for L cells; equal to the fixed point of the iterative loop of
    Wang et al. (NDSS'20):

    * if the positive cells sum to at least ``total``, the result is ``max(x - delta, 0)``,
      which is the Euclidean projection of ``x`` onto ``{y >= 0, sum(y) = total}``;
    * otherwise the shortfall is added evenly to the positive cells only (negative and zero
      cells become 0), as the loop does;
    * if no cell is positive, the loop is undefined; we return the uniform table
      ``total / L`` (the maximum-entropy choice when nothing is known).

    >>> norm_sub(np.array([0.5, 0.4, 0.3, -0.2])).round(6).tolist()
    [0.433333, 0.333333, 0.233333, 0.0]
    >>> norm_sub(np.array([0.2, -0.1, 0.0])).tolist()
    [1.0, 0.0, 0.0]
    >>> norm_sub(np.array([-1.0, 0.0])).tolist()
    [0.5, 0.5]
    """
    arr, total = _check(x, total)
    if arr.size == 0:
        return arr.copy()
    flat = arr.ravel()
    positive = flat > 0
    npos = int(positive.sum())
    if npos == 0:
        return np.full(arr.shape, total / arr.size)
    pos_sum = float(flat[positive].sum())
    if pos_sum < total:
        out = np.where(positive, flat + (total - pos_sum) / npos, 0.0)
        return out.reshape(arr.shape)
    u = np.sort(flat[positive])[::-1]
    css = np.cumsum(u) - total
    ks = np.arange(1, u.size + 1)
    k = int(np.nonzero(u - css / ks > 0)[0][-1])
    delta = css[k] / (k + 1)
    return np.maximum(flat - delta, 0.0).reshape(arr.shape)


def norm_sub_rows(rows: np.ndarray, totals: np.ndarray | float = 1.0, *,
                  cells: np.ndarray | None = None) -> np.ndarray:
    """:func:`norm_sub` of every row of a ``(tables, cells)`` array at once (sorting each row).

    ``totals``: one target total per row, or one for all.  Same results as calling
    :func:`norm_sub` row by row, in a handful of numpy calls.  ``cells``: each row's own
    number of cells when rows of different lengths are padded with ``-inf`` after them
    (each row's first ``cells[i]`` outputs are its Norm-Sub; the caller drops the rest).

    >>> norm_sub_rows(np.array([[0.5, 0.4, 0.3, -0.2], [0.2, -0.1, 0.0, 0.0]])).round(6).tolist()
    [[0.433333, 0.333333, 0.233333, 0.0], [1.0, 0.0, 0.0, 0.0]]
    """
    x = np.asarray(rows, dtype=np.float64)
    n, width = x.shape
    t = np.broadcast_to(np.asarray(totals, dtype=np.float64), (n,))
    if width == 0:
        return x.copy()
    positive = x > 0
    npos = positive.sum(axis=1)
    pos_sum = np.where(positive, x, 0.0).sum(axis=1)
    u = -np.sort(-x, axis=1)
    css = np.cumsum(u, axis=1) - t[:, None]
    with np.errstate(invalid="ignore"):  # padding: -inf - -inf is nan, never > 0
        support = u - css / np.arange(1, width + 1) > 0
    k = width - 1 - np.argmax(support[:, ::-1], axis=1)  # the last such j (0-based)
    if cells is not None:  # a row without support ends at its own last cell, not padding
        k = np.where(support.any(axis=1), k, np.asarray(cells) - 1)
    delta = css[np.arange(n), k] / (k + 1)
    out = np.maximum(x - delta[:, None], 0.0)
    short = (pos_sum < t) & (npos > 0)
    if short.any():  # the loop adds the shortfall to the positive cells only
        out[short] = np.where(positive[short], x[short] + ((t[short] - pos_sum[short])
                                                           / npos[short])[:, None], 0.0)
    none = npos == 0
    if none.any():
        own = np.full(n, width) if cells is None else np.asarray(cells)
        out[none] = (t[none] / own[none])[:, None]
    return out


def norm_cut(x: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Norm-Cut: keep the largest cells, zero the rest, so that the table sums to ``total``.

    The cells are taken in decreasing order until their running sum reaches ``total``; the
    cells after that are set to 0 and the last kept cell is trimmed so the sum is exactly
    ``total``.  When ``x`` already sums to ``total`` this is the DPSyn flavour (zero the
    negatives and take the same mass away from the smallest positive cells, in ascending
    order); LDPP's flavour would instead rescale the kept cells.  If the positive cells sum
    to less than ``total``, they are scaled up proportionally; if none is positive, the
    uniform table is returned.

    >>> norm_cut(np.array([0.5, 0.4, 0.3, -0.2])).round(12).tolist()
    [0.5, 0.4, 0.1, 0.0]
    """
    arr, total = _check(x, total)
    if arr.size == 0:
        return arr.copy()
    flat = arr.ravel()
    positive = flat > 0
    if not positive.any():
        return np.full(arr.shape, total / arr.size)
    pos_sum = float(flat[positive].sum())
    if pos_sum <= total:
        return np.where(positive, flat * (total / pos_sum), 0.0).reshape(arr.shape)
    order = np.argsort(-flat, kind="stable")[: int(positive.sum())]  # positive cells, largest first
    csum = np.cumsum(flat[order])  # increasing; its last entry pos_sum exceeds total
    k = int(np.searchsorted(csum, total))  # first index where the running sum reaches total
    out = np.zeros_like(flat)
    out[order[:k]] = flat[order[:k]]
    out[order[k]] = total - (csum[k - 1] if k > 0 else 0.0)
    return out.reshape(arr.shape)


def project_to_simplex(values: np.ndarray) -> np.ndarray:
    """Non-negative fractions summing to 1: a copy of ``values`` if it is one already,
    otherwise its :func:`norm_sub` (the raw estimates of InpHT, MargPS, FC, ...)."""
    values = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(values)):
        raise DPMarginalsError("the marginal has non-finite cells")
    if np.all(values >= 0) and abs(values.sum() - 1.0) < 1e-12:
        return values.copy()
    return norm_sub(values, 1.0)
