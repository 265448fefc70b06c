"""Chow–Liu trees as an application (Cormode et al. §6.2, Figure 8).

Cormode et al. compare the *true* total mutual information of the edges of the privately
learnt tree (computed on the real data) with that of the non-private tree (their Figure 8):
:func:`compare_trees` does exactly that.  The tree itself is learnt by
:func:`dpmarginals.inference.chow_liu.chow_liu_tree` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..inference.chow_liu import (
    ChowLiuTree,
    chow_liu_tree,
    mutual_information,
    pairwise_mutual_information,
)

__all__ = [
    "ChowLiuTree",
    "chow_liu_tree",
    "compare_trees",
    "mutual_information",
    "pairwise_mutual_information",
    "tree_mutual_information",
]


def tree_mutual_information(tree: ChowLiuTree, data: object) -> float:
    """Total mutual information of the tree's edges measured on ``data`` (the truth)."""
    return float(sum(mutual_information(data.marginal([a, b]))  # type: ignore[attr-defined]
                     for a, b, _ in tree.edges))


def compare_trees(synopsis: object, data: object, attributes: Sequence[str] | None = None
                  ) -> dict[str, float]:
    """Cormode et al. Figure 8: true total MI of the private tree vs. the non-private tree.

    Returns ``private`` (true MI of the tree learnt from ``synopsis``), ``nonprivate``
    (true MI of the tree learnt from ``data``, the maximum possible), their ``ratio``, the
    MI the synopsis itself claims for its tree (``private_estimated``) and the number of
    edges the two trees share (``shared_edges``, out of d - 1).
    """
    private = chow_liu_tree(synopsis, attributes)
    exact = chow_liu_tree(data, private.attributes)
    true_private = tree_mutual_information(private, data)
    best = exact.total_mutual_information
    shared = ({frozenset(e[:2]) for e in private.edges}
              & {frozenset(e[:2]) for e in exact.edges})
    return {"private": true_private, "nonprivate": best,
            "ratio": true_private / best if best > 0 else float("nan"),
            "private_estimated": private.total_mutual_information,
            "shared_edges": float(len(shared))}
