"""Empirical-Bayes shrinkage of noisy marginals toward maximum entropy (issue #9, step 1).

Every marginal over a set S that some view contains is first estimated by the
variance-weighted average of the views' projections (weights ``1 / (C_i Var_i)``, as in
CALM §4.4).  Its table is then split, in the Helmert basis
(:mod:`dpmarginals.inference.helmert`), into the parts already fixed by its
(|S|-1)-way sub-marginals and its own top-order interaction block.  The block is shrunk
toward the block of the maximum-entropy table of those sub-marginals (for |S| = 1, toward
uniform, or with ``location=True`` binary ones toward their common centre) by its
posterior mean under a scale-mixture-of-normals prior whose weights are fitted by EM over
all blocks of the same order (adaptive shrinkage, Stephens 2017, "False discovery rates:
a new deal", on a grid of prior variances).  The noise variance of each block is known
(the oracle's), so noise-dominated interactions are pulled to their max-entropy value and
strong ones are kept.  This is post-processing: it costs no privacy.  The shrunk
marginals are consistent by construction, also where a noisy facet has a negative cell
(:func:`facet_consistent`).  numpy only.

>>> import numpy as np
>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.inference.views import NoisyView
>>> dom = Domain(("a", "b"), (2, 2))
>>> view = NoisyView(("a", "b"), np.array([[0.3, 0.2], [0.2, 0.3]]), 1000, 1e-6)
>>> shrunk = eb_shrink(dom, [view])
>>> shrunk.tables[("a",)].round(3).tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from dpmarginals.core import tuned as _tuned
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference import location_prior
from dpmarginals.inference.grid_mixture import fit_scale_mixture
from dpmarginals.inference.helmert import project, top, transform, with_top
from dpmarginals.inference.maxent import max_entropy
from dpmarginals.inference.signed_prior import fit_signed, prefers_sign, single_coefficients

__all__ = [
    "ADAPTIVE_PRIORS",
    "CAPACITY_ORDERS",
    "NoisyMarginal",
    "ShrinkResult",
    "capacity_scale",
    "concentration",
    "eb_shrink",
    "facet_consistent",
    "fit_mixture",
    "interaction_capacity",
    "maxent_base",
    "sampling_variance",
]


class NoisyMarginal(Protocol):
    """Anything with the fields of :class:`dpmarginals.inference.views.NoisyView`."""

    attributes: tuple[str, ...]
    table: np.ndarray
    variance: float
    users: int



@dataclass(frozen=True)
class ShrinkResult:
    """Shrunk, mutually consistent marginals on every subset of every view.

    ``tables[S]``: the marginal on S (attributes in domain order); ``factor[S]``: how much
    of S's top-order interaction beyond max-entropy was kept (0 = none, 1 = all);
    ``noise[S]``: the variance of one coefficient of S's pooled noisy estimate;
    ``prior[j]``: the fitted mixture (grid of variances, weights) of order j;
    ``prior_kind[j]``: which prior order j's blocks were shrunk under: ``"mixture"`` (the
    scale mixture), ``"signed"`` (:mod:`~dpmarginals.inference.signed_prior`),
    ``"location"`` (binary 1-way blocks toward their centre,
    :mod:`~dpmarginals.inference.location_prior`; the others' by the mixture),
    ``"known energies"`` or ``"none"`` (left unshrunk).
    """

    tables: dict[tuple[str, ...], np.ndarray]
    factor: dict[tuple[str, ...], float]
    noise: dict[tuple[str, ...], float]
    prior: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    prior_kind: dict[int, str] = field(default_factory=dict)

    def per_order(self) -> dict[str, dict[str, Any]]:
        """What a release's info records of the shrinkage, per order (JSON keys):
        ``kept_fraction`` (the mean kept fraction) and ``prior_kind``."""
        orders = sorted({len(s) for s in self.factor})
        return {"kept_fraction": {str(j): float(np.mean([f for s, f in self.factor.items()
                                                          if len(s) == j])) for j in orders},
                "prior_kind": {str(j): k for j, k in sorted(self.prior_kind.items())}}

    def prior_variance(self, order: int) -> float:
        """Mean prior variance of one order-``order`` coefficient (nan if unmeasured)."""
        if order not in self.prior:
            return math.nan
        grid, weights = self.prior[order]
        return float((grid * weights).sum())


def fit_mixture(resid: list[np.ndarray], noise: np.ndarray, iters: int = 300,
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
    (the empirical-Bayes prior of :func:`fit_mixture` is then proportional to what each
    interaction can hold, not the same for every set of an order)."""
    cap = np.array([max(interaction_capacity(s, marginals), 1e-12) / d
                    for s, d in zip(subs, dims, strict=True)])
    return cap / cap.mean()


def eb_shrink(domain: Domain, views: Sequence[NoisyMarginal], *,
              first_order: bool = True, capacity: Sequence[int] = (), signs: bool = False,
              sign_test: bool = False, location: bool = False,
              energies: Callable[[tuple[str, ...]], float] | None = None,
              population: int | None = None) -> ShrinkResult:
    """Pool, then shrink every marginal's top-order interaction toward max-entropy.

    ``views``: the unbiased noisy marginals with their per-cell noise variance (f -> 0 form,
    as :class:`~dpmarginals.inference.views.NoisyView` carries it).  ``first_order=False``
    leaves the 1-way marginals unshrunk (pooled only).  ``capacity``: orders whose prior
    scales with each set's capacity (:func:`capacity_scale`; the adaptive method passes
    :data:`CAPACITY_ORDERS`).  ``signs=True``: orders whose blocks are single coefficients
    (binary attributes) get a prior that learns which sign the data's interactions take
    (:mod:`~dpmarginals.inference.signed_prior`; the adaptive method's); with
    ``sign_test=True`` only the orders whose residuals pass
    :func:`~dpmarginals.inference.signed_prior.prefers_sign`, the others the scale mixture
    (the adaptive method's releases; its planner's energies keep the untested prior).
    ``location=True``: binary 1-way marginals are shrunk toward their common centre, not
    toward uniform (:mod:`~dpmarginals.inference.location_prior`; the adaptive method's
    release).  ``energies``:
    known interaction energies (e.g. a public sample's,
    :meth:`~dpmarginals.planning.optimal.Structure.energy_of`): each block is then
    shrunk by ``E / (E + D v)``, the factor the planner's prediction assumes, instead of the
    fitted prior's posterior (``benchmarks/adaptive_headroom.py`` measures what that is worth).
    ``population``: the number of users the views' groups were drawn from, each user in one
    group (a local collection); every set's noise then also counts its sampling error
    (:func:`sampling_variance`) over the users of the views that contain it and are
    ``sampled`` (:class:`~dpmarginals.inference.views.NoisyView`), which the views' oracle
    variances leave out.  None: the oracle's noise only (e.g. views that all come from the
    same users).
    """
    if not views:
        raise DPMarginalsError("graphical-model inference needs at least one noisy view")
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    canon = []
    for v in views:
        attrs = domain.in_order(v.attributes)
        table = project(tuple(v.attributes), np.asarray(v.table, dtype=np.float64), attrs)
        if not (float(v.variance) > 0 and math.isfinite(float(v.variance))):
            raise DPMarginalsError(f"view {list(attrs)}: variance must be > 0")
        canon.append((attrs, table, float(v.variance)))
    users = ([int(v.users) if getattr(v, "sampled", True) else 0 for v in views]
             if population is not None else [])
    members: dict[tuple[str, ...], list[int]] = {}
    for i, (attrs, _, _) in enumerate(canon):
        for j in range(1, len(attrs) + 1):
            for sub in itertools.combinations(attrs, j):
                members.setdefault(sub, []).append(i)
    tables: dict[tuple[str, ...], np.ndarray] = {}
    factor: dict[tuple[str, ...], float] = {}
    noise: dict[tuple[str, ...], float] = {}
    prior: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    kind: dict[int, str] = {}
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
                acc = acc + w * project(attrs, table, sub)
                wsum += w
            pooled = np.asarray(acc / wsum)
            noise[sub] = 1.0 / wsum
            if population is not None:
                noise[sub] += sampling_variance(pooled, sum(users[i] for i in idx), population)
            if order == 1:
                pooled = pooled - (pooled.sum() - 1.0) / pooled.size  # the total is known: 1
                base = np.full(pooled.shape, 1.0 / pooled.size)
            else:
                base = facet_consistent(sub, maxent_base(sub, tables, sizes), tables)
            items.append((sub, pooled, base))
        if order == 1 and not first_order:
            for sub, pooled, _ in items:
                tables[sub], factor[sub] = pooled, 1.0
            kind[order] = "none"
            continue
        resid = [top(p) - top(b) for _, p, b in items]
        scale = (capacity_scale([s for s, _, _ in items], [r.size for r in resid], tables)
                 if order in capacity else None)
        noises = np.array([noise[s] for s, _, _ in items])
        if order == 1 and location:
            facs, kept, prior[order], kind[order] = _shrink_one_way(resid, noises, scale, signs,
                                                                    sign_test)
        else:
            facs, kept, prior[order], kind[order] = _shrink_blocks(resid, noises, scale, signs,
                                                                   sign_test)
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
            kind[order] = "known energies"
        for (sub, _, base), r, f in zip(items, kept, facs, strict=True):
            tables[sub] = with_top(base, top(base) + r)
            factor[sub] = float(f)
    return ShrinkResult(tables, factor, noise, prior, kind)


def sampling_variance(table: np.ndarray, users: int, population: int) -> float:
    """Variance of one coefficient of the marginal of ``users`` users drawn without
    replacement from ``population``, about the population's (CALM §4.3's sampling error).

    Averaged over the C - 1 contrasts of an orthonormal basis, one draw's variance is
    ``(1 - sum_x p_x^2) / (C - 1)`` (``1 / C`` at uniform cells), with ``p`` the table itself
    clipped at 0 (plug-in, as :mod:`~dpmarginals.synopsis.stderr`'s per-cell form); the
    mean of ``users`` draws scales it by ``(population - users) / ((population - 1) users)``.

    >>> round(sampling_variance(np.full(4, 0.25), 100, 10_000), 6)
    0.002475
    """
    if users <= 0:
        return 0.0
    p = np.clip(np.asarray(table, dtype=np.float64).ravel(), 0.0, None)
    p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / p.size)
    spread = (1.0 - float(p @ p)) / max(p.size - 1, 1)
    return spread * max(population - users, 0) / (max(population - 1, 1) * users)


