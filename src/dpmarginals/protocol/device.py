"""The device: one user's rules, enforced from her own records whatever the server sends.

numpy and the standard library only, so it can ship inside an app.  A :class:`Device` is
a :class:`~.ledger.Ledger` and three caps the device's owner sets, all required but the
period cap: ``max_epsilon`` (what one report may reveal), ``max_total_epsilon`` (what the
device ever spends) and ``max_period_epsilon`` per ``period_seconds`` (e.g. a day); and a
floor, ``min_longitudinal_ratio`` (default :data:`MIN_LONGITUDINAL_RATIO`), under which a
memoized plan's reports would link (docs/device-spec.md §4); ``memoize=False`` keeps no
permanent response at all (every report fresh and charged in full).  One
report, :meth:`Device.report`, in this order -- everything before step 6 draws nothing
random, and a refusal is one line (:class:`~.ledger.PlanRefused`,
:class:`~.ledger.BudgetExceeded`):

1. :func:`~.checks.check_plan` against ``max_epsilon`` (the hash, every field), and a
   memoized plan's ``longitudinal_epsilon`` at least ``min_longitudinal_ratio`` times its
   ``epsilon``: a server that sets them equal would get every report of a family as its
   permanent response, one identifier across its campaigns;
2. the campaign (``origin`` + id) is pinned to the plan it first showed: another plan
   under that id is refused, and a campaign already reported gives back its stored report
   (nothing charged, nothing drawn);
3. one phase per collection: a device that reported in any phase of a collection (``X``,
   ``X.phase2``, ...) refuses every other phase from its own ledger, whatever the plan
   says; a later phase must chain from (name in ``params.earlier_hashes``) every earlier
   phase plan the device pinned;
4. the group: the one this device keeps for the plan, else the server's, else a uniform
   draw (OS entropy; checked against the caps at the worst case first);
5. the charge -- the report's epsilon, or for a memoized plan what the report adds to its
   family's min(sum, R x longitudinal epsilon), R the permanent responses the family can
   hold (its values and the substitute) -- against the total and the period caps.  It
   reads the family, never the value: a refusal (which the server sees) cannot tell it
   whether the value changed (:mod:`.ledger`);
6. the randomization (OS entropy only): a memoized plan's permanent response is drawn
   once per (family, value) and kept; every report adds fresh instantaneous noise.  A value
   the plan's domain cannot encode (a label or number it does not list, a code out of
   range, an attribute the record lacks) is reported as a uniformly random value of the
   group's attributes, charged as any report (:class:`ValueSubstituted` tells the app,
   locally, once the report is made: a warnings filter set to "error" cannot take it
   back, the message is logged instead): a refusal the server could see would tell it
   the value lies outside the domain it chose, and a server free to choose domains could
   slice them until a report arrives (for memoized plans the substitute is one value per
   family, kept as its permanent response);
7. the ledger stores the report and its charge atomically before it is returned.

A server that mints campaigns (fresh ids, re-minted plans) gets a fresh report each time,
and each is charged (a memoized family until it has cost R x its longitudinal epsilon: a
nonce, another epsilon or a fresh id stays in its family): ``max_total_epsilon`` (and the
period cap) is what bounds it.

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("sex", "age"), (2, 3)),
...             (GroupSpec(("sex", "age"), "oue", 1.0, 6),), longitudinal=4.0)
>>> phone = Device(None, max_epsilon=1.0, max_total_epsilon=3.0)
>>> first = phone.report(plan, {"sex": 1, "age": 2}, origin="https://a.example", campaign="c1")
>>> again = phone.report(plan, {"sex": 1, "age": 2}, origin="https://a.example", campaign="c2")
>>> first["report_id"] != again["report_id"], float(phone.ledger.total())
(True, 2.0)
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import secrets
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.randomness import SecureRandom
from .checks import check_plan, device_cap, longitudinal_floor, refused
from .ledger import MAX_RESPONSES, BudgetExceeded, Ledger, LedgerError, campaign_root
from .phases import earlier_hashes
from .plan import Plan, canonical
from .reports import PlanCodec, ReportError

__all__ = ["DAY", "MIN_LONGITUDINAL_RATIO", "AssignmentIgnored", "Device", "RecordValueError",
           "ValueSubstituted", "choose_group", "codec", "family_responses", "record_row"]

DAY = 86_400.0
_SLACK = Fraction(1, 1 << 40)  # relative: sums of float budgets meet float caps
#: The least longitudinal / per-report epsilon a device accepts unless its owner sets
#: another: the service's default (docs/device-spec.md §4 tabulates what each ratio links).
MIN_LONGITUDINAL_RATIO = 4.0
_codecs: dict[str, PlanCodec] = {}


class AssignmentIgnored(UserWarning):
    """The device kept its group for a plan instead of the group it was given."""


class ValueSubstituted(UserWarning):
    """The record had a value the plan's domain cannot encode: the device reported a
    uniformly random value instead (module docstring, step 6).  Local only: nothing of it
    is sent."""


class RecordValueError(DPMarginalsError):
    """A value of the record the plan's domain cannot encode (the device substitutes it;
    :func:`record_row` callers that encode data of their own see the error)."""


def codec(plan: Plan) -> PlanCodec:
    """The (cached) :class:`~.reports.PlanCodec` of ``plan``."""
    out = _codecs.get(plan.hash)
    if out is None:
        if len(_codecs) > 64:
            _codecs.clear()
        out = _codecs[plan.hash] = PlanCodec(plan)
    return out


def choose_group(plan: Plan) -> int:
    """A uniformly random group, from the OS's entropy."""
    return secrets.randbelow(plan.m)


