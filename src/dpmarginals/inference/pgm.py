"""Graphical-model inference from noisy marginals (private-pgm's ``mbi``), plus shrinkage.

The faithful CALM pipeline makes the noisy views consistent and non-negative and answers
other marginals by local maximum entropy (CALM §4.1, §4.4).  This module is the
alternative of issue #9, in three steps:

1. **Empirical-Bayes shrinkage** (:func:`eb_shrink`, numpy only).  Every marginal over a
   set S that some view contains is first estimated by the variance-weighted average of the
   views' projections (weights ``1 / (C_i Var_i)``, as in CALM §4.4).  Its table is then
   split, in an orthonormal (Helmert) basis, into the parts already fixed by its
   (|S|-1)-way sub-marginals and its own top-order interaction block.  The block is shrunk
   toward the block of the maximum-entropy table of those sub-marginals (for |S| = 1,
   toward uniform, or with ``location=True`` binary ones toward their common centre) by its
   posterior mean under a scale-mixture-of-normals prior whose
   weights are fitted by EM over all blocks of the same order (adaptive shrinkage,
   Stephens 2017, "False discovery rates: a new deal", on a grid of prior variances).
   The noise variance of each block is known (the oracle's), so noise-dominated
   interactions are pulled to their max-entropy value and strong ones are kept.  This is
   post-processing: it costs no privacy.  The shrunk marginals are consistent by
   construction.
2. **Clique selection**: a view whose top-order interaction was shrunk by more than
   ``1 - keep`` is replaced by its sub-marginals (recursively), which both regularises the
   model and keeps the junction tree small.  When the fit of the selected cliques is
   predicted to exceed ``max_fit_seconds`` or ``max_fit_memory_mb``
   (:mod:`dpmarginals.inference.pgm_cost`), the weakest views are replaced the same way
   until it does not.
3. **Graphical-model fit** (:func:`fit_graphical_model`): the selected marginals go as
   ``mbi.LinearMeasurement(table, clique, stddev)`` into ``mbi``'s mirror-descent estimator
   (McKenna, Sheldon, Miklau, ICML 2019), which returns the maximum-entropy distribution
   in the marginal polytope closest to them — one non-negative, consistent joint
   distribution.  Its log-potentials are kept as plain numpy arrays
   (:class:`GraphicalModel`), so answering queries and loading a saved synopsis need
   neither JAX nor ``mbi``.  A fit predicted over the limits is refused before it starts,
   and one that uses twice its predicted CPU time is stopped.

Only step 3 needs the optional ``pgm`` extra (``pip install 'dpmarginals[pgm]'``); it
switches JAX to 64-bit floats for the whole process (``jax_enable_x64``), as ``mbi``
recommends, and keeps JAX's compiled programs on disk (:func:`require_mbi`).

>>> import numpy as np
>>> from dpmarginals.core.domain import Domain
>>> dom = Domain(("a", "b"), (2, 2))
>>> model = GraphicalModel(dom, [(("a", "b"), np.log(np.array([[0.4, 0.1], [0.1, 0.4]])))])
>>> model.marginal(["b"]).round(3).tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import itertools
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import numpy as np

from dpmarginals.core import tuned as _tuned
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.extras import MissingExtraError, message
from dpmarginals.inference import location_prior
from dpmarginals.inference.grid_mixture import fit_scale_mixture
from dpmarginals.inference.maxent import max_entropy
from dpmarginals.inference.pgm_cost import (
    MAX_FIT_MEMORY_MB,
    MAX_FIT_SECONDS,
    FitWatch,
    check_fit,
    check_limits,
    fit_within,
    limits_to_json,
    predict_fit,
)
from dpmarginals.inference.signed_prior import fit_signed, single_coefficients

__all__ = [
    "EXTRA_MESSAGE",
    "GraphicalModel",
    "NoisyMarginal",
    "ShrinkResult",
    "eb_shrink",
    "fit_graphical_model",
    "pgm_estimate",
    "require_mbi",
    "select_cliques",
]

EXTRA_MESSAGE = message("pgm", "graphical-model inference (calm-pgm, inference='pgm')")

#: Largest joint table (cells) that :class:`GraphicalModel` materialises to answer queries;
#: larger models use variable elimination.
JOINT_LIMIT = 2**22
#: Largest intermediate factor variable elimination may build.
FACTOR_LIMIT = 2**26
#: Mirror-descent iterations.  Fewer regularise small models (on 18 collections of MSNBC,
#: Kosarak, Adult at d = 8-16 with pairs or small junction trees, calm-pgm's mean SSE was
#: 0.61x CALM's after 200 iterations, 0.65x after 1000) but leave dense ones far from the
#: optimum: 560 overlapping triples in one 16-way clique (Kosarak d = 16, n = 2^20) were 17x
#: CALM's error after 200 iterations and 0.46x after 1000 (Armijo's step shrinks with the
#: overlap).  ``TOL`` (None: run them all) is mbi's convergence criterion.
ITERS = _tuned.ITERS  # provenance: core/tuned.py
TOL = None
#: ``$DPMARGINALS_JAX_CACHE``: where JAX keeps compiled programs across processes (default
#: ``~/.cache/dpmarginals/jax``); "off" keeps them in memory only.
ENV_JAX_CACHE = "DPMARGINALS_JAX_CACHE"


class NoisyMarginal(Protocol):
    """Anything with the fields of :class:`dpmarginals.inference.views.NoisyView`."""

    attributes: tuple[str, ...]
    table: np.ndarray
    variance: float


def require_mbi() -> Any:
    """Import ``mbi`` (64-bit JAX, compilation cached on disk), or raise a
    :class:`~dpmarginals.core.extras.MissingExtraError` naming the extra."""
    try:
        import jax
    except ImportError:
        raise MissingExtraError(EXTRA_MESSAGE, "pgm", "jax") from None
    jax.config.update("jax_enable_x64", True)
    _cache_compilation(jax)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mbi
            from mbi import estimation  # noqa: F401
    except ImportError:
        raise MissingExtraError(EXTRA_MESSAGE, "pgm", "mbi") from None
    return mbi


def _cache_compilation(jax: Any) -> None:
    """JAX's persistent compilation cache in ``$DPMARGINALS_JAX_CACHE`` (default the user
    cache's ``jax`` folder), unless the user chose a folder for JAX already.

    Every program is kept, however small or fast to compile (``mbi`` compiles a few large
    programs per model structure and many small ones): the first fit of a structure in a
    new process then loads them instead of compiling (3.5 s instead of 18 s on a 65-clique
    model here).  ``DPMARGINALS_JAX_CACHE=off`` turns it off.
    """
    setting = os.environ.get(ENV_JAX_CACHE, "").strip()
    if setting.lower() in ("off", "0", "false", "no", "none") or \
            jax.config.jax_compilation_cache_dir:
        return
    if setting:
        folder = os.path.expanduser(setting)
    else:
        from dpmarginals.datasets.files import cache_dir

        folder = str(cache_dir() / "jax")
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


# -- the orthonormal (Helmert) basis ----------------------------------------------------
@cache
def _helmert(c: int) -> np.ndarray:
    """Orthonormal c x c matrix whose first row is constant (1/sqrt(c))."""
    h = np.zeros((c, c))
    h[0] = 1.0 / math.sqrt(c)
    for i in range(1, c):
        h[i, :i] = 1.0 / math.sqrt(i * (i + 1))
        h[i, i] = -i / math.sqrt(i * (i + 1))
    return h


def _transform(table: np.ndarray, inverse: bool = False) -> np.ndarray:
    out = np.asarray(table, dtype=np.float64)
    for axis, c in enumerate(out.shape):
        h = _helmert(c).T if inverse else _helmert(c)
        out = np.moveaxis(np.tensordot(h, out, axes=([1], [axis])), 0, axis)
    return out


def _top(table: np.ndarray) -> np.ndarray:
    """The top-order interaction block: coefficients non-constant along every axis."""
    return _transform(table)[tuple(slice(1, None) for _ in table.shape)]


def _with_top(table: np.ndarray, block: np.ndarray) -> np.ndarray:
    coef = _transform(table)
    coef[tuple(slice(1, None) for _ in table.shape)] = block
    return _transform(coef, inverse=True)


def _project(attrs: Sequence[str], table: np.ndarray, onto: Sequence[str]) -> np.ndarray:
    """Marginal of ``table`` (axes ``attrs``) on ``onto`` (axes in that order)."""
    drop = tuple(i for i, a in enumerate(attrs) if a not in onto)
    summed = table.sum(axis=drop) if drop else table
    kept = [a for a in attrs if a in onto]
    return np.transpose(summed, [kept.index(a) for a in onto])


# -- step 1: empirical-Bayes shrinkage --------------------------------------------------
@dataclass(frozen=True)
class ShrinkResult:
    """Shrunk, mutually consistent marginals on every subset of every view.

    ``tables[S]``: the marginal on S (attributes in domain order); ``factor[S]``: how much
    of S's top-order interaction beyond max-entropy was kept (0 = none, 1 = all);
    ``noise[S]``: the variance of one coefficient of S's pooled noisy estimate;
    ``prior[j]``: the fitted mixture (grid of variances, weights) of order j.
    """

    tables: dict[tuple[str, ...], np.ndarray]
    factor: dict[tuple[str, ...], float]
    noise: dict[tuple[str, ...], float]
    prior: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def prior_variance(self, order: int) -> float:
        """Mean prior variance of one order-``order`` coefficient (nan if unmeasured)."""
        if order not in self.prior:
            return math.nan
        grid, weights = self.prior[order]
        return float((grid * weights).sum())


def _fit_mixture(resid: list[np.ndarray], noise: np.ndarray, iters: int = 300,
                 scale: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adaptive shrinkage of blocks r_b ~ N(0, (s_b g + v_b) I), g from a fitted grid mixture.

    ``scale``: each block's prior scale s_b (default 1; :func:`capacity_scale`).  Returns the
    grid, its weights and each block's posterior-mean factor
    ``sum_k w_bk s_b g_k / (s_b g_k + v_b)``.
    """
    dims = np.array([r.size for r in resid], dtype=np.float64)
    sq = np.array([float((r**2).sum()) for r in resid])
    s = np.ones(len(resid)) if scale is None else np.asarray(scale, dtype=np.float64)
    fit = fit_scale_mixture(sq, dims, noise, s, iters)
    return fit.grid, fit.weights, fit.factors


