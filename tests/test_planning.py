"""CALM's error model and Algorithm 1 (dpmarginals.planning.error_model)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.planning.covering import is_covering
from dpmarginals.planning.error_model import (
    MarginalChoice,
    choose_marginals,
    expected_cells,
    noise_error,
    sampling_error,
    select_marginals,
)

N16, N18 = 2**16, 2**18
EPS_GRID = [round(0.2 * i, 1) for i in range(1, 11)]


def _truncated(x: float) -> float:
    """The paper prints these errors truncated (not rounded) to 5 decimals."""
    return math.floor(x * 1e5 + 1e-9) / 1e5


# ---- CALM §4.3 worked example: n = 2^16, d = 8, k = 3 ----------------------------------


def test_paper_example_eps_2() -> None:
    c = choose_marginals(N16, 8, 2.0, 3)
    assert (c.l, c.m) == (4, 14)
    assert c.covers
    assert _truncated(c.noise_error) == 0.00076
    assert _truncated(c.sampling_error) == 0.00021


@pytest.mark.parametrize("eps", [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4])
def test_paper_example_small_eps_gives_l2(eps: float) -> None:
    assert choose_marginals(N16, 8, eps, 3).l == 2


def test_paper_example_printed_errors() -> None:
    # "when l = 3 ... max(NE = 0.00032, SE = 0.00085); when l = 4 ... max(NE = 0.00076,
    # SE = 0.00021)" -- NE there is k * NE.
    assert _truncated(3 * noise_error(N16, 8, 2.0, 3)) == 0.00032
    assert _truncated(3 * noise_error(N16, 8, 2.0, 4)) == 0.00076
    assert _truncated(sampling_error(N16, 14)) == 0.00021
    assert _truncated(sampling_error(N16, 56)) == 0.00085
    # Figure 3: l = 3 and 4 are below theta at eps = 2, l = 5 is not
    assert 3 * noise_error(N16, 8, 2.0, 5) > 1e-3


# ---- the reconstruction of Table 2 (notes §6), binary, theta = 1e-3 --------------------

TABLE2 = {
    (N16, 8, 3): {**{e: (2, 28) for e in EPS_GRID[:7]}, 1.6: (3, 56), 1.8: (3, 56),
                  2.0: (4, 14)},
    (N16, 16, 3): {**{e: (2, 65) for e in EPS_GRID[:8]}, 1.8: (3, 65), 2.0: (3, 65)},
    (N16, 32, 3): {e: (2, 65) for e in EPS_GRID},
    (N18, 16, 6): {**{e: (2, 120) for e in EPS_GRID[:7]}, 1.6: (3, 262), 1.8: (3, 262),
                   2.0: (4, 262)},
    (N18, 32, 6): {**{e: (2, 262) for e in EPS_GRID[:8]}, 1.8: (3, 262), 2.0: (3, 262)},
    (N18, 32, 8): {**{e: (2, 262) for e in EPS_GRID[:9]}, 2.0: (3, 262)},
}


@pytest.mark.parametrize("setting", list(TABLE2))
def test_table2_reconstruction(setting: tuple[int, int, int]) -> None:
    n, d, k = setting
    got = {}
    for eps in EPS_GRID:
        c = choose_marginals(n, d, eps, k)
        got[eps] = (c.l, c.m)
    assert got == TABLE2[setting]


def test_section_5_6_data_points() -> None:
    # n = 2^18, d = 16: for k' = 3 l goes 2 -> 3 between eps = 1.0 and 1.2
    assert choose_marginals(N18, 16, 1.0, 3).l == 2
    assert choose_marginals(N18, 16, 1.2, 3).l == 3
    # eps = 1.5: l = 3 for k' = 3, l = 2 for k' in {8, 9, 10}
    assert choose_marginals(N18, 16, 1.5, 3).l == 3
    for k in (8, 9, 10):
        assert choose_marginals(N18, 16, 1.5, k).l == 2


# ---- the result object -----------------------------------------------------------------


def test_choice_fields() -> None:
    c = choose_marginals(N16, 8, 2.0, 3)
    assert isinstance(c, MarginalChoice)
    assert c.cells == 16.0
    assert c.noise_error == pytest.approx(3 * c.noise_error_per_attribute)
    assert c.noise_error_per_attribute == pytest.approx(noise_error(N16, 8, 2.0, 4))
    assert c.sampling_error == pytest.approx(14 / N16)
    assert c.oracle == "grr"  # 16 - 2 < 3 e^2
    with pytest.raises(AttributeError):
        c.l = 3  # type: ignore[misc]


def test_oracle_rule() -> None:
    # OUE once L - 2 >= 3 e^eps: ten values per attribute, l = 2 -> L = 100 > 2 + 3e
    c = choose_marginals(N16, 8, 1.0, 3, sizes=[10] * 8)
    assert c.l == 2 and c.cells == 100 and c.oracle == "oue"
    assert choose_marginals(N16, 8, 0.5, 3).oracle == "grr"


def test_noise_error_uses_min_of_grr_and_oue() -> None:
    e = math.exp(1.0)
    for l in (2, 5, 9):
        L = 2**l
        expected = min(4 * e, L - 2 + e) / (e - 1) ** 2 * L / l * 10 / 1000
        assert noise_error(1000, 10, 1.0, l) == pytest.approx(expected)
    assert noise_error(1000, 10, 1.0, 2, cells=9) == pytest.approx(
        min(4 * e, 9 - 2 + e) / (e - 1) ** 2 * 9 / 2 * 10 / 1000
    )


def test_expected_cells_exact() -> None:
    rng = np.random.default_rng(1)
    sizes = [int(s) for s in rng.integers(2, 9, size=9)]
    for l in range(0, 10):
        brute = np.mean([math.prod(sizes[i] for i in c) for c in combinations(range(9), l)])
        assert expected_cells(sizes, l) == pytest.approx(brute, rel=1e-12)
    assert expected_cells([2] * 5, 3) == 8.0
    big = [3] * 60  # exact integers, no overflow
    assert expected_cells(big, 30) == float(3**30)


def test_non_binary_sizes() -> None:
    binary = choose_marginals(N16, 8, 2.0, 3)
    same = choose_marginals(N16, 8, 2.0, 3, sizes=[2] * 8)
    assert same == binary
    ternary = choose_marginals(N16, 8, 2.0, 3, sizes=[3] * 8)
    assert ternary.cells == 3.0**ternary.l
    assert ternary.l <= binary.l
    assert ternary.noise_error == pytest.approx(
        3 * noise_error(N16, 8, 2.0, ternary.l, cells=3.0**ternary.l)
    )


def test_l_u_is_capped_at_d() -> None:
    c = choose_marginals(10**12, 4, 5.0, 2)
    assert c.l == 4 and c.m == 1 and c.covers
    c = choose_marginals(10**6, 1, 1.0, 1)
    assert (c.l, c.m) == (1, 1)
    c = choose_marginals(10**6, 2, 1.0, 2)
    assert (c.l, c.m) == (2, 1)


def test_l_u_below_k_returns_min_mu_binomial() -> None:
    c = choose_marginals(N16, 8, 0.2, 3)
    assert (c.l, c.m) == (2, 28) and not c.covers  # C(8, 2) = 28 < m_u = 65
    c = choose_marginals(N16, 32, 0.2, 3)
    assert (c.l, c.m) == (2, 65)


def test_no_candidate_below_one_keeps_m_valid() -> None:
    # k = 1, eps = 0.01: k * NE(1) = 60 and k * NE(2) > 1, so no l_t beats E = 1 and
    # line 12's m = m_u = 500 would exceed the C(3, 2) = 3 distinct pairs (note 6).
    c = choose_marginals(1000, 3, 0.01, 1, theta=0.5)
    assert c.noise_error > 1
    assert (c.l, c.m) == (2, 3)


def test_m_u_floor_and_minimum_one() -> None:
    # theta * n = 0.5: there must still be one group
    c = choose_marginals(500, 6, 0.5, 3)
    assert c.m == 1
    # 0.0029 * 10000 is 28.999999999999996 in floating point; m_u must still be 29
    c = choose_marginals(10000, 40, 0.5, 3, theta=0.0029)
    assert (c.l, c.m) == (2, 29)


# ---- select_marginals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "d", "eps", "k"),
    [(N16, 8, 2.0, 3), (N16, 8, 1.6, 3), (N16, 8, 1.0, 3), (N16, 16, 2.0, 3),
     (N18, 16, 2.0, 6), (N18, 32, 2.0, 3), (10**7, 12, 3.0, 3), (10**6, 10, 4.0, 2)],
)
def test_select_marginals_matches_choice(n: int, d: int, eps: float, k: int) -> None:
    c = choose_marginals(n, d, eps, k)
    sets = select_marginals(d, k, c.l, c.m)
    assert len(sets) == c.m == len(set(sets))
    assert all(len(s) == c.l and all(0 <= a < d for a in s) for s in sets)
    assert is_covering(sets, d, k) == c.covers
    assert sets == select_marginals(d, k, c.l, c.m)
    relabelled = select_marginals(d, k, c.l, c.m, rng=5)
    assert len(relabelled) == c.m and is_covering(relabelled, d, k) == c.covers


def test_select_marginals_cases() -> None:
    assert len(select_marginals(8, 3, 4, 14)) == 14
    assert is_covering(select_marginals(8, 3, 4, 14), 8, 3)
    padded = select_marginals(8, 3, 4, 30)  # more than the covering: covering + extras
    assert len(set(padded)) == 30 and is_covering(padded, 8, 3)
    counts = np.bincount(np.array(padded).ravel(), minlength=8)
    assert counts.max() - counts.min() <= 2
    partial = select_marginals(8, 3, 4, 10)  # fewer: greedy partial covering
    triples = {t for b in partial for t in combinations(b, 3)}
    assert len(triples) == 40  # SQS blocks share no triple
    balanced = select_marginals(16, 3, 2, 65)
    counts = np.bincount(np.array(balanced).ravel(), minlength=16)
    assert counts.max() - counts.min() <= 1
    assert len(select_marginals(16, 3, 3, 65)) == 65


# ---- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"n": 65536.0}, "n"),
        ({"d": 0}, "d"),
        ({"k": 0}, "k"),
        ({"k": 9}, "k"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"theta": 0.0}, "theta"),
        ({"theta": 1.5}, "theta"),
        ({"theta": "x"}, "theta"),
        ({"sizes": [2] * 7}, "sizes"),
        ({"sizes": [2] * 7 + [0]}, "sizes"),
    ],
)
def test_choose_marginals_validation(kwargs: dict, field: str) -> None:
    args = {"n": N16, "d": 8, "epsilon": 1.0, "k": 3, **kwargs}
    with pytest.raises(DPMarginalsError, match=field):
        choose_marginals(**args)


def test_error_function_validation() -> None:
    with pytest.raises(DPMarginalsError, match="n"):
        noise_error(0, 8, 1.0, 2)
    with pytest.raises(DPMarginalsError, match="cells"):
        noise_error(100, 8, 1.0, 2, cells=0.5)
    with pytest.raises(DPMarginalsError, match="epsilon"):
        noise_error(100, 8, -1.0, 2)
    with pytest.raises(DPMarginalsError, match="m"):
        sampling_error(100, 0)
    with pytest.raises(DPMarginalsError, match="l"):
        expected_cells([2, 3], 3)
    with pytest.raises(DPMarginalsError, match="m"):
        select_marginals(8, 3, 2, 29)
    with pytest.raises(DPMarginalsError, match="k"):
        select_marginals(8, 9, 2, 2)


@pytest.mark.parametrize("eps", [1000.0, 1e308])
def test_huge_epsilon_plans_without_overflow(eps) -> None:
    # Algorithm 1's noise error is 0 once e^-eps underflows: one group of the largest l.
    assert noise_error(N16, 8, eps, 3) == 0.0
    c = choose_marginals(N16, 8, eps, 3)
    assert (c.l, c.m, c.oracle) == (8, 1, "grr")


def test_partial_cover_is_the_lazy_greedy() -> None:
    """_partial_cover keeps exact keys; it picks the blocks (in the same order) of the lazy
    greedy over (-new k-sets, attribute uses, position) that it replaced."""
    import heapq

    from dpmarginals.planning.covering import _block_ranks, cover_design
    from dpmarginals.planning.error_model import _partial_cover

    def lazy(d: int, k: int, l: int, m: int) -> list[tuple[int, ...]]:
        blocks = cover_design(d, k, l)
        arr = np.array(blocks, dtype=np.int64)
        ranks = _block_ranks(arr, k, d)
        covered = np.zeros(math.comb(d, k), dtype=bool)
        counts = np.zeros(d, dtype=np.int64)
        heap = [(-ranks.shape[1], 0, i) for i in range(len(blocks))]
        heapq.heapify(heap)
        out: list[tuple[int, ...]] = []
        while len(out) < m:
            _, _, i = heapq.heappop(heap)
            key = (-int((~covered[ranks[i]]).sum()), int(counts[arr[i]].sum()), i)
            if heap and key > heap[0]:
                heapq.heappush(heap, key)
                continue
            covered[ranks[i]] = True
            counts[arr[i]] += 1
            out.append(blocks[i])
        return out

    for d, k, l, m in [(12, 3, 5, 9), (20, 3, 5, 30), (16, 2, 4, 10), (18, 4, 6, 25)]:
        assert _partial_cover(d, k, l, m) == lazy(d, k, l, m)