def record_row(plan: Plan, record: Mapping[str, Any] | Sequence[Any] | np.ndarray,
               attributes: Sequence[str]) -> np.ndarray:
    """The record as one row of codes in domain order (only ``attributes`` are read): a
    value is an integer code, or, where the plan's domain declares them, one of the
    attribute's labels ("female") or a raw number its bins cut (an age of 37)."""
    dom = plan.domain
    row = np.zeros(len(dom), dtype=np.int64)
    if isinstance(record, Mapping):
        missing = [a for a in attributes if a not in record]
        if missing:
            raise RecordValueError(f"the record lacks the attributes {missing}")
        items = [(dom.index(a), record[a]) for a in attributes]
    else:
        values = list(np.asarray(record, dtype=object).ravel())
        if len(values) != len(dom):
            raise DPMarginalsError(f"a record needs {len(dom)} values in the domain's order "
                                   f"{list(dom.attributes)}, got {len(values)}")
        items = [(dom.index(a), values[dom.index(a)]) for a in attributes]
    for i, value in items:
        labels = dom.labels[i]
        if labels is not None and (isinstance(value, str) or labels.bins is not None):
            try:
                row[i] = labels.code_of(dom.attributes[i], value)  # the user's own value
            except DPMarginalsError as exc:
                raise RecordValueError(str(exc)) from None
            continue
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)  # 1.0 is the code 1, as in TypeScript (and pandas' gaps)
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise RecordValueError(f"attribute {dom.attributes[i]!r} must be an integer code"
                                   f"{' or one of its labels' if labels else ''}, got {value!r}")
        if not 0 <= value < dom.sizes[i]:
            raise RecordValueError(f"value {value} of attribute {dom.attributes[i]!r} is "
                                   f"outside its domain 0..{dom.sizes[i] - 1}")
        row[i] = int(value)
    return row


#: The value key a group's substituted values are memoized under (one per family).
SUBSTITUTE = "substitute"


def group_row(plan: Plan, record: Any, group: int) -> tuple[np.ndarray | None, str | None]:
    """The record's row of codes for ``group``'s attributes and None, or None and why when
    one of them cannot be encoded: the report then carries a uniformly random value
    (:func:`random_row`), whatever the record held."""
    try:
        return record_row(plan, record, plan.groups[group].attributes), None
    except RecordValueError as exc:
        return None, (f"{exc}: reported as a uniformly random value of "
                      f"{list(plan.groups[group].attributes)} (plan {plan.hash[:12]})")


def _tell_app(message: str) -> None:
    """Tell the app (a local :class:`ValueSubstituted` warning), once the report is made:
    a warning filter that turns it into an error cannot take the report back (no report
    would tell the server that the value lies outside its domain); then it is logged."""
    try:
        warnings.warn(message, ValueSubstituted, stacklevel=4)
    except Warning:
        logging.getLogger(__name__).warning(message)


def random_row(plan: Plan, group: int) -> np.ndarray:
    """A uniformly random value of ``group``'s attributes, from the OS's entropy."""
    row = np.zeros(len(plan.domain), dtype=np.int64)
    for a in plan.groups[group].attributes:
        i = plan.domain.index(a)
        row[i] = secrets.randbelow(plan.domain.sizes[i])
    return row


