"""The weighted least-squares projection onto consistent views, in an orthogonal basis.

Every table over attributes ``V`` has a unique orthogonal (ANOVA) decomposition into
*interaction* components, one per subset ``B`` of ``V``: functions of the ``B``-cells that sum to
zero along every axis of ``B``.  In the tensor basis ``Q_a`` (per attribute: the constant
``1/sqrt(s_a)``, then ``s_a - 1`` orthonormal contrasts) a view's coefficients with support
``B`` are that component, and ``sqrt(cells_i)`` times them depend only on the view's
projection onto ``B``.  So views agree on every shared set iff their scaled coefficients agree
on every shared set, and the projection minimising ``sum_i rho_i ||T_i - Y_i||^2`` subject to
consistency averages each shared coefficient over the views holding it, with weights
``rho_i / cells_i`` (proportional to CALM's ``rho_i / C_i``): one transform, one weighted
average, one inverse transform.  It is exactly what CALM §4.4's pass over the intersection
lattice (smaller sets first) computes: the steps of one size commute, and together they are
the orthogonal projection (see ``tests/test_inference.py``).
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

__all__ = ["ConsistentViews"]

#: Views of at most this many cells are transformed by one product with the whole basis.
_KRON_MAX = 64
#: Rows per matrix product, so that rows x cells^2 stays under OpenBLAS's threshold for
#: threads (65536 x 4): on a loaded machine threaded products of this size run 10-30x slower.
_PRODUCT_WORK = 2**17


def _rows_times(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``rows @ matrix`` in chunks small enough to run on one thread."""
    out = np.empty((rows.shape[0], matrix.shape[1]))
    step = max(1, _PRODUCT_WORK // matrix.size)
    for i in range(0, rows.shape[0], step):
        np.matmul(rows[i:i + step], matrix, out=out[i:i + step])
    return out


def contrast_basis(size: int) -> np.ndarray:
    """An orthonormal ``size x size`` matrix whose first row is the constant ``1/sqrt(size)``.

    >>> q = contrast_basis(3)
    >>> np.allclose(q @ q.T, np.eye(3)), np.allclose(q[0], 1 / np.sqrt(3))
    (True, True)
    """
    a = np.eye(size)
    a[:, 0] = 1.0
    q = np.linalg.qr(a)[0].T
    return np.ascontiguousarray(q if q[0, 0] > 0 else -q)


def _transform_axis(x: np.ndarray, pre: int, size: int, post: int, q: np.ndarray | None
                    ) -> np.ndarray:
    """Apply ``q`` (``size x size``; None for the 2-point Haar step) along the middle axis.

    One stacked matrix product (``q @ y`` over the ``pre`` blocks), in slices of ``post``
    small enough for one thread (:data:`_PRODUCT_WORK`); it was one numpy call per pair of
    rows of ``q``, whose overhead made the transform of small views (a 16 x 5 table: 256
    calls) 50-200x slower, which bootstrapped standard errors pay a hundred times over
    (issue #33)."""
    y = x.reshape(pre, size, post)
    if q is None:
        out = np.empty_like(y)
        a, b = y[:, 0], y[:, 1]
        np.add(a, b, out=out[:, 0])
        np.subtract(a, b, out=out[:, 1])
        out *= math.sqrt(0.5)
        return out.reshape(x.shape)
    step = max(1, _PRODUCT_WORK // (size * size))
    if post <= step:
        return np.matmul(q, y).reshape(x.shape)
    out = np.empty_like(y)
    for i in range(0, post, step):
        np.matmul(q, y[:, :, i:i + step], out=out[:, :, i:i + step])
    return out.reshape(x.shape)


class ConsistentViews:
    """Views laid out in one flat array, with the projection onto consistent views.

    ``attrs[i]`` are view i's sorted attribute indices, ``sizes`` the attribute sizes, ``rho``
    the per-view precision (``1/Var_i``, or group sizes; CALM's unweighted case is all ones).
    Views of equal shape sit next to each other (``offsets``, ``counts`` locate view i), so
    every operation is a few numpy calls per shape, whatever the number of views.
    """

    def __init__(self, attrs: list[tuple[int, ...]], sizes: tuple[int, ...],
                 rho: np.ndarray) -> None:
        m = len(attrs)
        self.attrs = attrs
        self.sizes = sizes
        shapes = [tuple(sizes[a] for a in at) for at in attrs]
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, sh in enumerate(shapes):
            by_shape.setdefault(sh, []).append(i)
        self.counts = np.array([math.prod(sh) for sh in shapes], dtype=np.int64)
        self.offsets = np.empty(m, dtype=np.int64)
        #: (shape, view indices, start, stop) of each block of equal-shape views
        self.groups: list[tuple[tuple[int, ...], np.ndarray, int, int]] = []
        start = 0
        for sh, members in by_shape.items():
            idx = np.array(members, dtype=np.int64)
            cells = math.prod(sh)
            self.offsets[idx] = start + cells * np.arange(len(idx))
            self.groups.append((sh, idx, start, start + cells * len(idx)))
            start += cells * len(idx)
        self.size = start
        #: the view of each cell of the layout
        self.view_of = np.concatenate([np.repeat(members, math.prod(sh))
                                       for sh, members, _, _ in self.groups]
                                      ) if m else np.zeros(0, np.int64)
        self._bases = {s: contrast_basis(s) for s in set(sizes) if s > 2}
        self._kron: dict[tuple[int, ...], np.ndarray] = {}
        for sh, *_ in self.groups:
            if math.prod(sh) <= _KRON_MAX:
                k = np.ones((1, 1))
                for s in sh:
                    k = np.kron(k, contrast_basis(s))
                self._kron[sh] = np.ascontiguousarray(k.T)  # rows @ k.T transforms
        rho = np.asarray(rho, dtype=np.float64)
        w_empty = rho / self.counts
        self.w_empty = w_empty / w_empty.sum()
        self.shared_sets: list[tuple[int, ...]] = []
        self._slots(rho)

    def _slots(self, rho: np.ndarray) -> None:
        """For every coefficient of a shared set: its slot (set, coefficient) and weight."""
        d = len(self.sizes)
        sizes = np.asarray(self.sizes, dtype=np.int64)
        group_attrs = [np.array([self.attrs[i] for i in members], dtype=np.int64
                                ).reshape(len(members), len(sh))
                       for sh, members, _, _ in self.groups]
        patterns = []
        for sh, _, _, _ in self.groups:
            coords = np.indices(sh).reshape(len(sh), -1)
            pattern = np.zeros(coords.shape[1], dtype=np.int64)
            for j in range(len(sh)):
                pattern |= (coords[j] > 0).astype(np.int64) << j
            patterns.append((coords, pattern))
        cells, slots = [], []
        n_slots = 0
        set_cells = 0
        #: (group, axes, rows holding a shared set, first cell of that set's table)
        self._shared_projections: list[tuple[int, tuple[int, ...], np.ndarray, np.ndarray]] = []
        for s in range(1, max((len(sh) for sh, *_ in self.groups), default=0) + 1):
            keys, where = [], []
            for g, (sh, *_rest) in enumerate(self.groups):
                for axes in combinations(range(len(sh)), s):
                    keys.append(group_attrs[g][:, list(axes)])
                    where.append((g, axes))
            if not keys:
                continue
            rows = np.concatenate(keys)
            if d ** s < 2**62:  # one integer per set: much faster than unique rows
                code = rows @ (d ** np.arange(s, dtype=np.int64))
                _, first, inv, cnt = np.unique(code, return_index=True, return_inverse=True,
                                               return_counts=True)
                uniq = rows[first]
            else:
                uniq, inv, cnt = np.unique(rows, axis=0, return_inverse=True,
                                           return_counts=True)
            inv = inv.reshape(-1)
            shared = cnt >= 2
            if not shared.any():
                continue
            n_coef = np.prod(sizes[uniq] - 1, axis=1)
            base = np.zeros(len(uniq), dtype=np.int64)
            base[shared] = n_slots + np.concatenate([[0], np.cumsum(n_coef[shared])[:-1]])
            n_slots += int(n_coef[shared].sum())
            n_cells = np.prod(sizes[uniq], axis=1)
            first_cell = np.zeros(len(uniq), dtype=np.int64)
            first_cell[shared] = set_cells + np.concatenate(
                [[0], np.cumsum(n_cells[shared])[:-1]])
            set_cells += int(n_cells[shared].sum())
            order = np.lexsort(uniq[shared].T[::-1])
            self.shared_sets += [tuple(int(a) for a in r) for r in uniq[shared][order]]
            pos = 0
            for (g, axes), k in zip(where, keys, strict=True):
                ids = inv[pos:pos + len(k)]
                pos += len(k)
                held = np.flatnonzero(shared[ids])
                if not len(held):
                    continue
                sh, _, start, _ = self.groups[g]
                coords, pattern = patterns[g]
                cols = np.flatnonzero(pattern == sum(1 << j for j in axes))
                local = np.ravel_multi_index(tuple(coords[j][cols] - 1 for j in axes),
                                             tuple(sh[j] - 1 for j in axes))
                cells.append((start + held[:, None] * math.prod(sh) + cols).ravel())
                slots.append((base[ids[held]][:, None] + local).ravel())
                self._shared_projections.append((g, axes, held, first_cell[ids[held]]))
        self._cells = np.concatenate(cells) if cells else np.zeros(0, np.int64)
        self._slot = np.concatenate(slots) if slots else np.zeros(0, np.int64)
        self._n_slots = n_slots
        self._scale = np.sqrt(self.counts[self.view_of].astype(np.float64))
        w = (rho / self.counts)[self.view_of[self._cells]]
        self._weight = w
        self._denominator = np.bincount(self._slot, w, n_slots)
        self._empty = self.offsets  # the constant coefficient is each view's first

    # -- layout ---------------------------------------------------------------------------
    def pack(self, tables: list[np.ndarray]) -> np.ndarray:
        x = np.empty(self.size)
        for o, c, t in zip(self.offsets, self.counts, tables, strict=True):
            x[o:o + c] = np.ravel(t)
        return x

    def unpack(self, x: np.ndarray) -> list[np.ndarray]:
        shapes = [tuple(self.sizes[a] for a in at) for at in self.attrs]
        return [x[o:o + c].reshape(sh)
                for o, c, sh in zip(self.offsets, self.counts, shapes, strict=True)]

    def blocks(self, x: np.ndarray) -> list[np.ndarray]:
        """Each group's views as rows of a ``(views, cells)`` array (views into ``x``)."""
        return [x[a:b].reshape(len(members), -1) for _, members, a, b in self.groups]

    def totals(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(len(self.counts))
        for (_, members, _, _), rows in zip(self.groups, self.blocks(x), strict=True):
            out[members] = rows.sum(axis=1)
        return out

    # -- the projection -------------------------------------------------------------------
    def _transform(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        """The orthonormal transform of every view of ``x``: one layout (``size``,) or a
        batch of layouts (``rows, size``), transformed row by row in the same calls."""
        rows = 1 if x.ndim == 1 else x.shape[0]
        out = np.empty_like(x)
        for sh, members, a, b in self.groups:
            y = np.ascontiguousarray(x[..., a:b]).reshape(-1)
            views = rows * len(members)
            if sh in self._kron:
                k = self._kron[sh]
                out[..., a:b] = _rows_times(y.reshape(views, -1), k.T if inverse else k
                                            ).reshape(out[..., a:b].shape)
                continue
            for j, s in enumerate(sh):
                if s == 1:
                    continue
                q = self._bases.get(s)
                if q is not None and inverse:
                    q = np.ascontiguousarray(q.T)
                y = _transform_axis(y, views * math.prod(sh[:j]), s,
                                    math.prod(sh[j + 1:]), q)
            out[..., a:b] = y.reshape(out[..., a:b].shape)
        return out

    def project(self, x: np.ndarray, total: float | None = 1.0) -> np.ndarray:
        """The ``rho``-weighted least-squares projection of ``x`` onto consistent views whose
        totals are ``total`` (None: the weighted average of the totals), as a new array.
        ``x``: one layout, or a batch of them as rows (each projected on its own)."""
        gamma = self._transform(x, inverse=False)
        gamma *= self._scale
        if self._n_slots:
            if gamma.ndim == 1:
                avg = np.bincount(self._slot, self._weight * gamma[self._cells], self._n_slots)
                gamma[self._cells] = (avg / self._denominator)[self._slot]
            else:
                rows = gamma.shape[0]
                slot = (self._slot[None, :] + self._n_slots * np.arange(rows)[:, None]).ravel()
                avg = np.bincount(slot, (self._weight * gamma[:, self._cells]).ravel(),
                                  self._n_slots * rows).reshape(rows, self._n_slots)
                gamma[:, self._cells] = (avg / self._denominator)[:, self._slot]
        if total is None:
            gamma[..., self._empty] = (gamma[..., self._empty] @ self.w_empty)[..., None] \
                if gamma.ndim > 1 else float(self.w_empty @ gamma[self._empty])
        else:
            gamma[..., self._empty] = total
        gamma /= self._scale
        return self._transform(gamma, inverse=True)

    # -- diagnostics ----------------------------------------------------------------------
    def inconsistency(self, x: np.ndarray, total: float | None = None) -> float:
        """The largest absolute difference between two views' projections onto a shared set
        (the totals included, and compared with ``total`` when given)."""
        totals = self.totals(x)
        worst = float(np.ptp(totals)) if len(totals) else 0.0
        if total is not None and len(totals):
            worst = max(worst, float(np.abs(totals - total).max()))
        if not self._shared_projections:
            return worst
        blocks = self.blocks(x)
        keys, values = [], []
        for g, axes, held, first in self._shared_projections:
            sh = self.groups[g][0]
            rest = tuple(j + 1 for j in range(len(sh)) if j not in axes)
            proj = blocks[g][held].reshape((len(held), *sh)).sum(axis=rest)
            keys.append((first[:, None] + np.arange(proj[0].size)).ravel())
            values.append(proj.ravel())
        key, value = np.concatenate(keys), np.concatenate(values)
        high = np.full(int(key.max()) + 1, -np.inf)
        low = np.full(len(high), np.inf)
        np.maximum.at(high, key, value)
        np.minimum.at(low, key, value)
        return max(worst, float((high - low).max()))
