"""Chow–Liu trees from (private) 2-way marginals (Chow & Liu 1968; Cormode et al. §6.2).

The Chow–Liu tree is the maximum-weight spanning tree of the complete graph over the
attributes, each edge weighted by the mutual information of its two attributes,

    MI(A, B) = sum_ij P[i, j] log(P[i, j] / (P[i] P[j]))      (natural log: nats),

and the best tree-structured approximation of the joint distribution (in KL divergence).
Any synopsis answers the C(d, 2) 2-way marginals, so the tree can be learnt from a
private release (:func:`dpmarginals.applications.compare_trees` scores it as Cormode et al.
do; :func:`dpmarginals.synopsis.synthetic.synthesize` samples along it).

Raw (possibly negative) estimates are projected onto the simplex with Norm-Sub first.
The spanning tree is ``scipy.sparse.csgraph.minimum_spanning_tree`` on the negated mutual
information (shifted by a tiny constant so that independent pairs, MI = 0, stay edges).

>>> import numpy as np
>>> from dpmarginals.core.dataset import Dataset
>>> from dpmarginals.core.domain import Domain
>>> x = np.random.default_rng(0).integers(0, 2, size=(2000, 1))
>>> codes = np.hstack([x, x, 1 - x, np.random.default_rng(1).integers(0, 2, size=(2000, 1))])
>>> data = Dataset(codes, Domain(("a", "b", "c", "e"), (2, 2, 2, 2)))
>>> tree = chow_liu_tree(data)
>>> sorted(tuple(sorted(e[:2])) for e in tree.edges)[:2]
[('a', 'b'), ('a', 'c')]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.table import MarginalTable
from dpmarginals.inference.nonneg import project_to_simplex

__all__ = [
    "ChowLiuTree",
    "chow_liu_tree",
    "mutual_information",
    "pairwise_mutual_information",
]

_SHIFT = 1e-12


def mutual_information(table: MarginalTable) -> float:
    """Mutual information (nats) of a 2-way table (Norm-Sub'd if not a distribution)."""
    if len(table.attributes) != 2:
        raise DPMarginalsError(f"mutual information needs a 2-way marginal, got "
                               f"{list(table.attributes)}")
    p = project_to_simplex(table.values)
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    expected = np.outer(rows, cols)
    mask = p > 0
    return float(max((p[mask] * np.log(p[mask] / expected[mask])).sum(), 0.0))


def _attributes(source: object, attributes: Sequence[str] | None) -> tuple[str, ...]:
    domain = getattr(source, "domain", None)
    if domain is None or not hasattr(source, "marginal"):
        raise DPMarginalsError("source must be a synopsis or a Dataset (with .domain and "
                               ".marginal)")
    attrs = tuple(domain.attributes if attributes is None else attributes)
    domain.project(attrs)  # unknown or repeated attributes are errors
    if len(attrs) < 2:
        raise DPMarginalsError(f"a tree needs at least two attributes, got {list(attrs)}")
    return attrs


def pairwise_mutual_information(source: object, attributes: Sequence[str] | None = None
                                ) -> tuple[tuple[str, ...], np.ndarray]:
    """The attributes and the symmetric matrix of their pairwise mutual information."""
    attrs = _attributes(source, attributes)
    mi = np.zeros((len(attrs), len(attrs)))
    for i, j in itertools.combinations(range(len(attrs)), 2):
        table = source.marginal([attrs[i], attrs[j]])  # type: ignore[attr-defined]
        mi[i, j] = mi[j, i] = mutual_information(table)
    return attrs, mi


@dataclass(frozen=True)
class ChowLiuTree:
    """The tree's edges ``(a, b, mutual information as estimated by the source)``."""

    attributes: tuple[str, ...]
    edges: tuple[tuple[str, str, float], ...]

    @property
    def total_mutual_information(self) -> float:
        """Sum of the edges' mutual information as the source estimated it."""
        return float(sum(w for _, _, w in self.edges))

    def parents(self, root: str | None = None) -> dict[str, str | None]:
        """Each attribute's parent when the tree is rooted at ``root`` (default: first)."""
        root = self.attributes[0] if root is None else root
        if root not in self.attributes:
            raise DPMarginalsError(f"{root!r} is not an attribute of the tree")
        nbrs: dict[str, list[str]] = {a: [] for a in self.attributes}
        for a, b, _ in self.edges:
            nbrs[a].append(b)
            nbrs[b].append(a)
        out: dict[str, str | None] = {root: None}
        queue = [root]
        while queue:
            node = queue.pop(0)
            for nb in nbrs[node]:
                if nb not in out:
                    out[nb] = node
                    queue.append(nb)
        return out


def chow_liu_tree(source: object, attributes: Sequence[str] | None = None) -> ChowLiuTree:
    """The Chow–Liu tree of ``source`` (a synopsis, or a Dataset for the non-private tree)."""
    attrs, mi = pairwise_mutual_information(source, attributes)
    weights = -np.triu(mi + _SHIFT, k=1)
    tree = minimum_spanning_tree(weights).tocoo()
    edges = sorted(((attrs[i], attrs[j], float(mi[i, j]))
                    for i, j in zip(tree.row, tree.col, strict=True)),
                   key=lambda e: (-e[2], e[0], e[1]))
    return ChowLiuTree(attrs, tuple(edges))