def family(plan: Plan, group: int, origin: str) -> str:
    """The permanent responses a group's reports share: the server's ``origin``, the
    group's attributes (with their declared values), oracle(s) and longitudinal epsilon,
    hashed.  Any plan of that server whose group has the same family noises the same
    permanent response of an unchanged value; another server's gets a permanent response
    of its own (charged as its own), so no two servers see one permanent response."""
    spec = plan.groups[group]
    body: dict[str, Any] = {
        "origin": origin,
        "attributes": [[a, plan.domain.project((a,)).to_dict()[a]] for a in spec.attributes],
        "oracle": spec.oracle, "longitudinal_epsilon": plan.longitudinal}
    if spec.oracle == "em":
        names = plan.params.get("attribute_oracles", [])
        body["attribute_oracles"] = [names[plan.domain.index(a)] for a in spec.attributes]
    return hashlib.sha256(canonical(body)).hexdigest()[:32]


def family_responses(plan: Plan, group: int) -> int | None:
    """R: how many permanent responses ``group``'s family can ever hold, one per value of its
    attributes and the substitute's (None beyond 2^53 - 1, a count JSON numbers do not keep:
    such a family's reports are charged in full)."""
    count = math.prod(plan.domain.project(plan.groups[group].attributes).sizes) + 1
    return count if count <= MAX_RESPONSES else None


def _value_key(inputs: np.ndarray, sizes: Sequence[int]) -> int:
    """One integer per distinct input: the cell, or em's values in mixed radix."""
    flat = [int(v) for v in np.asarray(inputs).ravel()]
    if len(flat) == 1:
        return flat[0]
    key = 0
    for value, size in zip(flat, sizes, strict=True):
        key = key * size + value
    return key


