"""Per-cell standard errors of answered marginals (issue #9).

Two cases, by whether the query Q lies inside one of the collected marginals:

* **Covered** (some group reported a marginal over A ⊇ Q): analytic.  A cell of Q is the
  sum of ``a = prod_{A∖Q} c`` cells of the group's marginal, with true frequency f.  The
  unbiased estimate of that sum from ``n_g`` users through a pure frequency oracle (p, q)
  has variance (Wang et al. 2017, Thm. 2, summed over the ``a`` cells)

  - GRR (one report supports exactly one cell, so the cells' counts are multinomial):
    ``[f P1 (1 - P1) + (1 - f) P0 (1 - P0)] / (n_g (p - q)^2)`` with ``P1 = p + (a-1) q``
    and ``P0 = a q``;
  - OUE/SUE (independent bits), OLH and HR (cross-cell covariances neglected):
    ``[f p (1 - p) + (a - f) q (1 - q)] / (n_g (p - q)^2)``;

  plus the sampling variance of a group of ``n_g`` of the ``n`` users drawn without
  replacement, ``f (1 - f) / n_g * (n - n_g) / (n - 1)`` (CALM §4.3's Sampling Error).  f is
  taken from the answer itself (plug-in).  When several groups cover Q their estimates are
  combined with inverse-variance weights, as consistency does.
* **Reconstructed** (no group covers Q): parametric bootstrap from the synopsis.  Treat
  the synopsis as the truth; for each replicate draw every group's true counts
  (multinomial with the group's size and the synopsis's marginal), its oracle's support
  counts (``oracle.sample_support``), unbias, re-run the synopsis's own inference and
  answer Q again.  The standard error is the root-mean-square deviation of the
  replicates from the released answer, so it includes the estimator's bias in the
  bootstrap world (e.g. from shrinkage or clipping), not only its variance.  It cannot see
  the reconstruction (max-entropy) bias of the real world, because the bootstrap truth is
  itself max-entropy; so the variance of the interactions no group measured is added
  (:func:`reconstruction_variance`: the fitted prior variance of interactions of that
  order, or of the largest measured order above it).

A synopsis can have standard errors only if it records how it was collected:
``info["groups"]`` (attributes, oracle, epsilon and users of every group) and
``info["n"]``; :func:`collection_info` builds that from a plan and its noisy views
(``CALM.run`` stores it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from .errors import DPMarginalsError, check_positive_int
from .randomness import RNGLike, simulation_rng

__all__ = [
    "GroupInfo",
    "analytic_std",
    "bootstrap_std",
    "collection_info",
    "covering_groups",
    "groups_of",
    "interaction_variance",
    "pooling_ratio",
    "reconstruction_variance",
    "standard_errors",
]

#: Default number of bootstrap replicates.
REPLICATES = 30


@dataclass(frozen=True)
class GroupInfo:
    """One group of users as a synopsis records it."""

    attributes: tuple[str, ...]
    oracle: str
    epsilon: float
    users: int

    def to_dict(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "oracle": self.oracle,
                "epsilon": self.epsilon, "users": self.users}


def collection_info(plan: Any, views: Sequence[Any]) -> dict[str, Any]:
    """``{"groups": [...]}`` for ``info``: each group's attributes, oracle, epsilon, users."""
    groups = [GroupInfo(tuple(g.attributes), g.oracle, float(g.epsilon), int(v.users))
              for g, v in zip(plan.groups, views, strict=True)]
    return {"groups": [g.to_dict() for g in groups]}


def groups_of(synopsis: Any) -> list[GroupInfo]:
    """The groups a synopsis records, or a clear error if it records none."""
    info = getattr(synopsis, "info", None) or {}
    raw = info.get("groups")
    if not raw or "n" not in info:
        raise DPMarginalsError(
            f"this {getattr(synopsis, 'method', '')} synopsis does not record its collection "
            "(info['groups'] and info['n']), so it has no standard errors; re-run it with "
            "this version of dpmarginals")
    try:
        return [GroupInfo(tuple(g["attributes"]), str(g["oracle"]), float(g["epsilon"]),
                          int(g["users"])) for g in raw]
    except (KeyError, TypeError, ValueError) as exc:
        raise DPMarginalsError(f"malformed info['groups'] in the synopsis: {exc!r}") from None


def covering_groups(groups: Sequence[GroupInfo], attrs: Sequence[str]) -> list[GroupInfo]:
    q = set(attrs)
    return [g for g in groups if q <= set(g.attributes)]


