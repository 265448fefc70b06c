"""How strong each measured interaction is, from noisy views: empirical-Bayes energies.

For every attribute set S inside some view (|S| >= 2), the views' projections on S are
pooled (weights ``1 / (C_i Var_i)``, CALM §4.4) and compared, in an orthonormal (Helmert)
basis, with the maximum-entropy table of S's shrunk facets
(:func:`dpmarginals.inference.pgm.eb_shrink`): the difference ``r`` is S's top-order
interaction plus noise of known variance ``v`` per coefficient.  Under the adaptive-shrinkage
prior that ``eb_shrink`` fits over all blocks of S's order (a scale mixture of normals,
Stephens 2017), the posterior mean of the interaction's energy ``||theta||^2`` is

    E[||theta||^2 | r] = sum_k post_k (s_k^2 ||r||^2 + D s_k v),   s_k = g_k / (g_k + v),

with ``D`` the block's coefficients, ``g_k`` the grid of prior variances and ``post_k`` the
posterior weights.  Where few blocks are measured with much noise (small epsilon, few users),
the fitted prior's mean is itself uncertain and errs upward (its weights cannot go below 0);
with ``conservative=True`` every order's posterior energies are scaled down, if need be, to
the moment estimate's lower one-standard-error bound ``mean(||r||^2 - D v) - se``, so that
an interaction is taken as strong only when the reports show it.  This is what an adaptive
planner needs to know about the data (:class:`dpmarginals.planning.optimal.Structure`); it is
post-processing of the views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.domain import Domain
from .pgm import NoisyMarginal, _maxent_base, _project, _top, eb_shrink

__all__ = ["InteractionEnergies", "interaction_energies"]


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
    total = v + grid
    loglik = -0.5 * dims * np.log(total) - 0.5 * r2 / total + np.log(np.maximum(weights, 1e-300))
    post = np.exp(loglik - loglik.max())
    post /= post.sum()
    s = grid / total
    return float((post * (s**2 * r2 + dims * s * v)).sum())


def interaction_energies(domain: Domain, views: Sequence[NoisyMarginal], *,
                         conservative: bool = True) -> InteractionEnergies:
    """The posterior energies of every interaction the views measure (module docstring)."""
    shrunk = eb_shrink(domain, views)
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    canon = []
    for v in views:
        attrs = tuple(sorted(v.attributes, key=domain.index))
        canon.append((attrs, _project(tuple(v.attributes), np.asarray(v.table, float), attrs),
                      float(v.variance)))
    energy: dict[frozenset[str], float] = {}
    by_order: dict[int, list[float]] = {}
    excess: dict[int, list[float]] = {}
    for sub, noise in shrunk.noise.items():
        if len(sub) < 2 or len(sub) not in shrunk.prior:
            continue
        acc, wsum = 0.0, 0.0
        for attrs, table, var in canon:
            if set(sub) <= set(attrs):
                w = 1.0 / (math.prod(sizes[a] for a in attrs if a not in sub) * var)
                acc = acc + w * _project(attrs, table, sub)
                wsum += w
        pooled = np.asarray(acc / wsum)
        resid = _top(pooled) - _top(_maxent_base(sub, shrunk.tables, sizes))
        grid, weights = shrunk.prior[len(sub)]
        e = _posterior_energy(float((resid**2).sum()), resid.size, noise, grid, weights)
        energy[frozenset(sub)] = e
        by_order.setdefault(len(sub), []).append(e)
        excess.setdefault(len(sub), []).append(float((resid**2).sum()) - resid.size * noise)
    if conservative:
        for order, values in excess.items():
            x = np.array(values)
            lower = max(float(x.mean() - x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1
                        else 0.0, 0.0)
            mean = float(np.mean(by_order[order]))
            if mean > lower:
                scale = lower / mean
                for key in [s for s in energy if len(s) == order]:
                    energy[key] *= scale
                by_order[order] = [e * scale for e in by_order[order]]
    marginals = {a: np.clip(shrunk.tables[(a,)], 0.0, None) for a in domain.attributes
                 if (a,) in shrunk.tables}
    return InteractionEnergies(energy, {j: float(np.mean(e)) for j, e in by_order.items()},
                               marginals)
