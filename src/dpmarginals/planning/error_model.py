"""CALM's error model and its choice of the marginal size l and number m (CCS'18 §4.3).

CALM splits the n users into m groups; each group reports one l-way marginal through a
frequency oracle.  Two predicted errors drive the choice:

* **Noise Error** (eq. 7), per attribute::

      NE(n, d, eps, l) = min(4 e^eps, L - 2 + e^eps) / (e^eps - 1)^2 * L / l * d / n

  with L = 2^l cells for binary attributes, or the expected number of cells of an
  l-way marginal for general domains (:func:`expected_cells`).  A k-way marginal is
  affected by k attributes, so Algorithm 1 compares ``k * NE`` with the threshold.
* **Sampling Error** (eq. 8): ``SE(n, m) = m / n``.

:func:`choose_marginals` is Algorithm 1; :func:`select_marginals` turns its (l, m) into
the actual attribute sets.  CALM's worked example (n = 2^16, d = 8, k = 3, eps = 2):

>>> c = choose_marginals(2**16, 8, 2.0, 3)
>>> c.l, c.m, c.oracle, round(c.noise_error, 5), round(c.sampling_error, 5)
(4, 14, 'grr', 0.00077, 0.00021)

(the paper prints k NE = 0.00076: it truncates 0.000768 rather than rounding.)

Where the printed pseudocode is ill-defined or does not say, we chose as follows (each
choice is marked "Algorithm 1 note" in the code):

1. ``m_u = theta * n`` need not be an integer: ``m_u = floor(theta * n)`` (as in our
   reconstruction of Table 2); if that is 0 we use 1 (there must be one group).
2. ``l_u`` starts at 2 without checking ``k * NE(2) <= theta``; we keep that literally
   (l = 2 is the fallback even when its noise exceeds theta), but cap it at d -- the
   while-loop only increments while ``l_u + 1 <= d``, and ``l_u = 1`` when d = 1.
3. The prose says ``k * NE < theta``, the pseudocode ``<=``: we follow the pseudocode.
4. ``CoverDesign`` is "the number of l-way marginals that can fully include all k-way
   marginals".  We use the size of the covering we actually deploy
   (:func:`dpmarginals.planning.covering.covering_size`), which is the covering number in the
   cases the paper uses (C(8,3,3) = 56, C(8,4,3) = 14) and an upper bound elsewhere.
5. Lines 6 and 11 return ``m = min(m_u, C(d, l_u))`` also when ``l_u >= k``, and then
   m need not be a covering size: with l = k and ``m < C(d, k)`` (e.g. n = 2^16, d = 16,
   k = 3, eps = 1.8: l = 3, m = 65) the m marginals cover only some k-sets; with
   ``l > k`` (line 11 after ``CoverDesign(d, k, l_u - 1) > m_u``) m may be smaller or
   larger than the covering.  We return the literal m; :func:`select_marginals` then
   picks m l-sets that cover as many k-sets as it can, and ``MarginalChoice.covers``
   says whether they cover all of them.
6. Line 15 uses a strict ``<`` with E initialised to 1, so ties keep the smaller l.
   If no l_t has an error below 1 (possible only when ``k * NE`` of the smallest sizes,
   which the algorithm never compares with theta, is >= 1 -- e.g. k = 1, tiny eps),
   line 12 would return ``m = m_u``, which can exceed the ``C(d, l_u)`` distinct
   l-sets; we return ``min(m_u, C(d, l_u))`` as lines 6 and 11 do.
   ``CoverDesign`` is only evaluated up to the budget that could still beat E (a
   covering with ``m_t / n >= E`` cannot win, nor can an l_t with ``k * NE >= E``),
   which gives the same answer as computing it exactly, with less work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core.errors import DPMarginalsError, check_epsilon, check_positive_int
from ..core.randomness import RNGLike
from ..oracles import grr_beats_oue
from .covering import (
    _block_ranks,
    _relabel,
    _unused_block,
    balanced_subsets,
    cover_design,
    covering_size,
)

__all__ = [
    "MarginalChoice",
    "choose_marginals",
    "expected_cells",
    "noise_error",
    "sampling_error",
    "select_marginals",
]

GRR = "grr"
OUE = "oue"


def _check_sizes(sizes: Sequence[int], d: int | None = None) -> tuple[int, ...]:
    try:
        raw = list(sizes)
    except TypeError:
        raise DPMarginalsError(f"sizes must be a sequence of integers, got {sizes!r}") from None
    out = tuple(check_positive_int(s, f"sizes[{i}]", 1) for i, s in enumerate(raw))
    if not out:
        raise DPMarginalsError("sizes must not be empty")
    if d is not None and len(out) != d:
        raise DPMarginalsError(f"sizes must have d = {d} entries, got {len(out)}")
    return out


def expected_cells(sizes: Sequence[int], l: int) -> float:
    """Mean number of cells of an l-way marginal: the average over all l-subsets of the
    attributes of the product of their sizes (CALM §4.3: "L is the expected number of
    cells").  Exact: ``e_l(sizes) / C(d, l)`` with the elementary symmetric polynomial
    ``e_l`` computed by the recurrence ``e_j <- e_j + s * e_{j-1}`` in integers.

    >>> expected_cells([2, 2, 2], 2), expected_cells([2, 3, 4], 2)
    (4.0, 8.666666666666666)
    """
    sizes = _check_sizes(sizes)
    l = check_positive_int(l, "l", 0)
    d = len(sizes)
    if l > d:
        raise DPMarginalsError(f"l must be <= the number of attributes {d}, got {l}")
    e = [1] + [0] * l
    for s in sizes:
        for j in range(l, 0, -1):
            e[j] += s * e[j - 1]
    return float(Fraction(e[l], math.comb(d, l)))


def _fo_factor(epsilon: float, cells: float) -> float:
    """min(4 e^eps, L - 2 + e^eps) / (e^eps - 1)^2: the per-cell FO variance times n
    for the better of OUE and GRR (CALM eq. 3).

    Computed with t = e^-eps (numerator and denominator divided by e^{2 eps}) so that it
    is finite for every finite eps.
    """
    t = math.exp(-epsilon)
    return min(4.0 * t, (cells - 2.0) * t * t + t) / math.expm1(-epsilon) ** 2


def _check_cells(cells: float) -> float:
    try:
        value = float(cells)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"cells must be a number, got {cells!r}") from None
    if not (value >= 1.0 and math.isfinite(value)):
        raise DPMarginalsError(f"cells must be a finite number >= 1, got {cells!r}")
    return value


def noise_error(
    n: int, d: int, epsilon: float, l: int, *, cells: float | None = None
) -> float:
    """CALM eq. (7): the Noise Error of one attribute's 1-way marginal.

    ``min(4e^eps, L-2+e^eps)/(e^eps-1)^2 * L/l * d/n`` with ``L = 2^l`` unless ``cells``
    (the expected number of cells of an l-way marginal, see :func:`expected_cells`) is
    given.  It does not depend on m.  Algorithm 1 uses ``k * noise_error(...)``.

    >>> round(3 * noise_error(2**16, 8, 2.0, 3), 5)
    0.00032
    """
    n = check_positive_int(n, "n", 1)
    d = check_positive_int(d, "d", 1)
    l = check_positive_int(l, "l", 1)
    epsilon = check_epsilon(epsilon)
    L = float(2**l) if cells is None else _check_cells(cells)
    return _fo_factor(epsilon, L) * L / l * d / n


def sampling_error(n: int, m: int) -> float:
    """CALM eq. (8): the Sampling Error bound ``m / n`` of m groups out of n users.

    >>> round(sampling_error(2**16, 14), 5)
    0.00021
    """
    n = check_positive_int(n, "n", 1)
    m = check_positive_int(m, "m", 1)
    return m / n


def _oracle(epsilon: float, cells: float) -> str:
    """CALM §2.2.3: GRR has the smaller variance when L - 2 < 3 e^eps, else OUE."""
    return GRR if grr_beats_oue(epsilon, cells) else OUE


@dataclass(frozen=True)
class MarginalChoice:
    """The outcome of CALM's Algorithm 1.

    ``l``: marginal size; ``m``: number of marginals (= groups of users).
    ``oracle``: "grr" or "oue" by CALM's adaptive rule for an l-way marginal of
    ``cells`` cells (GRR iff ``cells - 2 < 3 e^eps``).
    ``noise_error``: ``k * NE`` (eq. 7 times k), the quantity Algorithm 1 compares with
    theta; ``noise_error_per_attribute`` is NE itself.
    ``sampling_error``: ``m / n`` (eq. 8).
    ``cells``: L, the number of cells of an l-way marginal (2^l for binary attributes,
    the expected number otherwise).
    ``covers``: whether :func:`select_marginals` ``(d, k, l, m)`` returns l-sets that
    contain every k-subset (so no k-way marginal needs max-entropy reconstruction).
    """

    l: int
    m: int
    oracle: str
    noise_error: float
    sampling_error: float
    cells: float
    noise_error_per_attribute: float
    covers: bool


def _check_theta(theta: float) -> float:
    try:
        value = float(theta)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"theta must be a number, got {theta!r}") from None
    if not (0.0 < value < 1.0):
        raise DPMarginalsError(f"theta must be a number in (0, 1), got {theta!r}")
    return value


def _floor_product(theta: float, n: int) -> int:
    """floor(theta * n), robust to theta * n landing a rounding error below an integer."""
    x = theta * n
    f = math.floor(x)
    return f + 1 if (f + 1) - x <= 1e-9 * max(1.0, x) else f


def choose_marginals(
    n: int,
    d: int,
    epsilon: float,
    k: int,
    theta: float = 1e-3,
    *,
    sizes: Sequence[int] | None = None,
) -> MarginalChoice:
    """CALM Algorithm 1: choose the marginal size l and the number of marginals m.

    ``n`` users, ``d`` attributes (binary unless ``sizes`` gives each attribute's number
    of values), budget ``epsilon``, target marginal order ``k``, error threshold
    ``theta`` (CALM uses 1e-3 throughout).  See the module docstring for how we read
    the places where the printed pseudocode is ambiguous.

    >>> [choose_marginals(2**16, 8, e, 3).l for e in (1.4, 1.6, 2.0)]
    [2, 3, 4]
    """
    n = check_positive_int(n, "n", 1)
    d = check_positive_int(d, "d", 1)
    k = check_positive_int(k, "k", 1)
    epsilon = check_epsilon(epsilon)
    theta = _check_theta(theta)
    if k > d:
        raise DPMarginalsError(f"k must be <= d = {d} (the number of attributes), got k = {k}")
    dims = None if sizes is None else _check_sizes(sizes, d)

    def cells_of(size: int) -> float:
        return float(2**size) if dims is None else expected_cells(dims, size)

    def per_attribute(size: int) -> float:
        return noise_error(n, d, epsilon, size, cells=cells_of(size))

    def knoise(size: int) -> float:
        return k * per_attribute(size)

    def result(size: int, m: int) -> MarginalChoice:
        cells = cells_of(size)
        covers = size >= k and covering_size(d, k, size, max_blocks=m) is not None
        return MarginalChoice(
            l=size, m=m, oracle=_oracle(epsilon, cells), noise_error=knoise(size),
            sampling_error=m / n, cells=cells, noise_error_per_attribute=per_attribute(size),
            covers=covers,
        )

    # Algorithm 1 note 1: m_u = floor(theta * n), at least one group.
    m_u = max(1, _floor_product(theta, n))
    # Lines 2-4 (note 2: start at 2, never beyond d; note 3: "<=" as printed).
    l_u = min(2, d)
    while l_u + 1 <= d and knoise(l_u + 1) <= theta:
        l_u += 1
    # Lines 5-6.
    if l_u < k:
        return result(l_u, min(m_u, math.comb(d, l_u)))
    # Lines 7-9 (note 4: CoverDesign = the size of the covering we deploy).
    l_b = l_u
    while l_b > k and covering_size(d, k, l_b - 1, max_blocks=m_u) is not None:
        l_b -= 1
    # Lines 10-11 (note 5: m need not be a covering size).
    if l_b == l_u:
        return result(l_u, min(m_u, math.comb(d, l_u)))
    # Lines 12-17 (note 6: m_u clipped to the number of distinct l_u-sets).
    best_e, best_m, best_l = 1.0, min(m_u, math.comb(d, l_u)), l_u
    for l_t in range(l_b, l_u + 1):
        # max(SE, kNE) < E needs kNE < E and m_t / n < E, i.e. m_t <= ceil(E n) - 1:
        # skipping the rest gives the literal answer without building useless coverings.
        if knoise(l_t) >= best_e:
            continue
        budget = math.ceil(best_e * n) - 1
        m_t = covering_size(d, k, l_t, max_blocks=budget)
        if m_t is None:
            continue
        err = max(sampling_error(n, m_t), knoise(l_t))
        if err < best_e:
            best_e, best_m, best_l = err, m_t, l_t
    return result(best_l, best_m)


def select_marginals(
    d: int, k: int, l: int, m: int, *, rng: RNGLike = None
) -> list[tuple[int, ...]]:
    """The m attribute sets (l-subsets of ``range(d)``) for a plan with (l, m).

    * ``l < k``: :func:`~dpmarginals.planning.covering.balanced_subsets` -- every attribute in
      about ``m l / d`` sets, pairs spread.
    * ``l >= k`` and m equal to the covering size: the covering design
      (:func:`~dpmarginals.planning.covering.cover_design`), so every k-way marginal lies in one.
    * ``l >= k`` and m larger (Algorithm 1 line 11 can return ``min(m_u, C(d, l))``): the
      covering plus ``m - size`` further distinct l-sets, chosen to balance attributes.
    * ``l >= k`` and m smaller: m blocks of the covering picked greedily to cover the most
      k-sets (ties: least-used attributes); for ``l == k`` every set covers exactly one
      k-set, so balanced_subsets is used.

    Deterministic: ``rng=None`` gives the canonical sets; a seed or Generator relabels the
    attributes by a random permutation drawn from it.

    >>> len(select_marginals(8, 3, 4, 14)), len(select_marginals(8, 3, 2, 28))
    (14, 28)
    """
    d = check_positive_int(d, "d", 1)
    k = check_positive_int(k, "k", 1)
    l = check_positive_int(l, "l", 1)
    m = check_positive_int(m, "m", 1)
    if k > d:
        raise DPMarginalsError(f"k must be <= d = {d}, got k = {k}")
    if l > d:
        raise DPMarginalsError(f"l must be <= d = {d}, got l = {l}")
    if m > math.comb(d, l):
        raise DPMarginalsError(
            f"m must be <= C(d, l) = {math.comb(d, l)} distinct {l}-subsets, got m = {m}"
        )
    if l < k or (l == k and m < math.comb(d, k)):
        return balanced_subsets(d, l, m, rng=rng)
    size = covering_size(d, k, l, max_blocks=m)
    if size is not None:
        blocks = cover_design(d, k, l)
        assert blocks is not None
        if m > size:
            blocks = _pad(blocks, d, l, m)
    else:
        blocks = _partial_cover(d, k, l, m)
    if rng is None:
        return blocks
    return _relabel(blocks, d, rng)


def _pad(blocks: list[tuple[int, ...]], d: int, l: int, m: int) -> list[tuple[int, ...]]:
    """Add distinct l-sets to a design, least-used attributes first."""
    counts = np.bincount(np.array(blocks).ravel(), minlength=d)
    chosen = set(blocks)
    out = list(blocks)
    gen = np.random.default_rng(0)
    while len(out) < m:
        order = np.lexsort((gen.random(d), counts))
        block = tuple(sorted(int(a) for a in order[:l]))
        if block in chosen:
            block = _unused_block(d, l, chosen, counts, gen)
        chosen.add(block)
        out.append(block)
        counts[list(block)] += 1
    return out


def _partial_cover(d: int, k: int, l: int, m: int) -> list[tuple[int, ...]]:
    """m blocks of the covering design, greedily covering the most k-sets.

    Greedy on the key (k-sets a block would newly cover, then fewest uses of its
    attributes so far, then its position in the design).  Both parts are kept exact for
    every block and updated only where a pick changes them: the blocks holding a newly
    covered k-set lose one, the blocks holding a picked attribute gain one use.  Each pick
    is then one argmax over an integer array (first index on ties), in place of a heap of
    stale keys that the use counts invalidated after every pick (millions of pops for a few
    thousand picks).  Same blocks, same order as that lazy greedy.
    """
    blocks = cover_design(d, k, l)
    assert blocks is not None
    arr = np.array(blocks, dtype=np.int64)
    ranks = _block_ranks(arr, k, d)
    n_blocks, per_block = ranks.shape

    def holders(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
        """For each key value, the blocks holding it: ``blocks[start[v]:start[v + 1]]``."""
        order = np.argsort(keys.ravel(), kind="stable")
        start = np.searchsorted(keys.ravel()[order], np.arange(n_keys + 1))
        return order // keys.shape[1], start

    by_kset, kset_start = holders(ranks, math.comb(d, k))
    by_attr, attr_start = holders(arr, d)
    covered = np.zeros(math.comb(d, k), dtype=bool)
    gain = np.full(n_blocks, per_block, dtype=np.int64)
    use = np.zeros(n_blocks, dtype=np.int64)
    done = np.zeros(n_blocks, dtype=bool)
    scale = l * m + 1  # > any use count: gain decides first, then fewer uses
    key = gain * scale
    out: list[tuple[int, ...]] = []
    for _ in range(m):
        i = int(np.argmax(key))
        out.append(blocks[i])
        done[i] = True
        fresh = ranks[i][~covered[ranks[i]]]
        covered[fresh] = True
        lose = [by_kset[kset_start[r]:kset_start[r + 1]] for r in fresh]
        more = [by_attr[attr_start[a]:attr_start[a + 1]] for a in arr[i]]
        for group in lose:
            gain[group] -= 1  # a block holds a k-set once
        for group in more:
            use[group] += 1  # ... and an attribute once
        touched = np.concatenate([*lose, *more])
        key[touched] = np.where(done[touched], np.iinfo(np.int64).min,
                                gain[touched] * scale - use[touched])
    return out
