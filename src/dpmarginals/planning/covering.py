"""Covering designs: sets of l-subsets of ``range(d)`` that contain every k-subset.

CALM (Zhang et al., CCS'18, §4.3, Algorithm 1) calls an external procedure
``CoverDesign(d, k, l)``: the number of l-way marginals needed so that every k-way
marginal lies inside at least one of them.  In design-theory notation this is a
*(v, K, t) covering* with v = d points, block size K = l and strength t = k; the
least possible number of blocks is the covering number C(v, K, t).  CALM's own example
is C(8, 4, 3) = 14: fourteen 4-way marginals cover all 56 3-way marginals of 8 attributes.

This module builds actual coverings (not just their sizes), deterministically, taking
the smallest of these candidates:

* **Exact cases.** ``l == d``: one block.  ``l == k``: all k-subsets.  ``k == 1``:
  ``ceil(d / l)`` blocks.  ``l == d - 1``: the complements of k + 1 points.
  ``l == d - 2``: the complements of the pairs inside the parts of a balanced
  partition of the points into d - k - 1 parts (optimal by Turán's theorem).
* **Algebraic Steiner systems** (every k-set in exactly one block, so they meet the
  Schönheim bound), built from finite fields: the Steiner quadruple systems SQS(2^m)
  of GF(2)^m (blocks ``{a, b, c, a^b^c}``; d = 8, 16, 32), the inversive planes
  S(3, q+1, q^2+1) for q = 3, 4, 5 (SQS(10), S(3,5,17), S(3,6,26)), the projective
  planes PG(2, q) for q = 2..5 (k = 2, l = q + 1) and the derived designs of the
  k = 3 systems (STS(7), STS(15), STS(31), AG(2, 3), AG(2, 4), AG(2, 5)).  For fewer
  points a system is *restricted*: blocks inside ``range(d)`` are kept, cut blocks
  are padded back to l points greedily (skipped when redundant), then pruned; a few
  fixed relabellings are tried because which points survive matters.
* **Greedy** (everything else).  When all ``C(d, l)`` candidate blocks fit a small
  budget, the exact greedy: repeatedly add a block covering the most uncovered k-sets
  (bucketed gains, updated incrementally; ties broken at random) followed by a pruning
  pass that drops blocks whose k-sets are all covered twice.  Otherwise a scalable
  randomized greedy: seed a block with an uncovered k-set and extend it one point at a
  time by the point that covers the most new k-sets (several seeds per step, the best
  kept).  Its coverings are nearly irredundant (pruning removed at most 0.1% of the
  blocks in our measurements), so it is not pruned -- which lets a run stop exactly
  as soon as it exceeds a budget.  The best of a few restarts with fixed seeds is kept.

Results are cached per (d, k, l) and never depend on the caller's ``rng`` except
through a relabelling of the attributes (see :func:`cover_design`), nor on the order
of calls or on ``max_blocks`` budgets, so plans built on them are reproducible.

Quality and time, measured (one process, cold cache for each row's own construction;
ratio = our size / Schönheim bound; a ratio of 1.00 is provably optimal):

====  ===  ===  ======  =========  =====  =======
d     k    l    ours    Schönheim  ratio  time
====  ===  ===  ======  =========  =====  =======
8     2    3    11      11         1.00   0.02 s
8     3    4    14      14         1.00   0.02 s
8     3    5    8       7          1.14   0.00 s
8     4    5    21      18         1.17   0.00 s
10    3    4    30      30         1.00   0.02 s
10    3    5    18      14         1.29   0.01 s
12    3    4    65      57         1.14   0.04 s
12    3    5    32      27         1.19   0.02 s
12    4    6    54      36         1.50   0.02 s
16    2    3    43      43         1.00   0.01 s
16    2    4    20      20         1.00   0.00 s
16    3    4    140     140        1.00   0.03 s
16    3    5    68      61         1.11   0.04 s
16    3    6    44      32         1.38   0.10 s
16    4    5    464     397        1.17   0.09 s
16    4    7    97      69         1.41   0.20 s
16    6    7    1661    1253       1.33   0.34 s
16    6    8    549     322        1.70   0.28 s
16    6    9    224     121        1.85   0.39 s
16    8    10   620     316        1.96   0.39 s
20    3    4    332     285        1.16   0.14 s
24    3    5    266     221        1.20   0.25 s
32    2    4    93      88         1.06   0.11 s
32    3    4    1240    1240       1.00   0.00 s
32    3    5    635     500        1.27   0.16 s
32    3    6    373     267        1.40   0.38 s
32    3    8    170     92         1.85   0.30 s
32    4    6    3554    2480       1.43   0.49 s
32    4    9    681     306        2.23   0.53 s
32    6    12   3789    1038       3.65   1.65 s
====  ===  ===  ======  =========  =====  =======

The Schönheim bound is far from tight when l - k is large (true covering numbers lie
between it and our sizes), so large ratios there overstate how far from optimal the
construction is.  Cost grows with the number of blocks: about 1 ms per block for
d = 32, k = 6 (a 10^4-block covering takes ~10 s); budgets (``max_blocks``) cut that
short, and the Schönheim bound alone answers "more than the budget" with no work.
"""


from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import combinations

import numpy as np

from ..core.errors import DPMarginalsError, check_positive_int
from ..core.randomness import RNGLike

