"""The public plan of a local-DP collection: what each group of users reports, and how.

A plan is published to every client; it holds nothing private.  Its hash identifies it
in reports, so an aggregator can refuse reports made under another plan, and a device
pins a campaign to it.  Version 2 (written here) is hashed as RFC 8785 canonical JSON
(the JSON Canonicalization Scheme: sorted keys, ECMAScript number forms), so a Python
and a JavaScript client compute the same hash from the same plan, and it carries the
domain as a list of ``[name, spec]`` pairs (a JSON object's order is not part of its
value).  Version 1 plans (the domain as an object, hashed as Python's sorted JSON) are
still read.

``epsilon`` is what one report may reveal about its user's value;
``longitudinal_epsilon``, when not null, says that the device memoizes a permanent
randomized response per value and adds fresh noise to every report, so that any number
of reports of an unchanged value reveal at most that much
(:mod:`dpmarginals.oracles.memoized`).

>>> from dpmarginals.core.domain import Domain
>>> plan = Plan("calm", 1.0, Domain(("a", "b"), (2, 3)),
...             (GroupSpec(("a", "b"), "grr", 1.0, 6),), {"k": 2}, longitudinal=4.0)
>>> canonical(plan.to_dict(with_hash=False))[:60]
b'{"domain":[["a",2],["b",3]],"epsilon":1,"format":"dpmarginal'
>>> Plan.from_dict(plan.to_dict()) == plan
True
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = ["PLAN_VERSION", "SAFE_INTEGER", "GroupSpec", "Plan", "canonical", "warn_uncovered"]

PLAN_VERSION = 2
SAFE_INTEGER = (1 << 53) - 1
"""The largest integer a plan may hold: beyond it JavaScript's numbers are not exact."""
_FORMAT = "dpmarginals.plan"
_VERSIONS = (1, 2)


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON of a plan body; a number no client can read exactly (an
    integer beyond 2^53 - 1, a NaN or an infinity) is an error naming it."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise DPMarginalsError(f"the plan holds a value that is not portable JSON: {exc}") \
            from None


@dataclass(frozen=True)
class GroupSpec:
    """One group: the marginal its users report and the frequency oracle they use.

    ``cells`` is the size of the oracle's input domain (the marginal's number of cells).
    """

    attributes: tuple[str, ...]
    oracle: str
    epsilon: float
    cells: int

    def to_dict(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "oracle": self.oracle,
                "epsilon": self.epsilon, "cells": self.cells}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> GroupSpec:
        """From JSON, with exact types: what is hashed is what was sent."""
        attrs = spec["attributes"]
        if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
            raise DPMarginalsError(f"plan field 'attributes' must be a list of names, got "
                                   f"{attrs!r:.80}")
        return cls(tuple(attrs), _typed(spec, "oracle", str),
                   float(_typed(spec, "epsilon", float)), _typed(spec, "cells", int))


