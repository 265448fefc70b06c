"""Accuracy of a synopsis on random k-way marginal queries (CALM §5.1, Cormode et al. §5.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng
from .base import Synopsis, check_query

__all__ = ["QueryErrors", "evaluate", "random_queries"]


def random_queries(
    domain: Domain, k: int, count: int, *, rng: RNGLike = None
) -> list[tuple[str, ...]]:
    """``count`` random k-way attribute sets, distinct while C(d, k) allows."""
    d = len(domain)
    if not 1 <= k <= d:
        raise DPMarginalsError(f"k must be in 1..{d} (the number of attributes), got {k}")
    if count < 1:
        raise DPMarginalsError(f"the number of queries must be >= 1, got {count}")
    gen = simulation_rng(rng)
    check_query(domain, sorted(domain.attributes, key=domain.size)[-k:])  # the largest k-set
    total = math.comb(d, k)
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[str, ...]] = []
    while len(out) < count:
        q = tuple(sorted(int(i) for i in gen.choice(d, size=k, replace=False)))
        if q in seen and len(seen) < total:
            continue
        seen.add(q)
        out.append(tuple(domain.attributes[i] for i in q))
    return out


@dataclass(frozen=True)
class QueryErrors:
    """Per-query errors: SSE (sum of squared cell errors) and total variation distance."""

    queries: list[tuple[str, ...]]
    sse: np.ndarray
    tvd: np.ndarray

    @property
    def sse_mean(self) -> float:
        return float(self.sse.mean())

    @property
    def tvd_mean(self) -> float:
        return float(self.tvd.mean())


def evaluate(synopsis: Synopsis, truth: Dataset, queries: Sequence[Sequence[str]]) -> QueryErrors:
    """Compare the synopsis's answers with the exact marginals of ``truth``."""
    sse, tvd = [], []
    for q in queries:
        exact = truth.marginal(q)
        est = synopsis.marginal(q)
        sse.append(est.sse(exact))
        tvd.append(est.total_variation(exact))
    return QueryErrors([tuple(q) for q in queries], np.array(sse), np.array(tvd))