class Device:
    """One device's caps and ledger (module docstring).

    ``ledger``: a :class:`~.ledger.Ledger`, a file path, or None (in memory: tests).
    ``memoize=False``: keep no permanent response; every report of a memoized plan draws a
    fresh one, then its noise (the same composed law, so the server's estimates are
    unchanged and it cannot tell), charged its epsilon in full and linked to no other
    report: whether and when the value changed is then protected like the value (a
    memoized plan's charges do not bound that, docs/device-spec.md §4), at the price of
    the longitudinal bound for a value that never changes.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None, *, max_epsilon: float,
                 max_total_epsilon: float, max_period_epsilon: float | None = None,
                 period_seconds: float = DAY, clock: Callable[[], float] = time.time,
                 min_longitudinal_ratio: float = MIN_LONGITUDINAL_RATIO,
                 memoize: bool = True) -> None:
        self.max_epsilon = device_cap(max_epsilon)
        if not isinstance(memoize, bool):
            raise DPMarginalsError(f"memoize must be True or False, got {memoize!r}")
        self.memoize = memoize
        self.min_longitudinal_ratio = longitudinal_floor(min_longitudinal_ratio)
        self.max_total_epsilon = device_cap(max_total_epsilon, "max_total_epsilon")
        self.max_period_epsilon = (None if max_period_epsilon is None
                                   else device_cap(max_period_epsilon, "max_period_epsilon"))
        self.period_seconds = device_cap(period_seconds, "period_seconds")
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger, clock=clock)
        self.clock = self.ledger.clock

    # -- the checks ---------------------------------------------------------------------------
    def accept(self, plan: Any, *, origin: str, campaign: str) -> Plan:
        """The plan if this device would report under it now (steps 1-3 of the module
        docstring; the campaign is pinned), else one-line :class:`PlanRefused`."""
        with self.ledger.locked():
            return self._accept(plan, origin, campaign)[0]

    def _accept(self, source: Any, origin: str, campaign: str
                ) -> tuple[Plan, str, dict[str, Any] | None]:
        if not isinstance(campaign, str) or not campaign:
            raise DPMarginalsError(f"a campaign id is required, got {campaign!r}")
        if not isinstance(origin, str) or not origin:
            raise DPMarginalsError(f"the server's origin is required, got {origin!r}")
        plan = check_plan(source, self.max_epsilon)
        floor = Fraction(self.min_longitudinal_ratio) * Fraction(plan.epsilon)
        if (self.memoize and plan.longitudinal is not None  # kept responses are what link
                and Fraction(plan.longitudinal) < floor * (1 - _SLACK)):
            raise refused(f"longitudinal_epsilon = {plan.longitudinal:g} is below this device's "
                          f"floor, {self.min_longitudinal_ratio:g} x epsilon = "
                          f"{float(floor):g}: its reports would link across campaigns "
                          "(min_longitudinal_ratio)")
        key, root = f"{origin}|{campaign}", f"{origin}|{campaign_root(campaign)}"
        entry = self.ledger.campaign(key)
        if entry is not None and entry["plan_hash"] != plan.hash:
            raise refused(f"campaign {campaign!r} at {origin} is pinned to plan "
                          f"{entry['plan_hash'][:12]} (first seen), the server now shows "
                          f"{plan.hash[:12]}")
        if entry is not None and entry["report"] is not None:
            return plan, key, entry["report"]
        siblings = {k: e for k, e in self.ledger.campaigns().items()
                    if e["root"] == root and k != key}
        done = sorted(k for k, e in siblings.items() if e["report"] is not None)
        if done:
            raise refused(f"this device reported in {done[0].split('|', 1)[1]!r}, a phase of "
                          f"the same collection as {campaign!r}: each user reports in one "
                          "phase")
        chained = set(map(str, earlier_hashes(plan)))
        unchained = sorted(e["plan_hash"] for e in siblings.values()
                           if e["plan_hash"] not in chained)
        if unchained:
            raise refused(f"campaign {campaign!r} does not chain from the plan "
                          f"{unchained[0][:12]} this device pinned for its collection "
                          "(params.earlier_hashes must name it)")
        self.ledger.pin(key, root, plan.hash)
        return plan, key, None

    def _check_caps(self, charge: Fraction) -> None:
        """Raise :class:`BudgetExceeded` if ``charge`` more would pass a cap."""
        total = self.ledger.total()
        cap = Fraction(self.max_total_epsilon)
        if total + charge > cap * (1 + _SLACK):
            raise BudgetExceeded(f"max_total_epsilon = {self.max_total_epsilon:g} refuses this "
                                 f"report: spent {float(total):g} + {float(charge):g} > "
                                 f"{self.max_total_epsilon:g}")
        if self.max_period_epsilon is not None:
            recent = self.ledger.spent_since(self.clock() - self.period_seconds)
            if recent + charge > Fraction(self.max_period_epsilon) * (1 + _SLACK):
                raise BudgetExceeded(
                    f"max_period_epsilon = {self.max_period_epsilon:g} per "
                    f"{self.period_seconds:g} s refuses this report: spent {float(recent):g} "
                    f"in the period + {float(charge):g} > {self.max_period_epsilon:g}")

    def stored_report(self, *, origin: str, campaign: str) -> dict[str, Any] | None:
        """The report this device already made for the campaign (with the ticket it was
        sent with, if the ledger kept one), or None."""
        entry = self.ledger.campaign(f"{origin}|{campaign}")
        if entry is None or entry["report"] is None:
            return None
        report = dict(entry["report"])
        if entry.get("ticket") is not None:
            report["ticket"] = entry["ticket"]
        return report

    def check_charge(self, plan: Plan, group: int | None, *, origin: str) -> None:
        """Raise :class:`BudgetExceeded` unless the caps can pay for a report to ``origin``
        in ``group`` (None: any group, at the worst case, the plan's epsilon); nothing is
        drawn, and the record is not needed (the charge never depends on the value)."""
        if group is None:
            self._check_caps(Fraction(plan.epsilon))
            return
        if not 0 <= group < plan.m:
            raise LedgerError(f"the ledger keeps group {group} for plan {plan.hash[:12]}, "
                              f"which has {plan.m} groups")
        self._check_caps(self._charge(plan, group, origin))

    def _charge(self, plan: Plan, group: int, origin: str) -> Fraction:
        """What a report in ``group`` to ``origin`` adds to the device's spending: its
        epsilon, or for a memoized plan what it adds to its family's cost (step 5)."""
        if plan.longitudinal is None or not self.memoize:
            return Fraction(plan.epsilon)
        responses = family_responses(plan, group)
        cap = None if responses is None else responses * Fraction(plan.longitudinal)
        return self.ledger.charge(family(plan, group, origin), plan.epsilon, cap=cap)

    # -- one report ---------------------------------------------------------------------------
    def report(self, plan: Any, record: Mapping[str, Any] | Sequence[Any] | np.ndarray, *,
               origin: str, campaign: str, group: int | None = None) -> dict[str, Any]:
        """This device's report for ``campaign`` at ``origin`` (module docstring): ``group``
        is the server's assignment (ignored, with :class:`AssignmentIgnored`, when the
        device keeps another group for this plan)."""
        with self.ledger.locked():
            checked, key, stored = self._accept(plan, origin, campaign)
            if stored is not None:
                return dict(stored)
            return self._fresh(checked, key, record, group, origin)

    def _fresh(self, plan: Plan, key: str, record: Any, group: int | None, origin: str
               ) -> dict[str, Any]:
        if not plan.m:
            raise DPMarginalsError(f"plan of method {plan.method!r} has no groups: its users "
                                   "report nothing, so it cannot be collected")
        kept = self.ledger.group_of(plan.hash)
        requested = None if group is None else _check_group(plan, group)
        if kept is not None:
            if not 0 <= kept < plan.m:
                raise LedgerError(f"the ledger keeps group {kept} for plan {plan.hash[:12]}, "
                                  f"which has {plan.m} groups")
            if requested is not None and requested != kept:
                warnings.warn(f"plan {plan.hash[:12]}: this device reports group {kept} in "
                              f"every campaign of the plan, not the requested group "
                              f"{requested}", AssignmentIgnored, stacklevel=3)
            g = kept
        elif requested is not None:
            g = requested
        else:
            self._check_caps(Fraction(plan.epsilon))  # the worst case, before the draw
            g = choose_group(plan)
        plan_codec = codec(plan)
        fmt = plan_codec.oracle(g)
        row, substituted = group_row(plan, record, g)
        memo = _memo_key(plan, g, row, origin) if self.memoize else None
        self._check_caps(self._charge(plan, g, origin))
        src = SecureRandom()
        group_codec = plan_codec.groups[g]

        def inputs() -> np.ndarray:  # a substitute is drawn only when it is used
            return plan_codec.inputs(g, (random_row(plan, g) if row is None else row)[None, :])

        if memo is None:
            native = fmt.perturb(inputs(), rng=src)
            kept_response = None
        else:
            response = self.ledger.permanent_response(memo)
            if response is None:
                permanent = fmt.permanent(inputs(), src)
                response = group_codec.payloads(permanent)[0]
            else:
                try:
                    permanent = group_codec.native(group_codec.row(response))
                except ReportError as exc:
                    raise LedgerError(f"the ledger's permanent response {memo} is invalid: "
                                      f"{exc}") from None
            native = fmt.instantaneous(permanent, src)
            kept_response = (memo, response, plan.longitudinal, family_responses(plan, g))
        report = plan_codec.reports(g, native)[0]
        self.ledger.record(key, report, epsilon=plan.epsilon, permanent=kept_response)
        if substituted is not None:
            _tell_app(substituted)
        return report

    # -- what is left -------------------------------------------------------------------------
    def remaining(self) -> float:
        """What is left under ``max_total_epsilon`` (and the period cap, if set)."""
        left = Fraction(self.max_total_epsilon) - self.ledger.total()
        if self.max_period_epsilon is not None:
            recent = self.ledger.spent_since(self.clock() - self.period_seconds)
            left = min(left, Fraction(self.max_period_epsilon) - recent)
        return max(float(left), 0.0)


def _memo_key(plan: Plan, group: int, row: np.ndarray | None, origin: str) -> str | None:
    """Where a memoized report's permanent response is kept: the group's family and the
    value (:data:`SUBSTITUTE` for a substituted one); None for a plan without memoization."""
    if plan.longitudinal is None:
        return None
    if row is None:
        return f"{family(plan, group, origin)}:{SUBSTITUTE}"
    inputs = codec(plan).inputs(group, row[None, :])
    sizes = plan.domain.project(plan.groups[group].attributes).sizes
    return f"{family(plan, group, origin)}:{_value_key(inputs, sizes)}"


def _check_group(plan: Plan, group: object) -> int:
    if isinstance(group, bool) or not isinstance(group, int | np.integer):
        raise DPMarginalsError(f"group must be an integer, got {group!r}")
    if not 0 <= group < plan.m:
        raise DPMarginalsError(f"group {group} is not one of the plan's groups 0..{plan.m - 1}")
    return int(group)

