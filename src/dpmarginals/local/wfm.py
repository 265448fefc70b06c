"""WFM: the workload factorization mechanism (McKenna, Maity, Mazumdar, Miklau, "A
workload-adaptive mechanism for linear queries under local differential privacy", PVLDB
13(11) 2020), for the workload of all k-way marginals: the optimal-mechanism anchor.

**Plan.**  A strategy Q (m x n over the n cells of the full domain, column-stochastic,
eps-LDP) optimized for W = every k-way marginal (:mod:`dpmarginals.planning.factorization`;
cached per domain sizes, k, eps and optimizer settings).  The public plan has one group of
every attribute reporting through the ``matrix`` format and carries Q as integer weights
(``params["strategy"]``: every column sums to 2^63, every row's max/min <= e^eps in
integers, :func:`~dpmarginals.protocol.formats.integer_strategy`), so a device samples
exactly the published law and checks it first.  The full
domain must be small: ``max_cells`` (default 2^12) cells at most, since Q has 4n rows and
each optimization step costs O(m n^2).

**Collection.**  A user in cell x sends o ~ Q[:, x] (``StrategyMatrix.perturb``, OS
randomness); the aggregator counts the outputs, y (m counts).  The seeded simulation draws
y from its exact distribution, a multinomial per true cell (``per_user=False``), or makes
every report as the client does (``per_user=True``); tests check both agree.

**Release** (the paper's optimal reconstruction, §3-4).  With D = diag(Q 1) and
M = Q^T D^-1 Q, the weighted least-squares estimate of the data vector
``x_hat = M^-1 Q^T D^-1 y`` gives every workload answer W x_hat = V y with the paper's
optimal ``V = W M^-1 Q^T D^-1``; it is unbiased (A Q = I for A = M^-1 Q^T D^-1) and sums
to N exactly (D^-1 Q 1 = 1 lies in the column space of D^-1 Q).  Any marginal is a
projection of x_hat / N (queries of more than k attributes too, unbiased but not what Q
was optimized for).  ``postprocess="norm_sub"`` makes each answer a distribution.

**Variances** (the paper's closed form): one user of type u contributes variance
``sum_o (A^T w)_o^2 Q[o, u] - w_u^2`` to the linear query w^T x_hat, so the covariance of
the estimated fractions is ``C = (A diag(Q p) A^T - diag(p)) / N``, evaluated at the
estimate p (Norm-Sub of x_hat / N, so every variance is >= 0).  ``marginal(attrs,
std=True)`` attaches the per-cell standard errors of the linear answer (before
post-processing).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from scipy import linalg

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import (
    DPMarginalsError,
    check_choice,
    check_epsilon,
    check_k,
    check_positive_int,
)
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..core.table import MarginalTable
from ..inference import norm_sub
from ..planning.factorization import Strategy, optimize_strategy
from ..protocol.counts import Counts
from ..protocol.formats import (
    StrategyMatrix,
    bits_for,
    encode_matrix,
    group_oracle,
    integer_strategy,
)
from ..protocol.plan import GroupSpec, Plan
from ..synopsis.base import Synopsis, check_query
from .direct import POSTPROCESS, apply_postprocess

__all__ = ["MAX_CELLS", "WFM", "WFMSynopsis", "covariance", "reconstruction", "sample_outputs"]

MAX_CELLS = 1 << 12
"""The largest full domain WFM optimizes a strategy for by default."""
_SAMPLE_BLOCK = 256  # cells per multinomial call (bounds the (cells, m) draw in memory)


def sample_outputs(matrix: np.ndarray, true_counts: np.ndarray, *,
                   rng: RNGLike = None) -> np.ndarray:
    """The output counts y of users with ``true_counts`` per cell, each reporting
    o ~ matrix[:, cell]: an exact draw, one multinomial per cell (summed)."""
    gen = simulation_rng(rng)
    counts = np.asarray(true_counts, dtype=np.int64)
    out = np.zeros(matrix.shape[0], dtype=np.int64)
    cells = np.flatnonzero(counts)
    for start in range(0, cells.size, _SAMPLE_BLOCK):
        block = cells[start : start + _SAMPLE_BLOCK]
        pvals = matrix[:, block].T
        out += gen.multinomial(counts[block], pvals / pvals.sum(axis=1, keepdims=True)).sum(
            axis=0)
    return out


def reconstruction(matrix: np.ndarray) -> np.ndarray:
    """A = M^-1 Q^T D^-1 (n x m) for the strategy Q = ``matrix`` (its rows of zeros, never
    sent, get zero columns): x_hat = A y, and A Q = I."""
    used = matrix.sum(axis=1) > 0
    Q = matrix[used]
    weighted = Q / Q.sum(axis=1)[:, None]  # D^-1 Q
    try:
        chol = linalg.cho_factor(Q.T @ weighted, lower=True)
    except linalg.LinAlgError:
        raise DPMarginalsError("the strategy's information matrix Q^T D^-1 Q is singular: "
                               "the table cannot be estimated from its outputs") from None
    out = np.zeros((matrix.shape[1], matrix.shape[0]))
    out[:, used] = linalg.cho_solve(chol, weighted.T)
    return out


def covariance(matrix: np.ndarray, recon: np.ndarray, p: np.ndarray, users: int
               ) -> np.ndarray:
    """The covariance of the estimated fractions x_hat / N when the users' cells follow
    ``p``: ``(A diag(Q p) A^T - diag(p)) / N`` (the paper's closed form, module docstring)."""
    p = np.asarray(p, dtype=np.float64).ravel()
    return ((recon * (matrix @ p)) @ recon.T - np.diag(p)) / users


def _as_bytes(array: np.ndarray | None) -> str | None:
    if array is None:
        return None
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f8").tobytes()).decode()


def _from_bytes(text: str | None, n: int) -> np.ndarray | None:
    if text is None:
        return None
    return np.frombuffer(base64.b64decode(text), dtype="<f8").astype(np.float64).reshape(n, n)


@dataclass(eq=False)
class WFMSynopsis(Synopsis):
    """The estimated full table (fractions) and its estimated covariance (module
    docstring); any marginal is a projection, its standard errors the covariance's."""

    kind: ClassVar[str] = "wfm"
    domain: Domain
    table: np.ndarray
    covariance: np.ndarray | None = None
    method: str = "wfm"
    info: dict[str, Any] = field(default_factory=dict)
    postprocess: str = "none"

    def __post_init__(self) -> None:
        self.table = np.asarray(self.table, dtype=np.float64).reshape(self.domain.shape)
        if self.covariance is not None:
            n = self.domain.cells()
            self.covariance = np.asarray(self.covariance, dtype=np.float64).reshape(n, n)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)

    def marginal(self, attrs: Sequence[str], *, std: bool = False) -> MarginalTable:
        """The projection of the estimated table on ``attrs`` (then ``postprocess``);
        ``std=True`` attaches the closed-form standard errors of the linear answer."""
        attrs = check_query(self.domain, attrs)
        sub = self.domain.project(attrs)
        values = apply_postprocess(self._project(attrs), self.postprocess)
        return MarginalTable(sub, values, self.standard_errors(attrs) if std else None)

    def _cells_of(self, attrs: Sequence[str]) -> np.ndarray:
        """The query cell (C order over ``attrs``) of every cell of the full table."""
        full = np.indices(self.domain.shape).reshape(len(self.domain), -1)
        picked = full[list(self.domain.indices(attrs))]
        return np.ravel_multi_index(tuple(picked), self.domain.project(attrs).shape)

    def _project(self, attrs: Sequence[str]) -> np.ndarray:
        cells = self._cells_of(attrs)
        sub = self.domain.project(attrs)
        return np.bincount(cells, weights=self.table.ravel(), minlength=sub.cells()).reshape(
            sub.shape)

    def standard_errors(self, attrs: Sequence[str]) -> np.ndarray:
        """Per-cell standard errors of the linear answer to ``attrs``: for query cell c,
        the sum of the covariance over the pairs of full-table cells both in c."""
        if self.covariance is None:
            raise DPMarginalsError("this wfm synopsis carries no covariance, so it has no "
                                   "standard errors")
        attrs = check_query(self.domain, attrs)
        sub = self.domain.project(attrs)
        cells = self._cells_of(attrs)
        same = cells[:, None] == cells[None, :]
        variance = np.bincount(cells, weights=(self.covariance * same).sum(axis=1),
                               minlength=sub.cells())
        return np.sqrt(np.maximum(variance, 0.0)).reshape(sub.shape)

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "postprocess": self.postprocess,
                "values": self.table.ravel().tolist(),
                "covariance_float64": _as_bytes(self.covariance)}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        return cls(domain, np.asarray(payload["values"], float),
                   _from_bytes(payload.get("covariance_float64"), domain.cells()), method,
                   dict(payload.get("info", {})), str(payload.get("postprocess", "none")))


