"""How strong each measured interaction is, from noisy views: empirical-Bayes energies.

For every attribute set S inside some view (|S| >= 2), the views' projections on S are
pooled (weights ``1 / (C_i Var_i)``, CALM §4.4) and compared, in an orthonormal (Helmert)
basis, with the maximum-entropy table of S's shrunk facets
(:func:`dpmarginals.inference.shrinkage.eb_shrink`): the difference ``r`` is S's top-order
interaction plus noise of variance ``v`` per coefficient.  Under an adaptive-shrinkage prior
fitted over all blocks of S's order (a scale mixture of normals, Stephens 2017), the
posterior mean of the interaction's energy ``||theta||^2`` is

    E[||theta||^2 | r] = sum_k post_k (s_k^2 ||r||^2 + D s_k v),   s_k = g_k / (g_k + v),

with ``D`` the block's coefficients, ``g_k`` the grid of prior variances and ``post_k`` the
posterior weights.  A pair's prior variances are ``g_k`` times its capacity
(:func:`~dpmarginals.inference.shrinkage.interaction_capacity`, relative to the mean): two rare
items cannot interact as strongly as two common ones.

**No calibration downward.**  The fitted prior's mean errs upward when few blocks are
measured with much noise (its weights cannot go below 0), so the energies overstate weak
interactions.  For planning that is the cheaper error: a plan that measures a pair it did
not need costs some noise, one that leaves out a strong pair costs its whole energy.  An
earlier calibration (simulating phase 1 without interactions and scaling every order down
to the moment estimate) cut the overstatement (without it MSNBC d = 16's triples come out
at 4.1e-4, truth 9.5e-6) but made the adaptive method's plans worse: on the dev grid of
the CALM Fig. 4/5 settings its geometric-mean ratio to CALM went from 0.539 / 0.534
without to 0.563 / 0.562 with it.  ``conservative=True`` (below) keeps a downward
correction for callers that want one.

**The noise of r** is the pooled views' plus what the facets' own error puts into the
maximum-entropy base: linearised near independence, an error ``delta`` of the facet ``S - a``
reaches S's top block as ``delta ⊗ top(p_a)``, so each facet adds its error variance times
``tau_a = sum_x p_a(x)^2 - 1/c_a`` (a facet's error: its own shrunk noise plus, recursively,
what its own base inherits).  On sparse binary data this term is as large as the
interactions (Kosarak d = 32, eps = 0.8, 256 users a group: 0.009 per pair coefficient
against energies of 1e-4); :func:`~dpmarginals.inference.shrinkage.eb_shrink` leaves it out.

**Sampling error left out.** The releases' shrinkage counts each set's sampling error as
noise (``eb_shrink(population=n)``, CALM §4.3); these energies do not, so they keep the
sampling noise as signal and overstate weak interactions a little more.  Counting it here
too made the adaptive method's plans worse on the dev networks at n = 2^14 (+3.1% +- 1.6%
paired, +10% at eps = 2; docs/beyond-calm.md §7): as above, overstating is the cheaper error.

**Conservative estimates.**  With few blocks measured with much noise (small epsilon, few
users) the fitted prior's mean is itself uncertain and errs upward (its weights cannot go
below 0).  With ``conservative=True`` every order's posterior energies are scaled down, if
need be, to the moment estimate's lower one-standard-error bound
``mean(||r||^2 - D v) - se``, except that a block whose ``||r||^2 / v`` exceeds the
chi-squared (D) quantile noise alone reaches with probability :data:`DETECTION` / (blocks of
its order) keeps at least ``||r||^2 - D v``: an interaction counts as strong only when the
reports show it.

This is what an adaptive planner needs to know about the data
(:class:`dpmarginals.planning.optimal.Structure`); it is post-processing of the views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2

from ..core import tuned as _tuned
from ..core.domain import Domain
from .helmert import project, top
from .shrinkage import (
    CAPACITY_ORDERS,
    NoisyMarginal,
    capacity_scale,
    eb_shrink,
    fit_mixture,
    maxent_base,
)
from .signed_prior import fit_signed, single_coefficients

__all__ = ["InteractionEnergies", "interaction_energies"]

#: Family-wise false-detection rate of the per-block test of ``conservative=True``.
DETECTION = _tuned.DETECTION  # provenance: core/tuned.py


@dataclass(frozen=True)
class InteractionEnergies:
    """Posterior interaction energies of the measured sets and the shrunk 1-way marginals.

    ``energy[S]``: posterior mean of S's interaction energy (S a frozenset, |S| >= 2).
    ``order_energy[j]``: its mean over the measured sets of order j.
    ``marginals[a]``: attribute a's pooled, shrunk distribution.
    """

    energy: dict[frozenset[str], float]
    order_energy: dict[int, float]
    marginals: dict[str, np.ndarray]


def _posterior_energy(r2: float, dims: int, v: float, grid: np.ndarray,
                      weights: np.ndarray) -> float:
    """``grid``: the block's prior variances (the fitted grid times its capacity scale)."""
    total = v + grid
    loglik = -0.5 * dims * np.log(total) - 0.5 * r2 / total + np.log(np.maximum(weights, 1e-300))
    post = np.exp(loglik - loglik.max())
    post /= post.sum()
    s = grid / total
    return float((post * (s**2 * r2 + dims * s * v)).sum())


