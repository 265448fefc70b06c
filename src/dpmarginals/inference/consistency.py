"""Mutual consistency and non-negativity of overlapping noisy views (CALM §4.4, PriView).

CALM (Zhang et al., CCS'18, §4.4) makes the views agree on every attribute set ``A`` they
share: the copies ``P_i = Proj_A(T_i)`` are averaged with weights ``1/C_i`` (``C_i`` = number of
cells of view ``i`` that add up to one cell of ``A``; this minimises the variance when every
cell has the same variance), and each view is shifted by ``(T_A - P_i) / C_i`` on each of those
cells, over the sets shared by two or more views, smaller sets first.  That pass is the
weighted least-squares projection onto consistent views (``rho_i = 1/Var_i`` per view;
:mod:`dpmarginals.inference.interactions` computes it in one transform).  CALM and PriView
then alternate it with Norm-Sub until nothing is negative, which converges only
geometrically: hundreds of rounds once the views share many sets.

Here consistency and non-negativity are one problem: the views released approximate the
weighted least-squares projection of the noisy views onto the *consistent, non-negative*
views with the given total,

    minimise  sum_i rho_i ||T_i - Y_i||^2  over consistent T with T >= 0,

a strictly convex problem with one solution, to a tolerance the result reports.  Two
stages, each round one consistency projection ``P``:

1. accelerated projected gradient (FISTA, Beck & Teboulle 2009) on its dual, whose
   variables push the negative cells up: ``x = P(Y + nu)``, ``nu <- max(nu - x, 0)`` (step 1
   because ``P`` is an orthogonal projection), until the negative mass of ``x`` is
   ``dual_fraction`` of that of ``P(Y)``;
2. from there, alternating projections (Norm-Sub of every view in one call, then ``P``)
   with Anderson acceleration (Walker & Ni 2011), until no cell is below ``-neg_tol``; the
   last tiny negatives are removed by mixing every view with the uniform table by the
   smallest weight that makes them ``>= 0`` (consistent tables stay consistent).

The result is consistent (to rounding) and non-negative; ``gap``, the duality gap of the
final views and the last dual point relative to their objective, bounds how far they are
from the exact projection.  ``dual_fraction`` = 0.5 (stage 1 stops once the negative mass
has halved: one or two dual steps) was the only stopping point of 1, 0.5, 0.3 and 0.1 at
least as accurate as the CALM/PriView alternation, on the same reports, in all four real
settings we measured (adult3 d = 8 and msnbc d = 16 at k = 3, kosarak d = 32 at k = 3 and
d = 16 at k = 8; eps = 1): running stage 1 further lowers the error on msnbc and kosarak
k = 3 but raises it on adult3 and on kosarak's 8-way answers by maximum entropy, and near
the exact projection it is higher there still (``docs/beyond-calm.md`` §4).  It takes
10-40 rounds where the alternation took 40-800.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from dpmarginals.core import tuned as _tuned
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.interactions import ConsistentViews
from dpmarginals.inference.nonneg import norm_sub_rows
from dpmarginals.inference.views import View, as_view, check_sizes

__all__ = [
    "ConsistencyResult",
    "ConsistencyWarning",
    "intersection_family",
    "make_consistent",
    "make_consistent_each",
    "max_inconsistency",
]


class ConsistencyWarning(RuntimeWarning):
    """``make_consistent`` stopped at ``max_rounds`` before the views were consistent and >= 0."""


@dataclass(eq=False)
class ConsistencyResult(Sequence[View]):
    """The output of :func:`make_consistent`: a sequence of views plus how the loop ended.

    It behaves as the list of output views (``len``, indexing, iteration), so
    ``for attrs, table in make_consistent(...)`` works.

    Attributes:
        views: the output views, in input order, as :class:`View` ``(attrs, table)``.
        rounds: number of consistency projections run (1 when the projected noisy views
            have no negative cell).
        converged: True iff the result is consistent within ``tol`` and no cell is below
            ``-neg_tol`` before the final mixing; its cells are then all ``>= 0``.
        max_inconsistency: the largest absolute difference, over all shared attribute sets
            (and the totals, compared with ``total`` when given), between two views'
            projections of the returned views.
        min_cell: the smallest cell of the returned views (``< 0`` only when not converged).
        sets: the attribute sets contained in two or more views (closed under
            intersection), smaller first.
        dual_rounds: the rounds of stage 1 (projected gradient on the dual).
        gap: the duality gap of the result, relative to its objective
            ``sum_i rho_i ||T_i - Y_i||^2 / 2``: the result is within ``sqrt(2 gap objective)``
            (in that weighted norm) of the exact least-squares projection (NaN when it did
            not converge: an infeasible result certifies nothing).
        mixing: the weight of the uniform table mixed in to clear the last negatives.
    """

    views: list[View]
    rounds: int
    converged: bool
    max_inconsistency: float
    min_cell: float
    sets: list[tuple[int, ...]] = field(default_factory=list)
    dual_rounds: int = 0
    gap: float = 0.0
    mixing: float = 0.0

    @overload
    def __getitem__(self, i: int) -> View: ...
    @overload
    def __getitem__(self, i: slice) -> list[View]: ...
    def __getitem__(self, i: int | slice) -> View | list[View]:
        return self.views[i]

    def __len__(self) -> int:
        return len(self.views)

    def __iter__(self) -> Iterator[View]:
        return iter(self.views)

    def __repr__(self) -> str:
        return (f"ConsistencyResult({len(self.views)} views, rounds={self.rounds}, "
                f"converged={self.converged}, max_inconsistency={self.max_inconsistency:.3g}, "
                f"min_cell={self.min_cell:.3g}, gap={self.gap:.3g})")


def intersection_family(attr_sets: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Non-empty attribute sets contained in >= 2 of ``attr_sets``, closed under intersection.

    These are the intersections of two or more of the sets (the closure of the pairwise
    intersections).  Returned sorted by size, then lexicographically, so each set comes after
    every smaller set it contains.  Computed with integer bitmasks.

    >>> intersection_family([(0, 1, 2), (1, 2, 3), (0, 2, 3)])
    [(2,), (0, 2), (1, 2), (2, 3)]
    """
    masks = [sum(1 << int(a) for a in s) for s in attr_sets]
    closure: set[int] = set()
    for v in dict.fromkeys(masks):  # distinct view sets, first-seen order
        closure |= {v & s for s in closure}
        closure.add(v)
    count: dict[int, int] = {}
    for v in masks:
        count[v] = count.get(v, 0) + 1
    family = []
    for s in closure:
        if s == 0:
            continue
        n = 0
        for v, c in count.items():
            if v & s == s:
                n += c
                if n >= 2:
                    family.append(s)
                    break
    out = [tuple(i for i in range(s.bit_length()) if s >> i & 1) for s in family]
    out.sort(key=lambda t: (len(t), t))
    return out