__all__ = [
    "balanced_subsets",
    "cover_design",
    "covering_number_bound",
    "covering_size",
    "is_covering",
]

#: Fixed seed of the canonical (cached) constructions: plans must be reproducible.
_SEED = 0x0CA1_2018
#: Largest number of k-subsets we will track (one byte each).
_MAX_KSETS = 40_000_000
#: The exact greedy keeps one gain per l-subset and touches each (l-set, k-subset) pair once.
_EXACT_MAX_LSETS = 3_000_000
_EXACT_MAX_WORK = 4_000_000
#: Work (in k-set look-ups) we are willing to spend on restarts of one construction.
_RESTART_WORK = 4_000_000
#: Seconds (estimated) we are willing to spend on restarts of a scalable construction.
_EXTEND_SECONDS = 1.0
_MAX_RESTARTS = 6
#: Largest number of (k-1)-subsets of a growing block on which extension gains are
#: evaluated exactly; above it they are estimated on a random sample of this size.
_SUBSET_SAMPLE = 4096
#: Random relabellings tried when restricting a Steiner system to fewer points.
_RELABEL_TRIES = 8


# ----------------------------------------------------------------------------------------
# validation and small combinatorial helpers
# ----------------------------------------------------------------------------------------


def _check_dkl(d: object, k: object, l: object) -> tuple[int, int, int]:
    d = check_positive_int(d, "d", 1)
    k = check_positive_int(k, "k", 1)
    l = check_positive_int(l, "l", 1)
    if k > d:
        raise DPMarginalsError(f"k must be <= d = {d}, got k = {k}")
    if l > d:
        raise DPMarginalsError(f"l must be <= d = {d}, got l = {l}")
    if l < k:
        raise DPMarginalsError(
            f"l must be >= k = {k} for a covering design, got l = {l} "
            "(use balanced_subsets for l < k)"
        )
    return d, k, l


@lru_cache(maxsize=64)
def _combos(n: int, r: int) -> np.ndarray:
    """All r-subsets of range(n) in lexicographic order, shape (C(n, r), r)."""
    out = np.array(list(combinations(range(n), r)), dtype=np.int64)
    return out.reshape(math.comb(n, r), r)


@lru_cache(maxsize=64)
def _binom_table(n: int, r: int) -> np.ndarray:
    """``T[x, i] = C(x, i)`` for 0 <= x <= n, 0 <= i <= r (int64)."""
    return np.array([[math.comb(x, i) for i in range(r + 1)] for x in range(n + 1)],
                    dtype=np.int64)


