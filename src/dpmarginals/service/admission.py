"""What the aggregator accepts, checked before anything is stored or parsed at length.

* :func:`admit_plan`: a campaign's plan, validated on creation so that nothing accepted can
  fail later: every text valid UTF-8 (no lone surrogate), sizes bounded, every budget
  finite and within the client's range (:func:`~dpmarginals.protocol.checks.check_plan`
  with the device cap at :data:`~dpmarginals.core.errors.EPSILON_CEILING`: a plan no
  client would accept is refused here), reports encodable (``PlanCodec``), and a method
  that can release from counts (``methods.for_plan``).
* :func:`check_structure`: a cheap bound on the JSON a report body may hold, applied to the
  raw bytes *before* parsing, so a body within the byte limit cannot expand into millions
  of Python objects (the structural characters of a valid report never occur inside its
  strings: hex, base64 and the ticket's base64url).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.plan import Plan

__all__ = ["MAX_PLAN_ATTRIBUTES", "MAX_PLAN_CELLS", "MAX_PLAN_GROUPS", "MAX_TEXT",
           "PlanRejected", "admit_plan", "check_structure", "check_text"]

MAX_PLAN_GROUPS = 4096
MAX_PLAN_ATTRIBUTES = 1024
MAX_PLAN_CELLS = 1 << 24
"""Cells over all groups' count tensors (128 MiB of int64)."""
MAX_TEXT = 4096
"""Characters of any one string in a plan (a label, an attribute name, a method name)."""
_MAX_NODES = 1 << 20
_MAX_DEPTH = 32


class PlanRejected(DPMarginalsError):
    """A plan the aggregator refuses; the message names the field and the value."""


def check_text(value: Any, where: str = "plan") -> None:
    """Every string (keys too) encodes as UTF-8 and is at most :data:`MAX_TEXT` long;
    at most 2^20 values and depth 32.  Raises :class:`PlanRejected` naming the place."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES or depth > _MAX_DEPTH:
            raise PlanRejected(f"{where} is too large or too deeply nested")
        if isinstance(item, str):
            _check_string(item, path)
        elif isinstance(item, Mapping):
            for key, sub in item.items():
                _check_string(str(key), f"{path} key")
                stack.append((sub, f"{path}.{key}"[:200], depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((sub, f"{path}[{i}]", depth + 1) for i, sub in enumerate(item))


def _check_string(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlanRejected(f"{path} holds {text[exc.start:exc.end]!r}, which is not valid "
                           "UTF-8 (a lone surrogate)") from None
    if len(text) > MAX_TEXT:
        raise PlanRejected(f"{path} is a string of {len(text):,} characters; at most "
                           f"{MAX_TEXT:,}")


def admit_plan(spec: Any) -> Plan:
    """The plan of a new campaign, or :class:`PlanRejected` (one line naming the field).

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec
    >>> ok = Plan("calm", 1.0, Domain(("a",), (2,)), (GroupSpec(("a",), "grr", 1.0, 2),))
    >>> admit_plan(ok.to_dict()).hash == ok.hash
    True
    >>> bad = Plan("calm", 1.0, Domain(("a",), (2,)), (GroupSpec(("a",), "grr", 1e308, 2),))
    >>> admit_plan(bad.to_dict())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpmarginals.service.admission.PlanRejected: groups[0].epsilon = 1e+308 exceeds 20, ...
    """
    from ..core.errors import EPSILON_CEILING
    from ..methods import for_plan
    from ..protocol.checks import check_plan
    from ..protocol.reports import PlanCodec

    if not isinstance(spec, Mapping):
        raise PlanRejected("plan must be a JSON object")
    check_text(spec)
    try:
        plan = Plan.from_dict(spec)
    except DPMarginalsError as exc:
        raise PlanRejected(str(exc)) from None
    except (AttributeError, OverflowError, RecursionError) as exc:
        raise PlanRejected(f"malformed plan: {exc!r}"[:300]) from None
    if len(plan.domain) > MAX_PLAN_ATTRIBUTES:
        raise PlanRejected(f"domain has {len(plan.domain):,} attributes; at most "
                           f"{MAX_PLAN_ATTRIBUTES:,}")
    if plan.m > MAX_PLAN_GROUPS:
        raise PlanRejected(f"groups has {plan.m:,} groups; at most {MAX_PLAN_GROUPS:,}")
    total = sum(int(g.cells) for g in plan.groups if isinstance(g.cells, int))
    if total > MAX_PLAN_CELLS:
        raise PlanRejected(f"the groups' marginals hold {total:,} cells in all; at most "
                           f"{MAX_PLAN_CELLS:,}")
    try:
        check_plan(plan.to_dict(), EPSILON_CEILING)  # what a device would refuse
    except DPMarginalsError as exc:
        raise PlanRejected(str(exc).removeprefix("plan refused: ")) from None
    try:
        PlanCodec(plan)
        for_plan(plan)
    except DPMarginalsError as exc:
        raise PlanRejected(str(exc)) from None
    return plan


def check_structure(body: bytes | bytearray, reports: int) -> bool:
    """Whether ``body`` could be a JSON body of at most ``reports`` reports (each with a
    ticket), judging only by its count of structural characters: objects, arrays,
    members and elements.  False means: refuse it unparsed."""
    return (body.count(b"{") <= reports + 1 and body.count(b"[") <= reports + 1
            and body.count(b",") <= 8 * reports and body.count(b":") <= 7 * reports + 1)
