"""Which shrunk marginals become the graphical model's cliques (issue #9, step 2).

A view whose top-order interaction was shrunk by more than ``1 - keep``
(:class:`~dpmarginals.inference.shrinkage.ShrinkResult` ``factor``) is replaced by its
sub-marginals, recursively, which both regularises the model and keeps the junction tree
small.  When the fit of the selected cliques is predicted to exceed its limits
(:mod:`dpmarginals.inference.pgm_cost`), the weakest views are replaced the same way
until it does not.

>>> from dpmarginals.inference.shrinkage import ShrinkResult
>>> shrunk = ShrinkResult({}, {("a", "b"): 0.9, ("b", "c"): 0.05}, {})
>>> select_cliques([("a", "b"), ("b", "c")], shrunk, keep=0.2)
[('c',), ('a', 'b')]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from dpmarginals.core import tuned as _tuned
from dpmarginals.inference.shrinkage import ShrinkResult

__all__ = ["KEEP", "facets", "maximal", "select_cliques"]

#: Default ``keep``: every view stays a clique.  Dropping views whose interaction kept less
#: than 0.2 (the earlier default) made calm-pgm 2.5x worse on MSNBC d=16, k=6, eps=0.2 and
#: was never clearly better on the quick grids of CALM Fig. 4/5 (``dpmarginals experiment
#: calm-pgm``): a weakly kept interaction still beats none.
KEEP = _tuned.KEEP  # provenance: core/tuned.py


def select_cliques(views: Sequence[Sequence[str]], shrunk: ShrinkResult,
                   keep: float = KEEP, *,
                   fits: Callable[[list[tuple[str, ...]]], bool] | None = None,
                   ) -> list[tuple[str, ...]]:
    """The maximal sets whose interaction survived shrinkage (factor >= ``keep``).

    A view attribute set with a smaller factor is replaced by its facets, recursively;
    1-way sets are always kept.  ``keep=0`` keeps every view.  ``fits``: a test of a
    selection (e.g. its predicted fit within the limits); while the selection fails it,
    the fewest of its largest sets, weakest interaction first, are replaced by their facets
    (a binary search over how many); when no set is left to replace, the 1-way selection is
    returned and the caller refuses it.
    """
    chosen: set[tuple[str, ...]] = set()
    stack = [tuple(v) for v in views]
    seen: set[tuple[str, ...]] = set()
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        if len(s) == 1 or shrunk.factor.get(s, 1.0) >= keep:
            chosen.add(s)
        else:
            stack.extend(facets(s))
    selection = maximal(chosen)
    if fits is None:
        return selection
    while not fits(selection) and max(len(s) for s in selection) > 1:
        top = max(len(s) for s in selection)
        weakest = sorted((s for s in selection if len(s) == top),
                         key=lambda s: (shrunk.factor.get(s, 1.0), s))

        def replaced(j: int, base: list[tuple[str, ...]] = selection,
                     drop: list[tuple[str, ...]] = weakest) -> list[tuple[str, ...]]:
            out = set(base) - set(drop[:j])
            out.update(f for s in drop[:j] for f in facets(s))
            return maximal(out)

        if not fits(replaced(len(weakest))):
            selection = replaced(len(weakest))
            continue
        lo, hi = 1, len(weakest)  # fits(replaced(hi)) holds; find the smallest such j
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(replaced(mid)):
                hi = mid
            else:
                lo = mid + 1
        return replaced(lo)
    return selection


def facets(s: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The (|s|-1)-subsets of ``s``, in order."""
    return [tuple(s[i] for i in f) for f in itertools.combinations(range(len(s)), len(s) - 1)]


def maximal(sets: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The sets no other set contains (each set's subsets of the sizes present are listed
    once, not compared pairwise: plans have thousands of sets)."""
    sizes = sorted({len(s) for s in sets})
    inside: set[frozenset[str]] = set()
    for t in sets:
        for size in sizes:
            if size >= len(t):
                break
            inside.update(map(frozenset, itertools.combinations(t, size)))
    return sorted((s for s in sets if frozenset(s) not in inside), key=lambda s: (len(s), s))