Shrunk = tuple[np.ndarray, list[np.ndarray], tuple[np.ndarray, np.ndarray], str]


def _shrink_blocks(resid: list[np.ndarray], noises: np.ndarray, scale: np.ndarray | None,
                   signs: bool, sign_test: bool) -> Shrunk:
    """One order's blocks shrunk toward 0: the signed prior when ``signs`` and every block is
    one coefficient (and, with ``sign_test``, the residuals prefer a sign), else the scale
    mixture.  Returns the kept fractions, the shrunk blocks, the fitted prior (variances,
    weights) and its kind ("signed" or "mixture")."""
    single = single_coefficients(resid) if signs else None
    if single is not None and sign_test and not prefers_sign(single, noises):
        single = None
    if single is not None:  # binary attributes: signed_prior
        fit = fit_signed(single, noises, scale)
        return (fit.kept, [np.reshape(m, r.shape) for m, r in zip(fit.mean, resid, strict=True)],
                (fit.variances, fit.weights), "signed")
    grid, weights, facs = fit_mixture(resid, noises, scale=scale)
    return facs, [f * r for f, r in zip(facs, resid, strict=True)], (grid, weights), "mixture"


def _shrink_one_way(resid: list[np.ndarray], noises: np.ndarray, scale: np.ndarray | None,
                    signs: bool, sign_test: bool) -> Shrunk:
    """1-way blocks with ``location=True``: the binary attributes' toward their common centre
    (:mod:`~dpmarginals.inference.location_prior`, when there are enough of them), the other
    attributes' as :func:`_shrink_blocks` does, fitted among themselves."""
    binary = [i for i, r in enumerate(resid) if r.size == 1]
    if len(binary) < location_prior.MIN_BLOCKS:
        return _shrink_blocks(resid, noises, scale, signs, sign_test)
    loc = location_prior.fit_location(np.array([float(resid[i].ravel()[0]) for i in binary]),
                                      noises[binary])
    facs, kept = np.ones(len(resid)), list(resid)
    for j, i in enumerate(binary):
        facs[i], kept[i] = loc.kept[j], np.reshape(loc.mean[j], resid[i].shape)
    others = [i for i, r in enumerate(resid) if r.size > 1]
    if others:
        part, shrunk, _, _ = _shrink_blocks([resid[i] for i in others], noises[others],
                                            None if scale is None else scale[others], signs,
                                            sign_test)
        for j, i in enumerate(others):
            facs[i], kept[i] = part[j], shrunk[j]
    return facs, kept, (loc.variances, loc.weights), "location"


