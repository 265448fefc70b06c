"""Nominal 95% intervals that cover each query, not only queries on average (issue #20).

A query's error has a part that does not change between collections: the bias of the
interactions no group measured (maximum entropy sets them to "none") and, for an
empirical-Bayes synopsis (calm-pgm), of shrinking the measured ones.  The standard errors
of :mod:`~dpmarginals.synopsis.stderr` take that bias from a prior over interactions, so
``answer ± 1.96 std`` covers 95% of cells *on average over queries* (Armstrong, Kolesar and
Plagborg-Moller, Econometrica 2022), but a query whose interaction is stronger than the
typical one is covered less (57% for an unmeasured pair of correlated data).  Per query:

* **Measured by CALM** (some group reported a superset): ``answer ± 1.96 std``; the
  estimate is unbiased up to Norm-Sub, whose effect the std carries.
* **Measured, shrunk** (calm-pgm): shrinkage moves a strong interaction's answer by a fixed
  amount, and no prior tells which query it hits; the interval is the unshrunk estimate
  (:func:`linear_synopsis`) ± 1.96 of its std, which need not hold the answer.
* **Reconstructed** (no group reported the whole query): the reports have the same
  distribution for every population with the same measured tables, so they cannot tell
  the query's unmeasured interactions.  No interval can then cover this query 90-97%
  whatever the population when the range of its possible values is wide next to the
  noise: to cover each end of the range 90% of the time it must usually span the range,
  and then it covers a truth inside the range nearly always.  The interval is honest instead:
  the **range the measured tables allow** (:func:`measured_range`: a linear program over
  the joint table of the query and the attributes measured with it, each measured table
  within 1.96 of its standard errors), stretched to hold the answer.  It covers each query
  at least 95% (narrow when the measured tables pin the query down, as on chain-like
  data; wide when they do not), and the table's ``note`` says so.

Measured on a random Bayesian network and on MSNBC and Adult (``benchmarks/interval_coverage.py``,
docs/beyond-calm.md): measured queries 90-97% per query, reconstructed ones 99-100% with
intervals 1.5-3 times ``± 1.96 std``'s width, where ``± 1.96 std`` covered as little as 57%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from .stderr import GroupInfo, analytic_std, covering_groups, groups_of

__all__ = ["RANGE_CELLS", "RANGE_WORK", "Z95", "Interval", "interval", "linear_synopsis",
           "measured_range", "pooled_estimate", "with_uncertainty"]

#: The two-sided 95% normal quantile.
Z95 = 1.959964

#: The largest joint table :func:`measured_range` optimizes over (the query and as many
#: attributes measured with it as fit): 4096 cells keep a 3-way query's 2 x 27 linear
#: programs to a few seconds.
RANGE_CELLS = 4096

#: The most (query cells) x (joint-table cells) :func:`measured_range` solves linear
#: programs for (two per query cell, each over the joint table): the joint table shrinks
#: towards the query to fit, and a query of more than ``sqrt(RANGE_WORK)`` cells gets the
#: cheap, wider bounds of its measured sub-tables instead (a 64 x 64 pair would take 8,192
#: programs; a 64^3 triple, gigabytes).
RANGE_WORK = 1 << 20


@dataclass(frozen=True)
class Interval:
    """Per-cell nominal 95% bounds and, when they are not ``answer ± 1.96 std``, why."""

    lower: np.ndarray
    upper: np.ndarray
    note: str | None = None


def _sizes(synopsis: Any) -> dict[str, int]:
    return dict(zip(synopsis.domain.attributes, synopsis.domain.sizes, strict=True))


def linear_synopsis(synopsis: Any) -> Any | None:
    """The unbiased counterpart of a synopsis, from its groups' recorded raw estimates
    (``info["groups"][i]["estimate"]``, :func:`~dpmarginals.synopsis.stderr.collection_info`):
    one consistency pass (CALM §4.4), no Norm-Sub, no shrinkage, so its answers to measured
    queries are unbiased and :func:`~dpmarginals.synopsis.stderr.analytic_std` is their std.
    None when the synopsis did not record the estimates."""
    from ..inference.views import NoisyView
    from ..oracles import make_oracle
    from .base import consistent_synopsis

    info = getattr(synopsis, "info", None) or {}
    raw = info.get("groups") or []
    if not raw or any("estimate" not in g for g in raw):
        return None
    groups = groups_of(synopsis)
    views = []
    for g, r in zip(groups, raw, strict=True):
        shape = synopsis.domain.project(g.attributes).shape
        oracle = make_oracle(g.oracle, g.epsilon, math.prod(shape))
        views.append(NoisyView(g.attributes, np.asarray(r["estimate"], float).reshape(shape),
                               g.users, float(oracle.variance(g.users))))
    return consistent_synopsis(synopsis.domain, views, "linear",
                               {"n": info["n"], "groups": [g.to_dict() for g in groups]},
                               max_rounds=1)


def pooled_estimate(source: Any, attrs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The answer of ``source`` (a :func:`linear_synopsis`, or a synopsis standing in for
    one) to a measured query and its analytic per-cell std."""
    values = np.asarray(source.marginal(tuple(attrs)).values, dtype=np.float64)
    std = analytic_std(source, attrs, values)
    if std is None:
        raise DPMarginalsError(f"no group measured {list(attrs)} together")
    return values, std


