"""Empirical-Bayes shrinkage of binary 1-way marginals toward their common mean.

The other orders' priors (:func:`dpmarginals.inference.pgm._fit_mixture`,
:mod:`dpmarginals.inference.signed_prior`) shrink toward 0, the maximum-entropy table of the
facets: for interactions that is the right place, most are near 0.  For a 1-way marginal
0 is the uniform distribution, which real attributes are far from (Kosarak's and MSNBC's
items are rare: their 1-way coefficients sit together, far from 0), so a prior centred at 0
learns a wide spread and shrinks little.  Here attribute b's one coefficient (binary
attributes) is ``mu_b ~ N(m, tau^2)`` and its pooled estimate ``r_b ~ N(mu_b, v_b)``;
``m`` and ``tau^2`` are fitted by restricted maximum likelihood (REML, as in random-effects
meta-analysis: Viechtbauer 2005) and each coefficient is replaced by its posterior mean

    m + tau^2 / (tau^2 + v_b) (r_b - m),

the heteroscedastic form of Efron and Morris's (1973) James-Stein estimator toward the
grand mean.  With equal ``v`` and at least 4 attributes, shrinkage toward an estimated mean
has less total squared error than the raw estimates whatever the true marginals are (Stein);
when the attributes' frequencies spread far more than the noise, ``tau^2 >> v`` and the
estimates are left nearly as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

__all__ = ["MIN_BLOCKS", "LocationFit", "fit_location"]

#: Fewest blocks the prior is fitted to (with an estimated centre, shrinkage is sure to pay
#: from 4 blocks on: Stein); fewer are left as they are.
MIN_BLOCKS = 4


@dataclass(frozen=True)
class LocationFit:
    """The fitted ``centre`` and ``spread`` (``tau^2``), each block's posterior ``mean`` and
    ``kept`` fraction ``tau^2 / (tau^2 + v_b)`` of its deviation from the centre."""

    centre: float
    spread: float
    mean: np.ndarray
    kept: np.ndarray


def _centre(r: np.ndarray, v: np.ndarray, spread: float) -> tuple[float, np.ndarray]:
    w = 1.0 / (spread + v)
    return float((w * r).sum() / w.sum()), w


def _restricted_nll(spread: float, r: np.ndarray, v: np.ndarray) -> float:
    """Negative restricted log-likelihood of ``tau^2 = spread`` (constants dropped)."""
    m, w = _centre(r, v, spread)
    return 0.5 * float(-np.log(w).sum() + np.log(w.sum()) + (w * (r - m) ** 2).sum())


def fit_location(resid: np.ndarray, noise: np.ndarray) -> LocationFit:
    """Fit ``N(m, tau^2)`` to ``resid`` observed with noise variances ``noise`` (REML) and
    shrink each toward ``m``; fewer than :data:`MIN_BLOCKS` blocks are returned unshrunk."""
    r = np.asarray(resid, dtype=np.float64).ravel()
    v = np.asarray(noise, dtype=np.float64).ravel()
    if r.size < MIN_BLOCKS:
        return LocationFit(float(r.mean()) if r.size else 0.0, np.inf, r.copy(), np.ones(r.size))
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
    kept = spread / (spread + v)
    return LocationFit(m, spread, m + kept * (r - m), kept)
