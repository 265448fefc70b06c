"""Tests of dpmarginals.inference: Norm-Sub, CALM consistency (§4.4), max-entropy (§4.1)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy.linalg import null_space
from scipy.optimize import minimize_scalar

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference import (
    ConsistencyResult,
    ConsistencyWarning,
    View,
    intersection_family,
    make_consistent,
    max_entropy,
    max_inconsistency,
    norm_cut,
    norm_sub,
    project,
)
from dpmarginals.inference.nonneg import norm_sub_rows

# ----------------------------------------------------------------------------- helpers


def ldpp_norm_sub(x: np.ndarray, total: float) -> np.ndarray:
    """The iterative loop of vvv214/LDP_Protocols post-process/norm_sub.py (fractions)."""
    est = np.array(x, dtype=float)
    for _ in range(10_000):
        if abs(est.sum() - total) <= 1e-14 and not (est < 0).any():
            break
        est[est < 0] = 0
        mask = est > 0
        est[mask] += (total - est.sum()) / mask.sum()
    return est


def random_joint(sizes: tuple[int, ...], rng: np.random.Generator, *, floor: float = 0.0
                 ) -> np.ndarray:
    """A random joint distribution with some dependence, every cell >= floor / n_cells."""
    p = rng.dirichlet(np.full(math.prod(sizes), 0.7)).reshape(sizes)
    return (1 - floor) * p + floor / p.size


def marginal(joint: np.ndarray, attrs: tuple[int, ...]) -> np.ndarray:
    return project(tuple(range(joint.ndim)), joint, attrs)


def chain_data_marginals(d: int, sizes: list[int], sets: list[tuple[int, ...]],
                         rng: np.random.Generator, n: int = 20_000) -> list[np.ndarray]:
    """Exact marginals of a sample of n records from a Markov chain over d attributes."""
    x = np.empty((n, d), dtype=np.intp)
    x[:, 0] = rng.integers(0, sizes[0], n)
    for a in range(1, d):
        keep = rng.random(n) < 0.6
        x[:, a] = np.where(keep, x[:, a - 1] % sizes[a], rng.integers(0, sizes[a], n))
    out = []
    for s in sets:
        shape = tuple(sizes[a] for a in s)
        idx = np.ravel_multi_index(tuple(x[:, a] for a in s), shape)
        out.append(np.bincount(idx, minlength=math.prod(shape)).reshape(shape) / n)
    return out


def random_sets(d: int, m: int, size: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    sets: set[tuple[int, ...]] = set()
    while len(sets) < m:
        sets.add(tuple(sorted(rng.choice(d, size, replace=False).tolist())))
    return sorted(sets)


def pairwise_disagreement(views) -> float:
    """Max |difference| of two views' projections on their common attributes (and totals).

    Every set shared by >= 2 views lies inside some pairwise intersection, so agreement on
    all pairwise intersections means agreement on every shared set.
    """
    worst = 0.0
    for (a1, t1), (a2, t2) in itertools.combinations(views, 2):
        common = tuple(sorted(set(a1) & set(a2)))
        diff = project(a1, t1, common) - project(a2, t2, common)
        worst = max(worst, float(np.abs(diff).max()))
    return worst


# ----------------------------------------------------------------------------- project


def test_project_sums_out_and_reorders():
    rng = np.random.default_rng(0)
    t = rng.random((2, 3, 4, 5))
    attrs = (1, 4, 6, 9)
    np.testing.assert_allclose(project(attrs, t, (9, 1)), t.sum(axis=(1, 2)).T)
    np.testing.assert_allclose(project(attrs, t, (4,)), t.sum(axis=(0, 2, 3)))
    np.testing.assert_allclose(project(attrs, t, ()), t.sum())
    np.testing.assert_allclose(project(attrs, t, (6, 4, 9, 1)), t.transpose(2, 1, 3, 0))
    with pytest.raises(DPMarginalsError, match="not in the table"):
        project(attrs, t, (2,))


# ----------------------------------------------------------------------------- norm_sub


@pytest.mark.parametrize("seed", range(5))
def test_norm_sub_matches_ldpp_loop(seed):
    rng = np.random.default_rng(seed)
    for length in (1, 2, 5, 16, 64, 300):
        for loc, scale in ((0.5 / length, 0.3), (0.0, 0.1), (-0.02, 0.05), (1.0, 0.2)):
            x = rng.normal(loc, scale, length)
            if not (x > 0).any():
                continue  # the loop divides by zero there
            for total in (1.0, 0.3):
                got = norm_sub(x, total)
                np.testing.assert_allclose(got, ldpp_norm_sub(x, total), rtol=0, atol=1e-12)
                assert (got >= 0).all()
                assert got.sum() == pytest.approx(total, abs=1e-12)


def _brute_force_simplex_projection(x: np.ndarray, total: float) -> np.ndarray:
    """Exact Euclidean projection onto {y >= 0, sum y = total}, by trying every support."""
    best, best_dist = None, math.inf
    n = x.size
    for k in range(1, n + 1):
        for support in itertools.combinations(range(n), k):
            s = list(support)
            y = np.zeros(n)
            y[s] = x[s] - (x[s].sum() - total) / k
            if (y >= -1e-15).all():
                dist = float(((y - x) ** 2).sum())
                if dist < best_dist:
                    best, best_dist = y, dist
    return best


def test_norm_sub_is_euclidean_projection_when_positives_suffice():
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(200):
        x = rng.normal(0.2, 0.4, 7)
        total = 1.0
        if np.maximum(x, 0).sum() < total:
            continue
        checked += 1
        np.testing.assert_allclose(norm_sub(x, total), _brute_force_simplex_projection(x, total),
                                   atol=1e-12)
    assert checked > 50


def test_norm_sub_edge_cases():
    # shortfall goes to the positive cells only
    np.testing.assert_allclose(norm_sub(np.array([0.2, -0.1, 0.0, 0.3])), [0.45, 0, 0, 0.55])
    # nothing positive: uniform
    np.testing.assert_allclose(norm_sub(np.array([-0.1, 0.0, -2.0, -0.5]), 2.0), [0.5] * 4)
    # shape is preserved, input not modified
    x = np.array([[0.6, -0.1], [0.4, 0.3]])
    x0 = x.copy()
    y = norm_sub(x)
    assert y.shape == (2, 2) and (y >= 0).all() and y.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(x, x0)
    # already a distribution: unchanged
    p = np.array([0.1, 0.2, 0.7])
    np.testing.assert_allclose(norm_sub(p), p, atol=1e-15)
    with pytest.raises(DPMarginalsError):
        norm_sub(np.array([np.nan, 1.0]))


def test_norm_cut_keeps_largest_cells():
    rng = np.random.default_rng(2)
    for _ in range(50):
        x = rng.normal(0.1, 0.2, 12)
        y = norm_cut(x)
        assert (y >= 0).all() and y.sum() == pytest.approx(1.0, abs=1e-12)
        if np.maximum(x, 0).sum() > 1:
            kept = y > 0
            # the kept cells are the largest ones, all intact except possibly the smallest
            assert x[kept].min() >= x[~kept].max(initial=-np.inf)
            intact = np.isclose(y, x) & kept
            assert intact.sum() >= kept.sum() - 1
    np.testing.assert_allclose(norm_cut(np.array([-1.0, -2.0])), [0.5, 0.5])


# ----------------------------------------------------------------------------- family


def test_intersection_family_is_closed_and_ordered():
    rng = np.random.default_rng(3)
    sets = random_sets(12, 25, 4, rng)
    fam = intersection_family(sets)
    famset = set(fam)
    assert len(famset) == len(fam)
    # every non-empty pairwise intersection is there, and the family is closed
    for s1, s2 in itertools.combinations(sets, 2):
        inter = tuple(sorted(set(s1) & set(s2)))
        assert not inter or inter in famset
    for f1, f2 in itertools.combinations(fam, 2):
        inter = tuple(sorted(set(f1) & set(f2)))
        assert not inter or inter in famset
    # each set is in >= 2 views and comes after all of its strict subsets
    position = {f: i for i, f in enumerate(fam)}
    for f in fam:
        assert sum(set(f) <= set(s) for s in sets) >= 2
        for g in fam:
            if set(g) < set(f):
                assert position[g] < position[f]


# ----------------------------------------------------------------------------- consistency


def _noisy_views(sets, truths, sd, rng):
    return [(s, t + rng.normal(0, sd, t.shape)) for s, t in zip(sets, truths, strict=True)]


def _assert_consistent_nonneg(res: ConsistencyResult, inputs, total=1.0, tol=1e-9):
    assert res.converged
    assert len(res) == len(inputs)
    for (a_in, t_in), (a_out, t_out) in zip(inputs, res, strict=True):
        assert a_out == tuple(a_in) and t_out.shape == np.shape(t_in)
        assert (t_out >= 0).all()
        assert t_out.sum() == pytest.approx(total, abs=tol)
    assert pairwise_disagreement(res) <= tol
    assert res.max_inconsistency <= tol
    assert res.min_cell >= 0


def test_consistency_nonbinary_8_attrs_14_views():
    rng = np.random.default_rng(4)
    sizes = [3, 4, 2, 5, 3, 2, 4, 3]
    sets = random_sets(8, 14, 4, rng)
    truths = chain_data_marginals(8, sizes, sets, rng)
    views = _noisy_views(sets, truths, 0.01, rng)
    copies = [(s, t.copy()) for s, t in views]
    res = make_consistent(views, sizes, max_rounds=1000)
    _assert_consistent_nonneg(res, views)
    assert any((t < 0).any() for _, t in views)  # Norm-Sub was exercised
    for (_, t), (_, c) in zip(views, copies, strict=True):  # inputs not mutated
        np.testing.assert_array_equal(t, c)
    # the result is closer to the truth than the noisy input (on average over cells)
    err_in = sum(np.abs(t - tr).sum() for (_, t), tr in zip(views, truths, strict=True))
    err_out = sum(np.abs(t - tr).sum() for (_, t), tr in zip(res, truths, strict=True))
    assert err_out < err_in


def test_consistency_32_binary_attrs_60_views():
    rng = np.random.default_rng(5)
    sizes = [2] * 32
    sets = random_sets(32, 60, 3, rng)
    truths = chain_data_marginals(32, sizes, sets, rng)
    views = _noisy_views(sets, truths, 0.05, rng)
    res = make_consistent(views, sizes)
    _assert_consistent_nonneg(res, views)
    assert res.rounds > 1
    assert max_inconsistency(res, sizes, total=1.0) <= 1e-9


def test_consistency_single_pass_is_exact_in_closure_order():
    """Without negatives, one pass over ∅ and the ordered closure makes the views agree."""
    rng = np.random.default_rng(6)
    sizes = [2, 3, 2, 4, 3, 2, 2, 3, 2, 3]
    sets = random_sets(10, 20, 3, rng)
    sets.append(sets[0])  # a duplicate view set, too
    truths = chain_data_marginals(10, sizes, sets, rng)
    truths = [0.9 * t + 0.1 / t.size for t in truths]  # cells bounded away from 0
    views = _noisy_views(sets, truths, 0.002, rng)
    res = make_consistent(views, sizes)
    assert res.rounds == 1 and res.converged
    assert pairwise_disagreement(res) < 1e-13


def test_consistency_weighted_average_by_hand():
    """Two views sharing attribute 1: T_1 = (P1/C1 + P2/C2) / (1/C1 + 1/C2)."""
    rng = np.random.default_rng(7)
    sizes = [2, 3, 4]
    joint = random_joint((2, 3, 4), rng, floor=0.5)
    t1, t2 = marginal(joint, (0, 1)), marginal(joint, (1, 2))
    e1 = rng.normal(0, 0.01, t1.shape)
    e2 = rng.normal(0, 0.01, t2.shape)
    v1, v2 = t1 + e1 - e1.mean(), t2 + e2 - e2.mean()  # totals stay exactly 1
    p1, p2 = v1.sum(axis=0), v2.sum(axis=1)
    c1, c2 = 2, 4  # cells of each view per cell of attribute 1
    target = (p1 / c1 + p2 / c2) / (1 / c1 + 1 / c2)
    np.testing.assert_allclose(target, (2 * p1 + p2) / 3)
    res = make_consistent([((0, 1), v1), ((1, 2), v2)], sizes)
    assert res.rounds == 1
    np.testing.assert_allclose(res[0].table, v1 + (target - p1)[None, :] / c1, atol=1e-15)
    np.testing.assert_allclose(res[1].table, v2 + (target - p2)[:, None] / c2, atol=1e-15)
    np.testing.assert_allclose(res[0].table.sum(axis=0), target, atol=1e-15)

    # per-view variances: weights 1 / (C_i Var_i); equivalently weights = 1 / Var_i
    var = np.array([1.0, 0.25])
    target_v = (p1 / (c1 * var[0]) + p2 / (c2 * var[1])) / (1 / (c1 * var[0]) + 1 / (c2 * var[1]))
    res_v = make_consistent([((0, 1), v1), ((1, 2), v2)], sizes, variances=var)
    np.testing.assert_allclose(res_v[0].table.sum(axis=0), target_v, atol=1e-15)
    np.testing.assert_allclose(res_v[1].table.sum(axis=1), target_v, atol=1e-15)
    res_w = make_consistent([((0, 1), v1), ((1, 2), v2)], sizes, weights=1 / var)
    np.testing.assert_allclose(res_w[1].table, res_v[1].table, atol=1e-15)
    with pytest.raises(DPMarginalsError):
        make_consistent([((0, 1), v1), ((1, 2), v2)], sizes, weights=var, variances=var)


def test_consistency_forces_total():
    sizes = [2, 2]
    res = make_consistent([((0,), np.array([0.7, 0.5])), ((1,), np.array([0.2, 0.2]))], sizes)
    np.testing.assert_allclose(res[0].table, [0.6, 0.4])
    np.testing.assert_allclose(res[1].table, [0.5, 0.5])
    # total=None: the totals are averaged (weights 1/C_i = 1/2 each) instead
    res = make_consistent([((0,), np.array([0.7, 0.5])), ((1,), np.array([0.2, 0.2]))], sizes,
                          total=None)
    np.testing.assert_allclose([t.sum() for _, t in res], [0.8, 0.8])


def test_consistent_input_is_returned_unchanged():
    rng = np.random.default_rng(8)
    sizes = (2, 3, 2, 4, 3)
    joint = random_joint(sizes, rng)
    sets = [(0, 1, 2), (1, 2, 3), (0, 3, 4), (2, 4), (0, 1, 2)]
    views = [(s, marginal(joint, s)) for s in sets]
    res = make_consistent(views, sizes)
    assert res.rounds == 1 and res.converged
    for (_, t), (_, r) in zip(views, res, strict=True):
        np.testing.assert_allclose(r, t, rtol=0, atol=1e-15)


def test_consistency_is_unbiased_without_negatives():
    """The consistency pass is linear: zero-mean noise in, zero-mean error out."""
    rng = np.random.default_rng(9)
    sizes = (2, 3, 2, 2)
    joint = random_joint(sizes, rng, floor=0.6)
    sets = [(0, 1), (1, 2), (0, 2, 3), (1, 3)]
    truths = [marginal(joint, s) for s in sets]
    sd, trials = 0.004, 400
    outs = []
    for _ in range(trials):
        res = make_consistent(_noisy_views(sets, truths, sd, rng), sizes)
        assert res.rounds == 1  # no Norm-Sub, which would bias
        outs.append(np.concatenate([t.ravel() for _, t in res]))
    outs = np.array(outs)
    truth = np.concatenate([t.ravel() for t in truths])
    # error budget: |mean - truth| <= 4 sd / sqrt(trials); each output cell's sd <= input sd
    assert np.abs(outs.mean(axis=0) - truth).max() <= 4 * sd / math.sqrt(trials)


def test_consistency_reports_non_convergence():
    rng = np.random.default_rng(10)
    sizes = [3] * 6
    sets = random_sets(6, 8, 3, rng)
    views = [(s, rng.normal(1 / 27, 0.1, (3, 3, 3))) for s in sets]
    with pytest.warns(ConsistencyWarning, match="did not converge"):
        res = make_consistent(views, sizes, max_rounds=2)
    assert not res.converged and res.rounds == 2
    assert res.min_cell < 0 or res.max_inconsistency > 1e-9
    assert res.min_cell == pytest.approx(min(t.min() for _, t in res))


def test_consistency_accepts_unsorted_attrs_and_validates():
    rng = np.random.default_rng(11)
    sizes = [2, 3, 4]
    joint = random_joint((2, 3, 4), rng)
    t20 = marginal(joint, (2, 0))  # axes (attr 2, attr 0)
    res = make_consistent([((2, 0), t20), ((0, 1), marginal(joint, (0, 1)))], sizes)
    assert res[0].attrs == (0, 2)
    np.testing.assert_allclose(res[0].table, t20.T, atol=1e-15)
    assert isinstance(res[0], View)
    with pytest.raises(DPMarginalsError, match="shape"):
        make_consistent([((0, 1), np.zeros((3, 3)))], sizes)
    with pytest.raises(DPMarginalsError, match="out of range"):
        make_consistent([((0, 5), np.zeros((2, 3)))], sizes)
    with pytest.raises(DPMarginalsError, match="repeated"):
        make_consistent([((1, 1), np.zeros((3, 3)))], sizes)
    assert len(make_consistent([], sizes)) == 0


def test_consistency_large_nonbinary_views():
    """Large tables (sizes up to 40) take the axis-sum path."""
    rng = np.random.default_rng(12)
    sizes = [40, 13, 40, 7, 30]
    sets = [(0, 1, 2), (1, 2, 3), (0, 3, 4), (2, 4), (0, 2)]
    truths = chain_data_marginals(5, sizes, sets, rng)
    views = _noisy_views(sets, [0.5 * t + 0.5 / t.size for t in truths], 1e-5, rng)
    res = make_consistent(views, sizes, max_rounds=300)
    _assert_consistent_nonneg(res, views)


# ------------------------------------------------- the projection and the constrained solve


def calm_pass(views, sizes, rho, total=1.0):
    """CALM §4.4's consistency pass as printed: the totals, then each set shared by two or
    more views, smaller sets first, averaged with weights rho_i / C_i (the reference)."""
    tabs = [np.array(t, dtype=float) for _, t in views]
    attrs = [tuple(a) for a, _ in views]
    cells = np.array([t.size for t in tabs])
    w0 = rho / cells
    for t in tabs:
        t += (total - t.sum()) / t.size
    for aset in intersection_family(attrs):
        members = [i for i, a in enumerate(attrs) if set(aset) <= set(a)]
        n_a = math.prod(sizes[a] for a in aset)
        projs = [project(attrs[i], tabs[i], aset) for i in members]
        w = np.array([w0[i] * n_a for i in members])  # rho_i / C_i, C_i = cells_i / n_a
        target = sum(wi * p for wi, p in zip(w, projs, strict=True)) / w.sum()
        for i, p in zip(members, projs, strict=True):
            delta = (target - p) * n_a / tabs[i].size
            shape = [sizes[a] if a in aset else 1 for a in attrs[i]]
            tabs[i] += delta.transpose([aset.index(a) for a in attrs[i] if a in aset]
                                       ).reshape(shape)
    return tabs


@pytest.mark.parametrize("seed", range(4))
def test_interaction_projection_is_calms_pass(seed):
    """The one-transform projection equals CALM's sequential pass, is idempotent and is
    the rho-weighted orthogonal projection (the residual is orthogonal to every
    consistent direction)."""
    from dpmarginals.inference.interactions import ConsistentViews

    rng = np.random.default_rng(20 + seed)
    sizes = tuple(int(s) for s in rng.integers(1, 5, 9))
    sets = random_sets(9, 12, 3, rng) + random_sets(9, 4, 2, rng)
    sets.append(sets[0])  # a repeated attribute set too
    views = [(s, rng.normal(0.05, 0.1, tuple(sizes[a] for a in s))) for s in sets]
    rho = rng.uniform(0.5, 2.0, len(views))
    lattice = ConsistentViews(sets, sizes, rho)
    y = lattice.pack([t for _, t in views])
    x = lattice.project(y)
    for got, want in zip(lattice.unpack(x), calm_pass(views, sizes, rho), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)
    assert lattice.inconsistency(x, 1.0) < 1e-12 < lattice.inconsistency(y, 1.0)
    np.testing.assert_allclose(lattice.project(x), x, atol=1e-12)
    w = rho[lattice.view_of]
    for _ in range(3):  # another consistent point z: <y - Py, z - Py>_W = 0
        z = lattice.project(rng.normal(0, 1, y.size))
        assert abs(np.sum(w * (y - x) * (z - x))) < 1e-9 * np.sqrt(np.sum(w * (z - x) ** 2))
    assert set(intersection_family(sets)) <= set(lattice.shared_sets)


def test_norm_sub_rows_matches_norm_sub():
    rng = np.random.default_rng(30)
    for _ in range(300):
        cells, n = int(rng.integers(1, 12)), int(rng.integers(1, 6))
        x = rng.normal(rng.normal(0, 0.3), rng.uniform(0.01, 1), (n, cells))
        x[rng.random(x.shape) < 0.2] = 0.0
        totals = rng.uniform(0, 2, n)
        want = np.array([norm_sub(r, t) for r, t in zip(x, totals, strict=True)])
        np.testing.assert_allclose(norm_sub_rows(x, totals), want, atol=1e-15)


def _weighted_objective(res, views, rho):
    return 0.5 * sum(r * ((t - v) ** 2).sum()
                     for r, (_, t), (_, v) in zip(rho, res, views, strict=True))


def test_consistency_is_the_constrained_least_squares_projection():
    """A small problem solved by a general solver (SLSQP over every cell, consistency as
    equalities, cells >= 0): the objective make_consistent stops at is above that optimum
    by at most the duality gap it reports, for the default and a tighter dual_fraction."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(31)
    sizes = [2, 3, 2, 2]
    sets = [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)]
    truths = chain_data_marginals(4, sizes, sets, rng, n=400)
    views = _noisy_views(sets, truths, 0.08, rng)
    rho = rng.uniform(0.5, 2.0, len(views))
    tight = make_consistent(views, sizes, weights=rho, dual_fraction=1e-3)
    default = make_consistent(views, sizes, weights=rho)
    assert tight.converged and default.converged and default.dual_rounds < tight.dual_rounds

    shapes = [t.shape for _, t in views]
    cuts = np.cumsum([0] + [math.prod(s) for s in shapes])
    y = np.concatenate([t.ravel() for _, t in views])
    w = np.repeat(rho, np.diff(cuts))

    def tables(x):
        return [x[a:b].reshape(s) for a, b, s in zip(cuts[:-1], cuts[1:], shapes, strict=True)]

    def agree(x):
        out = [t.sum() - 1.0 for t in tables(x)]
        for (a1, t1), (a2, t2) in itertools.combinations(zip(sets, tables(x), strict=True), 2):
            common = tuple(sorted(set(a1) & set(a2)))
            if common:
                out.extend((project(a1, t1, common) - project(a2, t2, common)).ravel())
        return np.array(out)

    # consistent tables: x = x0 + Z theta (Z spans the null space of the agreement map)
    zero = agree(np.zeros(y.size))
    a = np.column_stack([agree(e) - zero for e in np.eye(y.size)])
    x0 = np.linalg.lstsq(a, -zero, rcond=None)[0]
    z = null_space(a)
    best = minimize(lambda th: 0.5 * np.sum(w * (x0 + z @ th - y) ** 2),
                    np.linalg.lstsq(z, y - x0, rcond=None)[0],
                    jac=lambda th: z.T @ (w * (x0 + z @ th - y)), method="SLSQP",
                    constraints=[{"type": "ineq", "fun": lambda th: x0 + z @ th,
                                  "jac": lambda th: z}],
                    options={"maxiter": 1000, "ftol": 1e-15})
    assert best.success and (x0 + z @ best.x).min() > -1e-9
    for res in (tight, default):
        _assert_consistent_nonneg(res, views)
        f = _weighted_objective(res, views, rho)
        assert best.fun - 1e-9 <= f <= best.fun + res.gap * f + 1e-9
        assert res.gap > 0


