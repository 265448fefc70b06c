"""Random Bayesian networks: populations no constant of this library was chosen on.

The held-out benchmark (``dpmarginals experiment heldout``, issue #36) draws its synthetic
populations here.  A :class:`NetworkSpec` names the family; :func:`random_network` draws a
network from it (structure and conditional tables, from the spec's ``seed``) and
:meth:`Network.sample` draws users from the network (from another stream).

* ``structure``: ``"tree"`` (every attribute but the root has one parent, drawn among the
  attributes before it in a random order: Chow and Liu's family) or ``"dense"`` (up to 3
  parents each, as in the PrivBayes experiments' networks of degree 3; Zhang et al.,
  SIGMOD 2014).
* ``values``: ``"binary"`` (2 values each), ``"multi"`` (3-5 each) or ``"mixed"`` (half of
  the attributes binary, the others 3-6 values).
* ``margins``: ``"skewed"``: every conditional distribution drawn from Dirichlet(0.4): peaked
  1-way marginals and strong dependence; ``"uniform"``: a noisy channel of the parents,
  ``(1 - rho) uniform + rho onehot(f(parents))`` with ``f`` a random map and rho in
  [0.15, 0.6] per attribute: near-uniform 1-way marginals and dependence of every strength.

Columns are shuffled so that the network's order is not the attributes' order.

>>> net = random_network(NetworkSpec(d=6, structure="tree", values="mixed", margins="skewed",
...                                  seed=1))
>>> data = net.sample(1000, rng=2)
>>> data.n, data.d, len(net.parents)
(1000, 6, 6)
>>> sum(len(p) for p in net.parents)      # a tree: d - 1 edges
5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng

__all__ = ["MARGINS", "STRUCTURES", "VALUES", "Network", "NetworkSpec", "check_family",
           "draw_rows", "random_network", "value_sizes"]

STRUCTURES = ("tree", "dense")
VALUES = ("binary", "multi", "mixed")
MARGINS = ("skewed", "uniform")
#: Most parents an attribute has in a dense network.
DENSE_PARENTS = 3
#: Dirichlet concentration of the skewed family's conditional distributions.
SKEW_CONCENTRATION = 0.4
#: Range of the uniform family's channel strength rho.
RHO = (0.15, 0.6)


@dataclass(frozen=True)
class NetworkSpec:
    """A family of networks and the seed of one member (see the module docstring)."""

    d: int
    structure: str = "tree"
    values: str = "binary"
    margins: str = "skewed"
    seed: int = 0

    def __post_init__(self) -> None:
        check_family(self, structure=STRUCTURES, values=VALUES, margins=MARGINS)

    @property
    def label(self) -> str:
        """A short name, e.g. ``bn-tree-mixed-skewed``."""
        return f"bn-{self.structure}-{self.values}-{self.margins}"


@dataclass(frozen=True)
class Network:
    """A Bayesian network over ``domain``: ``order`` (topological), each attribute's
    ``parents`` (indices) and ``cpts[j]`` of shape (parent configurations, size_j)."""

    domain: Domain
    order: tuple[int, ...]
    parents: tuple[tuple[int, ...], ...]
    cpts: tuple[np.ndarray, ...]
    spec: NetworkSpec

    def sample(self, n: int, *, rng: RNGLike = None) -> Dataset:
        """``n`` users drawn independently from the network (vectorized, node by node)."""
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        gen = simulation_rng(rng)
        sizes = self.domain.sizes
        codes = np.zeros((n, len(sizes)), dtype=np.uint8)
        for j in self.order:
            pa = self.parents[j]
            config = (np.ravel_multi_index([codes[:, p] for p in pa], [sizes[p] for p in pa])
                      if pa else np.zeros(n, dtype=np.intp))
            codes[:, j] = draw_rows(self.cpts[j], config, gen)
        return Dataset(codes, self.domain, {}, self.spec.label)


def check_family(spec: Any, **choices: Sequence[str]) -> None:
    """Refuse a spec whose ``d`` is outside 2..256 or whose named fields are not among
    their ``choices`` (one line naming the field and the value)."""
    d = spec.d
    if not 2 <= int(d) <= 256:
        raise DPMarginalsError(f"d must be in 2..256, got {d!r}")
    for name, allowed in choices.items():
        if getattr(spec, name) not in allowed:
            raise DPMarginalsError(f"{name} must be one of {', '.join(allowed)}, got "
                                   f"{getattr(spec, name)!r}")


def draw_rows(table: np.ndarray, rows: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """One value per user from row ``rows[i]`` of ``table`` (rows are distributions): the
    first value whose cumulative probability exceeds a uniform (one ``gen.random`` call)."""
    cdf = np.cumsum(table, axis=1)
    cdf[:, -1] = 1.0
    u = gen.random(rows.size)
    return (u[:, None] >= cdf[rows]).sum(axis=1)


def value_sizes(values: str, d: int, gen: np.random.Generator) -> list[int]:
    """The ``d`` attributes' numbers of values for ``values`` (module docstring)."""
    if values == "binary":
        return [2] * d
    if values == "multi":
        return gen.integers(3, 6, size=d).tolist()
    binary = gen.permutation(d) < d // 2
    return [2 if b else int(gen.integers(3, 7)) for b in binary]


def _cpt(spec: NetworkSpec, size: int, configs: int, gen: np.random.Generator) -> np.ndarray:
    if spec.margins == "skewed":
        return gen.dirichlet(np.full(size, SKEW_CONCENTRATION), size=configs)
    rho = gen.uniform(*RHO)
    if configs == 1:  # a root: near uniform
        return gen.dirichlet(np.full(size, 20.0), size=1)
    target = gen.integers(0, size, size=configs)
    table = np.full((configs, size), (1.0 - rho) / size)
    table[np.arange(configs), target] += rho
    return table


def random_network(spec: NetworkSpec) -> Network:
    """The network of ``spec`` (drawn from ``spec.seed``; the same spec gives the same
    network)."""
    gen = np.random.default_rng([36, int(spec.seed)])
    sizes = value_sizes(spec.values, spec.d, gen)
    order = gen.permutation(spec.d).tolist()
    parents: list[tuple[int, ...]] = [()] * spec.d
    cpts: list[np.ndarray] = [np.empty(0)] * spec.d
    most = 1 if spec.structure == "tree" else DENSE_PARENTS
    for pos, j in enumerate(order):
        count = min(pos, most if spec.structure == "tree" or pos < 2
                    else int(gen.integers(2, most + 1)))
        pa = tuple(sorted(gen.choice(order[:pos], size=count, replace=False).tolist())
                   ) if count else ()
        parents[j] = pa
        configs = int(np.prod([sizes[p] for p in pa])) if pa else 1
        cpts[j] = _cpt(spec, sizes[j], configs, gen)
    domain = Domain(tuple(f"a{j}" for j in range(spec.d)), tuple(sizes))
    return Network(domain, tuple(order), tuple(parents), tuple(cpts), spec)


def networks(specs: Sequence[NetworkSpec]) -> list[Network]:
    """:func:`random_network` of every spec."""
    return [random_network(s) for s in specs]