def _support(query: Sequence[str], groups: Sequence[GroupInfo], sizes: dict[str, int],
             max_cells: int) -> tuple[str, ...]:
    """The query and, greedily, the attributes most often measured with what is already
    in, while the joint table stays within ``max_cells`` cells."""
    chosen = list(query)
    cells = math.prod(sizes[a] for a in chosen)
    while True:
        score: dict[str, int] = {}
        for g in groups:
            if set(g.attributes) & set(chosen):
                for a in g.attributes:
                    if a not in chosen and cells * sizes[a] <= max_cells:
                        score[a] = score.get(a, 0) + 1
        if not score:
            return tuple(chosen)
        best = max(score, key=lambda a: (score[a], -sizes[a]))
        chosen.append(best)
        cells *= sizes[best]


def _indicator(shape: tuple[int, ...], axes: Sequence[int]) -> Any:
    """The 0/1 matrix that sums a joint table (C order, ``shape``) onto ``axes``."""
    from scipy import sparse

    grid = np.indices(shape).reshape(len(shape), -1)
    sub = tuple(shape[i] for i in axes)
    rows = np.ravel_multi_index(tuple(grid[i] for i in axes), sub) if axes else np.zeros(
        grid.shape[1], dtype=np.int64)
    n = grid.shape[1]
    return sparse.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(math.prod(sub), n))


@dataclass(frozen=True)
class MeasuredRange:
    """Per cell of a query, the least and greatest value the measured tables allow."""

    lower: np.ndarray
    upper: np.ndarray
    support: tuple[str, ...]   # the attributes of the joint table optimized over
    z: float                   # how many standard errors each measured cell could move
    recorded: bool             # from the groups' raw estimates (else the released tables)
    coarse: bool = False       # the query was too large for the programs: sub-table bounds