def test_consistency_stage_options():
    """dual_fraction=1 skips stage 1 (plain accelerated alternation); stage 1 and the
    mixing weight are reported; dual_fraction is validated."""
    rng = np.random.default_rng(32)
    sizes = [2] * 10
    sets = random_sets(10, 25, 3, rng)
    views = _noisy_views(sets, chain_data_marginals(10, sizes, sets, rng), 0.05, rng)
    plain = make_consistent(views, sizes, dual_fraction=1.0)
    staged = make_consistent(views, sizes)
    assert plain.dual_rounds == 0 < staged.dual_rounds
    for res in (plain, staged):
        _assert_consistent_nonneg(res, views)
        assert 0 <= res.mixing <= 1e-6 and 0 <= res.gap < 0.05
    with pytest.raises(DPMarginalsError, match="dual_fraction"):
        make_consistent(views, sizes, dual_fraction=1.5)


@pytest.mark.needs_data
@pytest.mark.slow
@pytest.mark.parametrize("name, d, limit", [("adult3", 8, 1.005), ("msnbc", 16, 0.99)])
def test_consistency_at_least_as_accurate_as_calms_alternation(name, d, limit):
    """Real data, eps = 1, k = 3, 50 random queries, 5 seeded collections: the SSE of the
    released answers against CALM/PriView's alternation (consistency pass, Norm-Sub of the
    views with negatives, until none is left; the pass computed by the projection the test
    above checks) on the same reports.  Mean ratios measured over 10 other seeds: adult3
    0.998 (single seeds 0.990-1.003: unchanged, hence a 0.5% budget), msnbc 0.982
    (0.964-0.994: better, asked here by at least 1%); these 5 seeds give 1.000 and 0.983."""
    from dpmarginals.datasets import load
    from dpmarginals.inference.consistency import _norm_sub_views
    from dpmarginals.inference.interactions import ConsistentViews
    from dpmarginals.local.calm import CALM
    from dpmarginals.local.collect import estimate_views, group_supports
    from dpmarginals.synopsis.base import ViewSynopsis, consistent_synopsis
    from dpmarginals.synopsis.evaluate import evaluate, exact_marginals, random_queries

    data = load(name, d=d)
    ratios = []
    for seed in range(5):
        calm = CALM(epsilon=1.0, k=3)
        plan = calm.plan(data.domain, data.n)
        views = estimate_views(plan, group_supports(data, plan, rng=seed))
        queries = random_queries(data.domain, 3, 50, rng=100 + seed)
        exact = exact_marginals(data, queries)
        ours = consistent_synopsis(data.domain, views, "calm", {})
        attrs = [data.domain.indices(v.attributes) for v in views]
        lattice = ConsistentViews(attrs, data.domain.sizes,
                                  np.array([1 / v.variance for v in views]))
        x = lattice.project(lattice.pack([v.table for v in views]))
        for _ in range(5000):
            if x.min() >= -1e-12:
                break
            x = lattice.project(_norm_sub_views(lattice, x, np.ones(len(views))))
        x = np.maximum(x, 0.0)
        theirs = ViewSynopsis(data.domain, [(v.attributes, t) for v, t in
                                            zip(views, lattice.unpack(x), strict=True)])
        ratios.append(evaluate(ours, exact).sse_mean / evaluate(theirs, exact).sse_mean)
    assert np.mean(ratios) <= limit, ratios


