"""``calm-pgm``: CALM's plan and reports, graphical-model inference instead of consistency.

The plan is CALM's, unchanged (same (m, l), attribute sets and oracles, and so the same
plan hash): reports collected for CALM can be fed to either inference.  The noisy views go
through :func:`dpmarginals.inference.pgm.pgm_estimate` (empirical-Bayes shrinkage of each
marginal's interactions toward max-entropy, then ``mbi``'s maximum-entropy graphical-model
estimator), and the result is a :class:`PGMSynopsis` that stores the model's
log-potentials: loading it and answering queries needs neither JAX nor ``mbi``.

Any method that produces noisy marginals with their variances can use the same inference
through :func:`pgm_synopsis` (``CALM(inference="pgm")`` does).

Fitting needs the optional extra: ``pip install 'dpmarginals[pgm]'``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_positive_int
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..core.tuned import CALM_PGM_PRIORS
from ..inference.cliques import KEEP
from ..inference.graphical_model import GraphicalModel
from ..inference.pgm import GAP, ITERS, PRIORS, pgm_estimate, require_mbi
from ..inference.pgm_cost import (
    MAX_FIT_MEMORY_MB,
    MAX_FIT_SECONDS,
    check_limits,
    limits_to_json,
)
from ..inference.shrinkage import NoisyMarginal
from ..protocol.plan import Plan
from ..synopsis.base import Synopsis, check_query, maximal_overlaps
from .calm import CALM

__all__ = ["CALMPGM", "PGMSynopsis", "pgm_options", "pgm_synopsis"]

#: Mirror-descent iterations of a bootstrap re-fit (warm-started at the fitted model).
REFIT_ITERS = 200


@dataclass(eq=False)
class PGMSynopsis(Synopsis):
    """A graphical model fitted to noisy marginals; any marginal is inferred from it.

    ``options``: the inference options (shrink, keep, iters, gap, the fit's limits, the priors
    and the population the groups were drawn from, where set), so
    that a bootstrap re-fit (:mod:`dpmarginals.synopsis.stderr`) repeats the same inference.
    """

    kind: ClassVar[str] = "pgm"
    domain: Domain
    model: GraphicalModel
    method: str = "calm_pgm"
    info: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def marginal(self, attrs: Sequence[str], *, std: bool = False) -> MarginalTable:
        """The model's marginal; ``std=True`` attaches per-cell standard errors and
        per-query 95% intervals."""
        attrs = check_query(self.domain, attrs)
        table = self.model.marginal(attrs)
        if not std:
            return MarginalTable(self.domain.project(attrs), table)
        from ..synopsis.intervals import with_uncertainty

        return with_uncertainty(self, MarginalTable(self.domain.project(attrs), table))

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        groups = self.info.get("groups") or []
        return maximal_overlaps([g["attributes"] for g in groups], attrs)

    def refit(self, views: Sequence[NoisyMarginal], *, iters: int = REFIT_ITERS) -> PGMSynopsis:
        """The same inference on other views, warm-started here with the same cliques."""
        opts = {**self.options, "iters": iters}
        model, _ = pgm_estimate(self.domain, views, warm_start=self.model,
                                cliques=self.info.get("cliques"), **opts)
        return PGMSynopsis(self.domain, model, self.method, {}, self.options)

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "options": self.options, "model": self.model.to_dict()}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        model = GraphicalModel.from_dict(domain, payload["model"])
        options = dict(payload.get("options", {}))
        if "tol" in options:  # files before the convergence stop ran every iteration
            options.pop("tol")
            options.setdefault("gap", None)
        return cls(domain, model, method, dict(payload.get("info", {})), options)


def pgm_options(method: Any) -> dict[str, Any]:
    """The inference options a method object carries (defaults where it has none)."""
    return {"shrink": bool(getattr(method, "shrink", True)),
            "priors": str(getattr(method, "priors", CALM_PGM_PRIORS)),
            "keep": float(getattr(method, "keep", KEEP)),
            "iters": int(getattr(method, "iters", ITERS)),
            "max_fit_seconds": float(getattr(method, "max_fit_seconds", MAX_FIT_SECONDS)),
            "max_fit_memory_mb": float(getattr(method, "max_fit_memory_mb", MAX_FIT_MEMORY_MB))}


def pgm_synopsis(domain: Domain, views: Sequence[NoisyMarginal], method: str,
                 info: Mapping[str, Any], *, shrink: bool = True, keep: float = KEEP,
                 iters: int = ITERS, gap: float | None = GAP,
                 max_fit_seconds: float | None = MAX_FIT_SECONDS,
                 max_fit_memory_mb: float | None = MAX_FIT_MEMORY_MB,
                 priors: str = "exchangeable", population: int | None = None) -> PGMSynopsis:
    """Graphical-model inference over noisy views, packed as a synopsis (``priors``: the
    shrinkage priors, ``population``: the users the groups were drawn from,
    :func:`~dpmarginals.inference.pgm.pgm_estimate`)."""
    limits = limits_to_json(*check_limits(max_fit_seconds, max_fit_memory_mb))
    options = {"shrink": shrink, "keep": keep, "iters": iters, "gap": gap, **limits}
    if priors != "exchangeable":  # saved synopses of the exchangeable prior stay as they were
        options["priors"] = priors
    if population is not None:  # as are those saved before the sampling error was counted
        options["population"] = int(population)
    model, fit = pgm_estimate(domain, views, **options)
    return PGMSynopsis(domain, model, method, {**info, **fit}, options)


@dataclass
class CALMPGM(CALM):
    """CALM's plan and collection; inference by shrinkage + a graphical model (``mbi``).

    ``shrink``: empirical-Bayes shrinkage before the fit (default on; off gives the plain
    ``mbi`` estimator on the noisy views).  ``keep``: a view whose interaction keeps less
    than this fraction after shrinkage is modelled through its sub-marginals only (default
    0: every view is a clique).  ``iters``: mirror-descent iterations.  ``priors``: the
    shrinkage priors, ``"adaptive"`` (default since issue #36: the adaptive method's signed,
    location and capacity priors, 8% less error on the dev grid) or ``"exchangeable"`` (one
    scale mixture per order; :func:`~dpmarginals.inference.pgm.pgm_estimate`).
    ``max_fit_seconds``, ``max_fit_memory_mb``
    (fields of :class:`CALM`): limits on the fit's predicted CPU time and memory
    (:mod:`dpmarginals.inference.pgm_cost`); the weakest views are modelled through their
    sub-marginals to stay within them, and a fit that cannot is refused before it starts.
    """

    inference: str = "pgm"
    shrink: bool = True
    priors: str = CALM_PGM_PRIORS
    keep: float = KEEP
    iters: int = ITERS
    name: ClassVar[str] = "calm_pgm"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inference != "pgm":
            raise DPMarginalsError("calm-pgm always uses inference='pgm'")
        check_choice(self.priors, "priors", PRIORS)
        if not 0.0 <= float(self.keep) <= 1.0:
            raise DPMarginalsError(f"keep must be in [0, 1], got {self.keep!r}")
        self.iters = check_positive_int(self.iters, "iters")

    def plan(self, domain: Domain, n: int) -> Plan:
        """CALM's plan, unchanged (``method`` stays "calm", so the hash is CALM's)."""
        plan = super().plan(domain, n)
        return dataclasses.replace(plan, method=CALM.name)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        require_mbi()  # fail before collecting when the extra is missing
        clock = time.perf_counter()
        synopsis = super().run(data, rng=rng)
        synopsis.info["seconds"] = time.perf_counter() - clock
        return synopsis
