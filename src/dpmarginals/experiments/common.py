"""Shared pieces of the experiment definitions: data stand-ins, users, queries, one run.

Data sets by experiment name (the papers' sets that are not available offline are
replaced, see ``docs/results.md``):

* ``msnbc``, ``kosarak`` (the 36,682-transaction prefix), ``adult3``, ``adult2``,
  ``acs``, ``nyc-taxis``: :func:`dpmarginals.datasets.load`;
* ``br2000-3``: BR2000 with every attribute capped at 3 values (CALM §5.3 "at most 3
  categories"): the 2 most frequent values of an attribute with more than 3 are kept and
  the rest merged into ``other``;
* ``nyc-taxis`` with ``d > 8``: the 8 flags' columns repeated (Cormode et al. §5.4,
  "achieved by duplicating columns"): attribute ``j`` is flag ``j mod 8``, copy ``j // 8``;
* ``zipf``: synthetic, lightly skewed (Cormode et al. B.2): each record's cell of the
  2^d binary table is drawn with probability proportional to ``rank^-1`` over a fixed
  random ranking of the cells (a Zipf law with exponent 1).

Users are drawn *with replacement* from the rows (as both papers do to reach n), with a
stream that depends only on (seed, data set, d, n, repeat): every method and epsilon of a
repeat sees the same users and the same queries (common random numbers).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import combinations
from typing import Any

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.table import MarginalTable
from ..synopsis.evaluate import evaluate, exact_marginals, random_queries
from .runner import seed_for

__all__ = [
    "EPS_CALM",
    "all_queries",
    "base_dataset",
    "evaluate_synopsis",
    "run_method",
    "sample_users",
    "truths",
]

#: CALM's epsilon grid (Figures 4-7): 0.2, 0.4, ..., 2.0.
EPS_CALM: tuple[float, ...] = tuple(round(0.2 * i, 1) for i in range(1, 11))
LN3 = math.log(3.0)


def cap_values(data: Dataset, cap: int) -> Dataset:
    """Every attribute with more than ``cap`` values keeps its ``cap - 1`` most frequent
    values; the others become one ``other`` value (the last code)."""
    codes = np.array(data.codes, dtype=np.int64)
    sizes, labels = [], {}
    for j, a in enumerate(data.domain.attributes):
        size = data.domain.sizes[j]
        names = list(data.labels.get(a, [str(v) for v in range(size)]))
        if size <= cap:
            sizes.append(size)
            labels[a] = tuple(names)
            continue
        freq = np.bincount(codes[:, j], minlength=size)
        top = np.argsort(-freq, kind="stable")[: cap - 1]
        remap = np.full(size, cap - 1)
        remap[top] = np.arange(cap - 1)
        codes[:, j] = remap[codes[:, j]]
        sizes.append(cap)
        labels[a] = (*[names[t] for t in top], "other")
    return Dataset(codes, Domain(data.domain.attributes, tuple(sizes)), labels,
                   f"{data.name}-{cap}")


def duplicate_columns(data: Dataset, d: int) -> Dataset:
    """``d`` attributes, attribute j a copy of attribute ``j mod data.d``."""
    idx = [j % data.d for j in range(d)]
    names = tuple(f"{data.domain.attributes[i]}#{j // data.d}" if j >= data.d
                  else data.domain.attributes[i] for j, i in enumerate(idx))
    labels = {names[j]: data.labels[data.domain.attributes[i]]
              for j, i in enumerate(idx) if data.domain.attributes[i] in data.labels}
    return Dataset(data.codes[:, idx], Domain(names, tuple(data.domain.sizes[i] for i in idx)),
                   labels, f"{data.name}-dup{d}")


def zipf_population(d: int, exponent: float = 1.0) -> np.ndarray:
    """Cell probabilities of the synthetic ``zipf`` data (fixed public ranking, seed 2018)."""
    cells = 2**d
    ranks = np.random.default_rng(2018).permutation(cells) + 1
    p = ranks.astype(float) ** -exponent
    return p / p.sum()


@lru_cache(maxsize=8)
def base_dataset(name: str, d: int | None = None) -> Dataset:
    """The rows of a data set (before sampling users); see the module docstring."""
    from ..datasets import get_info, load

    if name == "br2000-3":
        data = cap_values(load("br2000"), 3)
        return data if d is None else data.project(data.domain.attributes[:d])
    if name == "nyc-taxis" and d is not None and d > 8:
        return duplicate_columns(load("nyc-taxis"), d)
    if name == "zipf":
        raise DPMarginalsError("zipf is synthetic: use sample_users")
    info = get_info(name)
    if d is not None and d > info.max_d:
        raise DPMarginalsError(f"{name} has only {info.max_d} attributes, d = {d} asked")
    return load(name, d=d)


def sample_users(name: str, d: int, n: int, seed: int, repeat: int) -> Dataset:
    """``n`` users for one repeat (common to every method and epsilon of the repeat)."""
    ss = seed_for(seed, "users", name, d, n, repeat)
    if name == "zipf":
        p = zipf_population(d)
        cells = np.random.default_rng(ss).choice(p.size, size=n, p=p)
        codes = np.column_stack(np.unravel_index(cells, (2,) * d))
        return Dataset(codes, Domain(tuple(f"x{j}" for j in range(d)), (2,) * d), {}, "zipf")
    return base_dataset(name, d).sample(n, rng=ss)


def query_set(domain: Domain, k: int, count: int | None, seed: int, *key: object
              ) -> list[tuple[str, ...]]:
    """``count`` random k-way queries (all C(d, k) of them when ``count`` is None)."""
    if count is None:
        return all_queries(domain, k)
    return random_queries(domain, k, count, rng=seed_for(seed, "queries", *key))


def all_queries(domain: Domain, k: int) -> list[tuple[str, ...]]:
    return [tuple(c) for c in combinations(domain.attributes, k)]


def truths(data: Dataset, queries: Iterable[Sequence[str]]) -> dict[tuple[str, ...], MarginalTable]:
    """The exact marginals, computed once per repeat and shared by every method."""
    return exact_marginals(data, queries)


def evaluate_synopsis(synopsis: Any, exact: dict[tuple[str, ...], MarginalTable]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per-query SSE and total variation distance."""
    errors = evaluate(synopsis, exact)
    return errors.sse, errors.tvd


