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
  combined with inverse-variance weights, as consistency does.  That is the variance of the
  *linear* (consistent, unclipped) estimate; Norm-Sub's clipping at 0 removes much of the
  noise of small cells at low epsilon (95% intervals then covered 99-100% of cells), so the
  std is scaled by :func:`postprocessing_factor`, the ratio of the clipped to the linear
  estimate's RMSE in the bootstrap worlds below (a graphical-model synopsis: its model
  against its shrunk marginals before the model).
* **Reconstructed** (no group covers Q): parametric bootstrap from the synopsis.  Treat
  the synopsis as the truth; for each replicate draw every group's true counts
  (multinomial with the group's size and the synopsis's marginal), its oracle's support
  counts (``oracle.sample_support``), unbias, re-run the synopsis's own inference and
  answer Q again.  The standard error is the root-mean-square deviation of the
  replicates from the released answer, so it includes the estimator's bias in the
  bootstrap world (e.g. from shrinkage or clipping), not only its variance.  It cannot see
  the reconstruction (max-entropy) bias of the real world, because the bootstrap truth is
  itself max-entropy; so the variance of the interactions no group measured is added
  (:func:`reconstruction_variance`), estimated from the measured views' interactions less
  what the bootstrap worlds put there (:func:`interaction_variance`), and extrapolated to
  orders no group measured with :data:`INTERACTION_DECAY` -- an assumption, since no
  report carries them -- or with the ratios a public data set shows
  (:func:`interaction_profile`).  For an empirical-Bayes (calm-pgm) synopsis the bootstrap
  truth is already shrunk, so :func:`shrinkage_variance` adds what shrinkage hides.

A synopsis can have standard errors only if it records how it was collected:
``info["groups"]`` (attributes, oracle, epsilon and users of every group) and
``info["n"]``; :func:`collection_info` builds that from a plan and its noisy views
(``CALM.run`` stores it).
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..core.errors import DPMarginalsError, check_positive_int
from ..core.randomness import RNGLike, simulation_rng

__all__ = [
    "GroupInfo",
    "analytic_std",
    "bootstrap",
    "bootstrap_seed",
    "bootstrap_std",
    "collection_info",
    "covering_groups",
    "groups_of",
    "interaction_profile",
    "interaction_variance",
    "pooling_ratio",
    "postprocessing_factor",
    "reconstruction_variance",
    "shared_worlds",
    "shrinkage_variance",
    "standard_errors",
]

#: Default number of bootstrap replicates (with 30 the RMSE's own noise costs ~1 point of
#: coverage; 100 brings it within ~0.3).
REPLICATES = 100

#: Assumed ratio of the variance of order-(j+1) to order-j interactions above the largest
#: order any group measured, which no report can estimate.  Measured on the repository's
#: data (order 3 : 2 and 4 : 3): MSNBC d=8 0.15, 0.049; MSNBC d=16 0.056, 0.036; Adult with
#: 3 values 0.0013, 0.026.  The largest, so that intervals err on the safe side: with their
#: geometric mean (0.03) calm-pgm's reconstructed MSNBC intervals covered only 86%.
INTERACTION_DECAY = 0.15


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


#: The most cells of raw group estimates a synopsis records (:func:`collection_info`).
RECORDED_CELLS = 2**16


def collection_info(plan: Any, views: Sequence[Any]) -> dict[str, Any]:
    """``{"groups": [...]}`` for ``info``: each group's attributes, oracle, epsilon, users
    and, when all groups hold at most :data:`RECORDED_CELLS` cells, its unbiased estimate
    (``"estimate"``, flat, in the group's attribute order): post-processing of the reports,
    from which :mod:`.intervals` builds per-query intervals."""
    groups = [GroupInfo(tuple(g.attributes), g.oracle, float(g.epsilon), int(v.users))
              for g, v in zip(plan.groups, views, strict=True)]
    out = [g.to_dict() for g in groups]
    if sum(np.size(v.table) for v in views) <= RECORDED_CELLS:
        for g, v in zip(out, views, strict=True):
            g["estimate"] = [float(x) for x in np.ravel(v.table)]
    return {"groups": out}