def measured_range(synopsis: Any, attrs: Sequence[str], *, z: float = Z95,
                   max_cells: int = RANGE_CELLS) -> MeasuredRange:
    """The range of each cell of the marginal on ``attrs`` over every distribution whose
    measured marginals lie within ``z`` standard errors of their pooled estimates.

    A linear program per bound over the joint table p of the support U (the query and the
    attributes most measured with it, :func:`_support`): minimize or maximize the cell's
    sum of p subject to ``p >= 0``, ``sum p = 1`` and, for every set S inside U that some
    group measured (every subset of a group's part in U), ``|A_S p - m_S| <= z sd_S``
    (:func:`pooled_estimate` of the :func:`linear_synopsis`, or of the synopsis itself when
    it did not record its groups' estimates).  A smaller U relaxes the program, so the
    range stays valid (only wider).  Noisy tables can contradict each other: when the
    least t for which some table is within t standard errors of every measured one
    exceeds z, z becomes ``sqrt(z^2 + t^2)``.

    The work is bounded by :data:`RANGE_WORK`: beyond it each cell's range is [0, the
    least of ``m_S + z sd_S`` over the measured sub-tables S of the query] (``coarse``).
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, vstack

    sizes = _sizes(synopsis)
    groups = groups_of(synopsis)
    query = tuple(attrs)
    qcells = math.prod(sizes[a] for a in query)
    linear = linear_synopsis(synopsis)
    source = synopsis if linear is None else linear
    if qcells * qcells > RANGE_WORK:
        return _sub_table_bounds(source, query, groups, sizes, z, linear is not None)
    support = _support(query, groups, sizes, min(max_cells, RANGE_WORK // qcells))
    shape = tuple(sizes[a] for a in support)
    measured = _measured_sets(support, groups)
    qshape = tuple(sizes[a] for a in query)
    if not measured:  # no group measured any of it: nothing is ruled out
        return MeasuredRange(np.zeros(qshape), np.ones(qshape), support, z, linear is not None)
    rows, centre, spread = [], [], []
    for s in sorted(measured, key=lambda t: (len(t), t)):
        est, sd = pooled_estimate(source, s)
        rows.append(_indicator(shape, [support.index(a) for a in s]))
        centre.append(est.ravel())
        spread.append(sd.ravel())
    a_meas = vstack(rows).tocsr()
    m, sd = np.concatenate(centre), np.concatenate(spread)
    a_ub = vstack([a_meas, -a_meas]).tocsr()
    a_eq = csr_matrix(np.ones((1, math.prod(shape))))
    objective = _indicator(shape, [support.index(a) for a in query]).toarray()
    options = {"presolve": False}  # 4x faster on these programs
    # The least t with a table within t standard errors of every measured one: (p, t).
    cells = math.prod(shape)
    spread_col = csr_matrix(np.concatenate([-sd, -sd])[:, None])
    least = linprog(np.r_[np.zeros(cells), 1.0], A_ub=hstack([a_ub, spread_col]),
                    b_ub=np.concatenate([m, -m]), A_eq=hstack([a_eq, csr_matrix((1, 1))]),
                    b_eq=[1.0], bounds=(0, None), method="highs", options=options)
    if least.status == 0 and least.x[-1] > z:
        z = math.hypot(z, float(least.x[-1]))
    b_ub = np.concatenate([m + z * sd, -(m - z * sd)])
    lower = np.zeros(objective.shape[0])
    upper = np.ones(objective.shape[0])
    for i, c in enumerate(objective):
        for sign, out in ((1.0, lower), (-1.0, upper)):
            res = linprog(sign * c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0],
                          bounds=(0, None), method="highs", options=options)
            if res.status == 0:  # else (numerical trouble): nothing is ruled out
                out[i] = sign * res.fun
    return MeasuredRange(np.clip(lower, 0, 1).reshape(qshape),
                         np.clip(upper, 0, 1).reshape(qshape), support, z,
                         linear is not None)


def _measured_sets(support: tuple[str, ...], groups: Sequence[GroupInfo]
                   ) -> set[tuple[str, ...]]:
    """Every non-empty set of ``support``'s attributes some group measured together."""
    return {tuple(a for a in support if a in sub)
            for g in groups for j in range(1, len(g.attributes) + 1)
            for sub in combinations(g.attributes, j)} - {()}


def _sub_table_bounds(source: Any, query: tuple[str, ...], groups: Sequence[GroupInfo],
                      sizes: dict[str, int], z: float, recorded: bool) -> MeasuredRange:
    """:func:`measured_range` without programs: a cell is at most any measured sub-table's
    cell (within ``z`` of its standard errors) and at least 0."""
    qshape = tuple(sizes[a] for a in query)
    upper = np.ones(qshape)
    for s in _measured_sets(query, groups):
        est, sd = pooled_estimate(source, s)
        shape = tuple(sizes[a] if a in s else 1 for a in query)
        upper = np.minimum(upper, (est + z * sd).reshape(shape))
    return MeasuredRange(np.zeros(qshape), np.clip(upper, 0, 1), query, z, recorded,
                         coarse=True)


