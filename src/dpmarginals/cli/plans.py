"""Building a campaign's plan from the command line, with or without a server.

``dpmarginals plan --domain FILE --epsilon E --k K --n N --out plan.json`` and
``dpmarginals campaign create --domain ... `` build the same plan (:func:`build_plan`);
``campaign create --plan plan.json`` then uses the file.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import DPMarginalsError

__all__ = ["build_plan", "describe_plan"]


def build_plan(method: str, domain: str, epsilon: float, k: int, n: int,
               oracle: str | None = None, *, phases: bool = True) -> Any:
    """The plan ``method`` makes for ``n`` users over the domain in the JSON file
    ``domain`` (``k``: the marginal size to answer; ``oracle``: CALM's oracle choice).
    ``method="auto"`` plans with the method :func:`dpmarginals.local.auto.choose` picks
    (``phases``: whether the campaign can run in phases) and records the choice in the
    plan's ``params["auto"]``."""
    import dataclasses

    from ..core.domain import Domain
    from ..methods import make

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
        return dataclasses.replace(plan, params={**plan.params, "auto": choice.to_dict()})
    plan = make(method, **params).plan(dom, n)
    if not plan.groups and not plan.params:
        raise DPMarginalsError(f"method {method!r} makes no collectable plan")
    return plan


def describe_plan(plan: Any) -> str:
    """One line: method, epsilon, groups, hash."""
    return (f"{plan.method}, epsilon={plan.epsilon}, {plan.m} groups, plan hash {plan.hash}")