def maxent_base(sub: tuple[str, ...], tables: Mapping[tuple[str, ...], np.ndarray],
                 sizes: Mapping[str, int]) -> np.ndarray:
    """Max-entropy table on ``sub`` given the (already shrunk) marginals of its facets."""
    cons = []
    for facet in itertools.combinations(range(len(sub)), len(sub) - 1):
        t = np.clip(tables[tuple(sub[i] for i in facet)], 1e-12, None)
        cons.append((facet, t / t.sum()))
    return max_entropy(tuple(range(len(sub))), cons, [sizes[a] for a in sub])


def facet_consistent(sub: tuple[str, ...], base: np.ndarray,
                     tables: Mapping[tuple[str, ...], np.ndarray]) -> np.ndarray:
    """``base`` with every coefficient below its top block taken from ``sub``'s facets.

    :func:`maxent_base` fits clipped facets (max entropy needs them >= 0), so where a shrunk
    facet has a negative cell the base's lower-order marginals differ from it.  In the
    Helmert basis a coefficient that is constant along attribute ``a`` is the facet
    ``sub - a``'s coefficient over ``sqrt(c_a)``, so the facets fix every coefficient but the
    top block: replacing them keeps the table's marginals exactly the facets' (consistent
    facets give consistent tables) and keeps the max-entropy interaction.
    """
    coef = transform(base)
    for i, a in enumerate(sub):
        facet = tuple(b for b in sub if b != a)
        at: list[Any] = [slice(None)] * len(sub)
        at[i] = 0
        coef[tuple(at)] = transform(tables[facet]) / math.sqrt(base.shape[i])
    return transform(coef, inverse=True)


