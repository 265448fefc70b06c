"""Where a plan stands in an adaptive collection in phases, as its params say: which phase,
whether another follows, and the campaign id the next one gets (client and service agree
on these without either importing the other)."""

from __future__ import annotations

from typing import Any

from ..core.errors import DPMarginalsError
from .plan import Plan

__all__ = ["check_next_phase", "earlier_hashes", "has_next_phase", "next_phase_name",
           "phase_of"]


def phase_of(plan: Plan) -> int:
    """The plan's phase in an adaptive collection (0 for any other plan)."""
    phase = plan.params.get("phase")
    return phase if plan.method == "adaptive" and isinstance(phase, int) else 0


def has_next_phase(plan: Plan) -> bool:
    """Whether the plan is a phase of an adaptive collection with a phase after it."""
    return 1 <= phase_of(plan) < int(plan.params.get("phases", 2))


def check_next_phase(campaign: str, plan: Plan) -> None:
    """Raise unless ``campaign``'s plan is a phase with a phase after it."""
    if not has_next_phase(plan):
        raise DPMarginalsError(f"campaign {campaign!r} is not a phase of an adaptive "
                               "collection with a phase after it (its plan's method is "
                               f"{plan.method!r}, phase {plan.params.get('phase')!r} of "
                               f"{plan.params.get('phases')!r})")


def earlier_hashes(plan: Plan) -> list[Any]:
    """The hashes of the earlier phases' plans that a later phase's plan names, in order."""
    said = plan.params.get("earlier_hashes")
    return list(said) if isinstance(said, list) else []


def next_phase_name(campaign: str, plan: Plan) -> str:
    """The id of the phase after ``campaign``'s (whose plan is ``plan``): phase 1's id with
    ``.phase{j}``."""
    first = plan.params.get("phase1_campaign", campaign) if phase_of(plan) > 1 else campaign
    return f"{first}.phase{phase_of(plan) + 1}"
