"""Building a campaign's plan from the command line, with or without a server.

``dpmarginals plan --domain FILE --epsilon E --k K --n N --out plan.json`` and
``dpmarginals campaign create --domain ... `` build the same plan (:func:`build_plan`);
``campaign create --plan plan.json`` then uses the file.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.device import MIN_LONGITUDINAL_RATIO
from ..protocol.plan import warn_uncovered

__all__ = ["LONGITUDINAL_FACTOR", "build_plan", "describe_plan", "longitudinal"]

LONGITUDINAL_FACTOR = MIN_LONGITUDINAL_RATIO
"""A deployed plan's default longitudinal epsilon, in per-report epsilons: an unchanged
value reported in any number of campaigns reveals at most 4 reports' worth (RAPPOR's
deployment used about 8); the devices' default floor, below which they refuse a plan
(docs/device-spec.md §4); docs/deployment.md says how to choose it."""


def longitudinal(text: str) -> str | float | None:
    """``--longitudinal-epsilon``: ``auto``, ``none`` or a number (argparse type)."""
    import argparse

    if text in ("auto", "none"):
        return text if text == "auto" else None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, 'auto' or 'none', got "
                                         f"{text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def build_plan(method: str, domain: str, epsilon: float, k: int, n: int,
               oracle: str | None = None, memo: str | float | None = "auto", *,
               phases: bool = True) -> Any:
    """The plan ``method`` makes for ``n`` users over the domain in the JSON file
    ``domain`` (``k``: the marginal size to answer; ``oracle``: CALM's oracle choice).
    ``method="auto"`` plans with the method :func:`dpmarginals.local.auto.choose` picks
    (``phases``: whether the campaign can run in phases) and records the choice in the
    plan's ``params["auto"]``.

    ``memo`` is its longitudinal epsilon: a number, None (not memoized: devices charge
    every report in full), or "auto": :data:`LONGITUDINAL_FACTOR` times epsilon when every
    group can be memoized, else None."""
    import dataclasses

    from ..core.domain import Domain
    from ..methods import make
    from ..protocol.formats import memoizable

    params: dict[str, Any] = {"epsilon": epsilon, "k": k}
    if oracle is not None:
        params["oracle"] = oracle
    dom = Domain.load(domain)
    if method.lower() == "auto":
        from ..local.auto import Auto

        if oracle is not None:
            raise DPMarginalsError("--oracle sets CALM's oracle, but the method is auto: "
                                   "name the method (--method calm)")
        auto = Auto(epsilon=epsilon, k=k, phases=phases)
        choice = auto.choice(dom, n)
        plan = auto.plan(dom, n)
        plan = dataclasses.replace(plan, params={**plan.params, "auto": choice.to_dict()})
    else:
        plan = make(method, **params).plan(dom, n)
    if not plan.groups and not plan.params:
        raise DPMarginalsError(f"method {method!r} makes no collectable plan")
    warn_uncovered(plan)
    if memo == "auto":
        memo = LONGITUDINAL_FACTOR * plan.epsilon if memoizable(plan) else None
    elif memo is not None and not memoizable(plan):
        raise DPMarginalsError(f"--longitudinal-epsilon: a {method} plan's reports cannot be "
                               f"memoized (only grr, oue, sue and em groups can); give "
                               "--longitudinal-epsilon none")
    elif memo is not None and memo < MIN_LONGITUDINAL_RATIO * plan.epsilon:
        warnings.warn(f"--longitudinal-epsilon {memo:g} is below {MIN_LONGITUDINAL_RATIO:g} x "
                      f"epsilon: devices refuse it unless their owners lower their floor "
                      "(min_longitudinal_ratio), since nearer epsilon a device's reports "
                      "link across campaigns", UserWarning, stacklevel=2)
    return dataclasses.replace(plan, longitudinal=memo)


def describe_plan(plan: Any) -> str:
    """One line: method, epsilon (and the longitudinal one), groups, hash."""
    memo = ("not memoized" if plan.longitudinal is None
            else f"longitudinal epsilon {plan.longitudinal:g}")
    return (f"{plan.method}, epsilon={plan.epsilon} per report, {memo}, {plan.m} groups, "
            f"plan hash {plan.hash}")
