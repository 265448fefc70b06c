"""Empirical-Bayes shrinkage of binary 1-way marginals toward their common centre.

The other orders' priors (:func:`dpmarginals.inference.shrinkage.fit_mixture`,
:mod:`dpmarginals.inference.signed_prior`) shrink toward 0, the maximum-entropy table of the
facets: for interactions that is the right place, most are near 0.  For a 1-way marginal
0 is the uniform distribution, which real attributes are far from (Kosarak's and MSNBC's
items are rare: their 1-way coefficients sit together, far from 0), so a prior centred at 0
learns a wide spread and shrinks little.  Here attribute b's one coefficient (binary
attributes) is ``mu_b``, its pooled estimate ``r_b ~ N(mu_b, v_b)``, and the prior is one of
two, both about a centre ``m`` fitted to the data:

* a normal ``N(m, tau^2)``, ``m`` and ``tau^2`` by restricted maximum likelihood (REML, as
  random-effects meta-analysis); the posterior mean ``m + tau^2 / (tau^2 + v_b) (r_b - m)`` is
  the heteroscedastic form of Efron and Morris's James-Stein estimator toward the grand mean;
* the scale mixture of the other orders about ``m`` (a point mass and normals on a grid of
  variances, weights by EM; ``m`` maximises the marginal likelihood: ashr's estimated mode,
  Stephens 2017), for attributes that cluster with a few far from the rest (Kosarak's rare
  items and its few common ones), which a normal prior would pull toward the cluster.

The mixture is used when it beats the normal by twice the log-likelihood ratio of at least
:data:`NORMALITY`.  MSNBC d = 16's items, spread evenly, keep the normal prior (2 log LR
1.2-4.0 at eps = 1); Kosarak d = 32's take the mixture when the noise lets their shape show
(56-59 at eps = 1.4; 0.6 and 11 in two draws at eps = 0.2).  Either way no coefficient moves
more than :data:`LIMIT` standard errors from its unbiased estimate (Efron and Morris's
limited translation, 1972), which bounds what any one attribute can lose.  On 32
Kosarak-like items measured with noise sd 0.17 the total squared error is 0.49x the raw
estimates' and the most common item's 1.9x its own; where the attributes spread 10 times
more than the noise, 0.99x (tests/test_location_prior.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from ..core import tuned as _tuned
from .grid_mixture import ScaleMixture, fit_scale_mixture, log_marginal

__all__ = ["LIMIT", "MIN_BLOCKS", "NORMALITY", "LocationFit", "fit_location"]

#: Fewest blocks the prior is fitted to (with an estimated centre, shrinkage pays from 4 blocks
#: on: Stein); fewer are left as they are.
MIN_BLOCKS = _tuned.LOCATION_MIN_BLOCKS  # provenance: core/tuned.py
#: Most a coefficient moves from its unbiased estimate, in its standard errors.
LIMIT = _tuned.LOCATION_LIMIT  # provenance: core/tuned.py
#: Twice the log-likelihood ratio of the scale mixture over a normal prior above which the
#: mixture is used (the chi-squared 5% point for 2 degrees of freedom).
NORMALITY = _tuned.LOCATION_NORMALITY  # provenance: core/tuned.py
#: Candidate centres scanned before refining (quantiles of the estimates), and the EM steps
#: each gets while the centre is sought (the chosen centre's fit runs to convergence).
_SCAN = 17
_SCAN_ITERS = 60


@dataclass(frozen=True)
class LocationFit:
    """The fitted ``centre``, the prior's ``variances`` and ``weights`` about it (one variance,
    ``tau^2``, for the normal prior), each block's posterior ``mean`` and the ``kept`` fraction
    of its distance to the centre."""

    centre: float
    variances: np.ndarray
    weights: np.ndarray
    mean: np.ndarray
    kept: np.ndarray


def _mixture(r: np.ndarray, v: np.ndarray, centre: float, iters: int = 300
             ) -> tuple[float, ScaleMixture]:
    """The scale mixture fitted to ``r - centre``, and its log-likelihood."""
    fit = fit_scale_mixture((r - centre) ** 2, np.ones(r.size), v, np.ones(r.size), iters)
    return log_marginal(fit.loglik, fit.weights) - 0.5 * r.size * math.log(2 * math.pi), fit


def _centre(r: np.ndarray, v: np.ndarray, spread: float) -> tuple[float, np.ndarray]:
    w = 1.0 / (spread + v)
    return float((w * r).sum() / w.sum()), w


def _restricted_nll(spread: float, r: np.ndarray, v: np.ndarray) -> float:
    """Negative restricted log-likelihood of the normal prior's ``tau^2 = spread``
    (constants dropped)."""
    m, w = _centre(r, v, spread)
    return 0.5 * float(-np.log(w).sum() + np.log(w.sum()) + (w * (r - m) ** 2).sum())


def _normal(r: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """The normal prior ``N(m, tau^2)`` by REML: log-likelihood, centre, spread."""
    top = 10.0 * (float(r.var()) + float(v.max()))
    grid = np.concatenate([[0.0], top * np.geomspace(1e-12, 1.0, 241)])
    nll = np.array([_restricted_nll(s, r, v) for s in grid])
    best = int(np.argmin(nll))
    spread = float(grid[best])
    if 0 < best < grid.size - 1:  # refine inside the bracket around the grid's best
        found = minimize_scalar(_restricted_nll, bounds=(grid[best - 1], grid[best + 1]),
                                args=(r, v), method="bounded", options={"xatol": 1e-14})
        if found.fun <= nll[best]:
            spread = float(found.x)
    m, _ = _centre(r, v, spread)
    total = spread + v
    return float((-0.5 * np.log(2 * np.pi * total) - 0.5 * (r - m) ** 2 / total).sum()), m, spread


def fit_location(resid: np.ndarray, noise: np.ndarray) -> LocationFit:
    """Shrink ``resid`` (noise variances ``noise``) toward their fitted centre under the normal
    prior or the scale mixture (module docstring); fewer than :data:`MIN_BLOCKS` blocks are
    returned as given."""
    r = np.asarray(resid, dtype=np.float64).ravel()
    v = np.asarray(noise, dtype=np.float64).ravel()
    if r.size < MIN_BLOCKS:
        return LocationFit(float(r.mean()) if r.size else 0.0, np.zeros(1), np.ones(1),
                           r.copy(), np.ones(r.size))
    scan = np.unique(np.quantile(r, np.linspace(0.0, 1.0, _SCAN)))
    values = [_mixture(r, v, float(c), _SCAN_ITERS)[0] for c in scan]
    best = int(np.argmax(values))
    centre = float(scan[best])
    lo, hi = scan[max(best - 1, 0)], scan[min(best + 1, scan.size - 1)]
    if hi > lo:  # refine between the scan's neighbours
        found = minimize_scalar(lambda c: -_mixture(r, v, c, _SCAN_ITERS)[0], bounds=(lo, hi),
                                method="bounded", options={"xatol": 1e-4 * (hi - lo)})
        if -found.fun > values[best]:
            centre = float(found.x)
    fitted, mixture = _mixture(r, v, centre)
    grid, weights, factors = mixture.grid, mixture.weights, mixture.factors
    normal, m, spread = _normal(r, v)
    if 2.0 * (fitted - normal) < NORMALITY:  # the data do not reject a normal prior
        centre, grid, weights = m, np.array([spread]), np.ones(1)
        factors = np.full(r.size, spread) / (spread + v)
    step = LIMIT * np.sqrt(v)
    mean = r + np.clip(centre + factors * (r - centre) - r, -step, step)
    away = r - centre
    kept = np.where(away != 0, (mean - centre) / np.where(away != 0, away, 1.0), factors)
    return LocationFit(centre, grid, weights, mean, np.clip(kept, 0.0, 1.0))
