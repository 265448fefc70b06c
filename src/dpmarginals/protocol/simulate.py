"""Simulated users: many records randomized at once, each row another user (tests, demos,
load tests, the ``dpmarginals client --simulate`` command).

No ledger and no caps but the plan check: these are not devices.  Each user is
randomized exactly as a device would randomize her first report (a memoized plan: a
fresh permanent response and its instantaneous noise), drawing from the OS's entropy
unless a seed is given.  A real device reports through :class:`~.device.Device`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng
from .checks import check_plan
from .device import codec
from .http import ServiceClient
from .plan import Plan
from .reports import MAX_BATCH_REPORTS, ReportError

__all__ = ["play", "simulate_reports"]


def simulate_reports(
    plan: Plan | Mapping[str, Any], records: np.ndarray, *, max_epsilon: float,
    groups: Sequence[int] | np.ndarray | None = None, rng: RNGLike = None,
) -> list[dict[str, Any]]:
    """One report per simulated user: ``records`` is (n, d) in the domain's order.

    The plan is checked once against ``max_epsilon``; groups are drawn uniformly (OS
    entropy, or the seeded ``rng``) unless given.  The reports come in the rows' order.

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec, Plan
    >>> plan = Plan("calm", 1.0, Domain(("a", "b"), (2, 3)),
    ...             (GroupSpec(("a", "b"), "grr", 1.0, 6),))
    >>> [r["group"] for r in simulate_reports(plan, np.array([[0, 1], [1, 2]]), max_epsilon=1.0)]
    [0, 0]
    """
    return _reports(check_plan(plan, max_epsilon), records, groups=groups, rng=rng)


def _reports(plan: Plan, records: np.ndarray, *,
             groups: Sequence[int] | np.ndarray | None = None,
             rng: RNGLike = None) -> list[dict[str, Any]]:
    plan_codec = codec(plan)
    arr = np.asarray(records)
    if arr.ndim != 2:
        raise DPMarginalsError(f"records must be a 2-D array (n, d), got shape {arr.shape}")
    n = arr.shape[0]
    source = client_rng(rng)
    if groups is None:
        grp = np.asarray(source.integers(0, plan.m, size=n), dtype=np.int64)
    else:
        grp = np.asarray(groups)
        if grp.shape != (n,) or (grp.size and grp.dtype.kind not in "iu"):
            raise DPMarginalsError(f"groups must be {n} integers, got {grp.dtype} {grp.shape}")
        if grp.size and (grp.min() < 0 or grp.max() >= plan.m):
            raise DPMarginalsError(f"groups must lie in 0..{plan.m - 1}")
    out: list[dict[str, Any]] = [{}] * n
    for g in np.unique(grp):
        members = np.flatnonzero(grp == g)
        inputs = plan_codec.inputs(int(g), arr[members])
        native = plan_codec.oracle(int(g)).perturb(inputs, rng=source)
        for i, report in zip(members, plan_codec.reports(int(g), native), strict=True):
            out[i] = report
    return out


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def play(
    client: ServiceClient, records: np.ndarray, *, max_epsilon: float, batch: int = 1000,
    assign: str = "server", save: str | os.PathLike[str] | None = None, rng: RNGLike = None,
) -> dict[str, Any]:
    """Every row of ``records`` (domain order) as one simulated user: assign, randomize, send.

    For tests, demos and load tests (each row is another user; no ledger).  The plan is
    checked once against ``max_epsilon`` before anything is drawn.  ``batch`` reports per
    request (1: one request per user); ``assign="server"`` asks the service for groups,
    ``"local"`` draws them uniformly.  ``save`` writes the acknowledged reports as JSON
    lines (for an in-process check).
    """
    if assign not in ("server", "local"):
        raise DPMarginalsError(f"assign must be 'server' or 'local', got {assign!r}")
    if batch < 1:
        raise DPMarginalsError(f"batch must be >= 1, got {batch}")
    plan = check_plan(client.plan(), max_epsilon)
    arr = np.asarray(records)
    sink = open(save, "w", encoding="utf-8") if save is not None else None  # noqa: SIM115
    sent = 0
    start = time.perf_counter()
    try:
        for part in _chunks(arr.shape[0], min(batch, MAX_BATCH_REPORTS)):
            rows = arr[part]
            assigned = np.asarray(client.assignment(count=len(rows)), dtype=np.int64)
            groups = assigned if assign == "server" else None
            reports = _reports(plan, rows, groups=groups, rng=rng)
            if batch == 1:
                for report in reports:
                    client.send(report)
            else:
                client.send_batch(reports)
            sent += len(reports)
            if sink is not None:
                sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in reports)
    except ReportError as exc:  # a local validation error: report it as a user error
        raise DPMarginalsError(str(exc)) from None
    finally:
        if sink is not None:
            sink.close()
    seconds = time.perf_counter() - start
    return {"campaign": client.campaign, "plan_hash": plan.hash, "sent": sent,
            "seconds": seconds, "reports_per_second": sent / seconds if seconds > 0 else None}
