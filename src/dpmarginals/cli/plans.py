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
               oracle: str | None = None) -> Any:
    """The plan ``method`` makes for ``n`` users over the domain in the JSON file
    ``domain`` (``k``: the marginal size to answer; ``oracle``: CALM's oracle choice)."""
    from ..core.domain import Domain
    from ..methods import make

    params: dict[str, Any] = {"epsilon": epsilon, "k": k}
    if oracle is not None:
        params["oracle"] = oracle
    plan = make(method, **params).plan(Domain.load(domain), n)
    if not plan.groups and not plan.params:
        raise DPMarginalsError(f"method {method!r} makes no collectable plan")
    return plan


def describe_plan(plan: Any) -> str:
    """One line: method, epsilon, groups, hash."""
    return (f"{plan.method}, epsilon={plan.epsilon}, {plan.m} groups, plan hash {plan.hash}")