def _ranks(sets: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Colex ranks of sorted r-subsets (last axis): sum_i C(c_i, i), i = 1..r."""
    r = sets.shape[-1]
    return table[sets, np.arange(1, r + 1)].sum(axis=-1)


def _unrank(rank: int, r: int, d: int) -> list[int]:
    """The r-subset of range(d) with the given colex rank, ascending."""
    out = [0] * r
    x = d - 1
    for i in range(r, 0, -1):
        while math.comb(x, i) > rank:
            x -= 1
        out[i - 1] = x
        rank -= math.comb(x, i)
        x -= 1
    return out


def _block_ranks(blocks: np.ndarray, k: int, d: int) -> np.ndarray:
    """Colex ranks of the k-subsets of each (sorted) block: shape (len(blocks), C(l, k))."""
    l = blocks.shape[1]
    return _ranks(blocks[:, _combos(l, k)], _binom_table(d, k))


def covering_number_bound(d: int, k: int, l: int) -> int:
    """The Schönheim lower bound on the covering number C(d, l, k).

    ``L(d, l, k) = ceil(d / l * L(d - 1, l - 1, k - 1))`` with ``L(., ., 0) = 1``:
    no family of fewer l-subsets of ``range(d)`` can contain every k-subset.

    >>> covering_number_bound(8, 3, 4), covering_number_bound(32, 3, 4)
    (14, 1240)
    """
    d, k, l = _check_dkl(d, k, l)
    bound = 1
    for i in range(k - 1, -1, -1):
        # ceil((d - i) / (l - i) * bound) in exact integer arithmetic
        bound = -((-(d - i) * bound) // (l - i))
    return bound


def is_covering(blocks: Iterable[Iterable[int]], d: int, k: int) -> bool:
    """Whether every k-subset of ``range(d)`` lies inside at least one block.

    Blocks may have any sizes; a block with an element outside ``range(d)`` makes the
    answer False.

    >>> is_covering([(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)], 4, 3)
    True
    >>> is_covering([(0, 1, 2, 3)], 5, 2)
    False
    """
    d = check_positive_int(d, "d", 0)
    k = check_positive_int(k, "k", 0)
    n_k = math.comb(d, k)
    if n_k > _MAX_KSETS:
        raise DPMarginalsError(f"too many {k}-subsets of {d} points to check ({n_k})")
    covered = np.zeros(n_k, dtype=bool)
    by_size: dict[int, list[list[int]]] = {}
    for block in blocks:
        members = sorted({operator.index(a) for a in block})
        if members and (members[0] < 0 or members[-1] >= d):
            return False
        by_size.setdefault(len(members), []).append(members)
    if k == 0:
        return bool(by_size)
    for size, group in by_size.items():
        if size < k:
            continue
        covered[_block_ranks(np.array(group, dtype=np.int64), k, d).ravel()] = True
    return bool(covered.all())


# ----------------------------------------------------------------------------------------
# exact and algebraic constructions
# ----------------------------------------------------------------------------------------


def _partition(d: int, parts: int) -> list[list[int]]:
    """range(d) cut into ``parts`` consecutive runs whose sizes differ by at most one."""
    base, extra = divmod(d, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(list(range(start, start + size)))
        start += size
    return out


def _k_one(d: int, l: int) -> list[tuple[int, ...]]:
    """C(d, l, 1) = ceil(d / l): consecutive runs, the last one shifted to fit."""
    blocks = []
    for start in range(0, d, l):
        start = min(start, d - l)
        blocks.append(tuple(range(start, start + l)))
    return blocks


def _complement_singletons(d: int, k: int) -> list[tuple[int, ...]]:
    """C(d, d-1, k) = k + 1: a k-set avoids one of any k + 1 points."""
    return [tuple(a for a in range(d) if a != p) for p in range(k + 1)]


def _complement_pairs(d: int, k: int) -> list[tuple[int, ...]]:
    """C(d, d-2, k): complements of the pairs within each of d - k - 1 balanced parts.

    The d - k points outside a k-set fall into d - k - 1 parts, so two share a part and
    the complement of that pair contains the k-set.  By Turán's theorem no smaller
    graph has independence number below d - k, so this is optimal.
    """
    blocks = []
    for part in _partition(d, d - k - 1):
        for pair in combinations(part, 2):
            blocks.append(tuple(a for a in range(d) if a not in pair))
    return blocks


def _gf(p: int, n: int, modulus: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Addition and multiplication tables of GF(p^n).

    An element is the integer whose base-p digits are its polynomial coefficients (low
    degree first); ``modulus`` holds the low coefficients of a monic irreducible
    polynomial of degree n (x^n = -sum modulus[i] x^i).
    """
    q = p**n

    def digits(a: int) -> list[int]:
        return [(a // p**i) % p for i in range(n)]

    def number(c: Sequence[int]) -> int:
        return sum(int(x) * p**i for i, x in enumerate(c))

    add = np.array([[number([(x + y) % p for x, y in zip(digits(a), digits(b), strict=True)])
                     for b in range(q)] for a in range(q)], dtype=np.int64)
    mul = np.zeros((q, q), dtype=np.int64)
    for a in range(q):
        for b in range(q):
            prod = [0] * (2 * n - 1)
            for i, x in enumerate(digits(a)):
                for j, y in enumerate(digits(b)):
                    prod[i + j] = (prod[i + j] + x * y) % p
            for top in range(2 * n - 2, n - 1, -1):  # reduce x^top
                c, prod[top] = prod[top], 0
                for i, m in enumerate(modulus):
                    prod[top - n + i] = (prod[top - n + i] - c * m) % p
            mul[a, b] = number(prod[:n])
    return add, mul


#: GF(q) for the q we use: (p, n, low coefficients of a monic irreducible polynomial).
_FIELDS = {2: (2, 1, (0,)), 3: (3, 1, (0,)), 4: (2, 2, (1, 1)), 5: (5, 1, (0,)),
           9: (3, 2, (1, 0)), 16: (2, 4, (1, 1, 0, 0)), 25: (5, 2, (2, 0))}


def _sqs_binary(m: int) -> list[tuple[int, ...]]:
    """SQS(2^m): the 4-subsets {a, b, c, a^b^c} of GF(2)^m (every triple exactly once)."""
    return [(a, b, c, a ^ b ^ c) for a, b, c in combinations(range(2**m), 3)
            if a ^ b ^ c > c]


def _inversive_plane(q: int) -> list[tuple[int, ...]]:
    """The Miquelian inversive plane: a Steiner system S(3, q+1, q^2+1).

    Points GF(q^2) and infinity (= q^2); blocks are the images of the subfield GF(q)
    plus infinity under the Möbius group, generated by z+1, z+x, g z (g primitive) and
    1/z.  q = 3 gives SQS(10).
    """
    qq = q * q
    add, mul = _gf(*_FIELDS[qq])
    inf = qq
    one, x = 1, _FIELDS[qq][0]  # the integers encoding the polynomials 1 and x
    powers = [[1] for _ in range(qq)]
    for a in range(qq):
        while len(powers[a]) < qq:
            powers[a].append(int(mul[powers[a][-1], a]))
    gen = next(a for a in range(2, qq) if len(set(powers[a][: qq - 1])) == qq - 1)
    inverse = {a: next(b for b in range(1, qq) if mul[a, b] == 1) for a in range(1, qq)}

    def mapping(f: dict[int, int]) -> list[int]:
        return [f.get(z, z) for z in range(qq + 1)]

    maps = [
        mapping({z: int(add[z, one]) for z in range(qq)}),
        mapping({z: int(add[z, x]) for z in range(qq)}),
        mapping({z: int(mul[z, gen]) for z in range(qq)}),
        mapping({0: inf, inf: 0, **inverse}),
    ]
    base = frozenset([*(z for z in range(qq) if powers[z][q % (qq - 1) or qq - 1] == z
                        or z == 0), inf])
    seen, todo = {base}, [base]
    while todo:
        block = todo.pop()
        for f in maps:
            image = frozenset(f[z] for z in block)
            if image not in seen:
                seen.add(image)
                todo.append(image)
    return [tuple(sorted(b)) for b in seen]


def _projective_plane(q: int) -> list[tuple[int, ...]]:
    """PG(2, q): a Steiner system S(2, q+1, q^2+q+1) (lines of the projective plane)."""
    add, mul = _gf(*_FIELDS[q])
    points = ([(1, a, b) for a in range(q) for b in range(q)]
              + [(0, 1, a) for a in range(q)] + [(0, 0, 1)])

    def dot(u: tuple[int, int, int], v: tuple[int, int, int]) -> int:
        s = 0
        for a, b in zip(u, v, strict=True):
            s = int(add[s, mul[a, b]])
        return s

    return [tuple(i for i, pt in enumerate(points) if dot(line, pt) == 0) for line in points]


def _derived(blocks: list[tuple[int, ...]], v: int) -> list[tuple[int, ...]]:
    """The derived design at the last point: S(t, K, v) -> S(t-1, K-1, v-1)."""
    return [tuple(a for a in b if a != v - 1) for b in blocks if v - 1 in b]


@lru_cache(maxsize=1)
def _steiner_systems() -> tuple[tuple[int, int, int, tuple[tuple[int, ...], ...]], ...]:
    """Algebraic Steiner systems S(k, l, v) as (v, k, l, blocks): every k-set in exactly
    one block, so they meet the Schönheim bound.  Built on first use (a few ms)."""
    out: list[tuple[int, int, int, list[tuple[int, ...]]]] = []
    for m in (3, 4, 5):
        out.append((2**m, 3, 4, _sqs_binary(m)))
    for q in (3, 4, 5):
        out.append((q * q + 1, 3, q + 1, _inversive_plane(q)))
    for q in (2, 3, 4, 5):
        out.append((q * q + q + 1, 2, q + 1, _projective_plane(q)))
    for v, k, l, blocks in list(out):
        if k == 3:  # derived: STS(2^m - 1), AG(2, q)
            out.append((v - 1, 2, l - 1, _derived(blocks, v)))
    return tuple((v, k, l, tuple(tuple(sorted(b)) for b in blocks)) for v, k, l, blocks in out)


def _restrict(blocks: Sequence[tuple[int, ...]], d: int, k: int, l: int) -> list[tuple[int, ...]]:
    """A (d, l, k) covering from a design on more points: keep the blocks inside
    ``range(d)``; a block that loses points still covers its k-subsets inside range(d)
    once padded back to l points -- we pad greedily (the point covering the most k-sets
    not covered yet) and skip it when those k-sets are already covered."""
    full = [b for b in blocks if b[-1] < d]
    cut = sorted((tuple(a for a in b if a < d) for b in blocks if b[-1] >= d),
                 key=lambda b: (-len(b), b))
    covered = {t for b in full for t in combinations(b, k)}
    out = list(full)
    for part in cut:
        if len(part) < k or all(t in covered for t in combinations(part, k)):
            continue
        block = set(part)
        while len(block) < l:
            def gain(y: int, block: set[int] = block) -> int:
                return sum(t not in covered for t in combinations(sorted((*block, y)), k)
                           if y in t)
            block.add(max((y for y in range(d) if y not in block), key=gain))
        new = tuple(sorted(block))
        covered.update(combinations(new, k))
        out.append(new)
    return out


def _from_designs(d: int, k: int, l: int) -> list[list[tuple[int, ...]]]:
    """Coverings obtained by restricting each matching Steiner system on >= d points.

    Which d points survive matters, so besides the first d we try a few fixed random
    relabellings of the system and keep the smallest result.
    """
    out = []
    for v, kk, ll, blocks in _steiner_systems():
        if (kk, ll) != (k, l) or v < d:
            continue
        best = _best_pruned(_restrict(blocks, d, k, l), d, k)
        for trial in range(_RELABEL_TRIES if v > d else 0):
            perm = np.random.default_rng([_SEED, v, d, trial]).permutation(v)
            moved = [tuple(sorted(int(perm[a]) for a in b)) for b in blocks]
            found = _best_pruned(_restrict(moved, d, k, l), d, k)
            if len(found) < len(best):
                best = found
        out.append(best)
    return out


# ----------------------------------------------------------------------------------------
# greedy constructions
# ----------------------------------------------------------------------------------------


def _exact_feasible(d: int, k: int, l: int) -> bool:
    n_l = math.comb(d, l)
    return n_l <= _EXACT_MAX_LSETS and n_l * math.comb(l, k) <= _EXACT_MAX_WORK


def _greedy_exact(d: int, k: int, l: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Greedy over all l-subsets: always add a block covering the most uncovered k-sets.

    Gains live in one array indexed by the colex rank of the l-set; they only decrease,
    so we scan the bucket of the current maximum once and move down a level when it is
    exhausted.
    """
    n_k = math.comb(d, k)
    top = math.comb(l, k)
    tab_k, tab_l = _binom_table(d, k), _binom_table(d, l)
    pat_lk, pat_ext = _combos(l, k), _combos(d - k, l - k)
    n_ext = pat_ext.shape[0]
    gains = np.full(math.comb(d, l), top, dtype=np.int32)
    covered = np.zeros(n_k, dtype=bool)
    left = n_k
    blocks: list[tuple[int, ...]] = []
    level = top
    while left > 0 and level > 0:
        bucket = np.flatnonzero(gains == level)
        rng.shuffle(bucket)
        for idx in bucket:
            if gains[idx] != level:
                continue
            block = np.array(_unrank(int(idx), l, d), dtype=np.int64)
            subsets = block[pat_lk]
            ranks = _ranks(subsets, tab_k)
            fresh = ~covered[ranks]
            covered[ranks[fresh]] = True
            left -= int(fresh.sum())
            blocks.append(tuple(int(a) for a in block))
            if left == 0:
                return blocks
            # every l-set containing a newly covered k-set loses one unit of gain
            new_sets = subsets[fresh]
            count = new_sets.shape[0]
            outside = np.ones((count, d), dtype=bool)
            outside[np.arange(count)[:, None], new_sets] = False
            comp = np.nonzero(outside)[1].reshape(count, d - k)
            supersets = np.concatenate(
                [np.broadcast_to(new_sets[:, None, :], (count, n_ext, k)), comp[:, pat_ext]],
                axis=2,
            )
            supersets.sort(axis=2)
            hit, times = np.unique(_ranks(supersets, tab_l), return_counts=True)
            gains[hit] -= times.astype(np.int32)
        level -= 1
    return blocks


@lru_cache(maxsize=64)
def _insert_positions(s: int, k: int) -> np.ndarray:
    """``T[q, j]``: how many members of the j-th (k-1)-subset of range(s) are < q."""
    pat = _combos(s, k - 1)
    return np.array([(pat < q).sum(axis=1) for q in range(s + 1)], dtype=np.int64)


def _extension_ranks(
    blocks: np.ndarray,
    cand: np.ndarray,
    k: int,
    tab: np.ndarray,
    rows_of_sub: np.ndarray | None = None,
) -> np.ndarray:
    """Colex ranks of ``sub | {x}`` for every (k-1)-subset ``sub`` of each sorted block
    and every x among that block's candidates.

    ``blocks``: (B, s) rows ascending; ``cand``: (B, X) points not in the row's block.
    Returns (B, X, C(s, k-1)), or only the (k-1)-subsets ``rows_of_sub`` (indices into
    their lexicographic list) when given.  Inserting x after the first p members of ``sub`` shifts
    the later members up one place, so ``rank = sum_{i<p} C(sub_i, i+1) + C(x, p+1) +
    sum_{i>=p} C(sub_i, i+2)``: prefix and suffix sums per subset, no sorting.
    """
    n_b, size = blocks.shape
    pattern = _combos(size, k - 1)
    if rows_of_sub is not None:
        pattern = pattern[rows_of_sub]
    sub = blocks[:, pattern]  # (B, S, k-1)
    cols = np.arange(1, k)
    low = tab[sub, cols]  # C(sub_i, i+1)
    high = tab[sub, cols + 1]  # C(sub_i, i+2)
    both = np.zeros((*sub.shape[:2], k), dtype=np.int64)  # indexed by p
    np.cumsum(low, axis=2, out=both[:, :, 1:])
    both[:, :, :-1] += np.cumsum(high[:, :, ::-1], axis=2)[:, :, ::-1]
    pos = (blocks[:, None, :] < cand[:, :, None]).sum(axis=2)  # (B, X)
    table = _insert_positions(size, k)
    p = (table if rows_of_sub is None else table[:, rows_of_sub])[pos]  # (B, X, S)
    rows = np.arange(n_b)[:, None, None]
    return both[rows, np.arange(sub.shape[1])[None, None, :], p] + tab[cand[:, :, None], p + 1]


def _greedy_extend(
    d: int,
    k: int,
    l: int,
    rng: np.random.Generator,
    seeds: int,
    abort_above: int | None = None,
) -> list[tuple[int, ...]] | None:
    """Scalable randomized greedy: grow blocks around uncovered k-sets.

    Each step takes the first uncovered k-set (colex order) and up to ``seeds - 1``
    random uncovered ones; each is extended to an l-set by repeatedly adding the point
    that covers the most uncovered k-sets (all seeds at once, vectorized; once a block
    has more than ``_SUBSET_SAMPLE`` (k-1)-subsets, the gains are estimated on a random
    sample of them, the same for every candidate); the best extension becomes the next
    block.  Every block covers a new k-set, so the size only
    grows: the run gives up (returns None) once it needs more than ``abort_above`` blocks.
    """
    n_k = math.comb(d, k)
    tab = _binom_table(d, k)
    covered = np.zeros(n_k, dtype=bool)
    left, ptr = n_k, 0
    blocks: list[tuple[int, ...]] = []
    chunk = 4096
    while left > 0:
        if abort_above is not None and len(blocks) >= abort_above:
            return None
        while True:
            free = np.flatnonzero(~covered[ptr:ptr + chunk])
            if free.size:
                ptr += int(free[0])
                break
            ptr += chunk
        starts = [ptr]
        if seeds > 1:
            probe = rng.integers(0, n_k, size=4 * seeds)
            starts += [int(r) for r in probe[~covered[probe]][: seeds - 1]]
        grown = np.array([_unrank(r, k, d) for r in starts], dtype=np.int64)
        rows = np.arange(grown.shape[0])
        gain = np.ones(grown.shape[0], dtype=np.int64)
        for size in range(k, l):
            outside = np.ones((rows.size, d), dtype=bool)
            outside[rows[:, None], grown] = False
            cand = np.nonzero(outside)[1].reshape(rows.size, d - size)
            n_sub = math.comb(size, k - 1)
            sample = (None if n_sub <= _SUBSET_SAMPLE
                      else rng.choice(n_sub, size=_SUBSET_SAMPLE, replace=False))
            new = (~covered[_extension_ranks(grown, cand, k, tab, sample)]).sum(axis=2)
            pick = np.argmax(new + 0.5 * rng.random(new.shape), axis=1)
            gain += new[rows, pick]
            grown = np.sort(np.concatenate([grown, cand[rows, pick][:, None]], axis=1), axis=1)
        best = grown[int(np.argmax(gain))]
        ranks = _block_ranks(best[None, :], k, d)[0]
        left -= int((~covered[ranks]).sum())
        covered[ranks] = True
        blocks.append(tuple(int(a) for a in best))
    return blocks


def _prune(blocks: list[tuple[int, ...]], d: int, k: int, reverse: bool) -> list[tuple[int, ...]]:
    """Drop blocks all of whose k-subsets are covered by other blocks (one pass)."""
    if len(blocks) <= 1:
        return list(blocks)
    sizes = {len(b) for b in blocks}
    if len(sizes) != 1:  # only uniform designs reach here
        raise AssertionError("non-uniform design")
    ranks = _block_ranks(np.array(blocks, dtype=np.int64), k, d)
    count = np.bincount(ranks.ravel(), minlength=math.comb(d, k))
    keep = np.ones(len(blocks), dtype=bool)
    order = range(len(blocks) - 1, -1, -1) if reverse else range(len(blocks))
    for i in order:
        r = ranks[i]
        if count[r].min() >= 2:
            keep[i] = False
            count[r] -= 1
    return [b for b, kept in zip(blocks, keep, strict=True) if kept]


def _best_pruned(blocks: list[tuple[int, ...]], d: int, k: int) -> list[tuple[int, ...]]:
    a = _prune(blocks, d, k, reverse=False)
    b = _prune(blocks, d, k, reverse=True)
    return a if len(a) <= len(b) else b


def _extend_seconds(d: int, k: int, l: int, seeds: int) -> float:
    """Rough wall time of one extension run (calibrated on a laptop-class CPU)."""
    ranks = sum((d - s) * min(math.comb(s, k - 1), _SUBSET_SAMPLE) for s in range(k, l))
    per_block = (l - k) * 4e-5 + seeds * ranks * 1.5e-8
    return 2.5 * covering_number_bound(d, k, l) * per_block


def _plan_runs(d: int, k: int, l: int) -> tuple[bool, int, int]:
    """(exact greedy?, seeds per step, restarts) -- a function of (d, k, l) only."""
    if _exact_feasible(d, k, l):
        work = math.comb(d, l) * math.comb(l, k)
        return True, 1, int(min(_MAX_RESTARTS, max(1, _RESTART_WORK // max(work, 1))))
    seeds = 8
    while seeds > 1 and _extend_seconds(d, k, l, seeds) > _EXTEND_SECONDS:
        seeds //= 2
    runs = int(min(_MAX_RESTARTS, max(1, _EXTEND_SECONDS // _extend_seconds(d, k, l, seeds))))
    return False, seeds, runs


def _construct(d: int, k: int, l: int, budget: int | None) -> tuple[tuple[int, ...], ...] | None:
    """The canonical covering for validated (d, k, l), or None if it has > budget blocks.

    The canonical design is the smallest of the candidates below (the first on ties);
    with a budget the same candidates are tried, but a greedy run stops as soon as it
    can no longer beat the budget or the best so far, so the answer is identical.
    """
    if l == d:
        return (tuple(range(d)),)
    if l == k:
        if budget is not None and math.comb(d, k) > budget:
            return None
        if math.comb(d, k) > _MAX_KSETS // 8:
            raise DPMarginalsError(f"C({d}, {k}) = {math.comb(d, k)} blocks is too many")
        return tuple(combinations(range(d), k))
    if k == 1:
        best = _k_one(d, l)
    elif l == d - 1:
        best = _complement_singletons(d, k)
    elif l == d - 2:
        best = _complement_pairs(d, k)
    else:
        if math.comb(d, k) > _MAX_KSETS:
            raise DPMarginalsError(
                f"covering all {k}-subsets of {d} attributes ({math.comb(d, k)}) is too large"
            )
        best = _designs_or_greedy(d, k, l, budget)
        if best is None:
            return None
    if budget is not None and len(best) > budget:
        return None
    return tuple(sorted(tuple(sorted(b)) for b in best))


def _designs_or_greedy(
    d: int, k: int, l: int, budget: int | None
) -> list[tuple[int, ...]] | None:
    bound = covering_number_bound(d, k, l)
    best: list[tuple[int, ...]] | None = None
    for found in _from_designs(d, k, l):
        if best is None or len(found) < len(best):
            best = found
    if best is not None and len(best) == bound:
        return best
    exact, seeds, runs = _plan_runs(d, k, l)
    for run in range(runs):
        rng = np.random.default_rng([_SEED, d, k, l, run])
        if exact:  # small: always run to the end, then prune
            found: list[tuple[int, ...]] | None = _best_pruned(
                _greedy_exact(d, k, l, rng), d, k
            )
        else:  # stop a run once it cannot beat the best so far nor fit the budget
            limits = [x for x in (budget, None if best is None else len(best) - 1)
                      if x is not None]
            found = _greedy_extend(d, k, l, rng, seeds, min(limits) if limits else None)
        if found is not None and (best is None or len(found) < len(best)):
            best = found
        if best is not None and len(best) == bound:
            break
    return best


#: (d, k, l) -> the canonical design, or the largest budget it is known to exceed.
_DESIGNS: dict[tuple[int, int, int], tuple[tuple[int, ...], ...]] = {}
_EXCEEDS: dict[tuple[int, int, int], int] = {}


def _canonical(
    d: int, k: int, l: int, budget: int | None = None
) -> tuple[tuple[int, ...], ...] | None:
    """Cached :func:`_construct`; results do not depend on the order of calls."""
    key = (d, k, l)
    done = _DESIGNS.get(key)
    if done is not None:
        return done if budget is None or len(done) <= budget else None
    if budget is not None and _EXCEEDS.get(key, -1) >= budget:
        return None
    out = _construct(d, k, l, budget)
    if l == k:  # all k-subsets: cheap to rebuild, possibly large to keep
        return out
    if out is None:
        assert budget is not None
        _EXCEEDS[key] = max(budget, _EXCEEDS.get(key, -1))
    else:
        _DESIGNS[key] = out
    return out


def _relabel(
    blocks: Sequence[tuple[int, ...]], d: int, rng: RNGLike
) -> list[tuple[int, ...]]:
    perm = np.random.default_rng(rng).permutation(d)  # type: ignore[arg-type]
    return sorted(tuple(sorted(int(perm[a]) for a in b)) for b in blocks)


def cover_design(
    d: int,
    k: int,
    l: int,
    *,
    rng: RNGLike = None,
    max_blocks: int | None = None,
) -> list[tuple[int, ...]] | None:
    """A covering design: l-subsets of ``range(d)`` containing every k-subset.

    Deterministic: ``rng=None`` returns the canonical (cached) design; any other
    ``rng`` (a seed or ``numpy.random.Generator``) returns the canonical design with the
    attributes relabelled by a random permutation drawn from it -- a different but
    equally large covering.  ``max_blocks``: return ``None`` instead when the design has
    more than ``max_blocks`` blocks (when even the Schönheim lower bound exceeds the
    budget the construction is skipped entirely).

    >>> blocks = cover_design(8, 3, 4)
    >>> len(blocks), is_covering(blocks, 8, 3)
    (14, True)
    >>> cover_design(8, 3, 4, max_blocks=13) is None
    True
    """
    d, k, l = _check_dkl(d, k, l)
    if max_blocks is not None:
        max_blocks = check_positive_int(max_blocks, "max_blocks", 0)
        if covering_number_bound(d, k, l) > max_blocks:
            return None
    blocks = _canonical(d, k, l, max_blocks)
    if blocks is None:
        return None
    if rng is None:
        return list(blocks)
    return _relabel(blocks, d, rng)


def covering_size(d: int, k: int, l: int, max_blocks: int | None = None) -> int | None:
    """``len(cover_design(d, k, l))``, or ``None`` if that exceeds ``max_blocks``. Cached.

    This is the ``CoverDesign(d, k, l)`` of CALM's Algorithm 1 -- the size of the
    covering we actually deploy, an upper bound on the covering number.  With a budget
    the construction stops early once it is sure to exceed it (same answer, less work).

    >>> covering_size(8, 3, 3), covering_size(8, 3, 4), covering_size(32, 3, 4, 262)
    (56, 14, None)
    """
    d, k, l = _check_dkl(d, k, l)
    if max_blocks is not None:
        max_blocks = check_positive_int(max_blocks, "max_blocks", 0)
        if covering_number_bound(d, k, l) > max_blocks:
            return None
    if l == k:
        return math.comb(d, k)
    blocks = _canonical(d, k, l, max_blocks)
    return None if blocks is None else len(blocks)


# ----------------------------------------------------------------------------------------
# balanced families of l-subsets (l < k in Algorithm 1)
# ----------------------------------------------------------------------------------------

def balanced_subsets(
    d: int, l: int, m: int, *, rng: RNGLike = None
) -> list[tuple[int, ...]]:
    """m distinct l-subsets of ``range(d)`` in which every attribute appears about equally.

    Attribute counts differ by at most one (always possible, and guaranteed: a final
    repair pass swaps an over-used attribute for an under-used one in some block, which
    a counting argument shows is always available without creating a duplicate).
    Within that constraint each block is grown greedily from the least-used attributes,
    preferring the attribute whose pairs with the block's other members have been used
    least, so pairs are spread too.  Deterministic: ``rng=None`` uses a fixed seed.

    >>> blocks = balanced_subsets(6, 2, 5)
    >>> len(set(blocks)), sorted({sum(a in b for b in blocks) for a in range(6)})
    (5, [1, 2])
    """
    d = check_positive_int(d, "d", 1)
    l = check_positive_int(l, "l", 1)
    if l > d:
        raise DPMarginalsError(f"l must be <= d = {d}, got l = {l}")
    total = math.comb(d, l)
    m = check_positive_int(m, "m", 0)
    if m > total:
        raise DPMarginalsError(
            f"m must be <= C(d, l) = {total} distinct {l}-subsets of {d} attributes, got {m}"
        )
    gen = np.random.default_rng(_SEED if rng is None else rng)  # type: ignore[arg-type]
    if m == total:
        return list(combinations(range(d), l))
    counts = np.zeros(d, dtype=np.int64)
    pairs = np.zeros((d, d), dtype=np.int64)
    chosen: set[tuple[int, ...]] = set()
    blocks: list[tuple[int, ...]] = []
    for _ in range(m):
        block = _grow_block(counts, pairs, l, gen)
        if block in chosen:
            block = _unused_block(d, l, chosen, counts, gen)
        chosen.add(block)
        blocks.append(block)
        idx = np.array(block)
        counts[idx] += 1
        pairs[np.ix_(idx, idx)] += 1
    _rebalance(blocks, chosen, counts, d)
    if l >= 2 and m >= 2:
        _spread_pairs(blocks, chosen, gen, steps=min(40 * m, 6000))
    return blocks


def _grow_block(
    counts: np.ndarray, pairs: np.ndarray, l: int, gen: np.random.Generator
) -> tuple[int, ...]:
    """Least-used attributes first; among those, the fewest pairs with the block so far."""
    d = counts.size
    noise = gen.random(d)
    free = np.ones(d, dtype=bool)
    pair_load = np.zeros(d, dtype=np.int64)
    members: list[int] = []
    for _ in range(l):
        # lexicographic (count, pair load, noise); noise < 1 and loads are integers
        key = np.where(free, counts * (pairs.max() * l + 1) + pair_load + noise, np.inf)
        a = int(np.argmin(key))
        members.append(a)
        free[a] = False
        pair_load += pairs[a]
    return tuple(sorted(members))


def _unused_block(
    d: int,
    l: int,
    chosen: set[tuple[int, ...]],
    counts: np.ndarray,
    gen: np.random.Generator,
) -> tuple[int, ...]:
    """An l-set not chosen yet, preferring lightly used attributes."""
    order = np.lexsort((gen.random(d), counts))  # least used first, random ties
    # try sets drawn mostly from the least-used attributes, widening the pool
    for pool in range(l, d + 1):
        for _ in range(8):
            pick = gen.choice(order[:pool], size=l, replace=False)
            block = tuple(sorted(int(a) for a in pick))
            if block not in chosen:
                return block
    for combo in combinations(range(d), l):  # exhaustive fallback (m < C(d, l))
        if combo not in chosen:
            return combo
    raise AssertionError("no unused block")  # pragma: no cover


def _rebalance(
    blocks: list[tuple[int, ...]], chosen: set[tuple[int, ...]], counts: np.ndarray, d: int
) -> None:
    """Swap over-used for under-used attributes until counts differ by at most one.

    With a = most used, b = least used and count(a) >= count(b) + 2, more blocks contain
    a but not b than contain b but not a; replacing a by b is injective on the former and
    can only collide with the latter, so some swap yields a new distinct block.  Each
    swap lowers the sum of squared counts, so the loop ends.
    """
    while counts.max() - counts.min() > 1:
        a, b = int(np.argmax(counts)), int(np.argmin(counts))
        for i, block in enumerate(blocks):
            if a in block and b not in block:
                new = tuple(sorted((*(x for x in block if x != a), b)))
                if new not in chosen:
                    chosen.discard(block)
                    chosen.add(new)
                    blocks[i] = new
                    counts[a] -= 1
                    counts[b] += 1
                    break
        else:  # pragma: no cover - excluded by the counting argument
            raise AssertionError("rebalance failed")


def _spread_pairs(
    blocks: list[tuple[int, ...]],
    chosen: set[tuple[int, ...]],
    gen: np.random.Generator,
    steps: int,
) -> None:
    """Local search on the sum of squared pair counts (attribute counts unchanged).

    A move exchanges attribute a of block i with attribute b of block j (a not in j,
    b not in i); it is kept when it strictly lowers the sum and creates no duplicate.
    """
    pair: dict[tuple[int, int], int] = {}
    for block in blocks:
        for p in combinations(block, 2):
            pair[p] = pair.get(p, 0) + 1
    picks = gen.integers(0, len(blocks), size=(steps, 2))
    coins = gen.random((steps, 2))
    for (i, j), (u, v) in zip(picks.tolist(), coins.tolist(), strict=True):
        bi, bj = blocks[i], blocks[j]
        only_i = [x for x in bi if x not in bj]
        only_j = [x for x in bj if x not in bi]
        if i == j or not only_i:
            continue
        a = only_i[int(u * len(only_i))]
        b = only_j[int(v * len(only_j))]
        new_i = tuple(sorted((*(x for x in bi if x != a), b)))
        new_j = tuple(sorted((*(x for x in bj if x != b), a)))
        if new_i in chosen or new_j in chosen:
            continue
        delta: dict[tuple[int, int], int] = {}
        for block, sign in ((bi, -1), (bj, -1), (new_i, 1), (new_j, 1)):
            for p in combinations(block, 2):
                delta[p] = delta.get(p, 0) + sign
        change = sum((pair.get(p, 0) + dv) ** 2 - pair.get(p, 0) ** 2
                     for p, dv in delta.items() if dv)
        if change < 0:
            for p, dv in delta.items():
                pair[p] = pair.get(p, 0) + dv
            chosen.difference_update((bi, bj))
            chosen.update((new_i, new_j))
            blocks[i], blocks[j] = new_i, new_j