def concentration(p: Any) -> float:
    """``sum_x p(x)^2`` of a distribution (clipped at 0 and normalised; uniform if empty)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, None)
    total = p.sum()
    return float(((p / total) ** 2).sum()) if total > 0 else 1.0 / p.size


def interaction_capacity(sub: Sequence[str], marginals: Mapping[tuple[str, ...], np.ndarray]
                         ) -> float:
    """``prod_a (1 - sum_x p_a(x)^2)``: how much the attributes of ``sub`` *can* interact.

    An interaction's energy is bounded by its attributes' spread (for two binary attributes
    ``cov^2 <= var_a var_b``, and ``1 - kappa_a = 2 var_a``): a pair of rare items cannot
    carry the energy of a pair of common ones.  On Kosarak d = 32 the top 10% of pairs by
    capacity hold 63% of the pairs' energy (85% for the top 10% by energy).
    """
    return math.prod(1.0 - concentration(marginals[(a,)]) for a in sub)


def capacity_scale(subs: Sequence[Sequence[str]], dims: Sequence[int],
                   marginals: Mapping[tuple[str, ...], np.ndarray]) -> np.ndarray:
    """Each block's prior scale per coefficient, ``capacity / D``, relative to the mean
    (the empirical-Bayes prior of :func:`_fit_mixture` is then proportional to what each
    interaction can hold, not the same for every set of an order)."""
    cap = np.array([max(interaction_capacity(s, marginals), 1e-12) / d
                    for s, d in zip(subs, dims, strict=True)])
    return cap / cap.mean()


def _canonical(domain: Domain, attrs: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(attrs, key=domain.index))


def eb_shrink(domain: Domain, views: Sequence[NoisyMarginal], *,
              first_order: bool = True, capacity: Sequence[int] = (), signs: bool = False,
              location: bool = False,
              energies: Callable[[tuple[str, ...]], float] | None = None) -> ShrinkResult:
    """Pool, then shrink every marginal's top-order interaction toward max-entropy.

    ``views``: the unbiased noisy marginals with their per-cell noise variance (f -> 0 form,
    as :class:`~dpmarginals.inference.views.NoisyView` carries it).  ``first_order=False``
    leaves the 1-way marginals unshrunk (pooled only).  ``capacity``: orders whose prior
    scales with each set's capacity (:func:`capacity_scale`; the adaptive method passes
    :data:`CAPACITY_ORDERS`).  ``signs=True``: orders whose blocks are single coefficients
    (binary attributes) get a prior that learns which sign the data's interactions take
    (:mod:`~dpmarginals.inference.signed_prior`; the adaptive method's).  ``location=True``:
    binary 1-way marginals are shrunk toward their common centre, not toward uniform
    (:mod:`~dpmarginals.inference.location_prior`; the adaptive method's release).  ``energies``:
    known interaction energies (e.g. a public sample's,
    :meth:`~dpmarginals.planning.optimal.Structure.energy_of`): each block is then
    shrunk by ``E / (E + D v)``, the factor the planner's prediction assumes, instead of the
    fitted prior's posterior (``benchmarks/adaptive_headroom.py`` measures what that is worth).
    """
    if not views:
        raise DPMarginalsError("graphical-model inference needs at least one noisy view")
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    canon = []
    for v in views:
        attrs = _canonical(domain, v.attributes)
        table = _project(tuple(v.attributes), np.asarray(v.table, dtype=np.float64), attrs)
        if not (float(v.variance) > 0 and math.isfinite(float(v.variance))):
            raise DPMarginalsError(f"view {list(attrs)}: variance must be > 0")
        canon.append((attrs, table, float(v.variance)))
    members: dict[tuple[str, ...], list[int]] = {}
    for i, (attrs, _, _) in enumerate(canon):
        for j in range(1, len(attrs) + 1):
            for sub in itertools.combinations(attrs, j):
                members.setdefault(sub, []).append(i)
    tables: dict[tuple[str, ...], np.ndarray] = {}
    factor: dict[tuple[str, ...], float] = {}
    noise: dict[tuple[str, ...], float] = {}
    prior: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    top_order = max(len(a) for a, _, _ in canon)
    for order in range(1, top_order + 1):
        items = []
        for sub, idx in members.items():
            if len(sub) != order:
                continue
            acc, wsum = 0.0, 0.0
            for i in idx:
                attrs, table, var = canon[i]
                c_i = math.prod(sizes[a] for a in attrs if a not in sub)
                w = 1.0 / (c_i * var)
                acc = acc + w * _project(attrs, table, sub)
                wsum += w
            pooled = np.asarray(acc / wsum)
            noise[sub] = 1.0 / wsum
            if order == 1:
                pooled = pooled - (pooled.sum() - 1.0) / pooled.size  # the total is known: 1
                base = np.full(pooled.shape, 1.0 / pooled.size)
            else:
                base = _maxent_base(sub, tables, sizes)
            items.append((sub, pooled, base))
        if order == 1 and not first_order:
            for sub, pooled, _ in items:
                tables[sub], factor[sub] = pooled, 1.0
            continue
        resid = [_top(p) - _top(b) for _, p, b in items]
        scale = (capacity_scale([s for s, _, _ in items], [r.size for r in resid], tables)
                 if order in capacity else None)
        noises = np.array([noise[s] for s, _, _ in items])
        if order == 1 and location:
            facs, kept, prior[order] = _shrink_one_way(resid, noises, scale, signs)
        else:
            facs, kept, prior[order] = _shrink_blocks(resid, noises, scale, signs)
        if energies is not None:
            known = np.array([float(energies(s)) for s, _, _ in items])
            bad = np.flatnonzero(~(np.isfinite(known) & (known >= 0)))
            if bad.size:
                raise DPMarginalsError(f"energies{list(items[bad[0]][0])} must be a finite "
                                       f"number >= 0, got {float(known[bad[0]])!r}")
            block_noise = np.array([noise[s] * r.size for (s, _, _), r in zip(items, resid,
                                                                              strict=True)])
            facs = known / np.maximum(known + block_noise, 1e-300)
            kept = [f * r for f, r in zip(facs, resid, strict=True)]
        for (sub, _, base), r, f in zip(items, kept, facs, strict=True):
            tables[sub] = _with_top(base, _top(base) + r)
            factor[sub] = float(f)
    return ShrinkResult(tables, factor, noise, prior)


Shrunk = tuple[np.ndarray, list[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _shrink_blocks(resid: list[np.ndarray], noises: np.ndarray, scale: np.ndarray | None,
                   signs: bool) -> Shrunk:
    """One order's blocks shrunk toward 0: the signed prior when ``signs`` and every block is
    one coefficient, else the scale mixture.  Returns the kept fractions, the shrunk blocks
    and the fitted prior (variances, weights)."""
    single = single_coefficients(resid) if signs else None
    if single is not None:  # binary attributes: signed_prior
        fit = fit_signed(single, noises, scale)
        return (fit.kept, [np.reshape(m, r.shape) for m, r in zip(fit.mean, resid, strict=True)],
                (fit.variances, fit.weights))
    grid, weights, facs = _fit_mixture(resid, noises, scale=scale)
    return facs, [f * r for f, r in zip(facs, resid, strict=True)], (grid, weights)


def _shrink_one_way(resid: list[np.ndarray], noises: np.ndarray, scale: np.ndarray | None,
                    signs: bool) -> Shrunk:
    """1-way blocks with ``location=True``: the binary attributes' toward their common centre
    (:mod:`~dpmarginals.inference.location_prior`, when there are enough of them), the other
    attributes' as :func:`_shrink_blocks` does, fitted among themselves."""
    binary = [i for i, r in enumerate(resid) if r.size == 1]
    if len(binary) < location_prior.MIN_BLOCKS:
        return _shrink_blocks(resid, noises, scale, signs)
    loc = location_prior.fit_location(np.array([float(resid[i].ravel()[0]) for i in binary]),
                                      noises[binary])
    facs, kept = np.ones(len(resid)), list(resid)
    for j, i in enumerate(binary):
        facs[i], kept[i] = loc.kept[j], np.reshape(loc.mean[j], resid[i].shape)
    others = [i for i, r in enumerate(resid) if r.size > 1]
    if others:
        part, shrunk, _ = _shrink_blocks([resid[i] for i in others], noises[others],
                                         None if scale is None else scale[others], signs)
        for j, i in enumerate(others):
            facs[i], kept[i] = part[j], shrunk[j]
    return facs, kept, (loc.variances, loc.weights)


def _maxent_base(sub: tuple[str, ...], tables: Mapping[tuple[str, ...], np.ndarray],
                 sizes: Mapping[str, int]) -> np.ndarray:
    """Max-entropy table on ``sub`` given the (already shrunk) marginals of its facets."""
    cons = []
    for facet in itertools.combinations(range(len(sub)), len(sub) - 1):
        t = np.clip(tables[tuple(sub[i] for i in facet)], 1e-12, None)
        cons.append((facet, t / t.sum()))
    return max_entropy(tuple(range(len(sub))), cons, [sizes[a] for a in sub])


#: Orders whose shrinkage prior the adaptive method scales with each set's capacity
#: (:func:`interaction_capacity`).  Pairs only: ``cov^2 <= var_a var_b`` bounds a pair
#: exactly, and on a dev grid of the CALM Fig. 4/5 settings (2 x 56 settings x 3 repeats)
#: scaling pairs took the adaptive method's geometric-mean ratio to CALM from 0.539 / 0.534
#: to 0.525 / 0.524 (Kosarak k = 3: 0.81 / 0.76 to 0.76 / 0.67), while scaling every order
#: cost Kosarak k = 6 (0.50 -> 0.60).  calm-pgm keeps the exchangeable prior: on its quick
#: grid the scaled one took its geometric-mean ratio to CALM from 0.83 to 0.86.
CAPACITY_ORDERS = _tuned.CAPACITY_ORDERS  # provenance: core/tuned.py


# -- step 2: clique selection -----------------------------------------------------------
#: Default ``keep``: every view stays a clique.  Dropping views whose interaction kept less
#: than 0.2 (the earlier default) made calm-pgm 2.5x worse on MSNBC d=16, k=6, eps=0.2 and
#: was never clearly better on the quick grids of CALM Fig. 4/5 (``dpmarginals experiment
#: calm-pgm``): a weakly kept interaction still beats none.
KEEP = _tuned.KEEP  # provenance: core/tuned.py
#: Shrinkage priors of :func:`pgm_estimate` (see there).
PRIORS = ("exchangeable", "adaptive")


def select_cliques(views: Sequence[Sequence[str]], shrunk: ShrinkResult,
                   keep: float = KEEP, *,
                   fits: Callable[[list[tuple[str, ...]]], bool] | None = None,
                   ) -> list[tuple[str, ...]]:
    """The maximal sets whose interaction survived shrinkage (factor >= ``keep``).

    A view attribute set with a smaller factor is replaced by its facets, recursively;
    1-way sets are always kept.  ``keep=0`` keeps every view.  ``fits``: a test of a
    selection (e.g. its predicted fit within the limits); while the selection fails it,
    the fewest of its largest sets, weakest interaction first, are replaced by their facets
    (a binary search over how many); when no set is left to replace, the 1-way selection is
    returned and the caller refuses it.
    """
    chosen: set[tuple[str, ...]] = set()
    stack = [tuple(v) for v in views]
    seen: set[tuple[str, ...]] = set()
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        if len(s) == 1 or shrunk.factor.get(s, 1.0) >= keep:
            chosen.add(s)
        else:
            stack.extend(_facets(s))
    selection = _maximal(chosen)
    if fits is None:
        return selection
    while not fits(selection) and max(len(s) for s in selection) > 1:
        top = max(len(s) for s in selection)
        weakest = sorted((s for s in selection if len(s) == top),
                         key=lambda s: (shrunk.factor.get(s, 1.0), s))

        def replaced(j: int, base: list[tuple[str, ...]] = selection,
                     drop: list[tuple[str, ...]] = weakest) -> list[tuple[str, ...]]:
            out = set(base) - set(drop[:j])
            out.update(f for s in drop[:j] for f in _facets(s))
            return _maximal(out)

        if not fits(replaced(len(weakest))):
            selection = replaced(len(weakest))
            continue
        lo, hi = 1, len(weakest)  # fits(replaced(hi)) holds; find the smallest such j
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(replaced(mid)):
                hi = mid
            else:
                lo = mid + 1
        return replaced(lo)
    return selection


def _facets(s: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [tuple(s[i] for i in f) for f in itertools.combinations(range(len(s)), len(s) - 1)]


def _maximal(sets: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The sets no other set contains (each set's subsets of the sizes present are listed
    once, not compared pairwise: plans have thousands of sets)."""
    sizes = sorted({len(s) for s in sets})
    inside: set[frozenset[str]] = set()
    for t in sets:
        for size in sizes:
            if size >= len(t):
                break
            inside.update(map(frozenset, itertools.combinations(t, size)))
    return sorted((s for s in sets if frozenset(s) not in inside), key=lambda s: (len(s), s))


# -- step 3: the graphical model --------------------------------------------------------
@dataclass(eq=False)
class GraphicalModel:
    """A distribution ``p(x) ∝ exp(sum_C theta_C(x_C))`` over ``domain`` (numpy only).

    ``potentials``: (clique attributes, log-potential table with axes in that order).
    """

    domain: Domain
    potentials: list[tuple[tuple[str, ...], np.ndarray]]
    _joint: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        pots = []
        for attrs, table in self.potentials:
            attrs = tuple(attrs)
            arr = np.asarray(table, dtype=np.float64).reshape(self.domain.project(attrs).shape)
            canon = _canonical(self.domain, attrs)
            pots.append((canon, np.transpose(arr, [attrs.index(a) for a in canon])))
        self.potentials = pots

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [a for a, _ in self.potentials]

    def _factor(self, attrs: tuple[str, ...], table: np.ndarray,
                into: tuple[str, ...]) -> np.ndarray:
        shape = [self.domain.size(a) if a in attrs else 1 for a in into]
        return table.reshape(shape)

    def joint(self) -> np.ndarray:
        """The full joint table (axes in domain order); only for small domains."""
        if self._joint is None:
            if self.domain.cells() > JOINT_LIMIT:
                raise DPMarginalsError(f"the joint of {self.domain.cells():,} cells is too large")
            log = np.zeros(self.domain.shape)
            for attrs, table in self.potentials:
                log = log + self._factor(attrs, table, self.domain.attributes)
            p = np.exp(log - log.max())
            self._joint = p / p.sum()
        return self._joint

    def marginal(self, attrs: Sequence[str]) -> np.ndarray:
        """The model's marginal on ``attrs`` (axes in the order given), summing to 1."""
        attrs = tuple(attrs)
        canon = _canonical(self.domain, attrs)
        if self.domain.cells() <= JOINT_LIMIT:
            out = _project(self.domain.attributes, self.joint(), canon)
        else:
            out = self._eliminate(canon)
        return np.ascontiguousarray(np.transpose(out, [canon.index(a) for a in attrs]))

    def _eliminate(self, query: tuple[str, ...]) -> np.ndarray:
        """Variable elimination in log space, greedy by the size of the factor created."""
        factors = [(a, t) for a, t in self.potentials]
        factors += [((a,), np.zeros(self.domain.size(a))) for a in query]
        rest = {a for a, _ in factors for a in a} - set(query)
        order = self.domain.index
        while rest:
            costs = {v: math.prod(self.domain.size(a) for a in
                                  set().union(*(set(a) for a, _ in factors if v in a)))
                     for v in rest}
            var = min(sorted(rest, key=order), key=costs.__getitem__)
            if costs[var] > FACTOR_LIMIT:
                raise DPMarginalsError("the graphical model is too dense to answer this query "
                                       f"(an intermediate table of {costs[var]:,} cells)")
            touching = [(a, t) for a, t in factors if var in a]
            factors = [(a, t) for a, t in factors if var not in a]
            scope = tuple(sorted(set().union(*(set(a) for a, _ in touching)), key=order))
            log = sum(self._factor(a, t, scope) for a, t in touching)
            axis = scope.index(var)
            top = np.max(log, axis=axis, keepdims=True)
            summed = np.log(np.exp(log - top).sum(axis=axis)) + np.squeeze(top, axis=axis)
            factors.append((tuple(a for a in scope if a != var), summed))
            rest.discard(var)
        log = sum(self._factor(a, t, query) for a, t in factors)
        p = np.exp(log - np.max(log))
        return p / p.sum()

    def to_dict(self) -> dict[str, Any]:
        return {"potentials": [{"attributes": list(a), "values": t.ravel().tolist()}
                               for a, t in self.potentials]}

    @classmethod
    def from_dict(cls, domain: Domain, spec: Mapping[str, Any]) -> GraphicalModel:
        return cls(domain, [(tuple(p["attributes"]), np.asarray(p["values"], float))
                            for p in spec["potentials"]])


def fit_graphical_model(
    domain: Domain,
    measurements: Sequence[tuple[Sequence[str], np.ndarray, float]],
    *,
    iters: int = ITERS,
    warm_start: GraphicalModel | None = None,
    tol: float | None = None,
    watch: FitWatch | None = None,
) -> GraphicalModel:
    """``mbi``'s mirror descent on ``(clique, table of fractions, per-cell stddev)``.

    Minimises ``sum_i ||mu_{C_i} - y_i||^2 / (2 sigma_i^2)`` over the marginal polytope of
    the graphical model on the measured cliques (total fixed to 1).  ``tol``: stop once the
    loss improves by at most this fraction over two blocks of 50 iterations running (mbi's
    criterion; None runs every iteration).  ``watch``: a :class:`FitWatch` called after each
    block, which stops a fit that overruns its prediction.
    """
    mbi = require_mbi()
    from mbi import estimation

    # mbi sees the attributes by their index: it orders junction-tree messages through
    # sets, and strings hash differently in every process (integers do not), so with
    # names each process compiled a different program and JAX's disk cache never hit.
    dom = mbi.Domain(tuple(range(len(domain))), domain.sizes)
    meas = []
    for attrs, table, sd in measurements:
        canon = _canonical(domain, attrs)
        y = _project(tuple(attrs), np.asarray(table, dtype=np.float64), canon)
        meas.append(mbi.LinearMeasurement(y.ravel(), tuple(map(domain.index, canon)),
                                          float(sd)))
    warm = None
    if warm_start is not None:
        warm = _to_clique_vector(mbi, dom, warm_start)
    model = estimation.MirrorDescent().estimate(dom, meas, known_total=1.0, iters=iters,
                                                warm_start=warm, tol=tol, callback_fn=watch)
    pots = []
    for clique in model.potentials.cliques:
        f = model.potentials.tables[clique]
        attrs = tuple(domain.attributes[i] for i in f.domain.attributes)
        pots.append((attrs, np.asarray(f.values, dtype=np.float64)))
    return GraphicalModel(domain, pots)


#: Model structures (domain sizes, cliques) compiled in this process: no compilation to
#: predict for them (a bootstrap's re-fits, repeated runs).
_COMPILED: set[tuple[Any, ...]] = set()


def _structure(domain: Domain, cliques: Sequence[Sequence[str]]) -> tuple[Any, ...]:
    """What JAX's compiled program depends on: the sizes and the measurements' cliques in
    their order."""
    return (domain.attributes, domain.sizes, tuple(tuple(c) for c in cliques))


def _to_clique_vector(mbi: Any, dom: Any, model: GraphicalModel) -> Any:
    import jax.numpy as jnp

    tables = {}
    for attrs, table in model.potentials:
        clique = tuple(map(model.domain.index, attrs))
        tables[clique] = mbi.Factor(dom.project(clique), jnp.asarray(table))
    return mbi.CliqueVector(dom, list(tables), tables)


def pgm_estimate(
    domain: Domain,
    views: Sequence[NoisyMarginal],
    *,
    shrink: bool = True,
    keep: float = KEEP,
    iters: int = ITERS,
    warm_start: GraphicalModel | None = None,
    cliques: Sequence[Sequence[str]] | None = None,
    tol: float | None = TOL,
    max_fit_seconds: float | None = MAX_FIT_SECONDS,
    max_fit_memory_mb: float | None = MAX_FIT_MEMORY_MB,
    priors: str = "exchangeable",
) -> tuple[GraphicalModel, dict[str, Any]]:
    """The whole inference: shrinkage (optional), clique selection, ``mbi`` fit.

    ``priors``: the shrinkage priors (:data:`PRIORS`): ``"exchangeable"`` (calm-pgm's: one
    scale mixture per order) or ``"adaptive"`` (the adaptive method's numpy release's: pairs'
    prior scaled by capacity, binary interactions' sign learned, binary 1-way marginals
    toward their common centre; :func:`eb_shrink` with ``capacity``, ``signs``, ``location``).

    ``shrink=False`` gives the plain ``mbi`` estimator on the noisy views (every view a
    measurement with its stddev).  ``cliques`` fixes the selected cliques (a re-fit with
    the same structure reuses JAX's compiled program).  The fit's CPU seconds and memory
    are predicted first (:func:`~dpmarginals.inference.pgm_cost.predict_fit`): when the
    selected cliques' prediction exceeds ``max_fit_seconds`` or ``max_fit_memory_mb``, the
    views with the weakest shrunk interactions are modelled through their sub-marginals
    only until it does not; with ``cliques`` fixed, or without shrinkage, or when even the
    1-way model exceeds them, the fit is refused, naming the prediction (``None``: no
    limit).  A fit that uses more than twice its predicted CPU time is stopped.  Returns
    the model and an info dict (cliques, seconds, prediction, iterations run, fitted prior
    variances per order).
    """
    clock = time.perf_counter()
    require_mbi()
    max_fit_seconds, max_fit_memory_mb = check_limits(max_fit_seconds, max_fit_memory_mb)
    if priors not in PRIORS:
        raise DPMarginalsError(f"priors must be one of {', '.join(PRIORS)}, got {priors!r}")
    if shrink:
        shrunk = (eb_shrink(domain, views) if priors == "exchangeable" else
                  eb_shrink(domain, views, capacity=CAPACITY_ORDERS, signs=True, location=True))
        sets = [_canonical(domain, v.attributes) for v in views]
        info: dict[str, Any] = {
            "shrink": True, "keep": keep, "priors": priors,
            "prior_variance": {str(j): shrunk.prior_variance(j) for j in sorted(shrunk.prior)},
            "shrink_factors": {",".join(sorted(sub)): round(f, 6)
                               for sub, f in shrunk.factor.items()},
            "kept_fraction": {str(j): float(np.mean([f for s, f in shrunk.factor.items()
                                                     if len(s) == j]))
                              for j in sorted({len(s) for s in shrunk.factor})},
        }
        if cliques is None:
            unbounded = select_cliques(sets, shrunk, keep=keep)
            cliques = select_cliques(
                sets, shrunk, keep=keep,
                fits=lambda c: fit_within(domain, c, iters, max_fit_seconds,
                                          max_fit_memory_mb))
            if cliques != unbounded:
                info["cliques_reduced"] = _reduction(unbounded, cliques)
        cliques = [_canonical(domain, c) for c in cliques]
        missing = [list(c) for c in cliques if c not in shrunk.tables]
        if missing:
            raise DPMarginalsError(f"cliques {missing} are not inside any view")
        meas = [(c, shrunk.tables[c], math.sqrt(shrunk.noise[c])) for c in cliques]
    else:
        meas = [(tuple(v.attributes), np.asarray(v.table), math.sqrt(v.variance)) for v in views]
        cliques = [_canonical(domain, v.attributes) for v in views]
        info = {"shrink": False}
    structure = _structure(domain, [c for c, _, _ in meas])
    cost = predict_fit(domain, [c for c, _, _ in meas], iters, compiled=structure in _COMPILED)
    check_fit(cost, max_fit_seconds, max_fit_memory_mb)
    if "cliques_reduced" in info:
        reduced = info["cliques_reduced"]
        warnings.warn(
            f"graphical model: {reduced['replaced']} of the {reduced['of']} marginals are "
            "modelled through their sub-marginals only (the weakest interactions), to keep "
            f"the fit within max_fit_seconds={max_fit_seconds:g} and "
            f"max_fit_memory_mb={max_fit_memory_mb:g} (predicted {cost.describe()}); raise "
            "them for the full model", stacklevel=2)
    shrunk_seconds = time.perf_counter() - clock
    watch = FitWatch(cost)
    model = fit_graphical_model(domain, meas, iters=iters, warm_start=warm_start, tol=tol,
                                watch=watch)
    _COMPILED.add(structure)
    info.update({"cliques": [list(c) for c in cliques], "iters": iters,
                 "iterations": watch.steps, "tol": tol,
                 "predicted": {"seconds": round(cost.seconds, 3),
                               "memory_mb": round(cost.memory_mb, 1),
                               "compile_seconds": round(cost.compile_seconds, 3),
                               "step_seconds": cost.step_seconds,
                               "tree_cells": cost.tree_cells, "step_cells": cost.step_cells},
                 "limits": limits_to_json(max_fit_seconds, max_fit_memory_mb),
                 "fit_cpu_seconds": watch.cpu_seconds,
                 "shrink_seconds": shrunk_seconds,
                 "fit_seconds": time.perf_counter() - clock - shrunk_seconds})
    return model, info


def _reduction(full: Sequence[tuple[str, ...]], chosen: Sequence[tuple[str, ...]]
               ) -> dict[str, Any]:
    """How a budgeted selection differs from the unbounded one."""
    kept = set(chosen)
    replaced = [s for s in full if s not in kept]
    return {"replaced": len(replaced), "of": len(full),
            "examples": [list(s) for s in replaced[:5]]}
