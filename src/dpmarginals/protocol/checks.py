"""What a device checks of a plan before it draws anything (numpy + stdlib only).

:func:`check_plan` takes a plan as the server sent it (dict, JSON text or file), insists on
its hash, and refuses in one line naming the field and its value (:class:`PlanRefused`)
anything the device will not do: a budget that is not a finite number in
(0, :data:`~dpmarginals.core.errors.EPSILON_CEILING`], a per-report epsilon above the
device's own cap, a group whose epsilon is not the plan's, an oracle or format the
client does not know, a group whose ``cells`` is not its marginal's, an unknown field (a
server cannot smuggle oracle parameters: every one is derived from epsilon and cells),
a report format whose public parameters are malformed or not exactly eps-LDP (a
``matrix`` strategy is checked in integers), a memoized plan with a group that cannot be
memoized, a number no JavaScript client reads exactly.  What a device refuses from its
own records (a pinned campaign's changed plan, a second phase, the budget) is
:mod:`.device`'s.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import EPSILON_CEILING, DPMarginalsError
from ..oracles import ORACLES, make_oracle
from .formats import KNOWN, MAX_GROUP_SUPPORT, group_oracle
from .ledger import PlanRefused
from .plan import SAFE_INTEGER, Plan
from .reports import MAX_GROUP_CELLS

__all__ = ["check_plan", "device_cap", "load_plan", "longitudinal_floor", "parse_plan"]

_PLAN_KEYS = frozenset({"format", "version", "method", "epsilon", "longitudinal_epsilon",
                        "domain", "groups", "params", "hash"})
_GROUP_KEYS = frozenset({"attributes", "oracle", "epsilon", "cells"})
_TOLERANCE = 1e-9  # relative slack when a sum of per-attribute budgets meets the plan's


def refused(message: str) -> PlanRefused:
    return PlanRefused(f"plan refused: {message}")


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise refused(f"{field} = {value!r} is not a number")
    return float(value)


def _plan_epsilon(value: object, field: str, ceiling: float = EPSILON_CEILING) -> float:
    """A budget the plan asks for: finite, > 0 and at most ``ceiling``."""
    eps = _number(value, field)
    if not (math.isfinite(eps) and eps > 0):
        raise refused(f"{field} = {value!r} is not a finite number > 0")
    if eps > ceiling:
        raise refused(f"{field} = {eps!r} exceeds {ceiling:g}, beyond any meaningful privacy")
    return eps


def _device_number(value: object, field: str, rule: str) -> float:
    """One of the device owner's settings as a float, or one line: ``field`` must be a
    number (``rule`` names the setting's kind: cap, floor)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise DPMarginalsError(f"{field} must be a number (the device's own {rule}), got "
                               f"{value!r}")
    return float(value)


def device_cap(value: object, field: str = "max_epsilon") -> float:
    """One of the device's own caps: required, finite, in (0, EPSILON_CEILING] (the total
    and period caps: finite and > 0)."""
    cap = _device_number(value, field, "cap")
    high = EPSILON_CEILING if field == "max_epsilon" else math.inf
    if not (math.isfinite(cap) and 0 < cap <= high):
        raise DPMarginalsError(f"{field} must be a finite number in (0, {high:g}], got "
                               f"{value!r}")
    return cap


