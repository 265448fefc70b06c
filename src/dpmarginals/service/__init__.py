"""The collection service: an HTTP aggregator (FastAPI) over a durable store.

Install with the ``service`` extra.  ``create_app`` (in :mod:`.app`) builds the ASGI app;
:mod:`.store` keeps campaigns, reports and the per-(group, cell) support counts (SQLite
in WAL mode, or PostgreSQL); ``dpmarginals serve`` runs it (:mod:`.command`).

This module itself needs neither FastAPI nor a database: it holds the one function that
turns support counts into a synopsis, shared by the server and the in-process check
``synopsis_from_reports`` (the server's answers equal it on the same reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..protocol.plan import Plan

if TYPE_CHECKING:
    from ..synopsis.base import ViewSynopsis

__all__ = ["synopsis_from_counts", "synopsis_from_reports"]


def synopsis_from_counts(
    plan: Plan, supports: Sequence[np.ndarray], users: Sequence[int] | np.ndarray,
    *, max_rounds: int = 1000,
) -> ViewSynopsis:
    """Support counts per (group, cell) -> unbiased views -> consistent synopsis (CALM §4.2-4.4).

    Groups without reports are left out (their marginals are then answered by maximum
    entropy from the others).  The pipeline is CALM's (``estimate_views`` then
    ``consistent_synopsis``), whatever ``plan.method`` is.
    """
    from ..core.provenance import Provenance
    from ..local.collect import estimate_views
    from ..synopsis.base import consistent_synopsis
    from ..synopsis.stderr import collection_info

    users = np.asarray(users, dtype=np.int64)
    if len(supports) != plan.m or users.shape != (plan.m,):
        raise DPMarginalsError(f"expected counts for the plan's {plan.m} groups, got "
                               f"{len(supports)} supports and users of shape {users.shape}")
    keep = [g for g in range(plan.m) if users[g] > 0]
    if not keep:
        raise DPMarginalsError("no reports yet: every group is empty")
    sub = replace(plan, groups=tuple(plan.groups[g] for g in keep))
    views = estimate_views(sub, [np.asarray(supports[g]) for g in keep], users[keep])
    info: dict[str, Any] = {"plan_hash": plan.hash, **plan.params, "n": int(users.sum()),
                            "groups_reporting": len(keep),
                            "oracles": sorted({g.oracle for g in plan.groups}),
                            **collection_info(sub, views)}  # for standard errors
    synopsis = consistent_synopsis(plan.domain, views, plan.method, info,
                                   max_rounds=max_rounds)
    synopsis.provenance = Provenance(
        True, "local", plan.method, plan.epsilon, plan_hash=plan.hash,
        unit="one device: each report is one device's record, randomized on the device",
        randomness="made on the clients' devices (dpmarginals.protocol.client draws from the OS "
        "CSPRNG); the aggregator cannot verify how a report was made")
    return synopsis


def synopsis_from_reports(
    plan: Plan, reports: Iterable[Mapping[str, Any]], *, max_rounds: int = 1000
) -> ViewSynopsis:
    """The in-process release from JSON reports: validate, count, then as the server does.

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec, Plan
    >>> from dpmarginals.protocol.reports import PlanCodec
    >>> plan = Plan("calm", 1.0, Domain(("a",), (2,)), (GroupSpec(("a",), "grr", 1.0, 2),))
    >>> codec = PlanCodec(plan)
    >>> reports = [codec.report(0, v) for v in (0, 1, 1, 1)]
    >>> synopsis_from_reports(plan, reports).marginal(["a"]).values.round(3).tolist()
    [0.0, 1.0]
    """
    from ..protocol.reports import support_counts

    supports, users = support_counts(plan, reports)
    return synopsis_from_counts(plan, supports, users, max_rounds=max_rounds)