def groups_of(synopsis: Any) -> list[GroupInfo]:
    """The groups a synopsis records, or a clear error if it records none."""
    info = getattr(synopsis, "info", None) or {}
    raw = info.get("groups")
    method = getattr(synopsis, "method", "")
    if not raw and method == "priview":
        raise DPMarginalsError("priview releases carry no standard errors (their consistency "
                               "and non-negativity steps have no variance model here); query "
                               "without --std")
    if not raw or "n" not in info:
        raise DPMarginalsError(
            f"this {method} synopsis does not record its collection "
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
    from ..oracles import make_oracle

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
    recorded = groups_of(synopsis)
    groups = covering_groups(recorded, attrs)
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
    ratio = pooling_ratio(recorded, attrs, sizes,
                          synopsis.info.get("shrink_factors", {}))
    return np.sqrt(ratio / precision)


def _coefficient_variances(groups: Sequence[GroupInfo], sizes: Mapping[str, int]
                           ) -> dict[GroupInfo, float]:
    """Each group's variance of one orthonormal coefficient of its noisy marginal."""
    from ..oracles import make_oracle
    from ..planning.workload import coefficient_variance

    return {g: coefficient_variance(make_oracle(g.oracle, g.epsilon,
                                                math.prod(sizes[x] for x in g.attributes)),
                                    g.users) for g in groups}


def _block_precision(sub: Sequence[str], groups: Mapping[GroupInfo, float],
                     sizes: Mapping[str, int], within: Sequence[str] | None = None) -> float:
    """Precision of one coefficient of the sub-marginal ``sub`` pooled over the groups that
    contain ``within`` (default: ``sub`` itself), as consistency pools them (§4.4)."""
    need = set(sub if within is None else within)
    return sum(1.0 / (math.prod(sizes[x] for x in g.attributes if x not in sub) * var)
               for g, var in groups.items() if need <= set(g.attributes))


def _cell_weight(sub: Sequence[str], attrs: Sequence[str], sizes: Mapping[str, int]) -> float:
    """Mean per-cell variance, in Q = ``attrs``'s table, of a unit-variance coefficient of the
    sub-marginal S: ``prod_{a in S} (1 - 1/c_a) prod_{a in Q minus S} 1/c_a^2``."""
    return math.prod((1 - 1 / sizes[a]) if a in sub else 1 / sizes[a] ** 2 for a in attrs)


def pooling_ratio(groups: Sequence[GroupInfo], attrs: Sequence[str], sizes: Mapping[str, int],
                  shrink: Mapping[str, float] | None = None) -> float:
    """How much pooling over every group (and shrinkage) reduces a covered query's variance.

    In an orthonormal (Helmert) basis a query cell's variance is
    ``sum_{S ⊆ Q} v_S prod_{a∈S} (1 - 1/c_a) prod_{a∈Q∖S} 1/c_a^2`` where ``v_S`` is the
    variance of one coefficient of the sub-marginal S (in Q's table that coefficient is
    scaled by ``1 / sqrt(prod_{Q∖S} c_a)``, and spread over the cells by ``1/c_a``).  The
    covering groups alone give ``v_S = 1 / sum_{g ⊇ Q} 1/(C_g(S) Var_g)`` (``Var_g`` from
    :func:`~dpmarginals.planning.workload.coefficient_variance`); pooling every group that contains
    S (consistency, §4.4) gives the same sum over ``g ⊇ S``; an empirical-Bayes shrinkage
    factor s_S (the fraction of the interaction kept) turns ``v_S`` into the posterior
    variance ``s_S v_S``.  The ratio of the two totals scales the covering group's exact
    per-cell variance.
    """
    shrink = shrink or {}
    var = _coefficient_variances(groups, sizes)
    q = tuple(attrs)
    raw_total = pooled_total = 0.0
    for j in range(1, len(q) + 1):
        for sub in combinations(q, j):
            weight = _cell_weight(sub, q, sizes)
            raw_total += weight / _block_precision(sub, var, sizes, within=q)
            pooled_total += (weight * float(shrink.get(",".join(sorted(sub)), 1.0))
                             / _block_precision(sub, var, sizes))
    return pooled_total / raw_total


def shrinkage_variance(synopsis: Any, attrs: Sequence[str]) -> float:
    """Per-cell variance a bootstrap misses for an empirical-Bayes (calm-pgm) synopsis.

    Per coefficient of a measured sub-marginal S with noise variance v, prior variance g
    and shrinkage factor s = g / (g + v), the real mean squared error is the posterior
    variance ``s v``.  The bootstrap truth is the shrunk estimate, whose coefficients have
    mean square ``s^2 (g + v) = s g``, so the bootstrap error is
    ``s^2 v + (1 - s)^2 s g = s^2 (2 - s) v``; this adds the difference ``s (1 - s)^2 v``
    for every measured S ⊆ Q (weights as in :func:`pooling_ratio`).  0 for synopses
    without shrinkage.
    """
    shrink = (getattr(synopsis, "info", None) or {}).get("shrink_factors")
    if not shrink:
        return 0.0
    domain = synopsis.domain
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    var = _coefficient_variances(groups_of(synopsis), sizes)
    q = tuple(attrs)
    total = 0.0
    for j in range(1, len(q) + 1):
        for sub in combinations(q, j):
            s = shrink.get(",".join(sorted(sub)))
            precision = _block_precision(sub, var, sizes)
            if s is not None and precision > 0:
                total += s * (1 - s) ** 2 / precision * _cell_weight(sub, q, sizes)
    return total


def _refit_function(synopsis: Any, *, linear: bool = False) -> Callable[[list[Any]], Any] | None:
    """How to redo the synopsis's inference from new noisy views; ``linear=True``: the same
    inference without its non-negativity step (one consistency pass, no Norm-Sub), or None
    when the synopsis has no such linear counterpart."""
    from .base import ViewSynopsis, consistent_synopsis

    if isinstance(synopsis, ViewSynopsis):
        rounds = 1 if linear else 1000
        return lambda views: consistent_synopsis(synopsis.domain, views, synopsis.method, {},
                                                 max_rounds=rounds)
    if linear:
        if (getattr(synopsis, "options", None) or {}).get("shrink"):
            return lambda views: _shrunk_views(synopsis.domain, views)
        return None
    refit = getattr(synopsis, "refit", None)
    if callable(refit):
        return refit
    raise DPMarginalsError(f"no bootstrap for a {type(synopsis).__name__}")


def _refit_each(synopsis: Any, *, linear: bool = False
                ) -> Callable[[list[list[Any]]], list[Any]] | None:
    """:func:`_refit_function` for a list of replicates' views at once: a view synopsis
    fits them together (:func:`~dpmarginals.synopsis.base.consistent_synopses`, the same
    fits with their projections batched), others one by one."""
    from .base import ViewSynopsis, consistent_synopses

    if isinstance(synopsis, ViewSynopsis):
        rounds = 1 if linear else 1000
        return lambda problems: consistent_synopses(synopsis.domain, problems,
                                                    synopsis.method, {}, max_rounds=rounds)
    refit = _refit_function(synopsis, linear=linear)
    if refit is None:
        return None
    return lambda problems: [refit(views) for views in problems]


#: Replicates a view synopsis's bootstrap fits together (a progress bar moves once per
#: chunk): 25 keep most of batching's gain (issue #33).
FIT_CHUNK = 25


def _shrunk_views(domain: Any, views: Sequence[Any]) -> Any:
    """A graphical-model synopsis's linear counterpart: its empirical-Bayes shrunk
    marginals (consistent by construction) before the model's non-negativity."""
    from ..inference.shrinkage import eb_shrink
    from .base import ViewSynopsis

    tables = eb_shrink(domain, views).tables
    canon = {domain.in_order(v.attributes) for v in views}
    return ViewSynopsis(domain, [(a, tables[a]) for a in sorted(canon)], "shrunk", {})


@dataclass(frozen=True)
class Replicate:
    """One bootstrap world: the synopsis re-fitted on simulated reports, and (for view
    synopses) the same reports' linear estimate, before Norm-Sub."""

    fitted: Any
    linear: Any | None


def bootstrap(synopsis: Any, *, replicates: int = REPLICATES, rng: RNGLike = None,
              linear: bool = False, progress: bool = False) -> list[Replicate]:
    """``replicates`` synopses re-fitted on reports simulated from ``synopsis`` as the truth.

    Each replicate draws every group's true counts (multinomial with the group's size and
    the synopsis's marginal), its oracle's support counts (``oracle.sample_support``),
    unbiases them and re-runs the synopsis's own inference.  ``progress``: a progress bar
    on stderr (only on a terminal).
    """
    from ..inference.views import NoisyView
    from ..oracles import make_oracle
    from .base import ViewSynopsis

    replicates = check_positive_int(replicates, "replicates", 2)
    gen = simulation_rng(rng)
    refit = _refit_each(synopsis)
    refit_linear = _refit_each(synopsis, linear=True) if linear else None
    domain = synopsis.domain
    setup = []
    for g in groups_of(synopsis):
        shape = domain.project(g.attributes).shape
        p = np.clip(np.asarray(synopsis.marginal(g.attributes).values, float).ravel(), 0, None)
        p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / p.size)
        oracle = make_oracle(g.oracle, g.epsilon, int(np.prod(shape)))
        setup.append((g, shape, p, oracle, float(oracle.variance(g.users))))
    chunk = FIT_CHUNK if isinstance(synopsis, ViewSynopsis) else 1
    out: list[Replicate] = []
    with tqdm(total=replicates, desc="standard errors: bootstrap", unit="replicate",
              disable=None if progress else True, file=sys.stderr, leave=False) as bar:
        while len(out) < replicates:
            problems = []
            for _ in range(min(chunk, replicates - len(out))):
                views = []
                for g, shape, p, oracle, var in setup:
                    counts = gen.multinomial(g.users, p)
                    support = oracle.sample_support(counts, rng=gen)
                    est = np.asarray(oracle.estimate(support, g.users),
                                     dtype=np.float64).reshape(shape)
                    views.append(NoisyView(g.attributes, est, g.users, var))
                problems.append(views)
            fitted = refit(problems)
            linear_fits = refit_linear(problems) if refit_linear else [None] * len(problems)
            out += [Replicate(f, v) for f, v in zip(fitted, linear_fits, strict=True)]
            bar.update(len(problems))
    return out


