"""The client: randomize one user's record on her own device and send the report.

Needs only numpy and the standard library (no pandas, scipy or web framework), so it
can ship inside an app.  The flow of one user:

1. get the campaign's public plan (``ServiceClient.plan()``: its hash must be present and
   match its content);
2. :func:`check_plan` against the device's own cap ``max_epsilon`` (required: the server
   never decides how much a device spends): every group's epsilon is the plan's, the
   plan's epsilon is within the cap, each group's oracle (or report format) is one the
   client knows and its ``cells`` is the marginal's size.  A refusal is a
   :class:`PlanRefused`, raised before any random draw;
3. take the group the server assigns (``ServiceClient.assignment()``, which also keeps the
   single-use ticket that comes with it) or pick one uniformly with OS entropy
   (:func:`choose_group`);
4. :func:`make_report`: project the record onto the group's marginal and randomize the
   cell with the group's frequency oracle, drawing from the OS CSPRNG;
5. ``ServiceClient.send(report)``, which attaches the assignment's ticket (the service
   admits one report per ticket).  Only the report and its ticket leave the device.

With a :class:`~dpmarginals.protocol.ledger.Ledger` (``ServiceClient.submit(..., ledger=...)``
or ``make_report(..., ledger=..., campaign=...)``) the device reports once per campaign,
keeps its group per plan, reuses the memoized randomization of an unchanged value
(permanent randomized response) and counts the epsilon it spends, up to an optional
total cap.

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("sex", "age"), (2, 3)),
...             (GroupSpec(("sex", "age"), "oue", 1.0, 6),))
>>> report = make_report(plan, {"sex": 1, "age": 2}, max_epsilon=1.0)
>>> report["group"], len(report["payload"]), len(report["report_id"])
(0, 4, 32)
>>> make_report(plan, {"sex": 1, "age": 2}, max_epsilon=0.5)
Traceback (most recent call last):
...
dpmarginals.protocol.ledger.PlanRefused: plan refused: epsilon = 1.0 exceeds this device's ...

:func:`make_reports` does the same for many simulated users at once (tests, demos, the
``dpmarginals client`` command, which plays every row of a CSV file as one user).
"""

from __future__ import annotations

import csv
import gzip
import http.client
import io
import json
import math
import os
import secrets
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng
from ..oracles import ORACLES, make_oracle
from .formats import KNOWN, MAX_GROUP_SUPPORT, group_oracle
from .ledger import BudgetExceeded, Ledger, LedgerError, PlanRefused
from .phases import check_next_phase, next_phase_name
from .plan import Plan
from .reports import MAX_BATCH_REPORTS, MAX_GROUP_CELLS, PlanCodec, ReportError

__all__ = [
    "EPSILON_CEILING",
    "AssignmentIgnored",
    "BudgetExceeded",
    "Ledger",
    "LedgerError",
    "PlanRefused",
    "ServiceClient",
    "ServiceError",
    "check_plan",
    "choose_group",
    "load_plan",
    "make_report",
    "make_reports",
    "play",
    "read_records",
]

DEFAULT_TIMEOUT = 30.0
EPSILON_CEILING = 20.0
"""No plan may spend more per report, whatever the device's cap (e^20 is about 5e8)."""
_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_MAX_RETRY_AFTER = 60.0
_PLAN_KEYS = frozenset({"format", "version", "method", "epsilon", "domain", "groups", "params",
                        "hash"})
_GROUP_KEYS = frozenset({"attributes", "oracle", "epsilon", "cells"})
_TOLERANCE = 1e-9  # relative slack when a sum of per-attribute budgets meets the plan's
_codecs: dict[str, PlanCodec] = {}


class AssignmentIgnored(UserWarning):
    """The device kept its memoized group for a plan instead of the group it was given."""


def _codec(plan: Plan) -> PlanCodec:
    key = plan.hash
    codec = _codecs.get(key)
    if codec is None:
        if len(_codecs) > 64:
            _codecs.clear()
        codec = _codecs[key] = PlanCodec(plan)
    return codec


# -- protecting the user against the plan --------------------------------------------------
def _refused(message: str) -> PlanRefused:
    return PlanRefused(f"plan refused: {message}")


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise _refused(f"{field} = {value!r} is not a number")
    return float(value)


