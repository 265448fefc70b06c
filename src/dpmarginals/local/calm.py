"""CALM: Consistent Adaptive Local Marginal (Zhang, Wang, Li, He, Chen; CCS 2018, §4).

1. Choose the marginal size l and count m by the error analysis (§4.3, Algorithm 1) and
   the attribute sets (a covering design of the k-sets when l >= k).
2. Split the users into m groups; each user reports her group's l-way marginal cell
   through the adaptively chosen frequency oracle (GRR or OUE, §2.2.3).
3. Unbias, then make the noisy marginals consistent and non-negative (§4.4 + PriView).
4. Answer any k-way marginal from the consistent views by maximum entropy (§4.1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import (
    DPMarginalsError,
    check_choice,
    check_k,
    check_positive_int,
)
from ..core.randomness import RNGLike
from ..inference.pgm_cost import MAX_FIT_MEMORY_MB, MAX_FIT_SECONDS, check_limits
from ..inference.views import NoisyView
from ..oracles import adaptive_oracle, best_oracle
from ..planning.covering import covering_size
from ..planning.error_model import (
    choose_marginals,
    expected_cells,
    noise_error,
    sampling_error,
    select_marginals,
)
from ..protocol.plan import GroupSpec, Plan, attribute_names
from ..synopsis.base import Synopsis, consistent_synopsis
from ..synopsis.stderr import collection_info
from .calm_settings import CALMSettings
from .collect import Counts, estimate_views, group_supports

__all__ = ["CALM", "group_specs"]

ORACLES = ("adaptive", "best", "grr", "oue", "olh", "hr")
INFERENCE = ("consistency", "pgm")


def group_specs(
    domain: Domain, attribute_sets: list[tuple[str, ...]], epsilon: float, oracle: str
) -> tuple[GroupSpec, ...]:
    """One group per attribute set, each with its oracle chosen for its marginal's size."""
    specs = []
    for attrs in attribute_sets:
        cells = domain.project(attrs).cells()
        if oracle == "adaptive":
            name = adaptive_oracle(epsilon, cells).name
        elif oracle == "best":
            name = best_oracle(epsilon, cells).name
        else:
            name = oracle
        specs.append(GroupSpec(attrs, name, epsilon, cells))
    return tuple(specs)