#: The most cells (replicates x 2 x the synopsis's groups' cells) of bootstrap worlds kept
#: with a synopsis for its later queries (:func:`shared_worlds`): 64 MiB of float64.
SHARED_WORLD_CELLS = 2**23


def bootstrap_seed(synopsis: Any) -> np.random.SeedSequence:
    """The seed of a synopsis's own bootstrap: a digest of what the bootstrap reads (every
    recorded group and the synopsis's answer to its marginal), so the same release gives
    the same standard errors in every process, whichever query comes first."""
    digest = hashlib.sha256()
    for g in groups_of(synopsis):
        digest.update(repr(g).encode())
        values = np.ascontiguousarray(synopsis.marginal(g.attributes).values, dtype="<f8")
        digest.update(values.tobytes())
    return np.random.SeedSequence(int.from_bytes(digest.digest()[:16], "little"))


def shared_worlds(synopsis: Any, replicates: int = REPLICATES, *, progress: bool = False
                  ) -> list[Replicate]:
    """The synopsis's bootstrap worlds (with their linear counterparts), drawn once from
    :func:`bootstrap_seed` and kept with the synopsis while they fit in
    :data:`SHARED_WORLD_CELLS`: every later query of it (a service's release, a loaded
    file) reuses them, so its standard errors cost one bootstrap, not one per query."""
    replicates = check_positive_int(replicates, "replicates", 2)
    cache = synopsis.__dict__.setdefault("_shared_worlds", {})
    if replicates in cache:
        return cache[replicates]
    worlds = bootstrap(synopsis, replicates=replicates, rng=bootstrap_seed(synopsis),
                       linear=True, progress=progress)
    domain = synopsis.domain
    cells = sum(domain.project(g.attributes).cells() for g in groups_of(synopsis))
    if replicates * 2 * cells <= SHARED_WORLD_CELLS:
        cache[replicates] = worlds
    return worlds


