"""Maximum-entropy reconstruction of a marginal from views (CALM §4.1, PriView).

If a view contains every query attribute, the answer is that view's projection.  Otherwise
the answer is the maximum-entropy table over the query's cells whose marginals on the sets
``B_i = Q ∩ A_i`` equal the views' projections.  It is computed by iterative proportional
fitting (IPF) from the uniform table, which converges to the maximum-entropy (log-linear)
solution whenever the constraints admit a joint table (Darroch & Ratcliff 1972; Csiszár 1975).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.views import View, as_view, check_sizes, project

__all__ = ["MaxEntInfo", "max_entropy"]

#: IPF also stops (unconverged) once a whole sweep moves no cell by more than
#: ``tol * _STALL_FRACTION``.
_STALL_FRACTION = 1e-2
#: The default tolerance and sweep limit of :func:`max_entropy`.
MAXENT_TOL = 1e-7
MAXENT_ITERATIONS = 1000

@dataclass(frozen=True)
class MaxEntInfo:
    """How :func:`max_entropy` produced its answer.

    Attributes:
        method: ``"view"`` (marginalized the view ``view``), ``"ipf"``, or ``"uniform"``
            (no view shares an attribute with the query).
        view: index of the view used when ``method == "view"``, else ``None``.
        constraints: the constraint sets ``B`` used by IPF (sorted attribute tuples).
        iterations: number of IPF sweeps (0 unless ``method == "ipf"``).
        max_deviation: the largest ``|Proj_B(result) - M_B|`` over the constraints, measured
            on the returned table (0 for ``"view"`` and ``"uniform"``).
        converged: ``max_deviation < tol`` (always True for ``"view"`` and ``"uniform"``).
        negative_mass: total absolute value of the negative target cells that IPF clipped to
            0 (0 for views that are non-negative, as ``make_consistent`` returns them).
    """

    method: str
    view: int | None
    constraints: tuple[tuple[int, ...], ...]
    iterations: int
    max_deviation: float
    converged: bool
    negative_mass: float = 0.0


@overload
def max_entropy(query_attrs: Sequence[int], views: Sequence[Any], sizes: Sequence[int], *,
                tol: float = ..., max_iter: int = ..., init: np.ndarray | None = ...,
                return_info: Literal[False] = ...) -> np.ndarray: ...
@overload
def max_entropy(query_attrs: Sequence[int], views: Sequence[Any], sizes: Sequence[int], *,
                tol: float = ..., max_iter: int = ..., init: np.ndarray | None = ...,
                return_info: Literal[True]) -> tuple[np.ndarray, MaxEntInfo]: ...
def max_entropy(query_attrs: Sequence[int], views: Sequence[Any], sizes: Sequence[int], *,
                tol: float = MAXENT_TOL, max_iter: int = MAXENT_ITERATIONS,
                init: np.ndarray | None = None,
                return_info: bool = False) -> np.ndarray | tuple[np.ndarray, MaxEntInfo]:
    """The marginal over ``query_attrs`` implied by ``views`` (max-entropy when not covered).

    Args:
        query_attrs: distinct attribute indices, in any order.  The result's axes follow this
            order (``result.shape == tuple(sizes[a] for a in query_attrs)``).
        views: ``(attrs, table)`` pairs, normally the output of
            :func:`~dpmarginals.inference.consistency.make_consistent` (consistent and
            non-negative).  For IPF, negative target cells are clipped to 0 (reported in
            ``info.negative_mass``); a covering view is marginalized as it is.
        sizes: number of values of each attribute.
        tol: IPF stops once every constraint is met within ``tol`` (max absolute deviation).
        max_iter: maximum number of IPF sweeps.
        init: optional positive starting table (axes in ``query_attrs`` order) instead of the
            uniform one; IPF then finds the table closest to ``init`` in KL divergence.  Ignored
            when a view covers the query.
        return_info: also return a :class:`MaxEntInfo`.

    If some view contains every query attribute, the result is the projection of the one with
    the fewest cells.  Otherwise the constraint sets are ``B_i = Q ∩ A_i`` (non-empty), dropping
    any contained in another; the target of ``B`` is the ``1/C_i``-weighted average of the
    projections of the views containing it (identical after ``make_consistent``).  IPF from
    the uniform table multiplies by ``M_B / Proj_B(T)`` for each ``B`` in turn (0/0 = 0).
    Query attributes no view covers come out uniform (given the rest).  If the constraints
    are jointly infeasible (possible for cyclic constraint sets even when the views are
    consistent), IPF cannot meet them: it stops after ``max_iter`` sweeps or once a sweep moves
    no cell by more than ``tol / 100`` (its limit cycle), with ``info.converged`` False and the
    residual in ``info.max_deviation``.

    >>> ab = ((0, 1), np.array([[0.4, 0.1], [0.1, 0.4]]))
    >>> bc = ((1, 2), np.array([[0.3, 0.2], [0.1, 0.4]]))
    >>> t = max_entropy((0, 1, 2), [ab, bc], sizes=[2, 2, 2])  # = P(a,b) P(b,c) / P(b)
    >>> t.sum(axis=1).round(4).tolist()
    [[0.26, 0.24], [0.14, 0.36]]
    """
    sizes_t = check_sizes(sizes)
    q = tuple(int(a) for a in query_attrs)
    if len(set(q)) != len(q):
        raise DPMarginalsError(f"query_attrs has a repeated attribute: {q!r}")
    for a in q:
        if not 0 <= a < len(sizes_t):
            raise DPMarginalsError(f"query attribute {a} is out of range 0..{len(sizes_t) - 1}")
    if tol <= 0 or max_iter < 1:
        raise DPMarginalsError(f"need tol > 0 and max_iter >= 1, got {tol!r}, {max_iter!r}")
    vs = [as_view(v, sizes_t, index=i, copy=False) for i, v in enumerate(views)]
    return _max_entropy(q, vs, sizes_t, tol=tol, max_iter=max_iter, init=init,
                        return_info=return_info)


def _max_entropy(q: tuple[int, ...], vs: Sequence[View], sizes_t: tuple[int, ...], *,
                 tol: float, max_iter: int, init: np.ndarray | None, return_info: bool
                 ) -> Any:
    """:func:`max_entropy` of views already checked by :func:`as_view` (a synopsis checks
    its views once, not on every query)."""
    qset = frozenset(q)
    qs = tuple(sorted(q))  # internal axis order
    shape = tuple(sizes_t[a] for a in qs)
    perm = [qs.index(a) for a in q]  # internal -> requested axis order

    def finish(table: np.ndarray, info: MaxEntInfo) -> Any:
        out = np.ascontiguousarray(table.transpose(perm))
        return (out, info) if return_info else out

    # 1. Covered by a view: marginalize the smallest such view.
    best = None
    for i, v in enumerate(vs):
        if qset <= frozenset(v.attrs) and (best is None or v.table.size < vs[best].table.size):
            best = i
    if best is not None:
        out = np.array(project(vs[best].attrs, vs[best].table, qs), dtype=np.float64)
        return finish(out, MaxEntInfo("view", best, (), 0, 0.0, True))

    # 2. Constraint sets B = Q ∩ A_i, grouped; keep the maximal ones.
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, v in enumerate(vs):
        b = tuple(a for a in v.attrs if a in qset)
        if b:
            groups.setdefault(b, []).append(i)
    bsets = [frozenset(b) for b in groups]
    maximal = [b for b, bs in zip(groups, bsets, strict=True)
               if not any(bs < other for other in bsets)]

    if init is None:
        totals = [float(v.table.sum()) for v in vs]
        tot = float(np.mean(totals)) if totals else 1.0
        table = np.full(shape, tot / math.prod(shape))
    else:
        init_arr = np.asarray(init, dtype=np.float64)
        want = tuple(sizes_t[a] for a in q)
        if init_arr.shape != want:
            raise DPMarginalsError(f"init has shape {init_arr.shape}, expected {want}")
        if not (np.isfinite(init_arr).all() and (init_arr >= 0).all()):
            raise DPMarginalsError("init must be finite and non-negative")
        table = np.array(init_arr.transpose(np.argsort(perm)), dtype=np.float64)
    if not maximal:
        return finish(table, MaxEntInfo("uniform", None, (), 0, 0.0, True))

    # Targets, flattened; each constraint maps every query cell to its B-cell (bincount).
    coords = np.indices(shape).reshape(len(shape), -1)
    cons: list[tuple[np.ndarray, np.ndarray]] = []
    neg_mass = 0.0
    for b in maximal:
        members = groups[b]
        bshape = tuple(sizes_t[a] for a in b)
        acc = np.zeros(bshape)
        wsum = 0.0
        for i in members:
            v = vs[i]
            c_i = v.table.size / acc.size  # weight 1 / C_i
            acc += project(v.attrs, v.table, b) / c_i
            wsum += 1.0 / c_i
        target = (acc / wsum).reshape(-1)
        if target.min() < 0:
            neg_mass += float(-target[target < 0].sum())
            np.maximum(target, 0.0, out=target)
        idx = np.ravel_multi_index(tuple(coords[qs.index(a)] for a in b), bshape)
        cons.append((idx.astype(np.intp), target))

    flat = table.reshape(-1)  # a view: IPF updates `table` in place
    iterations, dev, converged = _ipf(flat, cons, tol, max_iter)
    info = MaxEntInfo("ipf", None, tuple(maximal), iterations, dev, converged, neg_mass)
    return finish(table, info)


def _ipf(flat: np.ndarray, cons: list[tuple[np.ndarray, np.ndarray]], tol: float,
         max_iter: int) -> tuple[int, float, bool]:
    """Run IPF in place on the flattened table ``flat``.

    Each constraint is ``(idx, target)``: ``idx[c]`` is the constraint cell of query cell ``c``,
    so ``np.bincount(idx, flat)`` is the projection.  Returns (sweeps, max deviation of the
    final table, converged).
    """

    def deviation() -> float:
        return max(float(np.abs(np.bincount(idx, flat, t.size) - t).max()) for idx, t in cons)

    stall = tol * _STALL_FRACTION
    prev = flat.copy()
    sweeps = 0
    while sweeps < max_iter:
        sweeps += 1
        worst = 0.0
        for idx, target in cons:
            proj = np.bincount(idx, flat, target.size)
            worst = max(worst, float(np.abs(proj - target).max()))
            ratio = np.divide(target, proj, out=np.zeros_like(proj), where=proj > 0)
            flat *= ratio[idx]
        # `worst` was measured during the sweep; confirm on the final table before stopping.
        if worst < tol:
            dev = deviation()
            if dev < tol:
                return sweeps, dev, True
        # A sweep that moves no cell by more than `stall` has reached IPF's limit: the
        # constraints cannot all be met (jointly infeasible).  Further sweeps change nothing.
        if np.abs(flat - prev).max() < stall:
            break
        prev[...] = flat
    dev = deviation()
    return sweeps, dev, dev < tol