def _shrinks(synopsis: Any) -> bool:
    return bool((getattr(synopsis, "info", None) or {}).get("shrink_factors"))


def interval(synopsis: Any, attrs: Sequence[str], values: np.ndarray, std: np.ndarray, *,
             max_cells: int = RANGE_CELLS) -> Interval:
    """Per-cell nominal 95% interval of the answer ``values`` (with standard errors ``std``,
    :func:`~dpmarginals.synopsis.stderr.standard_errors`) to ``attrs``, and a note when it
    is wider than ``values ± 1.96 std`` (see the module docstring)."""
    attrs = tuple(attrs)
    values = np.asarray(values, dtype=np.float64)
    lower, upper = values - Z95 * std, values + Z95 * std
    note = None
    together = ", ".join(attrs)
    if covering_groups(groups_of(synopsis), attrs):
        linear = linear_synopsis(synopsis) if _shrinks(synopsis) else None
        if linear is not None:
            est, sd = pooled_estimate(linear, attrs)
            lower, upper = est - Z95 * sd, est + Z95 * sd
            note = ("measured, then shrunk: the interval is the unshrunk estimate ± 1.96 of "
                    "its std, since shrinkage moves a strong interaction's answer by a fixed "
                    "amount that ± 1.96 std covers only on average over queries; the answer "
                    "may lie outside it")
        elif _shrinks(synopsis):
            note = ("measured, then shrunk: this synopsis did not record its groups' raw "
                    "estimates, so the interval is ± 1.96 std, which covers 95% only on "
                    "average over queries")
    else:
        allowed = measured_range(synopsis, attrs, max_cells=max_cells)
        lower = np.minimum(values, allowed.lower)
        upper = np.maximum(values, allowed.upper)
        extra = [a for a in allowed.support if a not in attrs]
        note = (f"reconstructed: no group measured {together} together, so the reports "
                "cannot tell their interaction; the interval spans every value the measured "
                f"tables allow (each within {allowed.z:.3g} of its standard errors"
                + (f"; over the joint table with {', '.join(extra)}" if extra else "")
                + ") and the answer, which covers this query whatever its interaction; "
                "± 1.96 std is narrower but assumes an interaction like the measured ones' "
                "and covers 95% only on average over queries"
                + ("" if allowed.recorded else "; this synopsis did not record its groups' raw "
                   "estimates, so its released tables stand in for them")
                + ("; the query has too many cells for the exact range, so each cell's range "
                   "is 0 to the least its measured sub-tables allow, which is wider"
                   if allowed.coarse else ""))
    return Interval(np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0), note)


def with_uncertainty(synopsis: Any, table: Any, **options: Any) -> Any:
    """``table`` (the synopsis's answer) with per-cell ``std``, the nominal 95% ``lower`` /
    ``upper`` of :func:`interval` and its ``note``; ``options`` go to
    :func:`~dpmarginals.synopsis.stderr.standard_errors` (replicates, rng, public, worlds)."""
    from .stderr import standard_errors

    std, basis = standard_errors(synopsis, table.attributes, table.values, **options)
    if basis == "measurement" or callable(getattr(synopsis, "standard_errors", None)):
        # AIM, MST (measured marginals) and wfm (unbiased linear reconstruction) record
        # no groups: their own std is the whole story, so the interval is ± 1.96 std
        values = np.asarray(table.values, dtype=np.float64)
        return table.replace(std=std, lower=np.clip(values - Z95 * std, 0.0, 1.0),
                             upper=np.clip(values + Z95 * std, 0.0, 1.0))
    bounds = interval(synopsis, table.attributes, table.values, std)
    return table.replace(std=std, lower=bounds.lower, upper=bounds.upper, note=bounds.note)