def max_inconsistency(views: Sequence[Any], sizes: Sequence[int], *,
                      total: float | None = None) -> float:
    """The largest absolute disagreement between two views' projections on a shared set.

    Checks every set of :func:`intersection_family` and the totals (against each other, and
    against ``total`` if given).  0 means the views are exactly consistent.
    """
    sizes_t = check_sizes(sizes)
    vs = [as_view(v, sizes_t, index=i, copy=False) for i, v in enumerate(views)]
    if not vs:
        return 0.0
    lattice = ConsistentViews([v.attrs for v in vs], sizes_t, np.ones(len(vs)))
    return lattice.inconsistency(lattice.pack([v.table for v in vs]), total)


def _rho(m: int, weights: Any, variances: Any) -> np.ndarray:
    if weights is not None and variances is not None:
        raise DPMarginalsError("give per-view weights or variances, not both")
    if weights is None and variances is None:
        return np.ones(m)
    name, arr = ("weights", weights) if weights is not None else ("variances", variances)
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape != (m,):
        raise DPMarginalsError(f"{name} must have one entry per view ({m}), got shape "
                               f"{arr.shape}")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise DPMarginalsError(f"{name} must be finite and > 0, got {arr.tolist()}")
    return arr if variances is None else 1.0 / arr



#: Stage 1 stops once the consistent iterate's negative mass is this fraction of the
#: consistent noisy views' (see the module docstring for how it was chosen).
DUAL_FRACTION = _tuned.DUAL_FRACTION  # provenance: core/tuned.py
#: Iterates kept by the Anderson acceleration of stage 2.
ANDERSON_MEMORY = 5


#: Views of different sizes are Norm-Subbed in one padded call while the padded array has
#: at most this many cells more than the views (see :func:`_padded_buckets`).
PADDING = 4096