def _answers(fits: Sequence[Any], attrs: Sequence[str]) -> np.ndarray:
    return np.stack([np.asarray(f.marginal(attrs).values, dtype=np.float64) for f in fits])


def _mean_square_about(reps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per cell, the mean squared deviation of the replicates from the released values."""
    return ((reps - np.asarray(values, dtype=np.float64)[None]) ** 2).mean(axis=0)


def bootstrap_replicates(synopsis: Any, attrs: Sequence[str], *, replicates: int = REPLICATES,
                         rng: RNGLike = None) -> np.ndarray:
    """``replicates`` answers to ``attrs`` from synopses re-fitted on simulated reports."""
    worlds = bootstrap(synopsis, replicates=replicates, rng=rng)
    return _answers([w.fitted for w in worlds], attrs)


def bootstrap_std(synopsis: Any, attrs: Sequence[str], values: np.ndarray, *,
                  replicates: int = REPLICATES, rng: RNGLike = None) -> np.ndarray:
    """Root-mean-square deviation of bootstrap replicates from the released ``values``.

    It includes the estimator's bias in the bootstrap world (e.g. from shrinkage or
    clipping), not only its variance."""
    reps = bootstrap_replicates(synopsis, attrs, replicates=replicates, rng=rng)
    return np.sqrt(_mean_square_about(reps, values))


def postprocessing_factor(worlds: Sequence[Replicate], attrs: Sequence[str],
                          values: np.ndarray) -> float:
    """How much non-negativity (Norm-Sub) shrinks a covered query's error:
    ``sqrt(sum MSE_fitted / sum MSE_linear)`` over the bootstrap worlds (1 without linear
    counterparts).  The analytic variance is that of the linear estimate; clipping cells at
    0 removes much of the noise of small cells at low epsilon."""
    if not worlds or worlds[0].linear is None:
        return 1.0
    fitted = float(_mean_square_about(_answers([w.fitted for w in worlds], attrs), values).sum())
    linear = float(_mean_square_about(_answers([w.linear for w in worlds], attrs), values).sum())
    return math.sqrt(fitted / linear) if linear > 0 else 1.0


def _interaction_block(attrs: Sequence[str], table: np.ndarray, domain: Any) -> np.ndarray:
    """A marginal's top-order interaction block beyond the max-entropy table of its facets."""
    from ..inference.helmert import top
    from ..inference.shrinkage import maxent_base

    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    canon = domain.in_order(attrs)
    t = np.transpose(table, [tuple(attrs).index(a) for a in canon])
    facets = {}
    for facet in combinations(canon, len(canon) - 1):
        drop = tuple(i for i, a in enumerate(canon) if a not in facet)
        facets[facet] = np.clip(t.sum(axis=drop), 1e-12, None)
    return top(t) - top(maxent_base(canon, facets, sizes))


