"""Priors that are mixtures over a fixed grid of variances, their weights fitted by EM.

The empirical-Bayes shrinkage of :func:`dpmarginals.inference.pgm.eb_shrink` (zero-mean
normals, :func:`~dpmarginals.inference.pgm._fit_mixture`) and of
:mod:`dpmarginals.inference.signed_prior` (half-normals of either sign) share the grid and
the EM for the weights (the nonparametric maximum-likelihood mixture, as ashr; Stephens 2017).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SPAN", "fit_weights", "posterior", "variance_grid"]

#: Doublings of the prior variance the grid spans around its base, the least noise per unit
#: of prior scale.
SPAN = (-6, 24)


def variance_grid(noise: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The grid of prior variances per unit of scale (without the point mass at 0)."""
    base = max(float((noise / scale).min()), 1e-300)
    return base * 2.0 ** np.arange(*SPAN)


def posterior(loglik: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each block's posterior over the components (``loglik``: blocks x components)."""
    post = loglik + np.log(np.maximum(weights, 1e-300))
    post = np.exp(post - post.max(axis=1, keepdims=True))
    return post / post.sum(axis=1, keepdims=True)


def fit_weights(loglik: np.ndarray, weights: np.ndarray, iters: int) -> np.ndarray:
    """Maximum-likelihood weights by EM from ``weights``, at most ``iters`` steps (stops when
    no weight moves by 1e-8)."""
    for _ in range(iters):
        new = posterior(loglik, weights).mean(axis=0)
        done = np.abs(new - weights).max() < 1e-8
        weights = new
        if done:
            break
    return weights