def _plan_epsilon(value: object, field: str) -> float:
    """A budget the plan asks for: finite, > 0 and at most :data:`EPSILON_CEILING`."""
    eps = _number(value, field)
    if not (math.isfinite(eps) and eps > 0):
        raise _refused(f"{field} = {value!r} is not a finite number > 0")
    if eps > EPSILON_CEILING:
        raise _refused(f"{field} = {eps!r} exceeds {EPSILON_CEILING!r}, beyond any meaningful "
                       "privacy")
    return eps


def _device_cap(max_epsilon: object) -> float:
    """The device's own cap: required, finite, in (0, EPSILON_CEILING]."""
    if isinstance(max_epsilon, bool) or not isinstance(max_epsilon, int | float | np.integer
                                                          | np.floating):
        raise DPMarginalsError(f"max_epsilon must be a number (the device's own cap on the "
                               f"epsilon of one report), got {max_epsilon!r}")
    cap = float(max_epsilon)
    if not (math.isfinite(cap) and 0 < cap <= EPSILON_CEILING):
        raise DPMarginalsError(f"max_epsilon must be a finite number in (0, {EPSILON_CEILING!r}]"
                               f", got {max_epsilon!r}")
    return cap


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _plan_source(source: Plan | Mapping[str, Any] | str | os.PathLike[str]) -> Plan:
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
    if not isinstance(spec, Mapping):
        raise _refused(f"a plan is a JSON object, got {type(spec).__name__}")
    return _plan_from_dict(spec)


def _plan_from_dict(spec: Mapping[str, Any]) -> Plan:
    """Plan.from_dict, stricter: no unknown field, and the hash present and equal."""
    unknown = sorted(str(k) for k in spec.keys() - _PLAN_KEYS)
    if unknown:
        raise _refused(f"unknown field {unknown[0]!r} = {spec[unknown[0]]!r:.80}")
    groups = spec.get("groups")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        extra = sorted(str(k) for k in group.keys() - _GROUP_KEYS) if isinstance(
            group, Mapping) else []
        if extra:
            raise _refused(f"groups[{i}] has unknown field {extra[0]!r} = "
                           f"{group[extra[0]]!r:.80} (the client derives every oracle parameter "
                           "from the group's epsilon and cells)")
    claimed = spec.get("hash")
    if claimed is None:
        raise _refused("hash is missing (the device checks the plan against its hash)")
    try:
        plan = Plan.from_dict({k: v for k, v in spec.items() if k != "hash"})
    except DPMarginalsError as exc:
        raise _refused(str(exc)) from None
    if claimed != plan.hash:
        raise _refused(f"hash = {claimed!r:.80} does not match the plan's content "
                       f"(SHA-256 {plan.hash})")
    return plan