# ----------------------------------------------------------------------------- max_entropy


def test_max_entropy_covered_query_is_the_projection():
    rng = np.random.default_rng(13)
    sizes = [2, 3, 4, 2]
    joint = random_joint(tuple(sizes), rng)
    views = [((0, 1, 2, 3), marginal(joint, (0, 1, 2, 3))), ((1, 2), marginal(joint, (1, 2))),
             ((0, 1, 2), marginal(joint, (0, 1, 2)))]
    out, info = max_entropy((2, 1), views, sizes, return_info=True)
    assert info.method == "view" and info.view == 1  # the smallest covering view
    np.testing.assert_allclose(out, marginal(joint, (2, 1)), atol=1e-15)
    out, info = max_entropy((2, 0), views, sizes, return_info=True)
    assert info.view == 2
    np.testing.assert_allclose(out, marginal(joint, (2, 0)), atol=1e-15)
    out[...] = -1  # the result is a fresh array
    assert (views[2][1] >= 0).all()


def test_max_entropy_matches_pairwise_constraints():
    rng = np.random.default_rng(14)
    sizes = (2, 3, 4)
    joint = random_joint(sizes, rng)
    views = [(s, marginal(joint, s)) for s in [(0, 1), (1, 2), (0, 2)]]
    out, info = max_entropy((0, 1, 2), views, sizes, return_info=True)
    assert info.method == "ipf" and info.converged and info.max_deviation < 1e-7
    assert set(info.constraints) == {(0, 1), (1, 2), (0, 2)}
    for s, t in views:
        np.testing.assert_allclose(project((0, 1, 2), out, s), t, atol=1e-6)
    # log-linear form: log T is a sum of functions of the constraint sets (no 3-way term)
    design = []
    cells = list(itertools.product(*[range(c) for c in sizes]))
    for s, _ in views:
        for v in itertools.product(*[range(sizes[a]) for a in s]):
            design.append([all(cell[a] == v[k] for k, a in enumerate(s)) for cell in cells])
    design = np.array(design, dtype=float).T
    logt = np.log(out.ravel())
    coef, *_ = np.linalg.lstsq(design, logt, rcond=None)
    assert np.abs(design @ coef - logt).max() < 1e-5


