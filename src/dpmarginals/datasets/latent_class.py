"""Latent-class populations: a second held-out family, never measured on before its report.

Every user belongs to one of ``classes`` hidden classes (weights drawn from Dirichlet(2));
given her class, her attributes are independent, each drawn from a table of its own per
class (Dirichlet(``concentration``)); the class is not released.  This is the latent class
model of categorical data (Lazarsfeld 1950; Goodman 1974), the mixture of product
distributions: every pair of attributes interacts through the hidden class, and so does
every triple, unlike a Bayesian network's few strong edges
(:mod:`dpmarginals.datasets.bayesnet`), the family the dev networks come from.

* ``values``: as the networks' (``"binary"``, ``"multi"`` 3-5, ``"mixed"`` half binary,
  the others 3-6).
* ``margins``: ``"skewed"``: the per-class tables from Dirichlet(0.5), peaked, so that the
  classes differ sharply; ``"uniform"``: from Dirichlet(5), near-uniform tables and weak
  dependence.

>>> model = random_latent_class(LatentClassSpec(d=6, classes=3, values="mixed", seed=1))
>>> data = model.sample(1000, rng=2)
>>> data.n, data.d, model.weights.size
(1000, 6, 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng
from .bayesnet import MARGINS, VALUES, check_family, draw_rows, value_sizes

__all__ = ["CONCENTRATION", "LatentClassModel", "LatentClassSpec", "random_latent_class"]

#: Dirichlet concentration of the per-class tables, per ``margins``.
CONCENTRATION = {"skewed": 0.5, "uniform": 5.0}
#: Dirichlet concentration of the class weights.
WEIGHT_CONCENTRATION = 2.0


@dataclass(frozen=True)
class LatentClassSpec:
    """A family of latent-class models and the seed of one member (module docstring)."""

    d: int
    classes: int = 4
    values: str = "binary"
    margins: str = "skewed"
    seed: int = 0

    def __post_init__(self) -> None:
        check_family(self, values=VALUES, margins=MARGINS)
        if not 2 <= int(self.classes) <= 64:
            raise DPMarginalsError(f"classes must be in 2..64, got {self.classes!r}")

    @property
    def label(self) -> str:
        """A short name, e.g. ``lc4-mixed-skewed``."""
        return f"lc{self.classes}-{self.values}-{self.margins}"


@dataclass(frozen=True)
class LatentClassModel:
    """Class ``weights`` (classes,) and ``tables[j]`` of shape (classes, size_j)."""

    domain: Domain
    weights: np.ndarray
    tables: tuple[np.ndarray, ...]
    spec: LatentClassSpec

    def sample(self, n: int, *, rng: RNGLike = None) -> Dataset:
        """``n`` users drawn independently (vectorized: the classes, then attribute by
        attribute the first value whose cumulative probability exceeds a uniform)."""
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        gen = simulation_rng(rng)
        cls = gen.choice(self.weights.size, size=n, p=self.weights)
        codes = np.zeros((n, len(self.tables)), dtype=np.uint8)
        for j, table in enumerate(self.tables):
            codes[:, j] = draw_rows(table, cls, gen)
        return Dataset(codes, self.domain, {}, self.spec.label)


def random_latent_class(spec: LatentClassSpec) -> LatentClassModel:
    """The model of ``spec`` (drawn from ``spec.seed``; the same spec gives the same model)."""
    gen = np.random.default_rng([1950, int(spec.seed)])
    sizes = value_sizes(spec.values, spec.d, gen)
    weights = gen.dirichlet(np.full(spec.classes, WEIGHT_CONCENTRATION))
    alpha = CONCENTRATION[spec.margins]
    tables = tuple(gen.dirichlet(np.full(s, alpha), size=spec.classes) for s in sizes)
    domain = Domain(tuple(f"a{j}" for j in range(spec.d)), tuple(sizes))
    return LatentClassModel(domain, weights, tables, spec)
