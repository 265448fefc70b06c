"""The public plan of a local-DP collection: what each group of users reports, and how.

A plan is published to every client; it holds nothing private.  Its hash identifies
it in reports, so an aggregator can refuse reports made under another plan.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = ["PLAN_VERSION", "GroupSpec", "Plan"]

PLAN_VERSION = 1
_FORMAT = "dpmarginals.plan"


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
        return cls(tuple(spec["attributes"]), _typed(spec, "oracle", str),
                   float(_typed(spec, "epsilon", float)), _typed(spec, "cells", int))


@dataclass(frozen=True)
class Plan:
    """A JSON-serialisable public plan.

    ``params`` holds the method's own public parameters (k, theta, l, m, predicted errors).
    """

    method: str
    epsilon: float
    domain: Domain
    groups: tuple[GroupSpec, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    version: int = PLAN_VERSION

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
        return {
            "format": _FORMAT,
            "version": self.version,
            "method": self.method,
            "epsilon": self.epsilon,
            "domain": self.domain.to_dict(),
            "groups": [g.to_dict() for g in self.groups],
            "params": dict(self.params),
        }

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical JSON of the plan (without the hash field).

        Keys are sorted, except the domain's: its attribute order is part of the plan, so
        it is hashed as a list of ``[name, size]`` pairs.
        """
        body = self._content()
        body["domain"] = [[a, s] for a, s in body["domain"].items()]
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()

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
            if version != PLAN_VERSION:
                raise DPMarginalsError(f"plan version {version} is not supported "
                                       f"(this dpmarginals reads version {PLAN_VERSION})")
            plan = cls(
                method=_typed(spec, "method", str),
                epsilon=float(_typed(spec, "epsilon", float)),
                domain=Domain.from_dict(spec["domain"]),
                groups=tuple(GroupSpec.from_dict(g) for g in spec["groups"]),
                params=copy.deepcopy(dict(spec.get("params", {}))),
                version=version,
            )
        except (KeyError, TypeError, ValueError) as exc:
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