def _padded_buckets(lattice: ConsistentViews) -> list[list[int]]:
    """The lattice's groups of equal-shape views, bucketed for :func:`_norm_sub_views`:
    groups taken by increasing cells, a bucket closed when padding every view to its
    largest would add more than :data:`PADDING` cells (memoized on the lattice)."""
    cached = lattice.__dict__.get("_norm_sub_buckets")
    if cached is not None:
        return cached
    order = sorted(range(len(lattice.groups)), key=lambda g: math.prod(lattice.groups[g][0]))
    buckets: list[list[int]] = []
    rows = real = 0
    for g in order:
        shape, members, _, _ = lattice.groups[g]
        cells = math.prod(shape)
        if buckets and (rows + len(members)) * cells - (real + len(members) * cells) > PADDING:
            buckets.append([])
            rows = real = 0
        if not buckets:
            buckets.append([])
        buckets[-1].append(g)
        rows += len(members)
        real += len(members) * cells
    lattice.__dict__["_norm_sub_buckets"] = buckets
    return buckets


def _norm_sub_views(lattice: ConsistentViews, x: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Norm-Sub of every view of the layout ``x`` (view i to ``totals[i]``); or of a batch
    of layouts (rows of ``x``, with their totals as rows of ``totals``).

    Views of different shapes go through one :func:`norm_sub_rows` call per bucket of
    :func:`_padded_buckets`, padded with ``-inf`` (sorted last, never positive, outside
    every support), so a plan of many shapes costs a few numpy calls, not a few per
    shape (issue #33)."""
    batch = x.reshape(-1, lattice.size)
    targets = totals.reshape(batch.shape[0], -1)
    out = np.empty_like(batch)
    for bucket in _padded_buckets(lattice):
        width = max(math.prod(lattice.groups[g][0]) for g in bucket)
        parts, cells, members = [], [], []
        for g in bucket:
            shape, idx, a, b = lattice.groups[g]
            c = math.prod(shape)
            rows = batch[:, a:b].reshape(-1, c)  # problem-major: problem r's views together
            if c < width:
                rows = np.concatenate([rows, np.full((len(rows), width - c), -np.inf)], axis=1)
            parts.append(rows.reshape(batch.shape[0], len(idx), width))
            cells.append(np.full(len(idx), c))
            members.append(idx)
        padded = np.concatenate(parts, axis=1).reshape(-1, width)
        own = np.tile(np.concatenate(cells), batch.shape[0])
        done = norm_sub_rows(padded, targets[:, np.concatenate(members)].ravel(),
                             cells=None if len(bucket) == 1 else own
                             ).reshape(batch.shape[0], -1, width)
        at = 0
        for g in bucket:
            shape, idx, a, b = lattice.groups[g]
            c = math.prod(shape)
            out[:, a:b] = done[:, at:at + len(idx), :c].reshape(batch.shape[0], -1)
            at += len(idx)
    return out.reshape(x.shape)


@functools.lru_cache(maxsize=4)
def _cached_lattice(attrs: tuple[tuple[int, ...], ...], sizes: tuple[int, ...],
                    rho: bytes) -> ConsistentViews:
    return ConsistentViews(list(attrs), sizes, np.frombuffer(rho, dtype=np.float64))


def _lattice(attrs: tuple[tuple[int, ...], ...], sizes: tuple[int, ...], rho: np.ndarray
             ) -> ConsistentViews:
    """The :class:`ConsistentViews` of these views, memoized: a bootstrap re-fits the same
    plan's views a hundred times (its layout, bases and shared sets took 5 ms of Adult's
    50 ms per fit).  The lattice is never modified after it is built."""
    return _cached_lattice(attrs, sizes, np.ascontiguousarray(rho, dtype=np.float64).tobytes())


def _negative_mass(x: np.ndarray) -> float:
    return -float(np.minimum(x, 0.0).sum())


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a . b`` by numpy's own summation: BLAS's threaded dot products of this size run
    10-30x slower on a loaded machine (the benchmarks run on shared ones)."""
    return float(np.add.reduce(a * b))


class _Anderson:
    """Type-II Anderson acceleration of a fixed-point iteration ``s -> F(s)`` (Walker & Ni
    2011): the next point combines the last ``memory`` images, with the weights that
    minimise the combined residual ``F(s) - s`` (a small ridge keeps the solve stable).
    The Gram matrix of the residual differences is updated, not recomputed."""

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.last: tuple[np.ndarray, np.ndarray, float] | None = None  # point, residual, |g|^2
        self.d_s: list[np.ndarray] = []  # differences of successive points
        self.d_g: list[np.ndarray] = []  # ... and of their residuals
        self.gram = np.zeros((0, 0))

    def step(self, s: np.ndarray, image: np.ndarray) -> np.ndarray:
        g = image - s
        norm = _dot(g, g)
        if self.last is not None:
            if norm > 1e4 * self.last[2]:  # diverging: restart from the plain step
                self.d_s, self.d_g, self.gram = [], [], np.zeros((0, 0))
            else:
                if len(self.d_g) == self.memory:
                    self.d_s.pop(0)
                    self.d_g.pop(0)
                    self.gram = self.gram[1:, 1:]
                new = g - self.last[1]
                row = [_dot(new, a) for a in self.d_g]
                self.gram = np.block([[self.gram, np.array(row)[:, None]],
                                      [np.array(row)[None, :], np.array([[_dot(new, new)]])]])
                self.d_s.append(s - self.last[0])
                self.d_g.append(new)
        self.last = (s, g, norm)
        if not self.d_g:
            return image
        ridge = 1e-12 * float(np.trace(self.gram)) + 1e-300
        try:
            gamma = np.linalg.solve(self.gram + ridge * np.eye(len(self.gram)),
                                    [_dot(a, g) for a in self.d_g])
        except np.linalg.LinAlgError:
            return image
        out = image.copy()
        for c, a, b in zip(gamma, self.d_s, self.d_g, strict=True):
            out -= c * (a + b)
        return out


def make_consistent(views: Sequence[Any], sizes: Sequence[int], *,
                    weights: Sequence[float] | np.ndarray | None = None,
                    variances: Sequence[float] | np.ndarray | None = None,
                    max_rounds: int = 100, tol: float = 1e-9,
                    total: float | None = 1.0,
                    neg_tol: float | None = None,
                    dual_fraction: float = DUAL_FRACTION) -> ConsistencyResult:
    """Make noisy views mutually consistent and non-negative (CALM §4.4 + Norm-Sub).

    The result is the weighted least-squares projection of the views onto the consistent,
    non-negative views (to the tolerance of the module docstring), made exactly feasible.

    Args:
        views: ``(attrs, table)`` pairs; ``table`` has shape ``tuple(sizes[a] for a in attrs)``
            and holds (noisy) fractions.  Not modified.  Unsorted ``attrs`` are accepted; the
            output view then has sorted attrs and correspondingly permuted axes.
        sizes: number of values of each attribute.
        weights: optional per-view relative precision ``rho_i`` (e.g. group size ``n_i``, or
            ``1/Var_i``); a shared set's copies are averaged with weights
            ``rho_i / C_i`` instead of CALM's ``1 / C_i``, and view i's squared error counts
            ``rho_i`` times.  CALM's weights assume every view's cells have the same variance;
            use this when the groups have different sizes or different frequency oracles.
        variances: optional per-view cell variance ``Var_i`` (e.g. from CALM eq. 3); same as
            ``weights = 1 / variances``.  At most one of the two.
        max_rounds: the most consistency projections to run (each round is one).
        tol: absolute tolerance on the disagreement between projections for convergence.
        total: the known total of every table (1 for fractions).  ``None`` averages the
            totals instead (with the same weights) and Norm-Sub keeps that common total.
        neg_tol: the most negative a cell may be when the iterations stop (default
            ``tol / 2``); what remains is cleared by mixing in the uniform table with weight
            at most ``neg_tol * cells / total``, which keeps the views consistent.
        dual_fraction: stage 1 stops once the negative mass is this fraction of the
            projected noisy views' (1: no stage 1, plain accelerated alternation; smaller:
            closer to the exact least-squares projection, at more rounds; ``gap`` says how
            close).

    Returns:
        A :class:`ConsistencyResult`: iterate or index it as the list of output views; its
        fields tell how many rounds ran, whether it converged, its residuals and gap.

    If ``max_rounds`` is reached first, the result has ``converged=False`` and is the last
    consistent iterate, with honest residuals (``max_inconsistency`` and a negative
    ``min_cell``), and a :class:`ConsistencyWarning` is issued.

    >>> v1 = ((0, 1), np.array([[0.3, 0.2], [0.1, 0.4]]))
    >>> v2 = ((1, 2), np.array([[0.5, 0.1], [0.2, 0.2]]))
    >>> res = make_consistent([v1, v2], sizes=[2, 2, 2])
    >>> res.converged, res.rounds
    (True, 1)
    >>> res[0].table.sum(axis=0).round(3).tolist(), res[1].table.sum(axis=1).round(3).tolist()
    ([0.5, 0.5], [0.5, 0.5])
    """
    return make_consistent_each([views], sizes, weights=weights, variances=variances,
                                max_rounds=max_rounds, tol=tol, total=total, neg_tol=neg_tol,
                                dual_fraction=dual_fraction, _stacklevel=3)[0]


#: The most cells (problems x layout) :func:`make_consistent_each` projects in one call.
BATCH_CELLS = 1 << 20


def make_consistent_each(problems: Sequence[Sequence[Any]], sizes: Sequence[int], *,
                         weights: Sequence[float] | np.ndarray | None = None,
                         variances: Sequence[float] | np.ndarray | None = None,
                         max_rounds: int = 100, tol: float = 1e-9,
                         total: float | None = 1.0,
                         neg_tol: float | None = None,
                         dual_fraction: float = DUAL_FRACTION,
                         _stacklevel: int = 2) -> list[ConsistencyResult]:
    """:func:`make_consistent` of each of several problems over the same attribute sets
    (``problems[r]``: its views, the same ``attrs`` in the same order in every problem;
    the weights or variances are shared), e.g. the replicates of a bootstrap.

    Each problem runs its own iteration (its own rounds, stopping points and acceleration,
    exactly as :func:`make_consistent` alone), but the projections and Norm-Subs that the
    problems need in a round are made in one batched call (:data:`BATCH_CELLS` at a time),
    so a hundred small problems cost little more in numpy calls than one (issue #33).
    """
    sizes_t = check_sizes(sizes)
    if max_rounds < 1:
        raise DPMarginalsError(f"max_rounds must be >= 1, got {max_rounds!r}")
    if not 0 <= dual_fraction <= 1:
        raise DPMarginalsError(f"dual_fraction must be in [0, 1], got {dual_fraction!r}")
    if total is not None:
        total = float(total)
        if not (np.isfinite(total) and total >= 0):
            raise DPMarginalsError(f"total must be a finite number >= 0 or None, got {total!r}")
    neg_tol = tol / 2 if neg_tol is None else float(neg_tol)
    checked = [[as_view(v, sizes_t, index=i, copy=False) for i, v in enumerate(views)]
               for views in problems]
    if not checked:
        return []
    attrs = [v.attrs for v in checked[0]]
    for r, vs in enumerate(checked[1:], 1):
        if [v.attrs for v in vs] != attrs:
            raise DPMarginalsError(f"problem {r}'s views are over {[v.attrs for v in vs]}, "
                                   f"problem 0's over {attrs}: give each set of views alone")
    if not attrs:
        return [ConsistencyResult([], 0, True, 0.0, 0.0, []) for _ in checked]
    rho = _rho(len(attrs), weights, variances)
    lattice = _lattice(tuple(attrs), sizes_t, rho)
    solvers = [_iterate(lattice, lattice.pack([v.table for v in vs]), rho, total=total,
                        max_rounds=max_rounds, tol=tol, neg_tol=neg_tol,
                        dual_fraction=dual_fraction) for vs in checked]
    finished = _serve(lattice, solvers, total)
    out = []
    for x, rounds, converged, incons, min_cell, dual_rounds, gap, mixing in finished:
        if not converged:
            warnings.warn(
                f"make_consistent did not converge in {max_rounds} rounds: max inconsistency "
                f"{incons:.3g}, min cell {min_cell:.3g}", ConsistencyWarning,
                stacklevel=_stacklevel)
        tables = lattice.unpack(x)
        out.append(ConsistencyResult([View(a, t) for a, t in zip(attrs, tables, strict=True)],
                                     rounds, converged, incons, min_cell, lattice.shared_sets,
                                     dual_rounds, gap if converged else math.nan, mixing))
    return out


#: What :func:`_iterate` asks for: ``("project", x, None)`` the projection of ``x``, or
#: ``("norm_sub", s, totals)`` the projection of the Norm-Sub of ``s``'s views.
_Request = tuple[str, np.ndarray, np.ndarray | None]
_Outcome = tuple[np.ndarray, int, bool, float, float, int, float, float]


def _iterate(lattice: ConsistentViews, y: np.ndarray, rho: np.ndarray, *,
             total: float | None, max_rounds: int, tol: float, neg_tol: float,
             dual_fraction: float) -> Generator[_Request, np.ndarray, _Outcome]:
    """The two stages of the module docstring for the packed noisy views ``y``.  Every
    projection it needs is yielded as a request and its result sent back, so that
    :func:`_serve` can make the requests of many problems in one call."""
    x = yield ("project", y, None)
    rounds = 1
    common = total if total is not None else float(lattice.totals(x).mean())
    totals = np.full(len(lattice.counts), common)

    # Stage 1: FISTA on the dual, x = P(y + nu), nu >= 0 (Beck & Teboulle 2009).
    nu = np.zeros_like(y)
    start_mass = _negative_mass(x)
    dual_rounds = 0
    if x.min() < -neg_tol:
        z, t_k = nu, 1.0
        while rounds < max(max_rounds // 2, 1) and _negative_mass(x) > dual_fraction * start_mass:
            nu_next = np.maximum(z - x, 0.0)
            t_next = (1 + math.sqrt(1 + 4 * t_k * t_k)) / 2
            z = nu_next + (t_k - 1) / t_next * (nu_next - nu)
            nu, t_k = nu_next, t_next
            x = yield ("project", y + z, None)
            rounds += 1
            dual_rounds += 1

    # Stage 2: accelerated alternating projections from the stage-1 iterate.
    anderson = _Anderson(ANDERSON_MEMORY)
    s = x
    while x.min() < -neg_tol and rounds < max_rounds:
        x = yield ("norm_sub", s, totals)
        rounds += 1
        s = anderson.step(s, x)

    converged = bool(x.min() >= -neg_tol)
    mixing = 0.0
    if converged and x.min() < 0:
        cells = lattice.counts[lattice.view_of].astype(np.float64)
        neg = x < 0
        share = -x[neg] * cells[neg]
        mixing = float(np.max(share / (common + share)))
        x = (1 - mixing) * x + mixing * common / cells
        x = np.maximum(x, 0.0)  # rounding only: the mixed cells are >= 0 in exact arithmetic
    incons = lattice.inconsistency(x, total)
    converged = converged and incons <= tol
    w = rho[lattice.view_of]
    objective = 0.5 * _dot(w, (x - y) ** 2)
    dual_x = yield ("project", y + nu, None)
    dual = 0.5 * _dot(w, (dual_x - y) ** 2) - _dot(w, nu * dual_x)
    gap = max(objective - dual, 0.0) / objective if objective > 0 else 0.0
    return x, rounds, converged, incons, float(x.min()), dual_rounds, gap, mixing


def _serve(lattice: ConsistentViews, solvers: list[Generator[_Request, np.ndarray, _Outcome]],
           total: float | None) -> list[_Outcome]:
    """Run the solvers to the end, making the requests of a round that are of one kind in
    one batched call (one problem alone: the unbatched call)."""
    results: dict[int, _Outcome] = {}
    pending: dict[int, _Request] = {}
    for i, solver in enumerate(solvers):
        pending[i] = next(solver)
    per_call = max(1, BATCH_CELLS // max(lattice.size, 1))
    while pending:
        for kind in ("project", "norm_sub"):
            waiting = [i for i, request in pending.items() if request[0] == kind]
            for at in range(0, len(waiting), per_call):
                chunk = waiting[at:at + per_call]
                if len(chunk) == 1:
                    _, x, totals = pending[chunk[0]]
                    if kind == "norm_sub":
                        x = _norm_sub_views(lattice, x, totals)
                    done = [lattice.project(x, total)]
                else:
                    batch = np.stack([pending[i][1] for i in chunk])
                    if kind == "norm_sub":
                        batch = _norm_sub_views(lattice, batch,
                                                np.stack([pending[i][2] for i in chunk]))
                    done = list(lattice.project(batch, total))
                for i, x in zip(chunk, done, strict=True):
                    try:
                        pending[i] = solvers[i].send(x)
                    except StopIteration as stop:
                        results[i] = stop.value
                        del pending[i]
    return [results[i] for i in range(len(solvers))]
