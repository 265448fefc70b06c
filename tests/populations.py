"""Synthetic populations shared by the tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

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


def random_network(n: int, sizes: tuple[int, ...] = (3, 4, 3, 2, 4, 3), *, seed: int,
                   parents: int = 2, concentration: float = 0.3) -> Dataset:
    """A random Bayesian network over categorical attributes ``a0, a1, ...``: attribute j
    takes up to ``parents`` parents among the earlier ones (chosen at random), and each
    parent configuration a conditional distribution drawn from Dirichlet(``concentration``):
    peaked conditionals, so strong pairwise and some three-way dependence.  The planner
    sees none of it (the network is drawn from ``seed``, the rows from ``seed + 1``)."""
    net = np.random.default_rng(seed)
    rows = np.random.default_rng(seed + 1)
    d = len(sizes)
    codes = np.empty((n, d), dtype=np.int64)
    for j, size in enumerate(sizes):
        pa = np.sort(net.choice(j, size=min(j, parents), replace=False)) if j else []
        shape = [sizes[p] for p in pa]
        cpt = net.dirichlet(np.full(size, concentration), size=int(np.prod(shape)))
        config = np.ravel_multi_index([codes[:, p] for p in pa], shape) if j else np.zeros(
            n, dtype=np.int64)
        cdf = np.cumsum(cpt, axis=1)[config]
        codes[:, j] = np.minimum((rows.random(n)[:, None] > cdf).sum(axis=1), size - 1)
    return Dataset(codes, Domain(tuple(f"a{j}" for j in range(d)), tuple(sizes)))


def people(n: int, seed: int = 0, *, smoker: bool = True) -> pd.DataFrame:
    """Correlated people with the user's own labels: income follows education (phd: 60%
    high, else 10%); sex, age and (``smoker``) smoking are independent.  The smoker column
    is drawn last, so the other columns do not depend on it."""
    rng = np.random.default_rng(seed)
    edu = rng.choice(["school", "college", "phd"], n, p=[0.5, 0.4, 0.1])
    rich = np.where(edu == "phd", 0.6, 0.1)
    income = np.where(rng.random(n) < rich, "high", rng.choice(["low", "mid"], n))
    frame = pd.DataFrame({"education": edu, "income": income, "sex": rng.choice(["f", "m"], n),
                          "age": rng.integers(18, 90, n)})
    if smoker:
        frame["smoker"] = rng.choice(["no", "yes"], n)
    return frame