def _cell_variance(group: GroupInfo, a: int, f: np.ndarray, n: int, sizes: Mapping[str, int]
                   ) -> np.ndarray:
    """Variance of the unbiased estimate of a sum of ``a`` group cells of frequency ``f``."""
    from .oracles import make_oracle

    cells = math.prod(sizes[x] for x in group.attributes)
    oracle = make_oracle(group.oracle, group.epsilon, cells)
    p, q, n_g = oracle.p, oracle.q, group.users
    if oracle.name == "grr":
        p1, p0 = p + (a - 1) * q, a * q
        noise = f * p1 * (1 - p1) + (1 - f) * p0 * (1 - p0)
    else:
        noise = f * p * (1 - p) + (a - f) * q * (1 - q)
    noise = noise / (n_g * (p - q) ** 2)
    sampling = f * (1 - f) / n_g * (max(n - n_g, 0) / max(n - 1, 1))
    return noise + sampling


def analytic_std(synopsis: Any, attrs: Sequence[str], values: np.ndarray) -> np.ndarray | None:
    """The analytic per-cell standard error of a covered query (None if not covered)."""
    groups = covering_groups(groups_of(synopsis), attrs)
    if not groups:
        return None
    domain = synopsis.domain
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    f = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)
    n = int(synopsis.info["n"])
    precision = np.zeros_like(f)
    for g in groups:
        a = math.prod(sizes[x] for x in g.attributes if x not in attrs)
        precision += 1.0 / _cell_variance(g, a, f, n, sizes)
    ratio = pooling_ratio(groups_of(synopsis), attrs, sizes,
                          synopsis.info.get("shrink_factors", {}))
    return np.sqrt(ratio / precision)


def pooling_ratio(groups: Sequence[GroupInfo], attrs: Sequence[str], sizes: Mapping[str, int],
                  shrink: Mapping[str, float] | None = None) -> float:
    """How much pooling over every group (and shrinkage) reduces a covered query's variance.

    In an orthonormal (Helmert) basis a query cell's variance is
    ``sum_{S ⊆ Q} v_S prod_{a∈S} (1 - 1/c_a) prod_{a∈Q∖S} 1/c_a^2`` where ``v_S`` is the
    variance of one coefficient of the sub-marginal S (in Q's table that coefficient is
    scaled by ``1 / sqrt(prod_{Q∖S} c_a)``, and spread over the cells by ``1/c_a``).  The
    covering groups alone give ``v_S = 1 / sum_{g ⊇ Q} 1/(C_g(S) Var_g)`` (``Var_g`` from
    :func:`~dpmarginals.workload.coefficient_variance`); pooling every group that contains
    S (consistency, §4.4) gives the same sum over ``g ⊇ S``; an empirical-Bayes shrinkage
    factor s_S (the fraction of the interaction kept) turns ``v_S`` into the posterior
    variance ``s_S v_S``.  The ratio of the two totals scales the covering group's exact
    per-cell variance.
    """
    from .oracles import make_oracle

    shrink = shrink or {}
    from .workload import coefficient_variance

    var = {}
    for g in groups:
        cells = math.prod(sizes[x] for x in g.attributes)
        var[g] = coefficient_variance(make_oracle(g.oracle, g.epsilon, cells), g.users)
    q = tuple(attrs)
    raw_total = pooled_total = 0.0
    for j in range(1, len(q) + 1):
        for sub in combinations(q, j):
            weight = math.prod((1 - 1 / sizes[a]) if a in sub else 1 / sizes[a] ** 2
                               for a in q)
            raw = sum(1.0 / (math.prod(sizes[x] for x in g.attributes if x not in sub) * var[g])
                      for g in groups if set(q) <= set(g.attributes))
            pooled = sum(1.0 / (math.prod(sizes[x] for x in g.attributes if x not in sub)
                                * var[g]) for g in groups if set(sub) <= set(g.attributes))
            key = ",".join(sorted(sub))
            raw_total += weight / raw
            pooled_total += weight * float(shrink.get(key, 1.0)) / pooled
    return pooled_total / raw_total


def _refit_function(synopsis: Any) -> Callable[[list[Any]], Any]:
    """How to redo the synopsis's inference from new noisy views."""
    refit = getattr(synopsis, "refit", None)
    if callable(refit):
        return refit
    from .local.calm import consistent_synopsis
    from .synopsis import ViewSynopsis

    if isinstance(synopsis, ViewSynopsis):
        return lambda views: consistent_synopsis(synopsis.domain, views, synopsis.method, {})
    raise DPMarginalsError(f"no bootstrap for a {type(synopsis).__name__}")


def bootstrap_replicates(synopsis: Any, attrs: Sequence[str], *, replicates: int = REPLICATES,
                         rng: RNGLike = None) -> np.ndarray:
    """``replicates`` answers to ``attrs`` from synopses re-fitted on simulated reports."""
    from .local.collect import NoisyView
    from .oracles import make_oracle

    replicates = check_positive_int(replicates, "replicates", 2)
    gen = simulation_rng(rng)
    groups = groups_of(synopsis)
    refit = _refit_function(synopsis)
    domain = synopsis.domain
    setup = []
    for g in groups:
        shape = domain.project(g.attributes).shape
        p = np.clip(np.asarray(synopsis.marginal(g.attributes).values, float).ravel(), 0, None)
        p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / p.size)
        oracle = make_oracle(g.oracle, g.epsilon, int(np.prod(shape)))
        setup.append((g, shape, p, oracle, float(oracle.variance(g.users))))
    out = []
    for _ in range(replicates):
        views = []
        for g, shape, p, oracle, var in setup:
            counts = gen.multinomial(g.users, p)
            support = oracle.sample_support(counts, rng=gen)
            est = np.asarray(oracle.estimate(support, g.users), dtype=np.float64).reshape(shape)
            views.append(NoisyView(g.attributes, est, g.users, var))
        out.append(np.asarray(refit(views).marginal(attrs).values, dtype=np.float64))
    return np.stack(out)