def _interactions(synopsis: Any, top: int) -> dict[tuple[str, ...], np.ndarray]:
    """Each order-``top`` view's interaction block beyond max-entropy, by sorted attributes."""
    domain = synopsis.domain
    return {domain.in_order(a): _interaction_block(a, t, domain)
            for a, t in synopsis.views if len(a) == top}


def interaction_profile(public: Any, orders: Sequence[int], *, max_sets: int = 200,
                        rng: RNGLike = 0) -> dict[int, float]:
    """Per order j, the mean variance of one order-j interaction coefficient beyond
    max-entropy in ``public`` (a public or synthetic data set over the synopsis's domain),
    over up to ``max_sets`` random j-sets of attributes.  Its ratios replace
    :data:`INTERACTION_DECAY` for the orders no report measured."""
    gen = simulation_rng(rng)
    attrs = public.domain.attributes
    out = {}
    for j in orders:
        if not 2 <= j <= len(attrs):
            continue
        sets = {tuple(sorted(gen.choice(len(attrs), size=j, replace=False).tolist()))
                for _ in range(max_sets)}
        blocks = [_interaction_block([attrs[i] for i in c], public.marginal(
            [attrs[i] for i in c]).values, public.domain) for c in sorted(sets)]
        out[j] = float(np.mean([float((b**2).mean()) for b in blocks]))
    return out


def interaction_variance(synopsis: Any, worlds: Sequence[Replicate] | None = None
                         ) -> dict[int, float]:
    """Per order j, the variance of one order-j interaction coefficient beyond max-entropy.

    A graphical-model synopsis carries it (``info["prior_variance"]``, the mean of the
    fitted empirical-Bayes prior).  For a view synopsis it is a method-of-moments estimate
    at the views' largest order l: the mean squared interaction coefficient of the released
    views, less the mean squared deviation of the bootstrap worlds' coefficients from them
    (what noise, sampling and post-processing alone put there); 0 if that is negative.
    """
    info = getattr(synopsis, "info", {}) or {}
    if "prior_variance" in info:
        return {int(j): float(v) for j, v in info["prior_variance"].items()
                if v == v and int(j) >= 2}  # drop nan
    views = getattr(synopsis, "views", None)
    if not views or not worlds:
        return {}
    top = max(len(a) for a, _ in views)
    if top < 2:
        return {}
    released = _interactions(synopsis, top)
    cells = sum(r.size for r in released.values())
    signal = sum(float((r**2).sum()) for r in released.values()) / cells
    noise = float(np.mean([sum(float(((rep[a] - r) ** 2).sum()) for a, r in released.items())
                           / cells for rep in (_interactions(w.fitted, top) for w in worlds)]))
    return {top: max(0.0, signal - noise)}


