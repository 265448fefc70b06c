"""DP marginals for sparse records: Gopi–Mahabadi–Yekhanin, Algorithms 1 and 2.

Extract, for ``k = 1..T``, the set ``S_k`` of k-tuples (sets of ``k`` (column, value)
items with distinct columns) that many records hold, with noisy counts ``H_k``, under
``(epsilon, delta)``-DP (neighbours: one user's record added or removed).

Stage ``k`` (Algorithm 1):

1. ``W_u = M_k(X^u) ∩ V_k``: user ``u``'s valid k-tuples.  ``V_1`` is every item; for
   ``k >= 2``, ``V_k`` is the k-tuples all of whose (k-1)-subtuples are in ``S_{k-1}``
   (apriori candidates: join two tuples of ``S_{k-1}`` sharing their first ``k-2`` items,
   then check the other subtuples).  Users' ``W_u`` are built the same way *inside each
   record*, from the (k-1)-tuples of ``S_{k-1}`` the record holds, so no tuple outside
   the records is ever enumerated for them.
2. ``Delta_k`` = DP ``Q``-th percentile of ``|W_u|`` (OpenDP's exponential mechanism,
   ``epsilon_Q``-DP, candidates ``1..max_contribution``).
3. Contribution bounding: a user with ``|W_u| > Delta_k`` keeps ``Delta_k`` tuples chosen
   uniformly at random (random priorities; vectorized over all users).
4. NoisyThresholding (Algorithm 2) on the histogram of the kept tuples over ``Omega``,
   with discrete Gaussian noise of scale ``sigma_k sqrt(Delta_k)``, keep ``H > rho_k``:

   * ``k = 1``: ``Omega = V_1`` = the union of the kept items, and ``rho_1 = 1 + t`` with
     ``t`` the smallest integer with ``P(Z > t) <= 1 - (1 - delta/2)^(1/Delta_1)`` -- the
     paper's ``1 + sigma sqrt(Delta) Phi^-1((1 - delta/2)^(1/Delta))`` for the discrete
     noise actually drawn (its exact tail, :func:`.noise.dg_threshold`).
   * ``k >= 2``: ``Omega = V_k`` and ``rho_k`` the smallest integer with
     ``P(Z > rho_k) <= eta min(1, |S_{k-1}| / |V_k|)``, so the expected number of
     *spurious* outputs (tuples no user holds) is at most ``eta min(|S_{k-1}|, |V_k|)``
     (Proposition 1.1).
   * ``no_spurious=True`` (Remark 1.1): for every ``k``, ``Omega`` = the union of the kept
     tuples and ``rho_k = 1 + t`` with ``delta / (2T)`` in place of ``delta / 2``; no
     spurious tuple is ever output, at the price of higher thresholds.

**Candidates no user holds.**  When ``|V_k|`` exceeds ``max_materialized``, ``V_k`` is
never materialised: the tuples with a non-zero kept count get OpenDP noise as usual; of
the ``n0`` others, ``Binomial(n0, P(Z > rho_k))`` are output, chosen uniformly (rejection
sampling from the apriori join, exact), with values from the exact conditional tail
``Z | Z > rho_k`` -- the same output distribution as noising all of ``V_k``, except that
the binomial and the tail are sampled by float64 inversion (total variation ~1e-12, which
adds at most ``(1 + e^epsilon) * 1e-12`` to ``delta``).  A test checks both paths agree.

Privacy accounting: :mod:`.accounting`.

>>> recs = SparseRecords.from_lists([[1, 2, 3]] * 3000 + [[1, 2]] * 3000 + [[4]] * 3000)
>>> res = DPMarginals(epsilon=1.0, delta=1e-6, max_k=3).fit(recs, rng=0, simulation=True)
>>> res.found()
[4, 3, 1]
>>> res.private
False
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon, describe_os_error
from ..core.provenance import CENTRAL_UNIT, Provenance
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..datasets.sparse import SparseRecords
from ..engines.parquet import as_records
from .accounting import PrivacyBudget, check_delta, plan_budget
from .noise import (
    NoiseSource,
    dg_sf,
    dg_threshold,
    noise_source,
    sample_binomial,
    sample_dg_tail,
)

__all__ = [
    "DPMarginals",
    "DPMarginalsResult",
    "Level",
    "TupleCounter",
    "spurious_fraction",
    "true_counts",
]

RELEASE_FORMAT = "dpmarginals.ktuples"
"""The ``format`` field of a saved k-tuple release (``query`` and ``synthesize`` read it)."""
_CHUNK_PAIRS = 1 << 22  # join pairs generated per chunk
_CACHE_ROWS = 1 << 25  # keep a stage's (user, tuple) rows in memory up to this many
_DENSE_KEYS = 1 << 25  # key spaces up to this size are looked up in a dense table


class _KeyMap:
    """Position of each query key in a sorted key array (-1 if absent).

    A dense table over the key space when it is small (one gather per query), else a
    binary search.
    """

    def __init__(self, keys: np.ndarray, space: int) -> None:
        self.keys = np.asarray(keys, dtype=np.int64)
        self.table: np.ndarray | None = None
        if 0 < space <= _DENSE_KEYS:  # slot `space` answers every out-of-range query
            self.table = np.full(space + 1, -1, dtype=np.int32 if keys.size < 2**31 else np.int64)
            self.table[self.keys] = np.arange(self.keys.size)
            self.space = np.uint64(space)

    def find(self, query: np.ndarray) -> np.ndarray:
        query = np.asarray(query, dtype=np.int64)
        if self.keys.size == 0:
            return np.full(query.shape, -1, np.int64)
        if self.table is not None:  # negative keys wrap to huge unsigned values
            return self.table[np.minimum(query.view(np.uint64), self.space)].astype(np.int64)
        pos = np.minimum(np.searchsorted(self.keys, query), self.keys.size - 1)
        return np.where(self.keys[pos] == query, pos, -1)


# -- the tuple index: S_1..S_k over compact item ids 0..m1-1 (ranks in S_1) -----------
class _TupleIndex:
    """``S_j`` as sorted int64 keys: ``key = index_in_S_{j-1}(prefix) * m1 + last item``.

    Key order is lexicographic tuple order, so ``S_j``'s row ``i`` is its ``i``-th key.
    """

    def __init__(self, item_columns: np.ndarray) -> None:
        self.m1 = int(item_columns.size)
        self.col = np.asarray(item_columns, dtype=np.int64)
        ids = np.arange(self.m1, dtype=np.int64)
        self.keys: list[np.ndarray] = [np.empty(0, np.int64), ids]
        self.tuples: list[np.ndarray] = [np.empty((1, 0), np.int64), ids[:, None]]
        self.maps: list[_KeyMap | None] = [None, None]

    def add_level(self, keys: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        prev = self.tuples[-1]
        self.maps.append(_KeyMap(keys, self.key_space(len(self.keys))))
        self.keys.append(keys)
        self.tuples.append(np.hstack([prev[keys // self.m1], (keys % self.m1)[:, None]]))

    def key_space(self, j: int) -> int:
        """Number of possible keys of j-tuples: ``|S_{j-1}| * m1``."""
        return self.size(j - 1) * self.m1

    def size(self, j: int) -> int:
        return int(self.keys[j].size)

    def prefix(self, j: int) -> np.ndarray:
        """Index in ``S_{j-1}`` of each ``S_j`` tuple's first ``j - 1`` items."""
        return self.keys[j] // self.m1 if j >= 2 else np.zeros(self.size(j), np.int64)

    def last(self, j: int) -> np.ndarray:
        return self.keys[j] % self.m1

    def lookup(self, t: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """Row of each tuple in ``S_j`` (-1 if absent): ``t`` is an (r, j) array of items
        or a list of ``j`` item columns."""
        cols = [t[:, i] for i in range(t.shape[1])] if isinstance(t, np.ndarray) else list(t)
        idx = np.asarray(cols[0], dtype=np.int64)
        for i in range(1, len(cols)):
            level_map = self.maps[i + 1]
            assert level_map is not None
            found = level_map.find(np.where(idx >= 0, idx * self.m1 + cols[i], -1))
            idx = np.where(idx >= 0, found, -1)
        return idx


def _pairs(u: np.ndarray, group: np.ndarray) -> np.ndarray:
    """For rows sorted by (u, group): how many later rows share each row's (u, group)."""
    r = u.size
    if r == 0:
        return np.zeros(0, np.int64)
    new = np.ones(r, dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (group[1:] != group[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], r)
    gid = np.cumsum(new) - 1
    return ends[gid] - np.arange(r) - 1


def _row_chunks(cnt: np.ndarray, cut_ok: np.ndarray | None, limit: int) -> list[tuple[int, int]]:
    """Split rows into ranges with about ``limit`` pairs each, cutting only where ``cut_ok``."""
    r = cnt.size
    cum = np.concatenate([[0], np.cumsum(cnt)])
    if cum[-1] <= limit:
        return [(0, r)]
    allowed = np.flatnonzero(cut_ok) if cut_ok is not None else None
    out, s = [], 0
    while s < r:
        e = int(np.searchsorted(cum, cum[s] + limit, side="right")) - 1
        e = max(e, s + 1)
        if allowed is not None:
            pos = int(np.searchsorted(allowed, e))
            e = int(allowed[pos]) if pos < allowed.size else r
        e = min(e, r)
        out.append((s, e))
        s = e
    return out


def _join(
    index: _TupleIndex, k: int, u: np.ndarray, idx: np.ndarray, start: int, end: int,
    cnt: np.ndarray, *, check_columns: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """k-tuples from pairs of rows ``start..end-1`` (left) with later rows of their group.

    Rows are (user ``u``, index ``idx`` in ``S_{k-1}``) sorted by (u, idx); a group is a
    user's tuples with the same first ``k-2`` items.  Returns (user, key in V_k encoding)
    of the joined tuples whose other (k-1)-subtuples are in ``S_{k-1}`` (and, when
    ``check_columns``, whose two last items are of different columns -- within a record
    columns are distinct already).
    """
    c = cnt[start:end]
    total = int(c.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    left = np.repeat(np.arange(start, end, dtype=np.int64), c)
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
    right = left + 1 + offs
    last_prev = index.last(k - 1)
    last_r = last_prev[idx[right]]
    keys = idx[left] * index.m1 + last_r
    ok = np.ones(total, dtype=bool)
    if check_columns:
        ok &= index.col[last_prev[idx[left]]] != index.col[last_r]
    if k >= 3:
        head = index.tuples[k - 1][idx[left]]
        cols = [head[:, j] for j in range(k - 1)] + [last_r]
        for i in range(k - 2):  # the subtuples without one of the shared first k-2 items
            ok &= index.lookup(cols[:i] + cols[i + 1:]) >= 0
    return u[left][ok], keys[ok]


class _UserTuples:
    """Every user's valid k-tuples ``W_u`` (in full), produced chunk by chunk.

    Built from ``held``: the rows (user, index in ``S_{k-1}``) of the (k-1)-tuples of
    ``S_{k-1}`` each record holds.  Chunks end at user boundaries.  Cached when small.
    """

    def __init__(self, index: _TupleIndex, k: int, u: np.ndarray, idx: np.ndarray) -> None:
        self.index, self.k, self.u, self.idx = index, k, u, idx
        group = index.prefix(k - 1)[idx] if k >= 3 else np.zeros(idx.size, np.int64)
        self.cnt = _pairs(u, group)
        cut_ok = np.zeros(u.size, dtype=bool)
        if u.size:
            cut_ok[1:] = u[1:] != u[:-1]
        self.chunks = _row_chunks(self.cnt, cut_ok, _CHUNK_PAIRS)
        self.total = int(self.cnt.sum())
        self._cache: list[tuple[np.ndarray, np.ndarray]] | None = None
        if self.total <= _CACHE_ROWS:
            self._cache = list(self._generate())

    def _generate(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for s, e in self.chunks:
            yield _join(self.index, self.k, self.u, self.idx, s, e, self.cnt,
                        check_columns=False)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return iter(self._cache) if self._cache is not None else self._generate()


def _candidate_chunks(index: _TupleIndex, k: int) -> Iterator[np.ndarray]:
    """Keys of ``V_k`` (apriori join of ``S_{k-1}``), chunk by chunk, in sorted order."""
    m = index.size(k - 1)
    u = np.zeros(m, np.int64)
    idx = np.arange(m, dtype=np.int64)
    group = index.prefix(k - 1) if k >= 3 else np.zeros(m, np.int64)
    cnt = _pairs(u, group)
    for s, e in _row_chunks(cnt, None, _CHUNK_PAIRS):
        yield _join(index, k, u, idx, s, e, cnt, check_columns=True)[1]


def _count_candidates(index: _TupleIndex, k: int, limit: int) -> tuple[int, np.ndarray | None]:
    """``|V_k|`` and, when it is at most ``limit``, the sorted keys of ``V_k``."""
    if k == 2:  # pairs of S_1 items of distinct columns, in closed form
        m1 = index.m1
        per_col = np.bincount(index.col) if m1 else np.zeros(0, np.int64)
        count = m1 * (m1 - 1) // 2 - int((per_col * (per_col - 1) // 2).sum())
        if count > limit:
            return count, None
    parts: list[np.ndarray] = []
    count = 0
    for keys in _candidate_chunks(index, k):
        count += keys.size
        if count <= limit:
            parts.append(keys)
    if count > limit:
        return count, None
    return count, (np.concatenate(parts) if parts else np.zeros(0, np.int64))


def _sample_unheld(
    index: _TupleIndex, k: int, m: int, held_keys: np.ndarray, noise: NoiseSource
) -> np.ndarray:
    """``m`` distinct keys drawn uniformly from ``V_k`` minus ``held_keys`` (sorted), by
    rejection from the apriori join (pairs of ``S_{k-1}`` tuples sharing a prefix)."""
    if m == 0:
        return np.zeros(0, np.int64)
    size = index.size(k - 1)
    group = index.prefix(k - 1) if k >= 3 else np.zeros(size, np.int64)
    new = np.ones(size, dtype=bool)
    new[1:] = group[1:] != group[:-1]
    gstart = np.flatnonzero(new)
    gsize = np.diff(np.append(gstart, size))
    npairs = gsize * (gsize - 1) // 2
    cum = np.cumsum(npairs)
    total = int(cum[-1])
    last = index.last(k - 1)
    found: list[np.ndarray] = []
    have: np.ndarray = np.zeros(0, np.int64)
    batch = max(256, 4 * m)
    while have.size < m:
        r = noise.integers(total, batch).astype(np.int64)
        g = np.searchsorted(cum, r, side="right")
        o = r - (cum[g] - npairs[g])
        gs = gsize[g]
        a = _unrank_pair_row(o, gs)
        b = a + 1 + (o - a * (2 * gs - a - 1) // 2)
        a += gstart[g]
        b += gstart[g]
        keys = a * index.m1 + last[b]
        ok = index.col[last[a]] != index.col[last[b]]
        if k >= 3:
            head = index.tuples[k - 1][a]
            cols = [head[:, j] for j in range(k - 1)] + [last[b]]
            for i in range(k - 2):
                ok &= index.lookup(cols[:i] + cols[i + 1:]) >= 0
        if held_keys.size:
            pos = np.minimum(np.searchsorted(held_keys, keys), held_keys.size - 1)
            ok &= held_keys[pos] != keys
        found.append(keys[ok])
        allkeys = np.concatenate(found)
        _, first = np.unique(allkeys, return_index=True)
        have = allkeys[np.sort(first)]  # distinct, in order of first draw
        batch = min(batch * 2, 1 << 22)
    return np.sort(have[:m])


def _unrank_pair_row(o: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Row ``a`` of pair number ``o`` in the order (0,1), (0,2), ..., (1,2), ... of ``g`` rows."""
    def start(a: np.ndarray) -> np.ndarray:
        return a * (2 * g - a - 1) // 2

    disc = np.maximum((2 * g - 1).astype(np.float64) ** 2 - 8 * o.astype(np.float64), 0.0)
    a = np.floor(((2 * g - 1) - np.sqrt(disc)) / 2).astype(np.int64)
    a = np.clip(a, 0, np.maximum(g - 2, 0))
    for _ in range(3):  # correct the float estimate
        a = np.where(start(a) > o, a - 1, a)
        a = np.where((a + 1 <= g - 2) & (start(a + 1) <= o), a + 1, a)
    return a


def _bounded(u: np.ndarray, per_user: np.ndarray, delta: int, noise: NoiseSource) -> np.ndarray:
    """Mask keeping, for each user with more than ``delta`` rows, ``delta`` uniform ones
    (a uniformly random ``delta``-subset; users with at most ``delta`` rows keep all).

    ``u`` is sorted and holds every row of its users; ``per_user`` counts them.  Users
    with up to ``2 delta`` rows get random priorities and keep their ``delta`` smallest;
    heavier users draw row offsets uniformly with replacement and keep the first
    ``delta`` distinct ones -- no randomness or sorting over all of their rows.
    """
    count = per_user[u]
    keep = count <= delta
    mid = np.flatnonzero((count > delta) & (count <= 2 * delta))
    if mid.size:  # mid rows are grouped by user (u is sorted)
        order = np.lexsort((noise.random(mid.size), u[mid]))
        srt = mid[order]
        keep[srt[_rank_in_group(u[srt]) < delta]] = True
    first = np.ones(u.size, dtype=bool)
    first[1:] = u[1:] != u[:-1]
    starts = np.flatnonzero(first)
    heavy = starts[count[starts] > 2 * delta]  # first row of each heavy user
    if heavy.size:
        sizes = count[heavy]
        draws_u = np.zeros(0, np.int64)  # heavy-user number of each draw, in draw order
        draws_o = np.zeros(0, np.int64)  # offset of each draw within its user's rows
        todo = np.arange(heavy.size)
        while todo.size:
            who = np.repeat(todo, 2 * delta)
            draws_u = np.concatenate([draws_u, who])
            draws_o = np.concatenate([draws_o, _uniform_below(sizes[who], noise)])
            keys = draws_u * int(sizes.max()) + draws_o
            _, first_seen = np.unique(keys, return_index=True)
            distinct = np.sort(first_seen)  # first occurrences, in draw order
            order = np.argsort(draws_u[distinct], kind="stable")
            per = np.bincount(draws_u[distinct], minlength=heavy.size)
            todo = np.flatnonzero(per < delta)
        chosen = distinct[order]
        chosen = chosen[_rank_in_group(draws_u[chosen]) < delta]
        keep[heavy[draws_u[chosen]] + draws_o[chosen]] = True
    return keep


def _rank_in_group(group: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of ``group``."""
    if group.size == 0:
        return np.zeros(0, np.int64)
    first = np.ones(group.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    idx = np.arange(group.size)
    return idx - np.maximum.accumulate(np.where(first, idx, 0))


def _uniform_below(high: np.ndarray, noise: NoiseSource) -> np.ndarray:
    """One uniform integer in ``[0, high[i])`` per entry (53-bit floats, floor)."""
    return np.minimum((noise.random(high.size) * high).astype(np.int64), high - 1)


def _delta_tail(delta: float, bound: int) -> float:
    """``1 - (1 - delta)^(1 / bound)``, the per-item crossing probability of Remark 1.1."""
    return -math.expm1(math.log1p(-delta) / bound)


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Level:
    """``S_k`` and ``H_k``: ``tuples[i]`` (indices into the result's items, increasing) has
    noisy count ``counts[i]``; rows in lexicographic order.

    ``contribution_bound`` = ``Delta_k``, ``threshold`` = ``rho_k`` (output iff the noisy
    count exceeds it), ``noise_scale`` = ``sigma_k sqrt(Delta_k)``, ``candidates`` =
    ``|V_k|`` when it is public (``k >= 2`` without ``no_spurious``), else ``None``: the
    size of a data-dependent universe (``k = 1``, Remark 1.1) is not released.
    """

    k: int
    tuples: np.ndarray
    counts: np.ndarray
    contribution_bound: int = 0
    threshold: float = float("nan")
    candidates: int | None = None
    noise_scale: float = float("nan")
    implicit: bool = False

    def __len__(self) -> int:
        return int(self.counts.size)


@dataclass(eq=False)
class DPMarginalsResult:
    """The release: ``S_1..S_T`` with noisy counts, the extracted items, and the budget.

    ``items[i] = (column, value)`` for the ``i``-th item of ``S_1`` (value ``"1"`` for
    transactional data).  ``timings`` are wall-clock seconds per stage: they depend on
    the data and are not protected, so they are not saved with the release.
    """

    levels: list[Level]
    items: list[tuple[str, str]]
    binary: bool
    budget: dict[str, Any]
    params: dict[str, Any]
    private: bool
    name: str = "records"
    timings: list[dict[str, float]] = field(default_factory=list)

    # -- views ----------------------------------------------------------------------
    @property
    def max_k(self) -> int:
        return len(self.levels)

    def found(self) -> list[int]:
        """``|S_k|`` for ``k = 1..T``."""
        return [len(level) for level in self.levels]

    def label(self, item: int) -> str:
        col, val = self.items[item]
        return col if self.binary else f"{col}={val}"

    def tuples(self, k: int) -> pd.DataFrame:
        """``S_k`` as a table: one row per tuple, its items' labels and its noisy count."""
        level = self._level(k)
        frame = pd.DataFrame({
            f"item{j + 1}": [self.label(i) for i in level.tuples[:, j]] for j in range(k)
        })
        frame["count"] = level.counts
        return frame

    def _level(self, k: int) -> Level:
        if not 1 <= k <= self.max_k:
            raise DPMarginalsError(f"k must be in 1..{self.max_k}, got {k}")
        return self.levels[k - 1]

    def columns(self) -> list[str]:
        """The columns with at least one extracted value."""
        return list(dict.fromkeys(col for col, _ in self.items))

    def count(self, items: Sequence[tuple[str, str] | str]) -> int | None:
        """The noisy count of one tuple given as ``(column, value)`` pairs (or column names
        for transactional data); ``None`` when it was not extracted."""
        ids = sorted(self._item_id(it) for it in items)
        if not ids or None in ids:
            return None
        level = self._level(len(ids))
        hit = np.flatnonzero((level.tuples == np.asarray(ids)).all(axis=1))
        return int(level.counts[hit[0]]) if hit.size else None

    def _item_id(self, item: tuple[str, str] | str) -> int | None:
        key = (item, "1") if isinstance(item, str) else (str(item[0]), str(item[1]))
        lookup = getattr(self, "_ids", None)
        if lookup is None:
            lookup = {it: i for i, it in enumerate(self.items)}
            self._ids = lookup
        return lookup.get(key)

    def marginal(self, columns: Sequence[str], n: int) -> MarginalTable:
        """The marginal table over ``columns`` (at most ``T`` of them) from the noisy counts.

        Each column's values are index 0 = "empty or a value not extracted" and then its
        extracted values in the order of :meth:`values`.  Cells follow by
        inclusion–exclusion from the counts of the extracted tuples (a tuple not extracted
        counts 0); ``n`` is the number of records, which the release does not contain
        (pass a public figure or your own DP estimate).  Negative cells are clipped to 0
        and the table is normalised.
        """
        cols = list(columns)
        if not 1 <= len(cols) <= self.max_k:
            raise DPMarginalsError(f"a marginal needs 1..{self.max_k} columns, got {len(cols)}")
        if len(set(cols)) != len(cols):
            raise DPMarginalsError(f"columns repeat in {cols}")
        known = set(self.columns())
        for c in cols:
            if c not in known:
                raise DPMarginalsError(
                    f"column {c!r} has no extracted value; extracted columns: {sorted(known)}"
                )
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        ids = [[i for i, it in enumerate(self.items) if it[0] == c] for c in cols]
        shape = tuple(len(v) + 1 for v in ids)
        upward = np.zeros(shape, dtype=np.float64)  # index 0 = "any value" on that axis
        lookup = [{tuple(t): int(c) for t, c in zip(lv.tuples.tolist(), lv.counts.tolist(),
                                                   strict=True)}
                  for lv in self.levels[: len(cols)]]
        for cell in np.ndindex(*shape):
            chosen = tuple(sorted(ids[a][v - 1] for a, v in enumerate(cell) if v > 0))
            upward[cell] = lookup[len(chosen) - 1].get(chosen, 0) if chosen else n
        exact = upward.copy()
        for axis in range(len(cols)):  # "other" = any value minus the extracted ones
            moved = np.moveaxis(exact, axis, 0)
            moved[0] = moved[0] - moved[1:].sum(axis=0)
        exact = np.clip(exact, 0.0, None)
        total = exact.sum()
        values = exact / total if total > 0 else np.full(shape, 1.0 / exact.size)
        return MarginalTable(Domain(tuple(cols), shape), values)

    def values(self, column: str) -> list[str]:
        """Labels of ``column``'s marginal axis: ``"(other)"`` then the extracted values."""
        return ["(other)"] + [v for c, v in self.items if c == column]

    # -- persistence ----------------------------------------------------------------
    def tuple_counts(self, columns: Sequence[str]) -> pd.DataFrame:
        """The extracted tuples over exactly ``columns`` (one value each), with their noisy
        counts: what the release says about those columns.  Tuples not listed were not
        extracted (their count is below the release's threshold, or they do not occur)."""
        cols = list(columns)
        level = self._level(len(cols))
        for c in cols:
            if c not in self.columns():
                raise DPMarginalsError(f"column {c!r} has no extracted value; extracted "
                                       f"columns: {sorted(self.columns())[:20]}")
        item_cols = np.asarray([col for col, _ in self.items], dtype=object)
        held = item_cols[level.tuples] if len(level) else np.empty((0, len(cols)), object)
        rows = [r for r in range(len(level)) if sorted(held[r]) == sorted(cols)]
        frame = pd.DataFrame({c: [next(self.items[i][1] for i in level.tuples[r]
                                       if self.items[i][0] == c) for r in rows] for c in cols})
        frame["count"] = level.counts[rows]
        return frame

    @property
    def provenance(self) -> Provenance:
        """The privacy mark saved with the release."""
        if self.private:
            return Provenance(True, "central", "dp_marginals", float(self.budget["epsilon"]),
                              delta=float(self.budget["delta"]), unit=CENTRAL_UNIT,
                              randomness="OpenDP's discrete Gaussian sampler")
        return Provenance.simulation("dp_marginals", "central", float(self.budget["epsilon"]),
                                     "seeded simulation: numpy noise, not OpenDP's; do not "
                                     "publish it", delta=float(self.budget["delta"]),
                                     unit=CENTRAL_UNIT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RELEASE_FORMAT,
            "privacy": self.provenance.to_dict(),
            "method": "dp-marginals (Gopi-Mahabadi-Yekhanin)",
            # the data file's name is not part of a private release
            **({} if self.private else {"name": self.name}),
            "private": self.private,
            "binary": self.binary,
            "budget": self.budget,
            "params": self.params,
            "items": [list(it) for it in self.items],
            "levels": [
                {"k": lv.k, "contribution_bound": lv.contribution_bound,
                 "threshold": _finite(lv.threshold), "candidates": lv.candidates,
                 "noise_scale": _finite(lv.noise_scale), "implicit": lv.implicit,
                 "tuples": lv.tuples.tolist(), "counts": lv.counts.tolist()}
                for lv in self.levels
            ],
        }

    def save(self, path: str | Path) -> None:
        try:
            Path(path).write_text(json.dumps(self.to_dict()))
        except OSError as exc:
            raise DPMarginalsError(f"cannot write {str(path)!r}: "
                                   f"{describe_os_error(exc, path)}") from None

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> DPMarginalsResult:
        levels = [
            Level(k=int(lv["k"]),
                  tuples=np.asarray(lv["tuples"], dtype=np.int64).reshape(-1, int(lv["k"])),
                  counts=np.asarray(lv["counts"], dtype=np.int64),
                  contribution_bound=int(lv["contribution_bound"]),
                  threshold=_num(lv["threshold"]), candidates=lv["candidates"],
                  noise_scale=_num(lv["noise_scale"]), implicit=bool(lv["implicit"]))
            for lv in spec["levels"]
        ]
        return cls(levels, [tuple(it) for it in spec["items"]], bool(spec["binary"]),
                   spec["budget"], spec["params"], bool(spec["private"]),
                   spec.get("name", "records"))

    @classmethod
    def load(cls, path: str | Path) -> DPMarginalsResult:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError) as exc:
            raise DPMarginalsError(f"cannot load a DP marginals result from {str(path)!r}: "
                                   f"{exc}") from None


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


# -- the algorithm ----------------------------------------------------------------------
class DPMarginals:
    """``(epsilon, delta)``-DP extraction of frequent k-tuples, ``k = 1..max_k``.

    Parameters (Algorithm 1): ``max_k`` = ``T``; ``eta`` = target fraction of spurious
    tuples; ``percentile`` = ``Q`` (0 < Q <= 100).  ``quantile_fraction`` of the zCDP
    budget goes to the percentiles (Remark 1.2: 10%).  ``accountant``: ``"zcdp"``
    (Theorem 1.1 with the correct conversion) or ``"rdp"`` (Google's dp-accounting; less
    noise for the same guarantee).  ``no_spurious``: Remark 1.1's variant.
    ``max_contribution``: the largest ``Delta_k`` the percentile may choose.
    ``max_materialized``: above this many candidates ``V_k`` is not materialised.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        max_k: int = 3,
        eta: float = 0.1,
        percentile: float = 99.0,
        *,
        quantile_fraction: float = 0.1,
        accountant: str = "zcdp",
        no_spurious: bool = False,
        max_contribution: int = 1000,
        max_materialized: int = 1 << 20,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if isinstance(max_k, bool) or not isinstance(max_k, int | np.integer) or max_k < 1:
            raise DPMarginalsError(f"max_k (T) must be a whole number >= 1, got {max_k!r}")
        self.max_k = int(max_k)
        if not 0.0 < float(eta) < 1.0:
            raise DPMarginalsError(f"eta must be in (0, 1), got {eta!r}")
        self.eta = float(eta)
        if not 0.0 < float(percentile) <= 100.0:
            raise DPMarginalsError(f"percentile must be in (0, 100], got {percentile!r}")
        self.percentile = float(percentile)
        if int(max_contribution) < 1:
            raise DPMarginalsError(f"max_contribution must be >= 1, got {max_contribution!r}")
        self.max_contribution = int(max_contribution)
        self.max_materialized = int(max_materialized)
        self.no_spurious = bool(no_spurious)
        self.budget: PrivacyBudget = plan_budget(
            self.epsilon, self.delta, self.max_k,
            quantile_fraction=quantile_fraction, accountant=accountant,
        )

    def params(self) -> dict[str, Any]:
        return {"max_k": self.max_k, "eta": self.eta, "percentile": self.percentile,
                "no_spurious": self.no_spurious, "max_contribution": self.max_contribution}

    def fit(
        self,
        data: SparseRecords | pd.DataFrame | str | Path,
        *,
        rng: RNGLike = None,
        simulation: bool = False,
        engine: str = "numpy",
        spark: Any = None,
        threads: int | None = None,
    ) -> DPMarginalsResult:
        """Run Algorithm 1 on ``data`` (records, a table with NaN for empty, a file, or a
        records directory of :func:`dpmarginals.engines.parquet.write_records`).

        ``rng=None`` is the private release (OpenDP noise, OS randomness).  A seed is only
        accepted with ``simulation=True``: a non-private, reproducible simulation.

        ``engine`` runs the counting passes (per-user tuple counts, contribution bounding,
        the histograms, the apriori join of each user's tuples): ``"numpy"`` in memory
        (default), ``"duckdb"`` (out of core; a records directory is scanned from its
        Parquet files) or ``"spark"`` (``spark``: a SparkSession, default the active one;
        needs the ``spark`` extra).  Noise, thresholds and candidates stay on the driver.
        The SQL engines bound contributions by a keyed hash (:func:`dpmarginals.engines.
        base.priority`) instead of numpy's random draws, so with the same seed they agree
        with each other exactly, and with numpy exactly when no user exceeds ``Delta_k``.
        """
        noise = noise_source(rng, simulation=simulation)
        if engine == "numpy":
            records: Any = as_records(data)
            counter: TupleCounter = _MemoryCounter(records)
        else:
            records, counter = tuple_counter(data, engine, spark=spark, threads=threads)
        runner = _Run(self, records, noise, counter)
        levels = runner.run()
        items = [(records.columns[int(records.item_column[i])], records.item_value_label(int(i)))
                 for i in runner.s1_items]
        return DPMarginalsResult(
            levels=levels, items=items, binary=records.binary,
            budget=self.budget.to_dict(), params=self.params(), private=noise.private,
            name=records.name, timings=runner.timings,
        )


class TupleCounter(Protocol):
    """The counting passes of Algorithm 1, over records that may not fit in memory.

    ``sizes(k, index, cap)`` builds every user's valid k-tuples ``W_u`` (from her held
    (k-1)-tuples of ``S_{k-1}``; the record's items for ``k = 1``) and returns ``|W_u|``
    for every user (entries may be clipped at ``cap``; order free).  ``kept(k, delta,
    noise)`` bounds each user to ``delta`` tuples and returns the distinct kept keys
    (sorted; item ids for ``k = 1``, ``V_k`` keys otherwise) with their counts.
    ``advance(k, index, s1_items)`` makes each user's held tuples those of ``S_k``.
    Implementations: :class:`_MemoryCounter` (numpy, the default) and the DuckDB and
    Spark counters of :mod:`dpmarginals.engines`.
    """

    def sizes(self, k: int, index: _TupleIndex | None, cap: int) -> np.ndarray: ...

    def kept(self, k: int, delta: int, noise: NoiseSource) -> tuple[np.ndarray, np.ndarray]: ...

    def advance(self, k: int, index: _TupleIndex, s1_items: np.ndarray) -> None: ...

    def close(self) -> None: ...


class _MemoryCounter:
    """The in-memory (numpy) counting passes over :class:`SparseRecords`."""

    def __init__(self, records: SparseRecords) -> None:
        self.records = records
        self.n = records.n
        self.held_u = np.zeros(0, np.int64)
        self.held_idx = np.zeros(0, np.int64)
        self.users: _UserTuples | None = None
        self.per_user = np.zeros(0, np.int64)

    def sizes(self, k: int, index: _TupleIndex | None, cap: int) -> np.ndarray:
        if k == 1:
            self.per_user = self.records.lengths()
            return self.per_user
        assert index is not None
        self.users = _UserTuples(index, k, self.held_u, self.held_idx)
        sizes = np.zeros(self.n, np.int64)
        for cu, _ in self.users:
            sizes += np.bincount(cu, minlength=self.n)
        self.per_user = sizes
        return sizes

    def kept(self, k: int, delta: int, noise: NoiseSource) -> tuple[np.ndarray, np.ndarray]:
        if k == 1:
            keep = _bounded(self.records.rows(), self.per_user, delta, noise)
            hist = np.bincount(self.records.items[keep], minlength=self.records.n_items)
            keys = np.flatnonzero(hist)
            return keys, hist[keys]
        assert self.users is not None
        kept = [ck[_bounded(cu, self.per_user, delta, noise)] for cu, ck in self.users]
        kept_keys = np.concatenate(kept) if kept else np.zeros(0, np.int64)
        return np.unique(kept_keys, return_counts=True)

    def advance(self, k: int, index: _TupleIndex, s1_items: np.ndarray) -> None:
        if k == 1:
            rank = np.full(self.records.n_items, -1, np.int64)
            rank[s1_items] = np.arange(s1_items.size)
            r = rank[self.records.items]
            self.held_u, self.held_idx = self.records.rows()[r >= 0], r[r >= 0]
            return
        assert self.users is not None
        out_map = index.maps[k]
        assert out_map is not None
        nu, ni = [], []
        for cu, ck in self.users:
            pos = out_map.find(ck)
            hit = pos >= 0
            nu.append(cu[hit])
            ni.append(pos[hit])
        self.held_u = np.concatenate(nu) if nu else np.zeros(0, np.int64)
        self.held_idx = np.concatenate(ni) if ni else np.zeros(0, np.int64)

    def close(self) -> None:
        self.users = None


class _Run:
    """One execution of Algorithm 1 (state shared by the stages)."""

    def __init__(self, algo: DPMarginals, records: Any, noise: NoiseSource,
                 counter: TupleCounter) -> None:
        self.algo = algo
        self.records = records  # SparseRecords or a RecordsTable: n, columns, item_column
        self.noise = noise
        self.counter = counter
        self.budget = algo.budget
        self.timings: list[dict[str, float]] = []
        self.s1_items = np.zeros(0, np.int64)

    def _upper(self, k: int) -> int:
        """Largest candidate ``Delta_k``: ``max_contribution``, or ``C(d, k)`` for a table
        with ``d`` columns (its schema is public and no record has more k-tuples)."""
        upper = self.algo.max_contribution
        if not self.records.binary:
            upper = max(1, min(upper, math.comb(len(self.records.columns), k)))
        return upper

    def _delta_k(self, k: int, index: _TupleIndex | None) -> int:
        """``Delta_k``: the DP percentile of the users' numbers of valid k-tuples."""
        upper = self._upper(k)
        sizes = self.counter.sizes(k, index, upper + 1)
        return self.noise.percentile(sizes, self.algo.percentile, self.budget.epsilon_q, upper)

    def _set_union_threshold(self, scale: float, bound: int) -> float:
        """``rho = 1 + t``: a count-1 item crosses it with prob. <= 1 - (1 - d)^(1/Delta)."""
        d = self.budget.delta_threshold / (self.algo.max_k if self.algo.no_spurious else 1)
        return 1.0 + dg_threshold(_delta_tail(d, bound), scale)

    def run(self) -> list[Level]:
        try:
            return self._run()
        finally:
            self.counter.close()

    def _run(self) -> list[Level]:
        T = self.algo.max_k
        clock = time.perf_counter()
        # -- k = 1 ------------------------------------------------------------------------
        d1 = self._delta_k(1, None)
        t_pct = time.perf_counter()
        omega, hist = self.counter.kept(1, d1, self.noise)
        t_count = time.perf_counter()
        scale = self.budget.sigmas[0] * math.sqrt(d1)
        rho = self._set_union_threshold(scale, d1)
        noisy = self.noise.add_discrete_gaussian(hist, scale)
        sel = noisy > rho
        self.s1_items = np.asarray(omega, np.int64)[sel]
        levels = [Level(1, np.arange(int(sel.sum()), dtype=np.int64)[:, None], noisy[sel],
                        d1, rho, None, scale, False)]
        t_noise = time.perf_counter()
        self.timings.append({"candidates": 0.0, "percentile": t_pct - clock,
                             "bounding": t_count - t_pct, "noise": t_noise - t_count,
                             "total": t_noise - clock})
        # compact ids: rank in S_1
        index = _TupleIndex(self.records.item_column[self.s1_items])
        if T >= 2 and index.size(1) >= 2:
            self.counter.advance(1, index, self.s1_items)
        # -- k = 2..T ---------------------------------------------------------------------
        for k in range(2, T + 1):
            clock = time.perf_counter()
            if index.size(k - 1) < 2:
                levels.extend(_empty(j) for j in range(k, T + 1))
                self.timings.extend({"total": 0.0} for _ in range(k, T + 1))
                break
            levels.append(self._stage(k, index))
            self.timings[-1]["total"] = time.perf_counter() - clock
        return levels

    def _stage(self, k: int, index: _TupleIndex) -> Level:
        algo, noise = self.algo, self.noise
        t0 = time.perf_counter()
        n_prev = index.size(k - 1)
        if algo.no_spurious:
            n_cand, cand_keys = 0, None
        else:
            n_cand, cand_keys = _count_candidates(index, k, algo.max_materialized)
        t1 = time.perf_counter()
        dk = self._delta_k(k, index)
        t2 = time.perf_counter()
        kept_keys, kept_counts = self.counter.kept(k, dk, noise)
        t3 = time.perf_counter()
        scale = self.budget.sigmas[k - 1] * math.sqrt(dk)
        implicit = False
        if algo.no_spurious:
            n_cand = int(kept_keys.size)
            rho = self._set_union_threshold(scale, dk)
            noisy = noise.add_discrete_gaussian(kept_counts, scale)
            sel = noisy > rho
            out_keys, out_counts = kept_keys[sel], noisy[sel]
        elif n_cand == 0:
            rho, out_keys, out_counts = float("nan"), np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            rho = float(dg_threshold(algo.eta * min(1.0, n_prev / n_cand), scale))
            if cand_keys is not None:  # V_k materialised: noise on every candidate
                hist = np.zeros(cand_keys.size, np.int64)
                hist[_KeyMap(cand_keys, index.key_space(k)).find(kept_keys)] = kept_counts
                noisy = noise.add_discrete_gaussian(hist, scale)
                sel = noisy > rho
                out_keys, out_counts = cand_keys[sel], noisy[sel]
            else:  # implicit: noise on held candidates, unheld ones sampled in aggregate
                implicit = True
                held_keys = kept_keys
                noisy = noise.add_discrete_gaussian(kept_counts, scale)
                sel = noisy > rho
                n0 = n_cand - int(held_keys.size)
                m = sample_binomial(n0, dg_sf(int(rho), scale), float(noise.random(1)[0]))
                zero_keys = _sample_unheld(index, k, m, held_keys, noise)
                zero_vals = sample_dg_tail(int(rho), scale, noise.random(m))
                out_keys = np.concatenate([held_keys[sel], zero_keys])
                out_counts = np.concatenate([noisy[sel], zero_vals])
                order = np.argsort(out_keys, kind="stable")
                out_keys, out_counts = out_keys[order], out_counts[order]
        index.add_level(out_keys)
        t4 = time.perf_counter()
        # the next stage starts from the tuples of S_k each record holds (all of them)
        if out_keys.size >= 2 and k < algo.max_k:
            self.counter.advance(k, index, self.s1_items)
        self.timings.append({"candidates": t1 - t0, "percentile": t2 - t1,
                             "bounding": t3 - t2, "noise": t4 - t3,
                             "total": 0.0, "next": time.perf_counter() - t4})
        return Level(k, index.tuples[k].copy(), np.asarray(out_counts, np.int64), dk,
                     rho, None if algo.no_spurious else int(n_cand), scale, implicit)


def _empty(k: int) -> Level:
    return Level(k, np.zeros((0, k), np.int64), np.zeros(0, np.int64))


# -- non-private evaluation ---------------------------------------------------------------
def true_counts(result: DPMarginalsResult, records: SparseRecords) -> list[np.ndarray]:
    """NON-PRIVATE evaluation aid: for each extracted tuple, how many records hold it.

    Computed from the raw input, so it is *not* differentially private: use it to evaluate
    a release (spurious tuples have true count 0), never publish it.
    """
    s1 = _record_item_ids(result, records)
    if (s1 < 0).any():
        raise DPMarginalsError("the result has items that the records do not have")
    index = _TupleIndex(records.item_column[s1] if s1.size else np.zeros(0, np.int64))
    rank = np.full(records.n_items, -1, np.int64)
    rank[s1] = np.arange(s1.size)
    r = rank[records.items]
    u = records.rows()[r >= 0]
    idx = r[r >= 0]
    out = [np.bincount(idx, minlength=s1.size).astype(np.int64)]
    for k in range(2, result.max_k + 1):
        level = result.levels[k - 1]
        if len(level) == 0 or index.size(k - 1) < 2:
            out.extend(np.zeros(len(result.levels[j - 1]), np.int64)
                       for j in range(k, result.max_k + 1))
            break
        keys = level.tuples[:, -1] + index.m1 * index.lookup(level.tuples[:, :-1])
        index.add_level(keys)
        counts = np.zeros(keys.size, np.int64)
        nu, ni = [], []
        level_map = index.maps[k]
        assert level_map is not None
        for cu, ck in _UserTuples(index, k, u, idx):
            pos = level_map.find(ck)
            hit = pos >= 0
            counts += np.bincount(pos[hit], minlength=keys.size)
            nu.append(cu[hit])
            ni.append(pos[hit])
        out.append(counts)
        u = np.concatenate(nu) if nu else np.zeros(0, np.int64)
        idx = np.concatenate(ni) if ni else np.zeros(0, np.int64)
    return out


def _record_item_ids(result: DPMarginalsResult, records: SparseRecords) -> np.ndarray:
    """The records' item id of each of the result's items (-1 when absent)."""
    if not result.items:
        return np.zeros(0, np.int64)
    col_idx = pd.Index(records.columns).get_indexer([c for c, _ in result.items])
    if records.binary:  # one item per column, item id = column index
        ok = col_idx >= 0
        out = np.full(col_idx.size, -1, np.int64)
        out[ok] = col_idx[ok]
        return out
    wanted = np.flatnonzero(np.isin(records.item_column, col_idx[col_idx >= 0]))
    ids = {(int(records.item_column[i]), records.item_value_label(int(i))): int(i)
           for i in wanted}
    return np.asarray([ids.get((int(c), v), -1) for c, (_, v) in
                       zip(col_idx, result.items, strict=True)], dtype=np.int64)


def spurious_fraction(result: DPMarginalsResult, records: SparseRecords) -> list[float]:
    """NON-PRIVATE evaluation aid: per ``k``, the fraction of extracted tuples that no
    record holds (0.0 when nothing was extracted)."""
    return [float((c == 0).mean()) if c.size else 0.0 for c in true_counts(result, records)]


def tuple_counter(data: Any, engine: str, *, spark: Any = None,
                  threads: int | None = None) -> tuple[Any, Any]:
    """``(records metadata, counter)`` for the central-DP extraction on a SQL engine.

    ``data``: a records directory (:func:`~dpmarginals.engines.parquet.write_records`;
    its entries are scanned by the engine and never loaded by Python), or anything
    ``DPMarginals.fit`` reads in memory (records, a DataFrame, a file).
    """
    from ..engines import check_engine
    from ..engines.parquet import is_records_dir, open_records

    engine = check_engine(engine)

    local_dir = isinstance(data, str | Path) and is_records_dir(data)
    if engine == "spark":
        from ..engines.spark_engine import SparkTupleCounter

        counter = SparkTupleCounter(data, spark=spark)
        return counter.records, counter
    if engine == "duckdb":
        from ..engines.duckdb_engine import DuckDBTupleCounter

        records = open_records(data) if local_dir else as_records(data)
        return records, DuckDBTupleCounter(records, threads=threads)
    records = as_records(data)
    return records, _MemoryCounter(records)
