"""Priors that are mixtures over a fixed grid of variances, their weights fitted by EM.

The scale mixture of zero-mean normals (:func:`fit_scale_mixture`; the shrinkage of
:func:`dpmarginals.inference.shrinkage.eb_shrink` and the 1-way centre prior of
:mod:`dpmarginals.inference.location_prior`) and the half-normals of either sign of
:mod:`dpmarginals.inference.signed_prior` share the grid and the EM for the weights (the
nonparametric maximum-likelihood mixture, as ashr; Stephens 2017)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SPAN", "ScaleMixture", "fit_scale_mixture", "fit_weights", "log_marginal",
           "posterior", "variance_grid"]

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


def log_marginal(loglik: np.ndarray, weights: np.ndarray) -> float:
    """The mixture's log-likelihood summed over the blocks (``loglik``: blocks x components)."""
    joint = loglik + np.log(np.maximum(weights, 1e-300))
    top = joint.max(axis=1, keepdims=True)
    return float((np.log(np.exp(joint - top).sum(axis=1)) + top[:, 0]).sum())


@dataclass(frozen=True)
class ScaleMixture:
    """A fitted scale mixture: the grid (with the point mass 0 first), its weights, each
    block's log-likelihood per component (without the ``2 pi`` constant) and posterior-mean
    factor ``sum_k w_bk s_b g_k / (s_b g_k + v_b)``."""

    grid: np.ndarray
    weights: np.ndarray
    loglik: np.ndarray
    factors: np.ndarray


def fit_scale_mixture(sq: np.ndarray, dims: np.ndarray, noise: np.ndarray, scale: np.ndarray,
                      iters: int = 300) -> ScaleMixture:
    """Blocks of ``dims`` coefficients with squared norms ``sq``, ``r_b ~ N(0, (s_b g + v_b) I)``
    with ``g`` from the grid mixture (a point mass at 0 and :func:`variance_grid`), the weights
    by EM from uniform (adaptive shrinkage, Stephens 2017)."""
    grid = np.concatenate([[0.0], variance_grid(noise, scale)])
    prior = scale[:, None] * grid[None, :]
    total = noise[:, None] + prior
    loglik = -0.5 * dims[:, None] * np.log(total) - 0.5 * sq[:, None] / total
    weights = fit_weights(loglik, np.full(grid.size, 1.0 / grid.size), iters)
    factors = (posterior(loglik, weights) * (prior / total)).sum(axis=1)
    return ScaleMixture(grid, weights, loglik, factors)