def test_max_entropy_maximizes_entropy_tiny_case():
    """2x2x2 with its three 2-way marginals: one free parameter; compare with scipy."""
    rng = np.random.default_rng(15)
    sizes = (2, 2, 2)
    joint = random_joint(sizes, rng, floor=0.2)
    sets = [(0, 1), (1, 2), (0, 2)]
    views = [(s, marginal(joint, s)) for s in sets]
    out = max_entropy((0, 1, 2), views, sizes, tol=1e-12)
    rows = []
    for s in sets:
        for v in itertools.product(range(2), range(2)):
            ind = np.zeros(sizes)
            index: list[object] = [slice(None)] * 3
            for k, a in enumerate(s):
                index[a] = v[k]
            ind[tuple(index)] = 1
            rows.append(ind.ravel())
    direction = null_space(np.array(rows))
    assert direction.shape == (8, 1)
    direction = direction[:, 0]
    base = joint.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = -base / direction
    lo, hi = ratio[direction > 0].max(), ratio[direction < 0].min()

    def neg_entropy(t: float) -> float:
        p = np.clip(base + t * direction, 1e-300, None)
        return float((p * np.log(p)).sum())

    best = minimize_scalar(neg_entropy, bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-12})
    np.testing.assert_allclose(out.ravel(), base + best.x * direction, atol=1e-7)


