"""A fitted graphical model as plain numpy arrays (issue #9, step 3's result).

``p(x) ∝ exp(sum_C theta_C(x_C))``: its log-potentials are kept as numpy arrays, so
answering queries and loading a saved synopsis need neither JAX nor ``mbi``
(:mod:`dpmarginals.inference.pgm` fits one).  Small models answer from the joint table,
large ones by variable elimination in log space.

>>> import numpy as np
>>> from dpmarginals.core.domain import Domain
>>> dom = Domain(("a", "b"), (2, 2))
>>> model = GraphicalModel(dom, [(("a", "b"), np.log(np.array([[0.4, 0.1], [0.1, 0.4]])))])
>>> model.marginal(["b"]).round(3).tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.helmert import project

__all__ = ["FACTOR_LIMIT", "JOINT_LIMIT", "GraphicalModel"]

#: Largest joint table (cells) that :class:`GraphicalModel` materialises to answer queries;
#: larger models use variable elimination.
JOINT_LIMIT = 2**22
#: Largest intermediate factor variable elimination may build.
FACTOR_LIMIT = 2**26


@dataclass(eq=False)
class GraphicalModel:
    """A distribution ``p(x) ∝ exp(sum_C theta_C(x_C))`` over ``domain`` (numpy only).

    ``potentials``: (clique attributes, log-potential table with axes in that order).
    """

    domain: Domain
    potentials: list[tuple[tuple[str, ...], np.ndarray]]
    _joint: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        pots = []
        for attrs, table in self.potentials:
            attrs = tuple(attrs)
            arr = np.asarray(table, dtype=np.float64).reshape(self.domain.project(attrs).shape)
            canon = self.domain.in_order(attrs)
            pots.append((canon, np.transpose(arr, [attrs.index(a) for a in canon])))
        self.potentials = pots

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [a for a, _ in self.potentials]

    def _factor(self, attrs: tuple[str, ...], table: np.ndarray,
                into: tuple[str, ...]) -> np.ndarray:
        shape = [self.domain.size(a) if a in attrs else 1 for a in into]
        return table.reshape(shape)

    def joint(self) -> np.ndarray:
        """The full joint table (axes in domain order); only for small domains."""
        if self._joint is None:
            if self.domain.cells() > JOINT_LIMIT:
                raise DPMarginalsError(f"the joint of {self.domain.cells():,} cells is too large")
            log = np.zeros(self.domain.shape)
            for attrs, table in self.potentials:
                log = log + self._factor(attrs, table, self.domain.attributes)
            p = np.exp(log - log.max())
            self._joint = p / p.sum()
        return self._joint

    def marginal(self, attrs: Sequence[str]) -> np.ndarray:
        """The model's marginal on ``attrs`` (axes in the order given), summing to 1."""
        attrs = tuple(attrs)
        canon = self.domain.in_order(attrs)
        if self.domain.cells() <= JOINT_LIMIT:
            out = project(self.domain.attributes, self.joint(), canon)
        else:
            out = self._eliminate(canon)
        return np.ascontiguousarray(np.transpose(out, [canon.index(a) for a in attrs]))

    def _eliminate(self, query: tuple[str, ...]) -> np.ndarray:
        """Variable elimination in log space, greedy by the size of the factor created."""
        factors = [(a, t) for a, t in self.potentials]
        factors += [((a,), np.zeros(self.domain.size(a))) for a in query]
        rest = {a for a, _ in factors for a in a} - set(query)
        order = self.domain.index
        while rest:
            costs = {v: math.prod(self.domain.size(a) for a in
                                  set().union(*(set(a) for a, _ in factors if v in a)))
                     for v in rest}
            var = min(sorted(rest, key=order), key=costs.__getitem__)
            if costs[var] > FACTOR_LIMIT:
                raise DPMarginalsError("the graphical model is too dense to answer this query "
                                       f"(an intermediate table of {costs[var]:,} cells)")
            touching = [(a, t) for a, t in factors if var in a]
            factors = [(a, t) for a, t in factors if var not in a]
            scope = tuple(sorted(set().union(*(set(a) for a, _ in touching)), key=order))
            log = sum(self._factor(a, t, scope) for a, t in touching)
            axis = scope.index(var)
            top = np.max(log, axis=axis, keepdims=True)
            summed = np.log(np.exp(log - top).sum(axis=axis)) + np.squeeze(top, axis=axis)
            factors.append((tuple(a for a in scope if a != var), summed))
            rest.discard(var)
        log = sum(self._factor(a, t, query) for a, t in factors)
        p = np.exp(log - np.max(log))
        return p / p.sum()

    def sampling_network(self) -> list[tuple[str, tuple[str, ...]]]:
        """Every attribute with parents such that sampling in this order from
        ``P(a | parents) = marginal(parents + a) / marginal(parents)`` draws exactly from the
        model (Koller & Friedman, Probabilistic Graphical Models, §9.4, §12.1.1).

        The model's graph (attributes adjacent when they share a clique) is triangulated by
        greedy min-fill elimination; sampling runs in the reverse elimination order, and an
        attribute's parents are its neighbours when it was eliminated: in a chordal graph they
        separate it from every attribute sampled before it.
        """
        adjacent: dict[str, set[str]] = {a: set() for a in self.domain.attributes}
        for attrs, _ in self.potentials:
            for a in attrs:
                adjacent[a].update(b for b in attrs if b != a)
        order = self.domain.index
        eliminated: list[tuple[str, tuple[str, ...]]] = []

        def fill(v: str) -> tuple[int, int, int]:
            """Min-fill's key: the edges eliminating ``v`` adds, then its factor's size."""
            nbrs = list(adjacent[v])
            missing = sum(1 for i, a in enumerate(nbrs) for b in nbrs[i + 1:]
                          if b not in adjacent[a])
            return missing, math.prod(self.domain.size(b) for b in nbrs), order(v)

        while adjacent:
            var = min(adjacent, key=fill)
            nbrs = adjacent.pop(var)
            for a in nbrs:
                adjacent[a].discard(var)
                adjacent[a].update(b for b in nbrs if b != a)
            eliminated.append((var, tuple(sorted(nbrs, key=order))))
        return eliminated[::-1]

    def to_dict(self) -> dict[str, Any]:
        return {"potentials": [{"attributes": list(a), "values": t.ravel().tolist()}
                               for a, t in self.potentials]}

    @classmethod
    def from_dict(cls, domain: Domain, spec: Mapping[str, Any]) -> GraphicalModel:
        return cls(domain, [(tuple(p["attributes"]), np.asarray(p["values"], float))
                            for p in spec["potentials"]])
