"""The release step: a campaign's report counts and its plan -> the plan's method's own
release (a synopsis marked private, made on the clients' devices).

The service answers with it, ``dpmarginals estimate`` counts with an engine and then calls
it, and ``synopsis_from_reports`` is the in-process check on the same reports: all three
give the same synopsis, bit for bit.  It sits above the counting engines, the methods and
the service (it imports the registry of methods), and below the service and the command
line, which call it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .core.domain import Domain
from .core.errors import DPMarginalsError
from .protocol.counts import Counts
from .protocol.formats import support_sizes
from .protocol.plan import Plan

if TYPE_CHECKING:
    from .synopsis.base import Synopsis

__all__ = ["answer_domain", "estimate", "synopsis_from_counts", "synopsis_from_reports"]


def answer_domain(plan: Plan) -> Domain:
    """The domain a plan's synopsis answers over: the plan's, or for a plan over an
    encoding of the users' records (BE: ``params["encoded_from"]``) the original one."""
    if "encoded_from" in plan.params:
        return Domain.from_dict(plan.params["encoded_from"])
    return plan.domain


def synopsis_from_counts(
    plan: Plan, counts: Counts | Sequence[np.ndarray],
    users: Sequence[int] | np.ndarray | None = None, *, max_rounds: int = 1000,
    earlier: Sequence[tuple[Plan, Counts]] = (),
) -> Synopsis:
    """Report counts -> the plan's method's own release (``method.release(plan, counts)``).

    ``synopsis_from_counts(plan, counts)`` or ``(plan, supports, users)``.  The method is
    the plan's (:func:`dpmarginals.methods.for_plan`), every local method included (EM,
    InpHT, MargHT, InpHTCMS report through :mod:`~dpmarginals.protocol.formats`): CALM
    drops groups without reports (their marginals are then answered by maximum entropy
    from the others), the methods that answer from their own views (FC, AM, ...) need
    every group.  ``earlier``: the (plan, counts) of a multi-phase collection's earlier
    phases, pooled into the release (:mod:`dpmarginals.service.phases`).  The synopsis is
    marked private, made on the clients' devices.
    """
    from .core.provenance import Provenance
    from .methods import for_plan

    if not isinstance(counts, Counts):
        counts = Counts(list(counts), users if users is not None else [])
    counts.check(support_sizes(plan))
    if counts.n == 0:
        raise DPMarginalsError("no reports yet: every group is empty")
    method = for_plan(plan, max_rounds=max_rounds)
    if earlier:
        synopsis = method.release([p for p, _ in earlier] + [plan],
                                  [c for _, c in earlier] + [counts])
    else:
        synopsis = method.release(plan, counts)
    synopsis.info.setdefault("n", counts.n)
    synopsis.info.setdefault("groups_reporting", int((counts.users > 0).sum()))
    synopsis.provenance = Provenance(
        True, "local", plan.method, plan.epsilon, plan_hash=plan.hash,
        unit="one device: each report is one device's record, randomized on the device",
        randomness="made on the clients' devices (dpmarginals.protocol.device draws from the OS "
        "CSPRNG); the aggregator cannot verify how a report was made")
    return synopsis


def synopsis_from_reports(
    plan: Plan, reports: Iterable[Mapping[str, Any]], *, max_rounds: int = 1000
) -> Synopsis:
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
    from .protocol.reports import support_counts

    return synopsis_from_counts(plan, support_counts(plan, reports), max_rounds=max_rounds)


def estimate(
    plan: Plan,
    reports: str | Path | Sequence[Any] | Mapping[int, Any],
    engine: str = "numpy",
    *,
    campaign: str | None = None,
    spark: Any = None,
    threads: int | None = None,
    max_rounds: int = 1000,
) -> Any:
    """Count with ``engine`` (:func:`dpmarginals.engines.count_supports`), then the plan's
    method's own release (:func:`synopsis_from_counts`, as the collection service does).
    ``synopsis.info`` records the engine and its seconds.
    """
    from .engines import count_supports

    start = time.perf_counter()
    counts = count_supports(plan, reports, engine, campaign=campaign, spark=spark,
                            threads=threads)
    counted = time.perf_counter()
    synopsis = synopsis_from_counts(plan, counts, max_rounds=max_rounds)
    synopsis.info["engine"] = engine
    synopsis.info["reports_per_group"] = [int(u) for u in counts.users]
    synopsis.info["stage_seconds"] = {"count": counted - start,
                                      "estimate": time.perf_counter() - counted}
    return synopsis
