"""ResidualPlanner: the optimal Gaussian mechanism for a workload of marginals (central DP).

Xiao, He, Zhang, Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy Marginals
under Convex Loss Functions", VLDB 2023.  The workload (default: all ``k``-way marginals;
``workload=`` any list of attribute sets, or a mapping set -> weight) is answered from the
residuals of its downward closure (:mod:`.residual_basis`), each measured once with
Gaussian noise of the variance that minimises the workload's total variance for the
budget (the paper's sum-of-variances loss, closed form).  Every workload marginal's cells
then have an exactly known variance (:meth:`ResidualSynopsis.measurement_std`), and the
answers are made non-negative keeping them consistent (:mod:`.residual_nonneg`).

**Privacy and noise.**  ``(epsilon, delta)`` becomes the zCDP budget ``rho``
(:func:`~.accounting.contingency_rho`).  The release is OpenDP's composition of
measurements of the records -> the residual coefficients divided by their noise scales
``sigma_A`` >> OpenDP's discrete Gaussian (:mod:`.residual_measure`: one measurement, or
``jobs`` parts over disjoint residuals measured in parallel processes).  OpenDP's privacy
map of that composition is the rho the release records, checked to be at most the budget
before the data is read; the Gaussian's scale is raised until it is.  Only the residual
basis's coefficients are drawn: ``sum_A prod_{i in A} (n_i - 1)`` of them.  ``n`` is not
published: the empty set's noisy residual is the noisy total.

``rng``: ``None`` is the private release (OpenDP's noise); a seed runs a **non-private**
seeded simulation of the same mechanism (numpy normal noise), for tests and experiments.

>>> from dpmarginals.core.dataset import Dataset
>>> rng = np.random.default_rng(0)
>>> data = Dataset(rng.integers(0, 3, (5000, 4)), Domain(("a", "b", "c", "d"), (3,) * 4))
>>> syn = ResidualPlanner(epsilon=1.0, delta=1e-9, k=2).run(data, rng=0)
>>> syn.marginal(["a", "b"]).values.shape, bool(syn.marginal(["a"]).values.min() >= 0)
((3, 3), True)
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_epsilon, check_k
from ..core.randomness import RNGLike, simulation_rng
from ..core.table import MarginalTable
from ..inference.nonneg import norm_sub_rows
from ..protocol.plan import Plan
from ..synopsis.base import Synopsis, check_query
from .accounting import ACCOUNTANTS, check_delta, contingency_rho, rdp_epsilon, zcdp_epsilon
from .residual_basis import (
    Subset,
    closure,
    marginal_variance,
    optimal_variances,
    reconstruct,
    variance_weights,
)
from .residual_measure import coefficients, measure, unit_coefficients
from .residual_nonneg import make_nonnegative

__all__ = ["ResidualPlanner", "ResidualSynopsis"]

POSTPROCESS = ("nonneg", "none")
RANDOMNESS = "OpenDP's discrete Gaussian sampler (lattice 2^-40, zCDP), on the OS's randomness"


@dataclass
class ResidualPlanner:
    """ResidualPlanner for the workload of all ``k``-way marginals, or ``workload``.

    ``postprocess``: ``"nonneg"`` (default: consistent, non-negative answers) or
    ``"none"`` (the unbiased reconstruction, whose variances ``--std`` gives exactly).
    ``max_rounds`` / ``max_seconds`` bound the non-negativity rounds.  ``jobs``: processes
    that count and draw the noise (None: one for a small release, else one per core).
    """

    epsilon: float
    delta: float | None = None
    k: int = 3
    workload: Sequence[Sequence[str]] | Mapping[tuple[str, ...], float] | None = None
    accountant: str = "zcdp"
    postprocess: str = "nonneg"
    max_rounds: int = 100
    max_seconds: float = 60.0
    jobs: int | None = None
    name: ClassVar[str] = "residual"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        if self.delta is None:
            raise DPMarginalsError("residual is (epsilon, delta)-DP: give a delta (--delta), "
                                   "well below 1/n, e.g. 1e-9")
        self.delta = check_delta(self.delta)
        self.k = check_k(self.k)
        check_choice(self.accountant, "accountant", ACCOUNTANTS)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)

    @property
    def rho(self) -> float:
        assert self.delta is not None
        return contingency_rho(self.epsilon, self.delta, self.accountant)

    def weights(self, domain: Domain) -> dict[Subset, float]:
        """The workload as ``{sorted attribute indices: weight}``."""
        if self.workload is None:
            check_k(self.k, len(domain))
            return {w: 1.0 for w in itertools.combinations(range(len(domain)), self.k)}
        items = (self.workload.items() if isinstance(self.workload, Mapping)
                 else ((w, 1.0) for w in self.workload))
        out: dict[Subset, float] = {}
        for attrs, weight in items:
            key = tuple(sorted(domain.indices(check_query(domain, attrs))))
            if not float(weight) > 0:
                raise DPMarginalsError(f"workload weight of {list(attrs)} must be > 0")
            out[key] = out.get(key, 0.0) + float(weight)
        if not out:
            raise DPMarginalsError("the workload is empty")
        return out

    def largest_marginal(self, domain: Domain) -> tuple[str, ...]:
        """The workload marginal with the most cells (release's size check, before any
        work: the residuals measured are its subsets' and the other marginals')."""
        widest = max(self.weights(domain),
                     key=lambda w: math.prod(domain.sizes[i] for i in w))
        return tuple(domain.attributes[i] for i in widest)

    def variances(self, domain: Domain) -> dict[Subset, float]:
        """``sigma_A^2`` of every residual, for the budget (before OpenDP's rounding)."""
        v = variance_weights(self.weights(domain), domain.sizes)
        return optimal_variances(v, domain.sizes, self.rho)

    def plan(self, domain: Domain, n: int) -> Plan:
        """The public parameters: the workload, the residuals and their noise."""
        weights = self.weights(domain)
        subsets = closure(weights)
        count = sum(coefficients(subsets, domain.sizes))
        described = (f"all {self.k}-way marginals" if self.workload is None else
                     [[domain.attributes[i] for i in w] for w in weights])
        return Plan(self.name, self.epsilon, domain, (), {
            "k": self.k, "model": "central", "delta": self.delta, "rho": self.rho,
            "accountant": self.accountant, "workload": described,
            "loss": "sum of the workload's cell variances", "residuals": len(subsets),
            "coefficients": int(count), "postprocess": self.postprocess,
            "neighbouring": "add or remove one record; n is not published (the total is "
                            "the empty set's noisy residual)"})

    # -- the mechanism --------------------------------------------------------------------
    def run(self, data: Dataset, *, rng: RNGLike = None) -> ResidualSynopsis:
        """Measure every residual and reconstruct (OpenDP's noise when ``rng`` is None)."""
        domain = data.domain
        plan = self.plan(domain, data.n)
        clock = time.perf_counter()
        weights = self.weights(domain)
        sigma2 = self.variances(domain)
        subsets = closure(weights)
        if rng is None:
            noisy_unit, factor, spent, parts = measure(data, subsets, sigma2, self.rho,
                                                       self.jobs)
            sampler, seeded = "opendp", False
        else:
            gen = simulation_rng(rng)
            noisy_unit = unit_coefficients(data, subsets, sigma2)
            noisy_unit = noisy_unit + gen.normal(size=noisy_unit.size)
            factor, spent, parts = 1.0, None, 1
            sampler, seeded = "simulation (numpy normal)", True
        t_measured = time.perf_counter()
        # back to the orthonormal residuals: y_A = Helmert coefficients / norms
        bounds = np.cumsum([0, *coefficients(subsets, domain.sizes)])
        residuals = {a: noisy_unit[bounds[j]:bounds[j + 1]] * math.sqrt(sigma2[a])
                     for j, a in enumerate(subsets)}
        used = {a: sigma2[a] * factor**2 for a in subsets}
        info: dict[str, Any] = {
            "plan_hash": plan.hash, **plan.params, "noise_sampler": sampler,
            "seeded_noise": seeded, "privacy_map_rho": spent,
            "epsilon_certified": None if spent is None else (
                rdp_epsilon if self.accountant == "rdp" else zcdp_epsilon)(spent, self.delta),
            "measure_seconds": t_measured - clock, "opendp_parts": parts}
        if self.postprocess == "nonneg":
            info.update(make_nonnegative(residuals, list(weights), domain.sizes,
                                         max_rounds=self.max_rounds,
                                         max_seconds=self.max_seconds))
        info["seconds"] = time.perf_counter() - clock
        return ResidualSynopsis(domain, residuals, used, [tuple(w) for w in weights],
                                self.name, info)


@dataclass(eq=False)
class ResidualSynopsis(Synopsis):
    """ResidualPlanner's release: the noisy residual coefficients (orthonormal basis) of
    the workload's downward closure, their noise variances, and the workload."""

    kind: ClassVar[str] = "residual"
    domain: Domain
    residuals: dict[Subset, np.ndarray]
    variances: dict[Subset, float]
    workload: list[Subset]
    method: str = "residual"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return float(self.residuals[()][0])

    def marginal(self, attrs: Sequence[str], *, std: bool = False) -> MarginalTable:
        """The marginal reconstructed from the residuals of its subsets (consistent with
        every other answer); ``std=True`` attaches :meth:`measurement_std`."""
        attrs = check_query(self.domain, attrs)
        index = tuple(self.domain.indices(attrs))
        counts = reconstruct(index, self.residuals, self.domain.sizes)
        if self.info.get("per_answer_norm_sub"):  # the rounds stopped short: Norm-Sub it
            counts = norm_sub_rows(counts.reshape(1, -1), counts.sum())[0].reshape(
                counts.shape)
        elif self.info.get("postprocess") == "nonneg":  # float rounding of exact zeros
            counts = np.where((counts < 0) & (counts > -1e-9), 0.0, counts)
        total = counts.sum()
        values = counts / total if total > 0 else np.full(counts.shape, 1.0 / counts.size)
        table = MarginalTable(self.domain.project(attrs), values)
        return table.replace(std=self.measurement_std(attrs)) if std else table

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        index = set(self.domain.indices(check_query(self.domain, attrs)))
        best = [w for w in self.workload if index <= set(w)]
        if best:
            return (tuple(attrs),)
        parts = [tuple(a for a in attrs if self.domain.indices([a])[0] in w)
                 for w in self.workload]
        return tuple(sorted({p for p in parts if p}, key=len, reverse=True))

    def measurement_std(self, attrs: Sequence[str]) -> np.ndarray:
        """The exact standard error of every cell (as a fraction of the total) of a marginal
        whose residuals were all measured: ``sqrt(sum_{A ⊆ W} sigma_A^2 p_A prod_{W \\ A}
        1/n_i^2) / total`` (:func:`~.residual_basis.marginal_variance`).  It is the error of
        the unbiased reconstruction (``postprocess="none"``); the non-negative answer is its
        projection, usually closer.  A marginal with an unmeasured residual has no such error
        (its answer sets that residual to 0), and asking is an error."""
        attrs = check_query(self.domain, attrs)
        index = tuple(sorted(self.domain.indices(attrs)))
        missing = [a for r in range(len(index) + 1) for a in itertools.combinations(index, r)
                   if a not in self.variances]
        if missing:
            names = [self.domain.attributes[i] for i in missing[-1]]
            raise DPMarginalsError(
                f"residual measured no residual of {names}: the marginal over {list(attrs)} "
                "sets it to 0 and has no calibrated standard error; --std applies to "
                "marginals inside the workload")
        var = marginal_variance(index, self.variances, self.domain.sizes)
        return np.full(self.domain.project(attrs).shape, math.sqrt(var) / max(self.total, 1.0))

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "workload": [list(w) for w in self.workload],
                "residuals": [{"subset": list(a), "variance": self.variances[a],
                               "coefficients": np.asarray(r).tolist()}
                              for a, r in self.residuals.items()]}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        residuals = {tuple(r["subset"]): np.asarray(r["coefficients"], dtype=np.float64)
                     for r in payload["residuals"]}
        variances = {tuple(r["subset"]): float(r["variance"]) for r in payload["residuals"]}
        return cls(domain, residuals, variances, [tuple(w) for w in payload["workload"]],
                   method, dict(payload.get("info", {})))