def check_plan(plan: Plan | Mapping[str, Any] | str | os.PathLike[str],
               max_epsilon: float) -> Plan:
    """The plan, if this device accepts it under its own cap ``max_epsilon``; else PlanRefused.

    ``plan`` is a :class:`Plan` or a plan dict, JSON text or JSON file, which must carry
    its ``hash`` and match it.  Refused, in one line naming the field and its value: a
    non-finite, non-positive or absurd (> :data:`EPSILON_CEILING`) epsilon; a plan epsilon
    above ``max_epsilon``; a group whose epsilon is not the plan's, whose oracle the client
    does not know, or whose ``cells`` is not the product of its attributes' sizes; an
    unknown field (derived oracle parameters such as OLH's g or HR's K are always
    recomputed from epsilon and cells, never read from the plan); a report format
    (:mod:`~dpmarginals.protocol.formats`) whose public parameters (``params.k``,
    ``support``, ``g``, ``w``, ``hash_seed``, ``attribute_oracles``) are malformed or whose
    support is too large; per-attribute budgets (``params.epsilon_per_attribute``) that
    compose to more than the plan's epsilon, or, for plans without groups, a
    randomized-response ``params.p`` implying more.  Every budget the client spends is
    derived from the group's epsilon (EM's attributes get epsilon / d each), never read
    from params.  Nothing random is drawn here.

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec, Plan
    >>> dom = Domain(("a", "b"), (2, 3))
    >>> bad = Plan("calm", 1.0, dom, (GroupSpec(("a", "b"), "grr", 20.0, 6),))
    >>> check_plan(bad, max_epsilon=1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpmarginals.protocol.ledger.PlanRefused: plan refused: groups[0].epsilon = 20.0 differs from ...
    """
    cap = _device_cap(max_epsilon)
    out = _plan_source(plan)
    eps = _plan_epsilon(out.epsilon, "epsilon")
    if eps > cap:
        raise _refused(f"epsilon = {eps!r} exceeds this device's max_epsilon = {cap!r}")
    dom = out.domain
    for i, spec in enumerate(out.groups):
        field = f"groups[{i}]"
        if spec.oracle not in KNOWN:
            raise _refused(f"{field}.oracle = {spec.oracle!r} is not one of {list(KNOWN)}")
        group_eps = _plan_epsilon(spec.epsilon, f"{field}.epsilon")
        if group_eps != eps:
            raise _refused(f"{field}.epsilon = {group_eps!r} differs from the plan's "
                           f"epsilon = {eps!r}")
        attrs = list(spec.attributes)
        bad = [a for a in attrs if a not in dom]
        if not attrs or bad or len(set(attrs)) != len(attrs):
            what = f"{bad[0]!r} is not in the domain" if bad else "must be distinct and non-empty"
            raise _refused(f"{field}.attributes = {attrs!r:.120}: {what}")
        cells = math.prod(dom.size(a) for a in attrs)
        if isinstance(spec.cells, bool) or spec.cells != cells:
            raise _refused(f"{field}.cells = {spec.cells!r} but the marginal over {attrs!r:.120} "
                           f"has {cells} cells")
        if spec.oracle in ORACLES:
            if not 2 <= cells <= MAX_GROUP_CELLS:
                raise _refused(f"{field}.cells = {cells} is outside 2..{MAX_GROUP_CELLS}")
            make_oracle(spec.oracle, group_eps, cells)  # derives g, K, p, q from eps and cells
            continue
        try:  # a report format: its parameters come from the plan's public params
            size = group_oracle(out, i).size
        except DPMarginalsError as exc:
            raise _refused(f"{field} ({spec.oracle}): {exc}") from None
        if not 1 <= size <= MAX_GROUP_SUPPORT:
            raise _refused(f"{field} ({spec.oracle}) has a support of {size:,} counts, "
                           f"outside 1..{MAX_GROUP_SUPPORT:,}")
    _check_params(out, eps)
    return out