#: Orders whose shrinkage prior the adaptive method scales with each set's capacity
#: (:func:`interaction_capacity`).  Pairs only: ``cov^2 <= var_a var_b`` bounds a pair
#: exactly, and on a dev grid of the CALM Fig. 4/5 settings (2 x 56 settings x 3 repeats)
#: scaling pairs took the adaptive method's geometric-mean ratio to CALM from 0.539 / 0.534
#: to 0.525 / 0.524 (Kosarak k = 3: 0.81 / 0.76 to 0.76 / 0.67), while scaling every order
#: cost Kosarak k = 6 (0.50 -> 0.60).  calm-pgm keeps the exchangeable prior: on its quick
#: grid the scaled one took its geometric-mean ratio to CALM from 0.83 to 0.86.
CAPACITY_ORDERS = _tuned.CAPACITY_ORDERS  # provenance: core/tuned.py
#: The adaptive method's priors as :func:`eb_shrink`'s options (its numpy release, and the
#: graphical model's ``priors="adaptive"``): pairs' prior scaled by capacity, binary
#: interactions' sign learned where the residuals show one, binary 1-way marginals toward
#: their common centre.
ADAPTIVE_PRIORS: Mapping[str, Any] = MappingProxyType(
    {"capacity": CAPACITY_ORDERS, "signs": True, "sign_test": True, "location": True})