def bootstrap_std(synopsis: Any, attrs: Sequence[str], values: np.ndarray, *,
                  replicates: int = REPLICATES, rng: RNGLike = None) -> np.ndarray:
    """Root-mean-square deviation of bootstrap replicates from the released ``values``."""
    reps = bootstrap_replicates(synopsis, attrs, replicates=replicates, rng=rng)
    return np.sqrt(((reps - np.asarray(values)[None]) ** 2).mean(axis=0))


def interaction_variance(synopsis: Any) -> dict[int, float]:
    """Per order j, the variance of one order-j interaction coefficient beyond max-entropy.

    A graphical-model synopsis carries it (``info["prior_variance"]``, the mean of the
    fitted empirical-Bayes prior).  For a view synopsis it is the method-of-moments
    estimate over the views of the largest order l: mean squared top-order residual of
    each view against the max-entropy table of its facets, less its noise variance.
    """
    info = getattr(synopsis, "info", {}) or {}
    if "prior_variance" in info:
        return {int(j): float(v) for j, v in info["prior_variance"].items()
                if v == v and int(j) >= 2}  # drop nan
    views = getattr(synopsis, "views", None)
    if not views:
        return {}
    from .inference.pgm import _maxent_base, _top
    from .oracles import make_oracle
    from .workload import coefficient_variance

    domain = synopsis.domain
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    groups = groups_of(synopsis)
    top = max(len(a) for a, _ in views)
    if top < 2:
        return {}
    resid, noise, count = 0.0, 0.0, 0
    for attrs, table in views:
        if len(attrs) != top:
            continue
        canon = tuple(sorted(attrs, key=domain.index))
        t = np.transpose(table, [attrs.index(a) for a in canon])
        facets = {}
        for facet in combinations(canon, top - 1):
            drop = tuple(i for i, a in enumerate(canon) if a not in facet)
            facets[facet] = t.sum(axis=drop)
        r = _top(t) - _top(_maxent_base(canon, facets, sizes))
        prec = sum(1.0 / (math.prod(sizes[x] for x in g.attributes if x not in canon)
                          * coefficient_variance(make_oracle(
                              g.oracle, g.epsilon, math.prod(sizes[x] for x in g.attributes)),
                              g.users))
                   for g in groups if set(canon) <= set(g.attributes))
        resid += float((r**2).sum())
        noise += r.size / prec if prec > 0 else 0.0
        count += r.size
    return {top: max(0.0, (resid - noise) / count)} if count else {}


def reconstruction_variance(synopsis: Any, attrs: Sequence[str],
                            tau: Mapping[int, float] | None = None) -> float:
    """Per-cell variance of what reconstruction cannot see: every S ⊆ Q (|S| >= 2) inside
    no group contributes its coefficients' interaction variance (orders above the largest
    measured one take that order's), spread over Q's cells as in :func:`pooling_ratio`."""
    groups = groups_of(synopsis)
    tau = interaction_variance(synopsis) if tau is None else tau
    if not tau:
        return 0.0
    sizes = dict(zip(synopsis.domain.attributes, synopsis.domain.sizes, strict=True))
    top = max(tau)
    q = tuple(attrs)
    total = 0.0
    for j in range(2, len(q) + 1):
        for sub in combinations(q, j):
            if any(set(sub) <= set(g.attributes) for g in groups):
                continue
            t2 = tau.get(j, tau[top] if j > top else 0.0)
            total += t2 * math.prod((1 - 1 / sizes[a]) if a in sub else 1 / sizes[a] ** 2
                                    for a in q)
    return total


def standard_errors(synopsis: Any, attrs: Sequence[str], values: np.ndarray, *,
                    replicates: int = REPLICATES, rng: RNGLike = None
                    ) -> tuple[np.ndarray, str]:
    """Per-cell standard errors of the answer ``values`` to ``attrs`` and how they were had:
    ``"analytic"`` (covered query) or ``"bootstrap"`` (reconstructed query)."""
    std = analytic_std(synopsis, attrs, values)
    if std is not None:
        return std, "analytic"
    boot = bootstrap_std(synopsis, attrs, values, replicates=replicates, rng=rng)
    return np.sqrt(boot**2 + reconstruction_variance(synopsis, attrs)), "bootstrap"
