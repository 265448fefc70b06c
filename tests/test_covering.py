"""Covering designs and balanced families (dpmarginals.planning.covering)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.planning.covering import (
    _from_designs,
    _steiner_systems,
    balanced_subsets,
    cover_design,
    covering_number_bound,
    covering_size,
    is_covering,
)

SMALL = [
    (d, k, l)
    for d in range(1, 11)
    for k in range(1, d + 1)
    for l in range(k, d + 1)
    if math.comb(d, l) * math.comb(l, k) <= 20_000
]
LARGER = [(12, 3, 5), (12, 4, 6), (16, 3, 4), (16, 3, 5), (16, 4, 5), (20, 3, 4), (13, 2, 4)]


def _check(d: int, k: int, l: int) -> list[tuple[int, ...]]:
    blocks = cover_design(d, k, l)
    assert blocks is not None
    assert all(len(b) == l and len(set(b)) == l for b in blocks)
    assert all(0 <= a < d for b in blocks for a in b)
    assert len(set(blocks)) == len(blocks)
    assert is_covering(blocks, d, k)
    assert len(blocks) >= covering_number_bound(d, k, l)
    assert covering_size(d, k, l) == len(blocks)
    return blocks


@pytest.mark.parametrize(("d", "k", "l"), SMALL + LARGER)
def test_cover_design_is_a_covering(d: int, k: int, l: int) -> None:
    _check(d, k, l)


def test_paper_example_c_8_4_3_is_14() -> None:
    # CALM §4.3: 14 4-way marginals cover all 3-way marginals of 8 attributes (an SQS(8)).
    blocks = _check(8, 3, 4)
    assert len(blocks) == 14 == covering_number_bound(8, 3, 4)
    # Steiner: every triple in exactly one block
    counts = {t: 0 for t in combinations(range(8), 3)}
    for b in blocks:
        for t in combinations(b, 3):
            counts[t] += 1
    assert set(counts.values()) == {1}


@pytest.mark.parametrize(
    ("d", "k", "l", "size"),
    [
        (8, 3, 3, 56),  # C(v, k, k) = C(v, k)
        (9, 4, 4, 126),
        (8, 3, 8, 1),  # l = d: one block
        (20, 5, 20, 1),
        (16, 3, 4, 140),  # SQS(16)
        (32, 3, 4, 1240),  # SQS(32), meets the Schönheim bound
        (10, 3, 4, 30),  # SQS(10), the inversive plane of order 3
        (17, 3, 5, 68),  # inversive plane of order 4
        (26, 3, 6, 130),  # inversive plane of order 5
        (7, 2, 3, 7),  # Fano plane
        (15, 2, 3, 35),  # STS(15), derived from SQS(16)
        (13, 2, 4, 13),  # PG(2, 3)
        (16, 2, 4, 20),  # AG(2, 4)
        (21, 2, 5, 21),  # PG(2, 4)
        (25, 2, 5, 30),  # AG(2, 5)
        (31, 2, 6, 31),  # PG(2, 5)
        (10, 1, 3, 4),  # ceil(d / l)
        (9, 4, 8, 5),  # l = d - 1: k + 1 blocks
        (10, 4, 8, 5),  # l = d - 2: Turán, 10 - 4 - 1 = 5 parts of size 2 -> 5 pairs
        (11, 3, 9, 4),  # 7 parts of sizes 2,2,2,2,1,1,1 -> 4 pairs
    ],
)
def test_known_sizes(d: int, k: int, l: int, size: int) -> None:
    blocks = cover_design(d, k, l)
    assert blocks is not None
    assert len(blocks) == size
    assert is_covering(blocks, d, k)


def test_algebraic_steiner_systems() -> None:
    # every built-in design is a Steiner system S(k, l, v): each k-set in exactly one block
    systems = _steiner_systems()
    assert len(systems) >= 12
    for v, k, l, blocks in systems:
        assert all(len(b) == l and len(set(b)) == l for b in blocks)
        assert is_covering(blocks, v, k)
        seen: dict[tuple[int, ...], int] = {}
        for b in blocks:
            for t in combinations(b, k):
                seen[t] = seen.get(t, 0) + 1
        assert set(seen.values()) == {1}
        assert len(blocks) == math.comb(v, k) // math.comb(l, k) == covering_number_bound(v, k, l)


def test_restricted_designs_cover() -> None:
    for d, k, l in [(12, 3, 4), (11, 3, 4), (24, 3, 4), (14, 3, 5), (22, 3, 6), (12, 2, 4),
                    (20, 2, 5), (28, 2, 6)]:
        for blocks in _from_designs(d, k, l):
            assert is_covering(blocks, d, k)
            assert all(len(b) == l for b in blocks)
        _check(d, k, l)


def test_turan_construction_is_optimal() -> None:
    # l = d - 2: sizes equal the Turán numbers; checked against brute force for d = 6.
    for k in range(1, 5):
        blocks = cover_design(6, k, 4)
        assert blocks is not None and is_covering(blocks, 6, k)
        best = next(
            size
            for size in range(1, 16)
            if any(
                is_covering([tuple(a for a in range(6) if a not in p) for p in pairs], 6, k)
                for pairs in combinations(list(combinations(range(6), 2)), size)
            )
        )
        assert len(blocks) == best


def test_meets_schonheim_where_it_should() -> None:
    for d, k, l in [(8, 2, 3), (9, 2, 3), (8, 2, 4), (7, 2, 3), (16, 3, 4), (16, 2, 3),
                    (22, 2, 5), (9, 3, 4)]:
        assert covering_size(d, k, l) == covering_number_bound(d, k, l)


def test_large_d32_k3_l4() -> None:
    blocks = _check(32, 3, 4)
    assert len(blocks) == 1240


def test_large_d16_k6_l7() -> None:
    blocks = _check(16, 6, 7)
    assert len(blocks) <= 1.4 * covering_number_bound(16, 6, 7)


def test_schonheim_values() -> None:
    assert covering_number_bound(8, 3, 4) == 14
    assert covering_number_bound(10, 3, 4) == 30
    assert covering_number_bound(7, 2, 3) == 7
    assert covering_number_bound(8, 3, 3) == 56
    assert covering_number_bound(12, 1, 5) == 3
    assert covering_number_bound(6, 3, 6) == 1


def test_max_blocks_budget() -> None:
    assert cover_design(8, 3, 4, max_blocks=14) is not None
    assert cover_design(8, 3, 4, max_blocks=13) is None
    assert covering_size(8, 3, 4, max_blocks=13) is None
    assert covering_size(8, 3, 4, max_blocks=14) == 14
    # the Schönheim bound alone rules these out, without any construction
    assert covering_size(32, 8, 9, max_blocks=1000) is None
    assert cover_design(32, 6, 7, max_blocks=262) is None


def test_deterministic_and_relabelled() -> None:
    a = cover_design(12, 3, 5)
    assert a == cover_design(12, 3, 5)
    b = cover_design(12, 3, 5, rng=7)
    c = cover_design(12, 3, 5, rng=7)
    assert b == c and b is not None and a is not None
    assert len(b) == len(a) and is_covering(b, 12, 3)


def test_is_covering() -> None:
    assert is_covering([(0, 1, 2)], 3, 2)
    assert not is_covering([(0, 1), (1, 2)], 3, 2)
    assert not is_covering([(0, 1, 5)], 3, 2)  # element out of range
    assert is_covering([(0, 1, 2, 3), (0, 4)], 5, 2) is False
    assert is_covering([[0, 1, 2], [2, 3], [0, 3], [1, 3]], 4, 2)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((8, 4, 3), "l"),  # l < k
        ((8, 9, 9), "k"),
        ((8, 3, 9), "l"),
        ((0, 1, 1), "d"),
        ((8, 0, 3), "k"),
        ((8.0, 3, 4), "d"),
        ((8, True, 4), "k"),
    ],
)
def test_cover_design_validation(args: tuple, field: str) -> None:
    with pytest.raises(DPMarginalsError, match=field):
        cover_design(*args)
    with pytest.raises(DPMarginalsError, match=field):
        covering_number_bound(*args)


@pytest.mark.parametrize(
    ("d", "l", "m"),
    [(8, 2, 28), (8, 2, 27), (16, 2, 65), (16, 3, 262), (32, 2, 65), (32, 3, 262),
     (5, 3, 9), (7, 3, 1), (6, 6, 1), (10, 4, 200), (12, 5, 700)],
)
def test_balanced_subsets(d: int, l: int, m: int) -> None:
    blocks = balanced_subsets(d, l, m)
    assert len(blocks) == m == len(set(blocks))
    assert all(len(b) == l and len(set(b)) == l and all(0 <= a < d for a in b) for b in blocks)
    counts = np.bincount(np.array(blocks).ravel(), minlength=d)
    assert counts.max() - counts.min() <= 1
    assert blocks == balanced_subsets(d, l, m)  # deterministic
    assert balanced_subsets(d, l, m, rng=3) == balanced_subsets(d, l, m, rng=3)


def test_balanced_subsets_spreads_pairs() -> None:
    blocks = balanced_subsets(16, 3, 262)
    pairs = np.zeros((16, 16), dtype=int)
    for b in blocks:
        for i, j in combinations(b, 2):
            pairs[i, j] += 1
    upper = pairs[np.triu_indices(16, 1)]
    # 786 pair slots over 120 pairs: 6.55 on average
    assert upper.max() - upper.min() <= 2


def test_balanced_subsets_validation() -> None:
    with pytest.raises(DPMarginalsError, match="m"):
        balanced_subsets(4, 2, 7)
    with pytest.raises(DPMarginalsError, match="l"):
        balanced_subsets(4, 5, 1)
    with pytest.raises(DPMarginalsError, match="d"):
        balanced_subsets(0, 1, 1)
    assert balanced_subsets(4, 2, 0) == []
