"""Adaptive campaigns in phases: each phase's plan is made from the earlier phases' reports.

A campaign created with an ``adaptive`` phase-1 plan (``dpmarginals plan --method adaptive``,
:class:`dpmarginals.local.adaptive.Adaptive`) collects like any other.  When the admin asks
for the next phase (``POST /campaigns/{id}/next-phase``), the service closes the campaign,
plans the next phase from every phase's counts so far (post-processing of private reports:
no user is asked twice and no budget is spent) and creates the campaign ``{id}.phase{j}``
(``id`` phase 1's) with that plan; its clients fetch the plan from
``GET /campaigns/{id}.phase{j}/plan`` and check it as any plan.  Releases of a later phase's
campaign pool every phase's counts up to it (:func:`earlier_phases`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.counts import Counts
from ..protocol.phases import check_next_phase, earlier_hashes, phase_of
from ..protocol.plan import Plan

__all__ = ["check_phase_one", "earlier_phases", "next_phase_plan"]


def check_phase_one(plan: Plan, counts: Counts) -> None:
    """Raise unless the next phase can be planned from this one's counts (phase 1: every
    group reported)."""
    from ..local.adaptive import check_phase_one as check

    if phase_of(plan) == 1:
        check(plan, counts)


def _method(plan: Plan) -> Any:
    from ..local.adaptive import Adaptive

    workload = plan.params.get("workload")
    custom = isinstance(workload, Mapping) and "queries" in workload
    return Adaptive(epsilon=plan.epsilon, k=int(plan.params.get("k", 3)),
                    workload=workload if custom else None)


def next_phase_plan(phases: Sequence[tuple[str, Plan, Counts]], users: int | None = None
                    ) -> Plan:
    """The next phase's plan from the (campaign, plan, counts) of phases 1..j (``users``: how
    many will report in it; default: the share phase 1 planned for it, or in the last phase
    the planned total less every report so far)."""
    campaign, plan, _ = phases[-1]
    check_next_phase(campaign, plan)
    first = phases[0][1]
    nxt = _method(first).next_phase([p for _, p, _ in phases], [c for _, _, c in phases], users)
    from ..protocol.formats import memoizable

    nxt = replace(nxt, params={**nxt.params, "phase1_campaign": phases[0][0],
                               "earlier_campaigns": [name for name, _, _ in phases]})
    # a memoized collection stays memoized where the next phase's groups can be
    memo = first.longitudinal if memoizable(nxt) else None
    return replace(nxt, longitudinal=memo)


def earlier_phases(store: Any, plan: Plan) -> list[tuple[str, Plan, Counts]]:
    """For a later phase's plan, the (campaign, plan, counts) of every earlier phase, from
    the store; else nothing."""
    if phase_of(plan) < 2:
        return []
    names = plan.params.get("earlier_campaigns")
    hashes = earlier_hashes(plan)
    if (not isinstance(names, list) or len(names) != len(hashes)
            or len(names) != phase_of(plan) - 1):
        raise DPMarginalsError(f"phase {phase_of(plan)}'s plan must name its "
                               f"{phase_of(plan) - 1} earlier phases' campaigns and plans")
    out = []
    for name, digest in zip(names, hashes, strict=True):
        found = store.campaign(name) if isinstance(name, str) else None
        if found is None or found.plan.hash != digest:
            raise DPMarginalsError(f"phase {len(out) + 1} of this campaign ({name!r}, plan "
                                   f"{str(digest)[:12]}) is not in the store")
        out.append((name, found.plan, store.counts(found)))
    return out