def reconstruction_variance(synopsis: Any, attrs: Sequence[str], tau: Mapping[int, float],
                            profile: Mapping[int, float] | None = None) -> float:
    """Per-cell variance of what reconstruction cannot see: every S ⊆ Q (|S| >= 2) inside
    no group contributes its coefficients' interaction variance ``tau`` (from
    :func:`interaction_variance`), spread over Q's cells as in :func:`pooling_ratio`.  An
    order j the synopsis did not measure takes ``tau[top] * INTERACTION_DECAY ** (j - top)``
    (``top`` = the largest measured order; lower orders take ``tau[top]``), or with a
    public data set's :func:`interaction_profile`, ``tau[top] * profile[j] / profile[top]``."""
    groups = groups_of(synopsis)
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
            if j in tau:
                t2 = tau[j]
            elif profile and profile.get(top, 0.0) > 0 and j in profile:
                t2 = tau[top] * profile[j] / profile[top]
            else:
                t2 = tau[top] * INTERACTION_DECAY ** max(j - top, 0)
            total += t2 * _cell_weight(sub, q, sizes)
    return total


def standard_errors(synopsis: Any, attrs: Sequence[str], values: np.ndarray, *,
                    replicates: int = REPLICATES, rng: RNGLike = None, public: Any = None,
                    worlds: Sequence[Replicate] | None = None, progress: bool = False
                    ) -> tuple[np.ndarray, str]:
    """Per-cell standard errors of the answer ``values`` to ``attrs`` and how they were had:
    ``"analytic"`` (covered query: the analytic std, times the bootstrap's
    :func:`postprocessing_factor` where the synopsis has a linear counterpart) or
    ``"bootstrap"`` (reconstructed query: bootstrap RMSE, the unmeasured interactions'
    variance and, for calm-pgm, what shrinkage hides from the bootstrap), or
    ``"measurement"`` for a synopsis that gives its own (``measurement_std``: AIM, MST).
    A synopsis with its own closed form (``wfm``'s ``standard_errors``) answers with it,
    as ``"analytic"``.  ``public``: a public or synthetic
    :class:`~dpmarginals.core.dataset.Dataset` over the same domain whose interactions tell
    how fast they fade with the order (:func:`interaction_profile`), instead of the fixed
    :data:`INTERACTION_DECAY`.  Without ``rng`` the bootstrap is the synopsis's own
    (:func:`shared_worlds`: seeded from its content, drawn once and shared by its queries),
    so asking twice gives the same answer (its randomness is post-processing, not
    privacy).  ``worlds``: bootstrap worlds already drawn (``bootstrap(synopsis,
    linear=True)``), shared by the queries of one synopsis.  ``progress``: a progress bar
    on stderr while the bootstrap runs (only on a terminal)."""
    own = getattr(synopsis, "measurement_std", None)
    if callable(own):  # AIM, MST: the noise of the measured marginals (central/contingency)
        return own(attrs), "measurement"
    own = getattr(synopsis, "standard_errors", None)
    if callable(own):  # wfm: the closed-form covariance of its reconstruction
        return own(attrs), "analytic"
    def draw(linear: bool) -> Sequence[Replicate]:
        if rng is None:
            return shared_worlds(synopsis, replicates, progress=progress)
        return bootstrap(synopsis, replicates=replicates, rng=rng, linear=linear,
                         progress=progress)

    std = analytic_std(synopsis, attrs, values)
    if std is not None:
        if _refit_function(synopsis, linear=True) is None:
            return std, "analytic"
        if worlds is None:
            worlds = draw(linear=True)
        return std * postprocessing_factor(worlds, attrs, values), "analytic"
    if worlds is None:
        worlds = draw(linear=False)
    boot = np.sqrt(_mean_square_about(_answers([w.fitted for w in worlds], attrs), values))
    tau = interaction_variance(synopsis, worlds)
    profile = None
    if public is not None and tau:
        if public.domain != synopsis.domain:
            raise DPMarginalsError(f"public: its domain {public.domain.to_dict()} differs "
                                   f"from the synopsis's {synopsis.domain.to_dict()}")
        top = max(tau)
        profile = interaction_profile(public, range(top, max(top, len(attrs)) + 1))
    extra = (reconstruction_variance(synopsis, attrs, tau, profile)
             + shrinkage_variance(synopsis, attrs))
    return np.sqrt(boot**2 + extra), "bootstrap"