def _check_params(plan: Plan, eps: float) -> None:
    """Budgets a plan's params imply (methods whose users report per attribute)."""
    params, d = plan.params, len(plan.domain)
    if "epsilon_per_attribute" in params:
        per = _plan_epsilon(params["epsilon_per_attribute"], "params.epsilon_per_attribute")
        if per * d > eps * (1 + _TOLERANCE):
            raise _refused(f"params.epsilon_per_attribute = {per!r} over {d} attributes "
                           f"composes to {per * d!r} > the plan's epsilon = {eps!r}")
        names = params.get("attribute_oracles")
        if names is not None and (not isinstance(names, list) or len(names) != d or any(
                n != "none" and n not in ORACLES for n in names)):
            raise _refused(f"params.attribute_oracles = {names!r:.120} is not {d} known oracles")
    if not plan.groups and "p" in params:
        keep = _number(params["p"], "params.p")
        if not 0.5 < keep < 1:
            raise _refused(f"params.p = {params['p']!r} is outside (0.5, 1)")
        implied = math.log(keep / (1 - keep))
        if implied > eps * (1 + _TOLERANCE):
            raise _refused(f"params.p = {keep!r} implies epsilon {implied!r} > the plan's "
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


def choose_group(plan: Plan, *, rng: RNGLike = None) -> int:
    """A uniformly random group (OS entropy unless ``rng`` is given)."""
    if rng is None:
        return secrets.randbelow(plan.m)
    return int(np.asarray(client_rng(rng).integers(0, plan.m, size=1))[0])


def _record_row(plan: Plan, record: Mapping[str, Any] | Sequence[int] | np.ndarray,
                attributes: Sequence[str]) -> np.ndarray:
    """The record as one row in domain order (only ``attributes`` need to be known)."""
    dom = plan.domain
    row = np.zeros(len(dom), dtype=np.int64)
    if isinstance(record, Mapping):
        missing = [a for a in attributes if a not in record]
        if missing:
            raise DPMarginalsError(f"the record lacks the attributes {missing}")
        items = [(dom.index(a), record[a]) for a in attributes]
    else:
        values = list(np.asarray(record).ravel())
        if len(values) != len(dom):
            raise DPMarginalsError(f"a record needs {len(dom)} values in the domain's order "
                                   f"{list(dom.attributes)}, got {len(values)}")
        items = [(dom.index(a), values[dom.index(a)]) for a in attributes]
    for i, value in items:
        labels = dom.labels[i]
        if labels is not None and (isinstance(value, str) or labels.bins is not None):
            row[i] = labels.code_of(dom.attributes[i], value)  # the user's own value
            continue
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise DPMarginalsError(f"attribute {dom.attributes[i]!r} must be an integer code"
                                   f"{' or one of its labels' if labels else ''}, got {value!r}")
        row[i] = int(value)
    return row


def make_report(
    plan: Plan | Mapping[str, Any], record: Mapping[str, Any] | Sequence[int] | np.ndarray, *,
    max_epsilon: float, group: int | None = None, rng: RNGLike = None,
    ledger: Ledger | None = None, campaign: str | None = None,
) -> dict[str, Any]:
    """One user's report: check the plan, pick (or take) her group, randomize her cell.

    ``max_epsilon`` is the device's own cap (required): :func:`check_plan` refuses the plan
    before any random draw.  ``record`` maps attribute names to values (only the group's
    attributes are read) or lists every attribute's value in the domain's order; a value is
    an integer code, or, where the plan's domain declares them, one of the attribute's
    labels ("female") or a raw number cut by its bins (an age of 37).
    ``rng=None`` draws all randomness from the OS CSPRNG; a seed is for tests only.

    With a ``ledger`` (and the ``campaign``'s id): a campaign already reported gives back
    its stored report; the device keeps its group per plan (a different ``group`` is
    ignored with an :class:`AssignmentIgnored` warning); an unchanged value of the group's
    attributes under the same plan reuses the memoized payload under a fresh report id;
    anything else is a fresh randomization, charged to the ledger (and refused with
    :class:`BudgetExceeded` before any draw if it would pass ``max_total_epsilon``).  The
    ledger records the report before it is returned.  A later phase of an adaptive
    collection (``params.earlier_hashes``) one of whose earlier phases the ledger reported in
    is refused: each user reports in one phase.
    """
    checked = check_plan(plan, max_epsilon)
    if ledger is not None:
        return _ledger_report(checked, record, ledger, campaign, group, rng)
    codec = _codec(checked)
    g = choose_group(checked, rng=rng) if group is None else _check_group(checked, group)
    inputs = _inputs(codec, g, record)
    native = codec.oracle(g).perturb(inputs, rng=client_rng(rng))
    return codec.reports(g, native)[0]


def _inputs(codec: PlanCodec, group: int,
            record: Mapping[str, Any] | Sequence[int] | np.ndarray) -> np.ndarray:
    """The group's randomizer input of one record (shape (1,), or (1, d) for EM)."""
    row = _record_row(codec.plan, record, codec.plan.groups[group].attributes)
    return codec.inputs(group, row[None, :])


def _memo_key(inputs: np.ndarray, codec: PlanCodec, group: int) -> int:
    """One integer per distinct input (the ledger memoizes payloads by it): the input
    itself, or EM's attribute values in mixed radix (an exact Python integer)."""
    flat = [int(v) for v in np.asarray(inputs).ravel()]
    if len(flat) == 1:
        return flat[0]
    key = 0
    for value, size in zip(flat, codec.plan.domain.project(
            codec.plan.groups[group].attributes).sizes, strict=True):
        key = key * size + value
    return key


def _ledger_report(plan: Plan, record: Mapping[str, Any] | Sequence[int] | np.ndarray,
                   ledger: Ledger, campaign: str | None, group: int | None,
                   rng: RNGLike) -> dict[str, Any]:
    """make_report's path with a ledger (the plan is already checked)."""
    if not isinstance(campaign, str) or not campaign:
        raise DPMarginalsError(f"a ledger needs the campaign's id (campaign=...), got "
                               f"{campaign!r}")
    stored = ledger.stored_report(campaign, plan.hash)
    if stored is not None:
        return stored
    _check_one_phase(plan, ledger)
    codec = _codec(plan)
    kept = ledger.group_of(plan.hash)
    requested = None if group is None else _check_group(plan, group)
    payload = None
    if kept is None:  # the first report under this plan: a fresh randomization
        ledger.check_budget(plan.epsilon)  # before any random draw
        g = requested if requested is not None else choose_group(plan, rng=rng)
        inputs = _inputs(codec, g, record)
        cell = _memo_key(inputs, codec, g)
    else:
        if not 0 <= kept < plan.m:
            raise LedgerError(f"the ledger keeps group {kept} for plan {plan.hash[:12]}, "
                              f"which has {plan.m} groups")
        if requested is not None and requested != kept:
            warnings.warn(f"plan {plan.hash[:12]}: this device reports group {kept} in every "
                          f"campaign of the plan, not the requested group {requested}",
                          AssignmentIgnored, stacklevel=3)
        g, inputs = kept, _inputs(codec, kept, record)
        cell = _memo_key(inputs, codec, g)
        payload = ledger.memoized_payload(plan.hash, g, cell)
        if payload is None:
            ledger.check_budget(plan.epsilon)  # a changed value: before any random draw
        else:
            try:
                codec.groups[g].row(payload)
            except ReportError as exc:
                raise LedgerError(f"the ledger's memoized payload for plan {plan.hash[:12]} "
                                  f"group {g} is invalid: {exc}") from None
    fresh = payload is None
    if fresh:
        native = codec.oracle(g).perturb(inputs, rng=client_rng(rng))
        payload = codec.groups[g].payloads(native)[0]
    report = codec.report(g, payload)  # a fresh report id either way
    ledger.record(campaign, report, cell=cell, epsilon=plan.epsilon, fresh=fresh,
                  requested_group=requested)
    return report


def _check_one_phase(plan: Plan, ledger: Ledger) -> None:
    """Refuse a later phase of an adaptive collection one of whose earlier phases this
    device reported in: each user reports in one phase (the adaptive method's privacy rests
    on it)."""
    named = [("phase1_hash", plan.params.get("phase1_hash"))]
    earlier = plan.params.get("earlier_hashes")
    if isinstance(earlier, list):
        named += [(f"earlier_hashes[{j}]", digest) for j, digest in enumerate(earlier)]
    for which, digest in named:
        if isinstance(digest, str) and ledger.group_of(digest) is not None:
            raise _refused(f"params.{which} = {digest[:12]}...: this device reported in an "
                           "earlier phase of this collection, and each user reports in one "
                           "phase")


def _check_group(plan: Plan, group: object) -> int:
    if isinstance(group, bool) or not isinstance(group, int | np.integer):
        raise DPMarginalsError(f"group must be an integer, got {group!r}")
    if not 0 <= group < plan.m:
        raise DPMarginalsError(f"group {group} is not one of the plan's groups 0..{plan.m - 1}")
    return int(group)


def make_reports(
    plan: Plan | Mapping[str, Any], records: np.ndarray, *, max_epsilon: float,
    groups: Sequence[int] | np.ndarray | None = None, rng: RNGLike = None,
) -> list[dict[str, Any]]:
    """Reports of many simulated users at once: ``records`` is (n, d) in the domain's order.

    The plan is checked once against ``max_epsilon`` (:func:`check_plan`).  Each user is
    randomized independently, exactly as :func:`make_report` would without a ledger;
    groups are drawn uniformly (OS entropy) unless given.  The reports come in the rows'
    order.
    """
    return _make_reports(check_plan(plan, max_epsilon), records, groups=groups, rng=rng)


def _make_reports(
    plan: Plan, records: np.ndarray, *, groups: Sequence[int] | np.ndarray | None = None,
    rng: RNGLike = None,
) -> list[dict[str, Any]]:
    codec = _codec(plan)
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
        inputs = codec.inputs(int(g), arr[members])
        native = codec.oracle(int(g)).perturb(inputs, rng=source)
        for i, report in zip(members, codec.reports(int(g), native), strict=True):
            out[i] = report
    return out


# -- reading users' records ---------------------------------------------------------------
def read_records(path: str | os.PathLike[str], plan: Plan) -> np.ndarray:
    """The rows of a CSV file (plain or .gz) as an (n, d) int64 array in the plan's domain order.

    The header must name every attribute of the plan's domain (other columns are ignored);
    cells hold integer codes 0..size-1.
    """
    dom = plan.domain
    p = Path(path)
    if not p.is_file():
        raise DPMarginalsError(f"data file not found: {str(path)!r}")
    opener: Callable[..., Any] = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader, [])]
            missing = [a for a in dom.attributes if a not in header]
            if missing:
                raise DPMarginalsError(f"{p.name}: columns {missing} of the plan's domain are "
                                       f"missing (columns: {header[:20]})")
            idx = [header.index(a) for a in dom.attributes]
            rows = []
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                try:
                    rows.append([int(row[i]) for i in idx])
                except (ValueError, IndexError):
                    raise DPMarginalsError(f"{p.name} line {line}: expected integer codes in "
                                           f"columns {list(dom.attributes)}") from None
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, len(dom))
    dom.validate_codes(arr)
    return arr