def test_max_entropy_chain_is_exact():
    rng = np.random.default_rng(16)
    sizes = (3, 4, 2)
    joint = random_joint(sizes, rng)
    pab, pbc = marginal(joint, (0, 1)), marginal(joint, (1, 2))
    pb = marginal(joint, (1,))
    out = max_entropy((0, 1, 2), [((0, 1), pab), ((1, 2), pbc)], sizes, tol=1e-12)
    expected = pab[:, :, None] * pbc[None, :, :] / pb[None, :, None]
    np.testing.assert_allclose(out, expected, atol=1e-12)
    # the requested axis order is honoured
    out_perm = max_entropy((2, 0, 1), [((0, 1), pab), ((1, 2), pbc)], sizes, tol=1e-12)
    np.testing.assert_allclose(out_perm, expected.transpose(2, 0, 1), atol=1e-12)


def test_max_entropy_uncovered_attributes_are_uniform():
    rng = np.random.default_rng(17)
    sizes = (2, 3, 4, 5)
    joint = random_joint(sizes, rng)
    views = [((0, 1), marginal(joint, (0, 1))), ((1, 2), marginal(joint, (1, 2)))]
    out = max_entropy((3, 0), views, sizes)
    np.testing.assert_allclose(out, np.outer(np.full(5, 0.2), marginal(joint, (0,))),
                               atol=1e-12)
    out, info = max_entropy((3,), views, sizes, return_info=True)
    assert info.method == "uniform"
    np.testing.assert_allclose(out, np.full(5, 0.2))


