"""Two-phase (adaptive) campaigns: phase 2's plan is made from phase 1's reports.

A campaign created with an ``adaptive`` phase-1 plan (``dpmarginals plan --method adaptive``,
:class:`dpmarginals.local.adaptive.Adaptive`) collects like any other.  When the admin asks
for phase 2 (``POST /campaigns/{id}/phase2``), the service closes phase 1, plans phase 2 from
phase 1's counts alone (post-processing of private reports: no user is asked twice and no
budget is spent) and creates the campaign ``{id}.phase2`` with that plan; its clients fetch
the plan from ``GET /campaigns/{id}.phase2/plan`` and check it as any plan.  Releases of the
phase-2 campaign pool both phases' counts (:func:`earlier_phases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.counts import Counts
from ..protocol.plan import Plan

__all__ = ["PHASE2_SUFFIX", "check_phase_one", "earlier_phases", "is_phase_one",
           "phase_two_name", "phase_two_plan"]

PHASE2_SUFFIX = ".phase2"


def is_phase_one(plan: Plan) -> bool:
    """Whether the plan is phase 1 of a two-phase (adaptive) collection."""
    return plan.method == "adaptive" and plan.params.get("phase") == 1


def phase_two_name(campaign: str) -> str:
    """The id of phase 1 ``campaign``'s phase-2 campaign."""
    return campaign + PHASE2_SUFFIX


def check_phase_one(plan1: Plan, counts1: Counts) -> None:
    """Raise unless phase 2 can be planned from phase 1's counts (every group reported)."""
    from ..local.adaptive import check_phase_one as check

    check(plan1, counts1)


def _method(plan: Plan) -> Any:
    from ..local.adaptive import Adaptive

    workload = plan.params.get("workload")
    custom = isinstance(workload, Mapping) and "queries" in workload
    return Adaptive(epsilon=plan.epsilon, k=int(plan.params.get("k", 3)),
                    workload=workload if custom else None)


def phase_two_plan(plan1: Plan, counts1: Counts, campaign: str,
                   users: int | None = None) -> Plan:
    """Phase 2's plan from phase 1's counts (``users``: how many will report in phase 2;
    default: the planned total less phase 1's reports)."""
    if not is_phase_one(plan1):
        raise DPMarginalsError(f"campaign {campaign!r} is not phase 1 of an adaptive "
                               "collection (its plan's method is "
                               f"{plan1.method!r}, phase {plan1.params.get('phase')!r})")
    if users is None:
        users = int(plan1.params.get("users", 0)) - counts1.n
        if users < 1:
            planned = plan1.params.get("users")
            raise DPMarginalsError(f"phase 1 has {counts1.n} reports, as many as the {planned} "
                                   "users the plan was made for: say how many users phase 2 "
                                   'will have ({"users": N})')
    plan2 = _method(plan1).phase_two(plan1, counts1, users)
    return replace(plan2, params={**plan2.params, "phase1_campaign": campaign})


def earlier_phases(store: Any, plan: Plan) -> list[tuple[Plan, Counts]]:
    """For a phase-2 plan, phase 1's (plan, counts) from the store; else nothing."""
    if plan.method != "adaptive" or plan.params.get("phase") != 2:
        return []
    name = plan.params.get("phase1_campaign")
    first = store.campaign(name) if isinstance(name, str) else None
    if first is None or first.plan.hash != plan.params.get("phase1_hash"):
        raise DPMarginalsError(f"phase 1 of this campaign ({name!r}, plan "
                               f"{str(plan.params.get('phase1_hash'))[:12]}) is not in the store")
    return [(first.plan, store.counts(first))]
