"""``adaptive``: collection in phases, each planned from the reports of the phases before it.

CALM plans once, before any report, with a fixed threshold theta standing in for everything
it does not know about the data.  Here a share of the users report first, through a plan
that reveals the data's structure cheaply; from their reports alone the aggregator predicts
the error of candidate plans for the next users and publishes the best; each later phase is
planned the same way from every earlier phase's reports, and the last takes the users left:

1. **Phase 1** (:meth:`Adaptive.plan`): ``share`` of the n users (default
   :data:`PHASE_SHARE`) each report one attribute set: a balanced family of pairs and,
   for workloads of 3-way or larger marginals, a quarter of the groups triples, each through
   the oracle of least variance for its size; phase 1 shows the 1-way marginals and how
   strong the pair and triple interactions are.
2. **Structure** (:func:`phase_one_structure`): empirical-Bayes estimates of every measured
   interaction's energy (:func:`dpmarginals.inference.energies.interaction_energies`, the
   pairs' prior scaled by their capacity); the mean per order (per unit of capacity for
   pairs) extrapolates to sets and orders phase 1 did not measure.
3. **Phases 2..P** (:meth:`Adaptive.next_phase`, :data:`PHASES` in all by default):
   :func:`dpmarginals.planning.optimal.plan_optimal` for the phase's users (``share`` of n,
   the rest in the last phase), with every earlier phase's groups pooled into each
   candidate's prediction: which attribute sets, how many groups (their sizes: a set may
   repeat), which oracle, to minimise the workload's predicted noise + sampling +
   reconstruction error.  A phase measures the sets that look strong with many more users
   than phase 1 gave them, so the next phase's picture of the structure is sharper: on the
   dev grid of the CALM Fig. 4/5 settings, four phases of 20/20/20/40% gave a geometric-mean
   SSE ratio to CALM of 0.49 where two phases of 25/75% gave 0.53 (docs/beyond-calm.md §6).
4. **Inference** pools every phase's views (their variances the oracles' exact coefficient
   variances): empirical-Bayes shrinkage of every measured interaction
   (:func:`dpmarginals.inference.shrinkage.eb_shrink`, the pairs' prior scaled by capacity),
   then CALM's consistency + Norm-Sub and maximum entropy (``inference="shrink"``, numpy
   only), or the graphical model (``inference="pgm"``, the optional extra; its shrinkage
   keeps calm-pgm's exchangeable prior).

Binary attributes' interactions are single coefficients whose sign real data may prefer
(Kosarak's pairs positive, MSNBC's triples negative); steps 2 and 4 learn that preference
(:mod:`dpmarginals.inference.signed_prior`), step 4 only for the orders whose residuals show
one (:func:`~dpmarginals.inference.signed_prior.prefers_sign`: a random network's pairs have
none, and a signed fit to their chance asymmetry costs accuracy).  Step 4 also shrinks
binary 1-way marginals toward their common centre rather than toward uniform
(:mod:`dpmarginals.inference.location_prior`): items are rare together.

Each phase's plan is post-processing of earlier phases' private reports and every user
reports once, at the full epsilon, so the whole collection is epsilon-LDP for every user.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from ..core import tuned as _tuned
from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_epsilon, check_k, check_positive_int
from ..core.randomness import RNGLike, simulation_rng
from ..inference.energies import interaction_energies
from ..inference.pgm_cost import MAX_FIT_MEMORY_MB, MAX_FIT_SECONDS, check_limits
from ..inference.shrinkage import ADAPTIVE_PRIORS, CAPACITY_ORDERS, eb_shrink
from ..inference.views import NoisyView
from ..planning.covering import balanced_subsets
from ..planning.optimal import MAX_QUERIES, Groups, Structure, group_variance, plan_optimal
from ..planning.workload import Workload, coefficient_variance, parse_workload
from ..protocol.counts import Counts
from ..protocol.formats import group_oracle
from ..protocol.phases import earlier_hashes
from ..protocol.plan import GroupSpec, Plan
from ..synopsis.base import Synopsis, consistent_synopsis
from ..synopsis.stderr import collection_info
from .calm import CALM
from .collect import estimate_views, group_supports

__all__ = ["Adaptive", "Phase", "calibrated_views", "check_phase_one", "check_phases",
           "phase_one_structure", "shrunk_synopsis"]

#: Share of the users in each phase but the last (which takes the rest) unless told otherwise.
PHASE_SHARE = _tuned.PHASE_SHARE  # provenance: core/tuned.py
#: Phases of a collection unless told otherwise, and the most allowed.
PHASES = _tuned.PHASES  # provenance: core/tuned.py
MAX_PHASES = 32
#: Users per phase-1 group the default aims at (fewer groups, each better measured, when the
#: users do not suffice for one group per pair).
PHASE1_GROUP_USERS = _tuned.PHASE1_GROUP_USERS  # provenance: core/tuned.py
INFERENCE = ("shrink", "pgm")


def check_phase_one(plan1: Plan, counts1: Counts) -> None:
    """Raise unless phase 2 can be planned from phase 1's counts: every group reported
    (phase 1 is the only picture of the structure phase 2 has)."""
    counts1.check([g.cells for g in plan1.groups])
    empty = np.flatnonzero(np.asarray(counts1.users) == 0).tolist()
    if empty:
        raise DPMarginalsError(f"phase 1 has no reports in {len(empty)} of its {plan1.m} groups "
                               f"(groups {empty[:10]}; {counts1.n} reports in all): phase 2 is "
                               "planned from every group's reports, so collect more first")


def calibrated_views(plan: Plan, counts: Counts) -> list[NoisyView]:
    """The groups' unbiased views, each with its oracle's exact coefficient variance.

    :func:`~dpmarginals.local.collect.estimate_views` gives CALM's f -> 0 per-cell variance,
    up to 1.6x too small for GRR at few cells; shrinkage judges interactions against the
    noise, so it needs the exact one (:func:`~dpmarginals.planning.workload.coefficient_variance`).
    """
    views = estimate_views(plan, counts)
    out = []
    for g, view in enumerate(views):
        if view.users <= 0:
            continue
        var = coefficient_variance(group_oracle(plan, g).oracle, view.users)
        out.append(NoisyView(view.attributes, view.table, view.users, var))
    return out


def phase_one_structure(domain: Domain, views: Sequence[NoisyView], *,
                        conservative: bool = False) -> Structure:
    """What phase 1's reports say about the data, as the planner reads it
    (:func:`~dpmarginals.inference.energies.interaction_energies`).  Pairs phase 1 did not
    measure get the measured pairs' energy per unit of capacity times their own
    (:meth:`~dpmarginals.planning.optimal.Structure.capacity_of`)."""
    est = interaction_energies(domain, views, conservative=conservative, signs=True)
    structure = Structure(domain, est.marginals, dict(est.energy), {}, "phase 1",
                          capacity=CAPACITY_ORDERS)
    for order, mean in est.order_energy.items():
        # the measured sets' energy per unit of capacity, times the domain's mean capacity
        sets = [s for s in est.energy if len(s) == order]
        held = sum(structure.capacity_of(tuple(s)) for s in sets)
        structure.order_energy[order] = (
            sum(est.energy[s] for s in sets) / held * structure.mean_capacity(order)
            if order in CAPACITY_ORDERS and held > 0 else mean)
    return structure


def shrunk_synopsis(domain: Domain, views: Sequence[NoisyView], method: str,
                    info: dict[str, Any], *, population: int | None = None) -> Synopsis:
    """Shrinkage, then CALM's consistency + Norm-Sub and maximum entropy (numpy only).

    The views' marginals are pooled and shrunk (:func:`~dpmarginals.inference.shrinkage.eb_shrink`,
    consistent by construction; ``population``: the users the groups were drawn from, so
    that the noise counts the groups' sampling error); the shrunk tables of the maximal
    measured sets then go through :func:`~dpmarginals.synopsis.base.consistent_synopsis`,
    which makes them non-negative, and queries no set contains are answered by maximum
    entropy.
    """
    shrunk = eb_shrink(domain, views, **ADAPTIVE_PRIORS, population=population)
    sets = {domain.in_order(v.attributes) for v in views}
    maximal = sorted((s for s in sets if not any(set(s) < set(o) for o in sets)),
                     key=lambda s: (len(s), s))
    users = {s: sum(v.users for v in views if set(s) <= set(v.attributes)) for s in maximal}
    shrunk_views = [NoisyView(s, shrunk.tables[s], users[s],
                              max(shrunk.noise[s] * shrunk.factor.get(s, 1.0), 1e-12))
                    for s in maximal]
    return consistent_synopsis(domain, shrunk_views, method, {**info, **shrunk.per_order()})


@dataclass(frozen=True)
class Phase:
    """One phase of a simulated collection: its plan, its users and their counts."""

    plan: Plan
    users: Dataset
    counts: Counts
    seed: int | None


@dataclass
class Adaptive:
    """Adaptive collection in phases (module docstring).

    ``share``: the share of the users in each phase but the last (default
    :data:`PHASE_SHARE`); ``phases``: how many phases (default :data:`PHASES`; 2 is the
    classic two-phase design).  ``workload``: the marginals to optimise for, as a list of
    attribute lists or ``{"k": K}`` (default: every k-way marginal).  ``inference``:
    "shrink" (default, numpy) or "pgm" (graphical model, the optional ``pgm`` extra).
    ``per_user=True`` randomizes every user's record (the client path) instead of sampling
    the aggregate counts.  ``oracles``: those a group may use (each takes the one of least
    variance for its size).  ``conservative=True`` takes an interaction as strong only when
    the reports show it (the energies' lower one-standard-error bound; better at eps = 0.2,
    worse at eps >= 0.8 in our measurements, so off by default).  ``priors``: the graphical
    model's shrinkage priors with ``inference="pgm"`` (``"exchangeable"``, calm-pgm's, or
    ``"adaptive"``, those of the numpy release; :func:`~dpmarginals.inference.pgm.pgm_estimate`).
    ``max_fit_seconds``, ``max_fit_memory_mb``: the graphical model's fit limits (as
    :class:`~dpmarginals.local.calm_pgm.CALMPGM`'s; ``inference="pgm"`` only).
    ``pgm_fallback=True`` (what ``auto`` builds): a fit refused by those limits or stopped
    for overrunning its prediction releases with the numpy inference instead, and the
    synopsis says why in ``info["inference_fallback"]``; False raises.  Either way a model
    over the limits first drops its weakest interactions to fit, as calm-pgm's does.

    >>> from dpmarginals.core.domain import Domain
    >>> plan = Adaptive(epsilon=1.0, k=3).plan(Domain.from_dict({f"x{i}": 2 for i in range(8)}),
    ...                                        2**14)
    >>> plan.params["phase"], plan.params["phases"], plan.params["phase_users"], plan.m
    (1, 4, [3277, 3277, 3277, 6553], 12)
    >>> sorted({len(g.attributes) for g in plan.groups})   # pairs, and three triples
    [2, 3]
    """

    epsilon: float
    k: int = 3
    share: float = PHASE_SHARE
    phases: int = PHASES
    workload: Any = None
    inference: str = "shrink"
    per_user: bool = False
    oracles: tuple[str, ...] = ("grr", "oue", "olh")
    conservative: bool = False
    priors: str = "exchangeable"
    max_fit_seconds: float = MAX_FIT_SECONDS
    max_fit_memory_mb: float = MAX_FIT_MEMORY_MB
    pgm_fallback: bool = False
    name: ClassVar[str] = "adaptive"
    _workloads: dict[Domain, Workload] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.inference, "inference", INFERENCE)
        check_choice(self.priors, "priors", ("exchangeable", "adaptive"))
        self.max_fit_seconds, self.max_fit_memory_mb = check_limits(self.max_fit_seconds,
                                                                    self.max_fit_memory_mb)
        self.phases = check_positive_int(self.phases, "phases", 2)
        if self.phases > MAX_PHASES:
            raise DPMarginalsError(f"phases must be at most {MAX_PHASES}, got {self.phases}")
        try:
            share = float(self.share)
        except (TypeError, ValueError):
            share = math.nan
        if not 0.0 < share * (self.phases - 1) < 1.0:
            raise DPMarginalsError(f"share must be a number > 0 with share x (phases - 1) < 1 "
                                   f"(every phase but the last takes that share, the last the "
                                   f"rest), got share={self.share!r} with phases={self.phases}")
        self.share = share
        self.oracles = tuple(self.oracles)

    # -- the workload -------------------------------------------------------------------
    def workload_for(self, domain: Domain) -> Workload:
        """The workload over ``domain`` (every k-way marginal unless one was given)."""
        if domain not in self._workloads:
            if self.workload is None:
                check_k(self.k, len(domain))
                wl = _all_k(domain, self.k)
            elif isinstance(self.workload, Workload):
                wl = self.workload
            else:
                wl = parse_workload(self.workload, domain)
            self._workloads[domain] = wl
        return self._workloads[domain]

    # -- phase 1 ------------------------------------------------------------------------
    def phase_users(self, n: int) -> list[int]:
        """How many of ``n`` users report in each phase (``share`` each, the last the rest)."""
        early = [round(self.share * n)] * (self.phases - 1)
        return [*early, n - sum(early)]

    def plan(self, domain: Domain, n: int) -> Plan:
        """Phase 1's public plan for a collection from ``n`` users in all."""
        d = len(domain)
        wl = self.workload_for(domain)
        planned = self.phase_users(n)
        n1 = planned[0]
        top = min(d, max(2, wl.max_size), 3)
        fewest = math.ceil(d / 2)
        m1 = min(math.comb(d, 2), max(fewest, n1 // PHASE1_GROUP_USERS))
        if n1 < m1 or min(planned) < 1:
            raise DPMarginalsError(f"{n} users are too few for {self.phases} phases over {d} "
                                   f"attributes (phase 1 needs at least {fewest} of them, and "
                                   "every phase one)")
        # pairs, and a quarter of the groups triples when the workload has 3-way queries
        m3 = 0 if top < 3 else max(math.ceil(d / 3), m1 // 4)
        m3 = min(m3, m1 - 1, math.comb(d, 3))
        blocks = balanced_subsets(d, 2, m1 - m3) + (balanced_subsets(d, 3, m3) if m3 else [])
        sets = [tuple(domain.attributes[i] for i in b) for b in blocks]
        l1 = 3 if m3 else 2
        groups = []
        for s in sets:
            cells = domain.project(s).cells()
            oracle, _ = group_variance(self.epsilon, cells, n1 / m1, self.oracles)
            groups.append(GroupSpec(s, oracle, self.epsilon, cells))
        params = {"phase": 1, "phases": self.phases, "k": self.k, "users": int(n),
                  "phase_users": planned, "phase1_users": n1, "l": l1, "m": m1,
                  "workload": {"k": self.k} if self.workload is None else wl.to_dict()}
        return Plan(self.name, self.epsilon, domain, tuple(groups), params)

    # -- the later phases ---------------------------------------------------------------
    def next_phase(self, plans: Sequence[Plan], counts: Sequence[Counts],
                   users: int | None = None) -> Plan:
        """The next phase's plan for ``users`` more users (default: the phase's planned
        share, or in the last phase the planned n less every report so far), from the
        earlier phases' counts alone (post-processing)."""
        plans, counts = list(plans), list(counts)
        phase = check_phases(plans, counts)
        first = plans[0]
        total = int(first.params.get("phases", 2))
        if phase >= total:
            raise DPMarginalsError(f"the collection has {total} phases and all have a plan")
        if phase == 1:
            check_phase_one(first, counts[0])
        if users is None:
            planned = first.params.get("phase_users")
            if phase + 1 < total and isinstance(planned, list):
                users = int(planned[phase])
            else:  # the last phase: the users left
                reported = sum(c.n for c in counts)
                users = int(first.params["users"]) - reported
                if users < 1:
                    raise DPMarginalsError(
                        f"the phases so far have {reported} reports, as many as the "
                        f"{first.params['users']} users the plan was made for: say how many "
                        f"users phase {phase + 1} will have (users=N; the service's "
                        '{"users": N}, `campaign next-phase --users N`)')
        if users < 1:
            raise DPMarginalsError(f"phase {phase + 1} has no users left ({users})")
        domain = first.domain
        views = [v for p, c in zip(plans, counts, strict=True) for v in _reported(p, c)[1]]
        structure = phase_one_structure(domain, views, conservative=self.conservative)
        workload = self.workload_for(domain)
        calm = CALM(epsilon=self.epsilon, k=min(self.k, len(domain))).plan(domain, users)
        choice = plan_optimal(domain, users, self.epsilon, workload, structure,
                              existing=Groups.reported(domain, views), shrink=True,
                              oracles=self.oracles,
                              extra=[("calm", [g.attributes for g in calm.groups])])
        params = {"phase": phase + 1, "phases": total, "k": self.k,
                  "earlier_hashes": [p.hash for p in plans], "phase1_users": counts[0].n,
                  "users": int(users)}
        if "auto" in first.params:  # auto's pick (and its inference) goes with every phase
            params["auto"] = first.params["auto"]
        return choice.plan(domain, self.epsilon, self.name, params)

    # -- simulation ---------------------------------------------------------------------
    def collect(self, data: Dataset, *, rng: RNGLike = None) -> list[Phase]:
        """Every phase with each row of ``data`` as one user (a random share a phase)."""
        n = data.n
        seeded = rng is not None
        sim = simulation_rng(rng)
        draws = self.phases + 1
        seeds = ([int(s) for s in sim.integers(0, 2**63 - 1, size=draws)] if seeded
                 else [None] * draws)
        order = simulation_rng(seeds[0]).permutation(n)
        plan = self.plan(data.domain, n)
        cuts = np.cumsum([0, *plan.params["phase_users"]])
        phases: list[Phase] = []
        for j in range(self.phases):
            users = data.take(order[cuts[j]:cuts[j + 1]])
            if j:
                plan = self.next_phase([p.plan for p in phases], [p.counts for p in phases],
                                       users.n)
            counts = group_supports(users, plan, rng=seeds[j + 1], per_user=self.per_user)
            phases.append(Phase(plan, users, counts, seeds[j + 1]))
        return phases

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        """Collect every phase from ``data`` and release the pooled synopsis."""
        clock = time.perf_counter()
        phases = self.collect(data, rng=rng)
        collected = time.perf_counter()
        synopsis = self.release([p.plan for p in phases], [p.counts for p in phases])
        synopsis.info["stage_seconds"] = {"plan and collect": collected - clock,
                                          self.inference: time.perf_counter() - collected}
        return synopsis

    # -- release ------------------------------------------------------------------------
    def release(self, plan: Plan | Sequence[Plan], counts: Counts | Sequence[Counts],
                n: int | None = None) -> Synopsis:
        """The synopsis of the phases' reports so far, pooled.

        ``plan``/``counts``: phase 1's (a release before phase 2), or the lists of phases 1..j
        in order.  ``n`` is ignored (the counts say how many users reported; CALM's signature).
        """
        plans = [plan] if isinstance(plan, Plan) else list(plan)
        all_counts = [counts] if isinstance(counts, Counts) else list(counts)
        check_phases(plans, all_counts)
        views: list[NoisyView] = []
        groups: list[dict[str, Any]] = []
        for p, c in zip(plans, all_counts, strict=True):
            reported, phase_views = _reported(p, c)
            views += phase_views
            groups += collection_info(reported, phase_views)["groups"]
        if not views:
            raise DPMarginalsError("no reports yet: every group is empty")
        last = plans[-1]
        info: dict[str, Any] = {
            "plan_hash": last.hash, "phase_hashes": [p.hash for p in plans],
            "n": int(sum(c.n for c in all_counts)), "k": self.k, "phases": len(plans),
            "phase1_users": int(all_counts[0].n),
            "l": max(len(g.attributes) for g in last.groups), "m": sum(p.m for p in plans),
            "oracles": sorted({g.oracle for p in plans for g in p.groups}), "groups": groups,
            **{key: last.params[key] for key in ("family", "predicted_sse", "noise_error",
                                                 "sampling_error", "reconstruction_error")
               if key in last.params}}
        return self.release_views(plans[0].domain, views, info, population=info["n"])

    def release_views(self, domain: Domain, views: Sequence[NoisyView],
                      info: dict[str, Any] | None = None, *,
                      population: int | None = None) -> Synopsis:
        """This method's inference on unbiased views (both phases', or cleaner ones: the
        error split of :mod:`dpmarginals.local.error_sources`).  ``population``: the
        number of users the views' groups were drawn from (each user in one group), so that
        shrinkage counts the groups' sampling error (the release passes its n; the
        cleaner views of the error split claim their own sampling error or none)."""
        info = dict(info or {})
        if self.inference == "pgm":
            from .calm_pgm import pgm_synopsis

            try:
                return pgm_synopsis(domain, views, self.name, info, priors=self.priors,
                                    max_fit_seconds=self.max_fit_seconds,
                                    max_fit_memory_mb=self.max_fit_memory_mb,
                                    population=population)
            except DPMarginalsError as exc:
                if not self.pgm_fallback:
                    raise
                info["inference_fallback"] = f"numpy inference: {exc}"
        return shrunk_synopsis(domain, views, self.name, info, population=population)


def _all_k(domain: Domain, k: int) -> Workload:
    """Every k-way marginal, or a fixed random sample of :data:`MAX_QUERIES` of them when
    there are more (the planner's prediction averages over a sample anyway)."""
    total = math.comb(len(domain), k)
    if total <= MAX_QUERIES:
        return Workload.all_k(domain, k)
    gen = np.random.default_rng(20)
    queries = {tuple(sorted(gen.choice(len(domain), k, replace=False).tolist()))
               for _ in range(4 * MAX_QUERIES)}
    chosen = sorted(queries)[:MAX_QUERIES] if len(queries) > MAX_QUERIES else sorted(queries)
    return Workload(domain, tuple(tuple(domain.attributes[i] for i in q) for q in chosen), k)


def check_phases(plans: Sequence[Plan], counts: Sequence[Counts]) -> int:
    """Raise unless ``plans`` are phases 1..j of one adaptive collection, in order, each
    with its counts; return j."""
    if len(plans) != len(counts) or not plans:
        raise DPMarginalsError(f"give one Counts per phase plan (got {len(plans)} plans and "
                               f"{len(counts)} counts)")
    for j, (plan, c) in enumerate(zip(plans, counts, strict=True)):
        if plan.method != Adaptive.name or plan.params.get("phase") != j + 1:
            raise DPMarginalsError(f"plan {j + 1} of the list is not phase {j + 1} of an "
                                   f"adaptive collection (method {plan.method!r}, phase "
                                   f"{plan.params.get('phase')!r})")
        earlier = [p.hash for p in plans[:j]]
        if j and earlier_hashes(plan) != earlier:
            raise DPMarginalsError(f"phase {j + 1}'s plan {plan.hash[:12]} was not planned from "
                                   f"these earlier phases (plans {[h[:12] for h in earlier]})")
        c.check([g.cells for g in plan.groups])
    return len(plans)


def _reported(plan: Plan, counts: Counts) -> tuple[Plan, list[NoisyView]]:
    """The plan with only its groups that have reports, and their calibrated views."""
    keep = [g for g in range(plan.m) if counts.users[g] > 0]
    sub = replace(plan, groups=tuple(plan.groups[g] for g in keep))
    return sub, calibrated_views(sub, counts.subset(keep))