def _residuals(domain: Domain, views: Sequence[NoisyMarginal], signs: bool
               ) -> tuple[dict[tuple[str, ...], tuple[np.ndarray, float]], Any]:
    """Every measured set's top-block residual against the max-entropy base of its shrunk
    facets, with its modelled noise per coefficient; and the shrinkage result."""
    shrunk = eb_shrink(domain, views, capacity=CAPACITY_ORDERS, signs=signs)
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    canon = []
    for v in views:
        attrs = domain.in_order(v.attributes)
        canon.append((attrs, project(tuple(v.attributes), np.asarray(v.table, float), attrs),
                      float(v.variance)))
    tau = {a: float((shrunk.tables[(a,)] ** 2).sum() - 1.0 / sizes[a])
           for a in domain.attributes if (a,) in shrunk.tables}
    base_noise: dict[tuple[str, ...], float] = {}

    def inherited(sub: tuple[str, ...]) -> float:
        """Per-coefficient variance the facets' errors put into S's max-entropy base."""
        if len(sub) == 1:
            return 0.0
        if sub not in base_noise:
            base_noise[sub] = sum(error(tuple(b for b in sub if b != a)) * tau.get(a, 0.0)
                                  for a in sub)
        return base_noise[sub]

    def error(sub: tuple[str, ...]) -> float:
        """Per-coefficient error variance of S's shrunk top block (own noise, shrunk, plus
        what its base inherits)."""
        own = shrunk.noise[sub] * (min(shrunk.factor.get(sub, 1.0), 1.0) if len(sub) > 1
                                   else 1.0)
        return own + inherited(sub)

    out: dict[tuple[str, ...], tuple[np.ndarray, float]] = {}
    for sub, noise in shrunk.noise.items():
        if len(sub) < 2:
            continue
        acc, wsum = 0.0, 0.0
        for attrs, table, var in canon:
            if set(sub) <= set(attrs):
                w = 1.0 / (math.prod(sizes[a] for a in attrs if a not in sub) * var)
                acc = acc + w * project(attrs, table, sub)
                wsum += w
        pooled = np.asarray(acc / wsum)
        resid = top(pooled) - top(maxent_base(sub, shrunk.tables, sizes))
        out[sub] = (resid, noise + inherited(sub))
    return out, shrunk


def interaction_energies(domain: Domain, views: Sequence[NoisyMarginal], *,
                         conservative: bool = False, signs: bool = False
                         ) -> InteractionEnergies:
    """The posterior energies of every interaction the views measure (module docstring).

    ``signs=True``: orders of single-coefficient blocks use the prior of
    :mod:`~dpmarginals.inference.signed_prior` (its posterior energies), as
    :func:`~dpmarginals.inference.shrinkage.eb_shrink` does with ``signs=True``."""
    measured, shrunk = _residuals(domain, views, signs)
    blocks: dict[int, list[tuple[tuple[str, ...], np.ndarray, float]]] = {}
    for sub, (resid, noise) in measured.items():
        blocks.setdefault(len(sub), []).append((sub, resid, noise))
    energy: dict[frozenset[str], float] = {}
    order_energy: dict[int, float] = {}
    for order, items in sorted(blocks.items()):
        resid = [r for _, r, _ in items]
        noise = np.array([v for _, _, v in items])
        scale = (capacity_scale([s for s, _, _ in items], [r.size for r in resid],
                                shrunk.tables) if order in CAPACITY_ORDERS else np.ones(len(items)))
        single = single_coefficients(resid) if signs else None
        if single is not None:
            values = fit_signed(single, noise, scale).energy
        else:
            grid, weights, _ = fit_mixture(resid, noise, scale=scale)
            values = np.array([_posterior_energy(float((r**2).sum()), r.size, v, s * grid,
                                                 weights)
                               for r, v, s in zip(resid, noise, scale, strict=True)])
        if conservative and len(items) > 1:
            dims = np.array([r.size for r in resid], dtype=np.float64)
            excess = np.array([float((r**2).sum()) for r in resid]) - dims * noise
            spread = excess.std(ddof=1) / math.sqrt(excess.size)
            target = max(float(excess.mean() - spread), 0.0)
            if values.mean() > target:
                values = values * (target / values.mean())
            # a block that noise alone would exceed with probability 5% / (blocks) is real
            seen = excess + dims * noise > chi2.isf(DETECTION / len(items), dims) * noise
            values = np.where(seen, np.maximum(values, excess), values)
        for (sub, _, _), e in zip(items, values, strict=True):
            energy[frozenset(sub)] = float(e)
        order_energy[order] = float(values.mean())
    marginals = {a: np.clip(shrunk.tables[(a,)], 0.0, None) for a in domain.attributes
                 if (a,) in shrunk.tables}
    return InteractionEnergies(energy, order_energy, marginals)