def longitudinal_floor(value: object) -> float:
    """The device's ``min_longitudinal_ratio``: a finite number >= 1 (1: no floor beyond
    the plan check's longitudinal >= epsilon)."""
    ratio = _device_number(value, "min_longitudinal_ratio", "floor")
    if not (math.isfinite(ratio) and ratio >= 1):
        raise DPMarginalsError(f"min_longitudinal_ratio must be a finite number >= 1, got "
                               f"{value!r}")
    return ratio


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def parse_plan(source: Plan | Mapping[str, Any] | str | os.PathLike[str]) -> Plan:
    """A plan from a Plan, or from a dict, JSON text or JSON file that must carry its hash."""
    if isinstance(source, Plan):
        return source
    if isinstance(source, Mapping):
        return _plan_from_dict(source)
    text = os.fspath(source) if isinstance(source, os.PathLike) else str(source)
    if not text.lstrip().startswith("{"):
        try:
            text = Path(text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DPMarginalsError(f"cannot read plan {str(source)!r}: {exc}") from None
    try:
        spec = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise DPMarginalsError(f"plan is not valid JSON: {exc}") from None
    except RecursionError:
        raise refused("the plan's JSON is nested too deep") from None
    if not isinstance(spec, Mapping):
        raise refused(f"a plan is a JSON object, got {type(spec).__name__}")
    return _plan_from_dict(spec)


def _plan_from_dict(spec: Mapping[str, Any]) -> Plan:
    """Plan.from_dict, stricter: no unknown field, only exact numbers, the hash present and
    equal."""
    unknown = sorted(str(k) for k in spec.keys() - _PLAN_KEYS)
    if unknown:
        raise refused(f"unknown field {unknown[0]!r} = {spec[unknown[0]]!r:.80}")
    groups = spec.get("groups")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        extra = sorted(str(k) for k in group.keys() - _GROUP_KEYS) if isinstance(
            group, Mapping) else []
        if extra:
            raise refused(f"groups[{i}] has unknown field {extra[0]!r} = "
                          f"{group[extra[0]]!r:.80} (the client derives every oracle parameter "
                          "from the group's epsilon and cells)")
    big = _unsafe_integer(spec)
    if big is not None:
        raise refused(f"{big[0]} = {big[1]} is beyond 2^53 - 1, which not every client reads "
                      "exactly")
    claimed = spec.get("hash")
    if claimed is None:
        raise refused("hash is missing (the device checks the plan against its hash)")
    try:
        plan = Plan.from_dict({k: v for k, v in spec.items() if k != "hash"})
        actual = plan.hash
    except DPMarginalsError as exc:
        raise refused(str(exc)) from None
    if claimed != actual:
        raise refused(f"hash = {claimed!r:.80} does not match the plan's content (SHA-256 "
                      f"{actual})")
    return plan


def _unsafe_integer(value: Any, where: str = "plan") -> tuple[str, int] | None:
    """The first integer beyond +-(2^53 - 1) in a JSON value, with its path."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (where, value) if abs(value) > SAFE_INTEGER else None
    items = (value.items() if isinstance(value, Mapping)
             else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        found = _unsafe_integer(item, f"{where}[{key!r}]" if isinstance(key, int) else
                                f"{where}.{key}" if where != "plan" else str(key))
        if found is not None:
            return found
    return None


def check_plan(plan: Plan | Mapping[str, Any] | str | os.PathLike[str],
               max_epsilon: float) -> Plan:
    """The plan, if this device accepts it under its own per-report cap ``max_epsilon``;
    else :class:`PlanRefused` (module docstring).  Nothing random is drawn here.

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec, Plan
    >>> dom = Domain(("a", "b"), (2, 3))
    >>> bad = Plan("calm", 1.0, dom, (GroupSpec(("a", "b"), "grr", 20.0, 6),))
    >>> check_plan(bad, max_epsilon=1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpmarginals.protocol.ledger.PlanRefused: plan refused: groups[0].epsilon = 20.0 differs from ...
    """
    cap = device_cap(max_epsilon)
    out = parse_plan(plan)
    eps = _plan_epsilon(out.epsilon, "epsilon")
    if eps > cap:
        raise refused(f"epsilon = {eps!r} exceeds this device's max_epsilon = {cap!r}")
    if out.longitudinal is not None:
        _plan_epsilon(out.longitudinal, "longitudinal_epsilon", math.inf)
    dom = out.domain
    for i, spec in enumerate(out.groups):
        field = f"groups[{i}]"
        if spec.oracle not in KNOWN:
            raise refused(f"{field}.oracle = {spec.oracle!r} is not one of {list(KNOWN)}")
        group_eps = _plan_epsilon(spec.epsilon, f"{field}.epsilon")
        if group_eps != eps:
            raise refused(f"{field}.epsilon = {group_eps!r} differs from the plan's "
                          f"epsilon = {eps!r}")
        attrs = list(spec.attributes)
        bad = [a for a in attrs if a not in dom]
        if not attrs or bad or len(set(attrs)) != len(attrs):
            what = f"{bad[0]!r} is not in the domain" if bad else "must be distinct and non-empty"
            raise refused(f"{field}.attributes = {attrs!r:.120}: {what}")
        cells = math.prod(dom.size(a) for a in attrs)
        if isinstance(spec.cells, bool) or spec.cells != cells:
            raise refused(f"{field}.cells = {spec.cells!r} but the marginal over {attrs!r:.120} "
                          f"has {cells} cells")
        if spec.oracle in ORACLES:
            if not 2 <= cells <= MAX_GROUP_CELLS:
                raise refused(f"{field}.cells = {cells} is outside 2..{MAX_GROUP_CELLS}")
            make_oracle(spec.oracle, group_eps, cells)  # derives g, K, p, q from eps and cells
        try:  # the format's parameters come from the plan's public params
            size = group_oracle(out, i).size
        except DPMarginalsError as exc:
            raise refused(f"{field} ({spec.oracle}): {exc}") from None
        if spec.oracle not in ORACLES and not 1 <= size <= MAX_GROUP_SUPPORT:
            raise refused(f"{field} ({spec.oracle}) has a support of {size:,} counts, "
                          f"outside 1..{MAX_GROUP_SUPPORT:,}")
    _check_params(out, eps)
    return out


def _check_params(plan: Plan, eps: float) -> None:
    """Budgets a plan's params imply (methods whose users report per attribute)."""
    params, d = plan.params, len(plan.domain)
    if "epsilon_per_attribute" in params:
        per = _plan_epsilon(params["epsilon_per_attribute"], "params.epsilon_per_attribute")
        if per * d > eps * (1 + _TOLERANCE):
            raise refused(f"params.epsilon_per_attribute = {per!r} over {d} attributes "
                          f"composes to {per * d!r} > the plan's epsilon = {eps!r}")
    if not plan.groups and "p" in params:
        keep = _number(params["p"], "params.p")
        if not 0.5 < keep < 1:
            raise refused(f"params.p = {params['p']!r} is outside (0.5, 1)")
        implied = math.log(keep / (1 - keep))
        if implied > eps * (1 + _TOLERANCE):
            raise refused(f"params.p = {keep!r} implies epsilon {implied!r} > the plan's "
                          f"epsilon = {eps!r}")


def load_plan(source: Plan | Mapping[str, Any] | str | os.PathLike[str]) -> Plan:
    """A plan from a Plan, a plan dict, a JSON string, or a JSON file path.

    Lenient (for the operator's own plans: a missing hash is accepted); a device uses
    :func:`check_plan`, which requires the hash and checks the budgets.
    """
    if isinstance(source, Plan):
        return source
    if isinstance(source, Mapping):
        return Plan.from_dict(source)
    text = str(source)
    if text.lstrip().startswith("{"):
        try:
            return Plan.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise DPMarginalsError(f"plan is not valid JSON: {exc}") from None
    return Plan.load(text)