# -- talking to the service ----------------------------------------------------------------
class ServiceError(DPMarginalsError):
    """The service refused a request (``status`` and the service's ``code`` and reason)."""

    def __init__(self, status: int, code: str, reason: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {reason}")
        self.status, self.code, self.reason, self.body = status, code, reason, body


class ServiceClient:
    """A connection to one campaign of a ``dpmarginals serve`` aggregator.

    Keeps one HTTP/1.1 connection open.  Requests are retried on a lost connection or a
    429 or 502-504 answer (up to ``retries`` times, after the answer's ``Retry-After`` when
    it says, up to a minute); the report ids make that safe: a retried batch that the
    service had already stored comes back as all duplicates, which counts as success.

    Tickets: :meth:`assignment` keeps the single-use ticket of each group it is handed;
    :meth:`send` and :meth:`send_batch` attach one to each report that has none (one of
    its group's, else any kept one, which a campaign whose tickets are not bound to groups
    accepts).  A campaign without tickets gets reports without them.
    """

    def __init__(self, server: str, campaign: str, *, token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = 3) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DPMarginalsError(f"server must be an http(s) URL, got {server!r}")
        self.server = server.rstrip("/")
        self.campaign = campaign
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._base = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None
        self._plan: Plan | None = None
        self._tickets: dict[int, list[str]] = {}
        self.last_headers: dict[str, str] = {}

    # -- plumbing ------------------------------------------------------------------------
    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (http.client.HTTPSConnection if self._scheme == "https"
                   else http.client.HTTPConnection)
            self._conn = cls(self._host, self._port, timeout=self.timeout)
        return self._conn

    def _path(self, suffix: str = "", query: Mapping[str, Any] | None = None) -> str:
        path = f"{self._base}/campaigns/{quote(self.campaign, safe='')}{suffix}"
        return path + ("?" + urlencode(query) if query else "")

    def request(self, method: str, path: str, body: Any = None, *, admin: bool = False,
                raw: bool = False) -> tuple[int, Any]:
        """One request with retries; returns (status, parsed JSON or text)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if admin:
            if not self.token:
                raise DPMarginalsError("this request needs the admin token (--token-file or "
                                       "DPMARGINALS_ADMIN_TOKEN)")
            headers["Authorization"] = f"Bearer {self.token}"
        last: Exception | None = None
        wait = 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(wait or min(0.2 * 2 ** (attempt - 1), 2.0))
                wait = 0.0
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                self.last_headers = {k.lower(): v for k, v in resp.getheaders()}
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            if resp.status in _RETRY_STATUSES and attempt < self.retries:
                last = ServiceError(resp.status, "unavailable", payload[:200].decode("latin-1"))
                wait = _retry_after(self.last_headers.get("retry-after"))
                if wait <= _MAX_RETRY_AFTER:  # (429: too many requests; 503: busy)
                    continue
            text = payload.decode("utf-8", "replace")
            if raw and resp.status < 400:
                return resp.status, text
            try:
                parsed: Any = json.loads(text) if text else None
            except ValueError:
                parsed = text
            if resp.status >= 400:
                err = ServiceClient._error(resp.status, parsed)
                if attempt and _all_duplicates(err, body):
                    return 200, {"accepted": 0, "already_stored": _count(body)}
                raise err
            return resp.status, parsed
        raise DPMarginalsError(f"cannot reach {self.server}: {last}")

    @staticmethod
    def _error(status: int, parsed: Any) -> ServiceError:
        if isinstance(parsed, dict) and "error" in parsed:
            return ServiceError(status, str(parsed["error"]), str(parsed.get("reason", "")),
                                parsed)
        if isinstance(parsed, dict) and "detail" in parsed:
            return ServiceError(status, "invalid_request", json.dumps(parsed["detail"])[:500],
                                parsed)
        return ServiceError(status, "error", str(parsed)[:500], parsed)

    # -- the campaign --------------------------------------------------------------------
    @property
    def ledger_key(self) -> str:
        """The campaign's name in a device's ledger: the server URL and the campaign id."""
        return f"{self.server}/campaigns/{self.campaign}"

    def plan(self, *, refresh: bool = False) -> Plan:
        """The campaign's public plan (its hash must be present and match its content)."""
        if self._plan is None or refresh:
            _, body = self.request("GET", self._path("/plan"))
            if not isinstance(body, Mapping):
                raise PlanRefused(f"plan refused: the server's plan is not a JSON object: "
                                  f"{str(body)[:80]!r}")
            self._plan = _plan_from_dict(body)
        return self._plan

    def assignment(self, count: int | None = None) -> int | list[int]:
        """The group the service assigns to this user (``count`` users: a list); the
        tickets that come with them are kept for :meth:`send` and :meth:`send_batch`."""
        query = None if count is None else {"count": int(count)}
        _, body = self.request("GET", self._path("/assignment", query))
        key = "group" if count is None else "groups"
        value = body.get(key) if isinstance(body, dict) else None
        groups = [value] if count is None else value
        if not isinstance(groups, list) or not all(
                isinstance(g, int) and not isinstance(g, bool) for g in groups) or (
                count is not None and len(groups) != count):
            raise ServiceError(200, "bad_assignment", f"the server's assignment is not "
                               f"{'an integer group' if count is None else f'{count} groups'}: "
                               f"{str(body)[:200]}", body)
        tickets = body.get("ticket" if count is None else "tickets")
        if tickets is not None:
            tickets = [tickets] if count is None else tickets
            if not isinstance(tickets, list) or len(tickets) != len(groups) or not all(
                    isinstance(t, str) and len(t) <= 256 for t in tickets):
                raise ServiceError(200, "bad_assignment", f"the server's tickets are not "
                                   f"{len(groups)} strings: {str(tickets)[:200]}", body)
            for g, ticket in zip(groups, tickets, strict=True):
                self._tickets.setdefault(g, []).append(ticket)
        return groups[0] if count is None else groups

    def _take_ticket(self, group: object) -> str | None:
        """A kept ticket for ``group`` (else any kept one), or None."""
        pool = self._tickets.get(group) if isinstance(group, int) else None
        if not pool:
            pool = next((p for p in self._tickets.values() if p), None)
        return pool.pop() if pool else None

    def _ticketed(self, report: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(report)
        if "ticket" not in out:
            ticket = self._take_ticket(out.get("group"))
            if ticket is not None:
                out["ticket"] = ticket
        return out

    def with_tickets(self, reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``reports``, each given a kept ticket if it has none (to keep a report
        with its ticket, e.g. in an outbox for a later retry)."""
        return [self._ticketed(r) for r in reports]

    def send(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """Post one report (with a kept ticket); returns the service's acknowledgement."""
        return self.request("POST", self._path("/reports"), self._ticketed(report))[1]

    def send_batch(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Post reports (each with a kept ticket) in batches of at most 10,000 (each batch
        stored atomically)."""
        accepted = stored = 0
        for start in range(0, len(reports), MAX_BATCH_REPORTS):
            chunk = [self._ticketed(r) for r in reports[start : start + MAX_BATCH_REPORTS]]
            body = self.request("POST", self._path("/reports/batch"), {"reports": chunk})[1]
            accepted += int(body.get("accepted", 0))
            stored += int(body.get("already_stored", 0))
        return {"accepted": accepted, "already_stored": stored}

    def submit(self, record: Mapping[str, Any] | Sequence[int], *, max_epsilon: float,
               group: int | None = None, assign: str = "server",
               ledger: Ledger | None = None) -> dict[str, Any]:
        """The whole path for one user: plan, check, group, randomize, send; the report.

        The plan is checked against the device's cap ``max_epsilon`` (:func:`check_plan`)
        before anything else.  ``group`` (else the service's assignment, or with
        ``assign="local"`` a uniform draw on the device).  With a ``ledger``: a campaign
        already reported sends its stored report again (a duplicate answer counts as
        stored); a plan this device already reported under keeps its group (the
        assignment is asked only for its ticket and its group ignored, so a campaign whose
        tickets are bound to groups may refuse the report); see :func:`make_report` for
        the memoized randomization and the budget.  Every fresh report asks the service
        for an assignment: its single-use ticket goes with the report.
        """
        if assign not in ("server", "local"):
            raise DPMarginalsError(f"assign must be 'server' or 'local', got {assign!r}")
        plan = check_plan(self.plan(), max_epsilon)
        key = self.ledger_key
        if ledger is not None:
            stored = ledger.stored_report(key, plan.hash)
            if stored is not None:
                self._deliver(stored)
                return stored
            _check_one_phase(plan, ledger)  # before asking for an assignment
        if group is None:
            kept = None if ledger is None else ledger.group_of(plan.hash)
            if ledger is not None and kept is None:
                ledger.check_budget(plan.epsilon)  # refuse before asking for a group
            assigned = self.assignment()  # its ticket is kept for the send
            if assign == "server" and kept is None:
                group = assigned  # type: ignore[assignment]
        report = make_report(plan, record, max_epsilon=max_epsilon, group=group,
                             ledger=ledger, campaign=key)
        self._deliver(report)
        return report

    def _deliver(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """Send one report; the service already holding it counts as delivered."""
        try:
            return self.send(report)
        except ServiceError as exc:
            if exc.status == 409 and exc.code == "duplicate_report":
                return {"accepted": 0, "already_stored": 1}
            raise

    def status(self) -> dict[str, Any]:
        """The campaign's status (with the token, if this client has one: analyst or
        admin; a public campaign needs none)."""
        return self.request("GET", self._path("/status"), admin=bool(self.token))[1]

    def marginal(self, attributes: Sequence[str]) -> dict[str, Any]:
        """A marginal of the campaign's current release (token as for :meth:`status`)."""
        query = {"attributes": ",".join(attributes)}
        return self.request("GET", self._path("/marginals", query), admin=bool(self.token))[1]

    def close_campaign(self) -> dict[str, Any]:
        """Close the campaign: no more assignments or reports (admin token)."""
        return self.request("POST", self._path("/close"), admin=True)[1]

    def next_phase(self) -> ServiceClient:
        """A client of the phase after this adaptive campaign's (``{phase 1's id}.phase{j}``,
        named from this campaign's plan), with the same server, token and timeouts."""
        plan = self.plan()
        check_next_phase(self.campaign, plan)
        return ServiceClient(self.server, next_phase_name(self.campaign, plan),
                             token=self.token, timeout=self.timeout, retries=self.retries)

    # -- admin ---------------------------------------------------------------------------
    def open_next_phase(self, users: int | None = None,
                        settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Close this phase of an adaptive campaign and open the next, planned by the
        service from every phase's reports so far (admin token); ``users``: how many will
        report in it; ``settings``: changes to this phase's settings, which it inherits."""
        body: dict[str, Any] = {} if users is None else {"users": int(users)}
        if settings:
            body["settings"] = dict(settings)
        return self.request("POST", self._path("/next-phase"), body, admin=True)[1]

    def create_campaign(self, plan: Plan, settings: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
        """Create this campaign from ``plan`` and optional ``settings`` (admin token)."""
        body: dict[str, Any] = {"id": self.campaign, "plan": plan.to_dict()}
        if settings:
            body["settings"] = dict(settings)
        return self.request("POST", f"{self._base}/campaigns", body, admin=True)[1]

    def export_reports(self) -> list[dict[str, Any]]:
        """A snapshot of the campaign's stored reports (admin token); its count is checked
        against the service's ``X-Report-Count``."""
        _, text = self.request("GET", self._path("/reports"), admin=True, raw=True)
        reports = [json.loads(line) for line in io.StringIO(text) if line.strip()]
        stated = self.last_headers.get("x-report-count")
        if stated is not None and stated.isdigit() and int(stated) != len(reports):
            raise DPMarginalsError(f"the export was cut short: {len(reports):,} of "
                                   f"{int(stated):,} reports arrived")
        return reports


def _retry_after(value: str | None) -> float:
    """Seconds of a ``Retry-After`` header (0 when absent or not a number of seconds)."""
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0


def _count(body: Any) -> int:
    if isinstance(body, dict) and isinstance(body.get("reports"), list):
        return len(body["reports"])
    return 1


def _all_duplicates(err: ServiceError, body: Any) -> bool:
    if err.status != 409 or err.code != "duplicate_report" or not isinstance(err.body, dict):
        return False
    return len(err.body.get("duplicates", [])) == _count(body)


# -- playing many users ---------------------------------------------------------------------
def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def play(
    client: ServiceClient, records: np.ndarray, *, max_epsilon: float, batch: int = 1000,
    assign: str = "server", save: str | os.PathLike[str] | None = None, rng: RNGLike = None,
) -> dict[str, Any]:
    """Every row of ``records`` (domain order) as one simulated user: assign, randomize, send.

    For tests and demos (no ledger: each row is another user).  The plan is checked once
    against ``max_epsilon`` before anything is drawn.  ``batch`` reports per request (1: one
    request per user); ``assign="server"`` asks the service for groups, ``"local"`` draws
    them uniformly on the "device".  ``save`` writes the acknowledged reports as JSON lines
    (for an in-process check).
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
            reports = _make_reports(plan, rows, groups=groups, rng=rng)
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