@dataclass(frozen=True)
class Plan:
    """A JSON-serialisable public plan.

    ``params`` holds the method's own public parameters (k, theta, l, m, predicted errors);
    ``longitudinal`` the memoized plans' longitudinal epsilon (None: every report is a
    fresh randomization, charged in full by the device).
    """

    method: str
    epsilon: float
    domain: Domain
    groups: tuple[GroupSpec, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    longitudinal: float | None = None
    version: int = PLAN_VERSION

    def __post_init__(self) -> None:
        if self.version not in _VERSIONS:
            raise DPMarginalsError(f"plan version {self.version} is not supported (this "
                                   f"dpmarginals reads versions {list(_VERSIONS)})")
        if self.longitudinal is not None:
            if self.version == 1:
                raise DPMarginalsError("a version 1 plan has no longitudinal_epsilon")
            value = float(self.longitudinal)
            if not (math.isfinite(value) and value >= self.epsilon):
                raise DPMarginalsError(f"plan longitudinal_epsilon = {self.longitudinal!r} must "
                                       f"be a finite number >= epsilon = {self.epsilon!r}")
            object.__setattr__(self, "longitudinal", value)

    def uncovered(self) -> list[str]:
        """The domain's attributes in none of the groups: nothing is collected about them."""
        held = {a for g in self.groups for a in g.attributes}
        return [a for a in self.domain.attributes if a not in held]

    @property
    def m(self) -> int:
        return len(self.groups)

    def to_dict(self, *, with_hash: bool = True) -> dict[str, Any]:
        """The plan as JSON values: a copy, so changing it leaves the plan as it was."""
        body = self._content()
        body["params"] = copy.deepcopy(body["params"])
        if with_hash:
            body["hash"] = self.hash
        return body

    def _content(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": _FORMAT, "version": self.version,
                               "method": self.method, "epsilon": self.epsilon}
        if self.version == 1:
            out["domain"] = self.domain.to_dict()
        else:
            out["longitudinal_epsilon"] = self.longitudinal
            out["domain"] = [[a, s] for a, s in self.domain.to_dict().items()]
        out["groups"] = [g.to_dict() for g in self.groups]
        out["params"] = dict(self.params)
        return out

    @property
    def hash(self) -> str:
        """SHA-256 (hex) of the plan without its hash field, as RFC 8785 canonical JSON
        (version 1: Python's sorted JSON, the domain as ``[name, size]`` pairs)."""
        body = self._content()
        if self.version == 1:
            body["domain"] = [[a, s] for a, s in body["domain"].items()]
            text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        else:
            text = canonical(body)
        return hashlib.sha256(text).hexdigest()

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Plan:
        try:
            if spec.get("format", _FORMAT) != _FORMAT:
                raise DPMarginalsError(f"plan format must be {_FORMAT!r}, got "
                                       f"{spec.get('format')!r}")
            version = _typed(spec, "version", int) if "version" in spec else PLAN_VERSION
            if version not in _VERSIONS:
                raise DPMarginalsError(f"plan version {version} is not supported (this "
                                       f"dpmarginals reads versions {list(_VERSIONS)})")
            longitudinal = spec.get("longitudinal_epsilon")
            if longitudinal is not None:
                longitudinal = float(_typed(spec, "longitudinal_epsilon", float))
            plan = cls(
                method=_typed(spec, "method", str),
                epsilon=float(_typed(spec, "epsilon", float)),
                domain=_domain(spec["domain"], version),
                groups=tuple(GroupSpec.from_dict(g) for g in _list(spec, "groups")),
                params=copy.deepcopy(dict(spec.get("params", {}))),
                longitudinal=longitudinal,
                version=version,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, DPMarginalsError):
                raise
            raise DPMarginalsError(f"malformed plan: {exc!r}") from None
        if "hash" in spec and spec["hash"] != plan.hash:
            raise DPMarginalsError(f"plan hash {spec['hash']!r} does not match its content")
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise DPMarginalsError(f"cannot read plan {str(path)!r}: {exc}") from None

    def group_indices(self) -> list[tuple[int, ...]]:
        """Each group's attributes as positions in the domain."""
        return [self.domain.indices(g.attributes) for g in self.groups]


def _domain(value: Any, version: int) -> Domain:
    """The domain of a version 1 (object) or version 2 (list of [name, spec]) plan."""
    if version == 1:
        return Domain.from_dict(value)
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value):
        raise DPMarginalsError(f"plan field 'domain' must be a list of [name, spec] pairs, "
                               f"got {str(value)[:80]!r}")
    names = [p[0] for p in value]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise DPMarginalsError(f"plan field 'domain' names attribute {twice!r} twice")
    return Domain.from_dict(dict(value))


def _list(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec[key]
    if not isinstance(value, list):
        raise DPMarginalsError(f"plan field {key!r} must be a JSON array, got {value!r:.80}")
    return value


def _typed(spec: Mapping[str, Any], key: str, kind: type) -> Any:
    """``spec[key]`` if it is a JSON value of ``kind`` (an int counts as a float; a bool as
    neither), else an error naming the field: a plan is taken as sent or not at all."""
    value = spec[key]
    kinds = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        name = {float: "number", int: "integer", str: "string"}[kind]
        raise DPMarginalsError(f"plan field {key!r} must be a JSON {name}, got {value!r}")
    return value


def attribute_names(domain: Domain, index_sets: Sequence[Sequence[int]]) -> list[tuple[str, ...]]:
    """Attribute-index sets -> attribute-name tuples (in domain order)."""
    return [tuple(domain.attributes[i] for i in sorted(s)) for s in index_sets]


def warn_uncovered(plan: Plan) -> None:
    """Warn when the plan's groups leave attributes out (CALM's Algorithm 1 gives m =
    theta n groups: 2 of 2 attributes each for 2,000 users), whose answers would then be
    uniform guesses."""
    left = plan.uncovered() if plan.groups else []
    if left:
        later = " unless a later phase measures them" if "phases" in plan.params else ""
        warnings.warn(f"the {plan.method} plan's {plan.m} groups leave out {left}: nothing "
                      f"is collected about them, so their answers are uniform guesses{later} "
                      "(more users, or --m / --l to measure more)", stacklevel=2)
