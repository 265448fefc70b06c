"""The counting passes of the central-DP k-tuple extraction (:mod:`.dp_marginals`): the
tuple index ``S_1..S_k``, the users' valid tuples ``W_u`` built inside each record,
contribution bounding, the candidates no user holds, and the in-memory counter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from ..datasets.sparse import SparseRecords
from .noise import (
    NoiseSource,
)

__all__ = ["TupleCounter"]

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