@dataclass
class CALM(CALMSettings):
    """CALM with Algorithm 1's choice of (m, l) unless both are given (the settings it shares
    with BE: :class:`~dpmarginals.local.calm_settings.CALMSettings`).

    ``oracle``: "adaptive" (CALM §2.2.3, GRR or OUE per marginal size), "best" (least
    variance among GRR, OUE, OLH, HR), or one oracle name for every group.
    ``per_user=True`` randomizes every user's record (the client path); the default
    samples the aggregate counts from their exact distribution (fast simulation).
    ``inference="pgm"`` replaces consistency + max-entropy by graphical-model inference
    (:mod:`dpmarginals.local.calm_pgm`, the optional ``pgm`` extra) on the same reports;
    ``max_fit_seconds`` and ``max_fit_memory_mb`` bound its fit's predicted CPU time and
    memory (:mod:`dpmarginals.inference.pgm_cost`).

    >>> from dpmarginals.core.domain import Domain
    >>> plan = CALM(epsilon=2.0, k=3).plan(Domain.from_dict({str(i): 2 for i in range(8)}), 2**16)
    >>> plan.params["l"], plan.m
    (4, 14)
    """

    max_rounds: int = 1000
    inference: str = "consistency"
    max_fit_seconds: float = MAX_FIT_SECONDS
    max_fit_memory_mb: float = MAX_FIT_MEMORY_MB
    name: ClassVar[str] = "calm"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.oracle, "oracle", ORACLES)
        check_choice(self.inference, "inference", INFERENCE)
        self.max_fit_seconds, self.max_fit_memory_mb = check_limits(self.max_fit_seconds,
                                                                    self.max_fit_memory_mb)
        if self.m is not None:
            self.m = check_positive_int(self.m, "m")
        if self.l is not None:
            self.l = check_positive_int(self.l, "l")

    def plan(self, domain: Domain, n: int) -> Plan:
        """The public plan: m attribute sets of size l, each with its oracle."""
        d = len(domain)
        check_k(self.k, d)
        choice = choose_marginals(n, d, self.epsilon, self.k, self.theta, sizes=domain.sizes)
        l = self.l if self.l is not None else choice.l
        if l > d:
            raise DPMarginalsError(f"l = {l} exceeds the number of attributes d = {d}")
        if self.m is not None:
            m = self.m
        elif self.l is None:
            m = choice.m
        elif l >= self.k:
            m = covering_size(d, self.k, l)  # a covering design of the k-sets
        else:
            m = min(max(int(self.theta * n), 1), math.comb(d, l))  # Algorithm 1, line 6
        if m > math.comb(d, l):
            raise DPMarginalsError(f"m = {m} exceeds the {math.comb(d, l)} distinct {l}-way "
                                   f"marginals of d = {d} attributes")
        sets = select_marginals(d, self.k, l, m)
        attrs = attribute_names(domain, sets)
        cells = expected_cells(domain.sizes, l)
        params = {"k": self.k, "theta": self.theta, "l": l, "m": len(attrs),
                  "noise_error": self.k * noise_error(n, d, self.epsilon, l, cells=cells),
                  "sampling_error": sampling_error(n, len(attrs)),
                  "planned_l": choice.l, "planned_m": choice.m}
        return Plan(self.name, self.epsilon, domain,
                    group_specs(domain, attrs, self.epsilon, self.oracle), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        """Collect from every row of ``data`` as one user and build the synopsis.

        ``info["stage_seconds"]`` holds the time of planning, collection and inference.
        """
        clock = time.perf_counter()
        plan = self.plan(data.domain, data.n)
        planned = time.perf_counter()
        counts = group_supports(data, plan, rng=rng, per_user=self.per_user)
        collected = time.perf_counter()
        synopsis = self.release(plan, counts)
        synopsis.info["stage_seconds"] = {"plan": planned - clock, "collect": collected - planned,
                                          self.inference: time.perf_counter() - collected}
        return synopsis

    def release(self, plan: Plan, counts: Counts | list[NoisyView], n: int | None = None
                ) -> Synopsis:
        """The synopsis of ``plan``'s collected reports by this inference; reports
        collected once can be released by either inference.

        ``counts``: the collection's :class:`~dpmarginals.protocol.counts.Counts` (groups
        without reports are left out: their marginals are answered by maximum entropy from
        the others), or the unbiased ``views`` already estimated (with ``n``, the users)."""
        info: dict[str, Any] = {"plan_hash": plan.hash, **plan.params}
        if isinstance(counts, Counts):
            counts.check([g.cells for g in plan.groups])
            keep = [g for g in range(plan.m) if counts.users[g] > 0]
            if not keep:
                raise DPMarginalsError("no reports yet: every group is empty")
            n = counts.n
            info["groups_reporting"] = len(keep)
            plan = replace(plan, groups=tuple(plan.groups[g] for g in keep))
            views = estimate_views(plan, counts.subset(keep))
        else:
            views = list(counts)
            if n is None:
                n = int(sum(v.users for v in views))
        info.update({"n": n, "oracles": sorted({g.oracle for g in plan.groups}),
                     **collection_info(plan, views)})  # what standard errors need (issue #9)
        if self.inference == "pgm":
            from .calm_pgm import pgm_options, pgm_synopsis

            return pgm_synopsis(plan.domain, views, self.name, info, **pgm_options(self),
                                population=n)
        return consistent_synopsis(plan.domain, views, self.name, info,
                                   max_rounds=self.max_rounds)