def not_run(reason: str, **fields: Any) -> dict[str, Any]:
    return {**fields, "status": "not run", "reason": reason}


def run_method(
    method: str,
    params: dict[str, Any],
    data: Dataset,
    exact: dict[tuple[str, ...], MarginalTable],
    rng: np.random.SeedSequence,
    *,
    fields: dict[str, Any] | None = None,
    after: Callable[[Any, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run one method on ``data``, answer the queries, and return one result row.

    A method that refuses the setting up front (:class:`DPMarginalsError` from ``make``,
    ``plan`` or ``run``) gives a ``not run`` row with its reason; an answer it cannot give
    afterwards a ``failed`` row.  ``after(synopsis, row)`` may add columns.
    """
    from ..methods import make

    row: dict[str, Any] = {**(fields or {}), "method": fields.get("method", method)
                           if fields else method}
    try:
        m = make(method, **params)
        m.plan(data.domain, data.n)
    except DPMarginalsError as exc:
        return {**row, "status": "not run", "reason": str(exc)}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # EM failures / consistency are read from .info
        try:
            synopsis = m.run(data, rng=rng)
        except DPMarginalsError as exc:
            return {**row, "status": "not run", "reason": str(exc)}
        released = time.perf_counter()
        try:
            sse, tvd = evaluate_synopsis(synopsis, exact)
        except DPMarginalsError as exc:
            return {**row, "status": "failed", "reason": str(exc)}
    info = getattr(synopsis, "info", {}) or {}
    row.update({
        "status": "ok", "reason": "",
        "sse": float(sse.mean()), "sse_sd": float(sse.std()), "tvd": float(tvd.mean()),
        "queries": len(exact), "seconds": time.perf_counter() - start,
        "release_seconds": released - start,
        "l": info.get("l"), "m": info.get("m"),
    })
    if after is not None:
        after(synopsis, row)
    return row
