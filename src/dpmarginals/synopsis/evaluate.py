"""Accuracy of a synopsis on random k-way marginal queries (CALM §5.1, Cormode et al. §5.1)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng
from ..core.table import MarginalTable
from .base import Synopsis, check_query

__all__ = ["QueryErrors", "evaluate", "exact_marginals", "random_queries"]

#: Exact answers by query, as :func:`exact_marginals` returns them.
Exact = Mapping[tuple[str, ...], MarginalTable]


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


def exact_marginals(truth: Dataset, queries: Iterable[Sequence[str]]) -> dict[
        tuple[str, ...], MarginalTable]:
    """The exact marginal of every query, computed once, to compare any number of
    synopses (every method, every repeat, the Uniform baseline) against."""
    return {tuple(q): truth.marginal(q) for q in queries}


def evaluate(synopsis: Synopsis, truth: Dataset | Exact,
             queries: Sequence[Sequence[str]] | None = None) -> QueryErrors:
    """Compare the synopsis's answers with the exact marginals.

    ``truth``: the data, or the exact answers of :func:`exact_marginals` (then ``queries``
    defaults to theirs), which spares recounting the data for every synopsis compared.
    """
    if queries is None:
        if isinstance(truth, Dataset):
            raise DPMarginalsError("evaluate needs the queries to answer")
        queries = list(truth)
    exact = truth if not isinstance(truth, Dataset) else exact_marginals(truth, queries)
    sse, tvd = [], []
    for q in queries:
        est = synopsis.marginal(q)
        sse.append(est.sse(exact[tuple(q)]))
        tvd.append(est.total_variation(exact[tuple(q)]))
    return QueryErrors([tuple(q) for q in queries], np.array(sse), np.array(tvd))