def test_max_entropy_with_init():
    sizes = (2, 2, 2)
    pab = np.array([[0.3, 0.2], [0.1, 0.4]])
    pbc = np.array([[0.2, 0.2], [0.3, 0.3]])
    init = np.ones((2, 2, 2))
    init[1, 0, 1] = 0.0  # a structural zero stays zero (the constraints still allow it)
    out, info = max_entropy((0, 1, 2), [((0, 1), pab), ((1, 2), pbc)], sizes, init=init,
                            return_info=True)
    assert info.converged and out[1, 0, 1] == 0
    np.testing.assert_allclose(out.sum(axis=2), pab, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=0), pbc, atol=1e-7)
    with pytest.raises(DPMarginalsError, match="init"):
        max_entropy((0, 1, 2), [((0, 1), pab)], sizes, init=np.ones((2, 2)))


def test_max_entropy_validates():
    views = [((0, 1), np.full((2, 2), 0.25))]
    with pytest.raises(DPMarginalsError, match="repeated"):
        max_entropy((0, 0), views, [2, 2])
    with pytest.raises(DPMarginalsError, match="out of range"):
        max_entropy((0, 2), views, [2, 2])


def test_max_entropy_k8_of_32_binary_after_consistency():
    rng = np.random.default_rng(18)
    sizes = [2] * 32
    sets = random_sets(32, 300, 3, rng)
    truths = chain_data_marginals(32, sizes, sets, rng)
    res = make_consistent(_noisy_views(sets, truths, 0.03, rng), sizes)
    assert res.converged
    converged = 0
    for _ in range(3):
        query = tuple(rng.choice(32, 8, replace=False).tolist())
        out, info = max_entropy(query, res, sizes, return_info=True)
        assert out.shape == (2,) * 8
        assert (out >= 0).all() and out.sum() == pytest.approx(1.0, abs=1e-6)
        assert info.method == "ipf" and info.iterations >= 1
        converged += info.converged
        if info.converged:
            for b in info.constraints:
                # the target is the (common) projection of any view containing b
                src = next(v for v in res if set(b) <= set(v.attrs))
                got = project(query, out, b)
                np.testing.assert_allclose(got, project(src.attrs, src.table, b), atol=1e-6)
    assert converged >= 1


def test_max_entropy_reports_infeasible_constraints():
    """Pairwise-consistent but jointly infeasible 2-way marginals: IPF stops, unconverged."""
    sizes = (2, 2, 2)
    eq = np.array([[0.5, 0.0], [0.0, 0.5]])    # a = b, b = c
    ne = np.array([[0.0, 0.5], [0.5, 0.0]])    # but a != c
    views = [((0, 1), eq), ((1, 2), eq), ((0, 2), ne)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, info = max_entropy((0, 1, 2), views, sizes, return_info=True, max_iter=200)
    assert not info.converged and info.max_deviation > 0.1
    assert np.isfinite(out).all() and (out >= 0).all()
