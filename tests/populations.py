"""Synthetic populations shared by the tests."""

from __future__ import annotations

import numpy as np

from dpmarginals import Dataset, Domain


def correlated_binary(n: int, d: int, seed: int) -> Dataset:
    """A chain-structured binary population: x_j copies x_{j-1} with probability 0.8."""
    rng = np.random.default_rng(seed)
    codes = np.empty((n, d), dtype=np.int64)
    codes[:, 0] = rng.random(n) < 0.3
    for j in range(1, d):
        keep = rng.random(n) < 0.8
        codes[:, j] = np.where(keep, codes[:, j - 1], rng.random(n) < 0.5)
    return Dataset(codes, Domain(tuple(f"a{j}" for j in range(d)), (2,) * d))