@dataclass
class WFM:
    """The workload factorization mechanism for all k-way marginals (module docstring).

    ``rows`` (m, default 4 x cells), ``iterations`` and ``seed`` set the strategy's
    optimization (:func:`~dpmarginals.planning.factorization.optimize_strategy`; ``cache``
    keeps it in memory and on disk).  ``max_cells``: refuse larger full domains.

    >>> dom = Domain(("a", "b", "c"), (2, 2, 2))
    >>> plan = WFM(epsilon=1.0, k=2, cache=False).plan(dom, 1000)
    >>> plan.groups[0].oracle, plan.params["rows"], plan.params["report_bits"]
    ('matrix', 32, 5)
    """

    epsilon: float
    k: int = 3
    per_user: bool = False
    postprocess: str = "none"
    rows: int | None = None
    iterations: int = 300
    seed: int = 0
    max_cells: int = MAX_CELLS
    cache: bool = True
    name: ClassVar[str] = "wfm"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)
        self.iterations = check_positive_int(self.iterations, "iterations")
        self.max_cells = check_positive_int(self.max_cells, "max_cells", 2)
        if self.rows is not None:
            self.rows = check_positive_int(self.rows, "rows")

    def _check(self, domain: Domain) -> None:
        check_k(self.k, len(domain))
        cells = domain.cells()
        if cells > self.max_cells:
            raise DPMarginalsError(
                f"wfm optimizes a strategy over the full domain, which has {cells:,} cells "
                f"(d = {len(domain)}, sizes {list(domain.sizes)}); it holds at most "
                f"max_cells = {self.max_cells:,}: use fewer or coarser attributes, or calm")
        if cells < 2:
            raise DPMarginalsError("the domain has a single cell: there is nothing to estimate")
        if self.rows is not None and self.rows < cells:
            raise DPMarginalsError(f"wfm needs rows >= the {cells:,} cells of the domain, got "
                                   f"rows = {self.rows}")

    def strategy(self, domain: Domain) -> Strategy:
        """The optimized strategy for ``domain`` (cached)."""
        self._check(domain)
        return optimize_strategy(domain.sizes, self.k, self.epsilon, rows=self.rows,
                                 iterations=self.iterations, seed=self.seed, cache=self.cache)

    def plan(self, domain: Domain, n: int) -> Plan:
        """One group of every attribute reporting one output of the optimized strategy
        (format ``matrix``).  ``expected_sse``: the paper's objective as the mean SSE of a
        k-way marginal with n users, averaged over the users' cells (uniform data)."""
        strategy = self.strategy(domain)
        queries = math.comb(len(domain), self.k)
        params = {"k": self.k, "n": int(n), "rows": strategy.rows, "cells": domain.cells(),
                  "report_bits": bits_for(strategy.rows), "iterations": strategy.iterations,
                  "seed": strategy.seed, "objective": strategy.objective,
                  "expected_sse": strategy.average_error / (queries * max(int(n), 1)),
                  "strategy": encode_matrix(integer_strategy(strategy.matrix, self.epsilon))}
        group = GroupSpec(tuple(domain.attributes), "matrix", self.epsilon, domain.cells())
        return Plan(self.name, self.epsilon, domain, (group,), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> WFMSynopsis:
        """Plan, simulated collection (:meth:`simulate`), release."""
        plan = self.plan(data.domain, data.n)
        return self.release(plan, self.simulate(data, plan, rng=rng))

    def simulate(self, data: Dataset, plan: Plan, *, rng: RNGLike = None) -> Counts:
        """The Counts of ``plan``'s collection with every row of ``data`` as one user: the
        exact multinomial draw (:func:`sample_outputs`), or with ``per_user=True`` every
        report made as the client makes it (OS entropy when ``rng`` is None)."""
        fmt = self._format(plan)
        cells = data.cell_indices(plan.domain.attributes)
        sim = simulation_rng(rng)
        if self.per_user:
            source = client_rng(None) if rng is None else sim
            support = fmt.support(fmt.perturb(cells, rng=source))
        else:
            true = np.bincount(cells, minlength=plan.domain.cells())
            support = sample_outputs(fmt.probabilities, true, rng=sim)
        return Counts([support], [data.n])

    def _format(self, plan: Plan) -> StrategyMatrix:
        if plan.m != 1 or plan.groups[0].oracle != "matrix":
            raise DPMarginalsError(f"{self.name} releases a plan of one matrix group, got "
                                   f"{[g.oracle for g in plan.groups][:4]}")
        return group_oracle(plan, 0)

    def release(self, plan: Plan, counts: Counts) -> WFMSynopsis:
        """The estimated full table x_hat / N and its covariance from the output counts
        (module docstring)."""
        fmt = self._format(plan)
        counts.check([fmt.size])
        users = int(counts.users[0])
        if users <= 0:
            raise DPMarginalsError(f"{plan.method}: no reports yet")
        recon = reconstruction(fmt.probabilities)
        estimate = recon @ counts.supports[0].astype(np.float64) / users
        cov = covariance(fmt.probabilities, recon, norm_sub(estimate), users)
        info = {"plan_hash": plan.hash, "n": users,
                **{k: v for k, v in plan.params.items() if k != "strategy"}}
        return WFMSynopsis(plan.domain, estimate, cov, self.name, info, self.postprocess)

    def output_distribution(self, domain: Domain) -> np.ndarray:
        """P[o | record] for every record of ``domain`` (rows: cells in C order): the
        published strategy's columns, as a device samples them."""
        return np.array(self._format(self.plan(domain, 1)).probabilities.T)
