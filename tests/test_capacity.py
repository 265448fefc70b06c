"""The capacity-scaled shrinkage prior (issue #20): an interaction can only be as strong as
its attributes' spread allows, so the empirical-Bayes prior scales with it."""

from __future__ import annotations

import itertools
import math

import numpy as np

from dpmarginals import Domain
from dpmarginals.inference.shrinkage import capacity_scale, fit_mixture, interaction_capacity
from dpmarginals.planning.optimal import ORDER_DECAY, Structure


def test_capacity_is_the_product_of_the_gini_impurities():
    marg = {("a",): np.array([0.9, 0.1]), ("b",): np.array([0.5, 0.5]),
            ("c",): np.array([2.0, 1.0, 1.0])}  # not normalised: normalised first
    assert math.isclose(interaction_capacity(("a", "b"), marg), (1 - 0.82) * 0.5)
    assert math.isclose(interaction_capacity(("a", "b", "c"), marg),
                        (1 - 0.82) * 0.5 * (1 - (0.25 + 0.0625 + 0.0625)))
    # per coefficient, relative to the mean: a 2x3 pair spreads its capacity over 2 coefs
    scale = capacity_scale([("a", "b"), ("b", "c")], [1, 2], marg)
    raw = np.array([0.09, 0.5 * 0.625 / 2])
    assert np.allclose(scale, raw / raw.mean())


def test_a_scaled_prior_is_the_unit_prior_on_rescaled_blocks():
    """N(0, s g + v) for r is N(0, g + v / s) for r / sqrt(s): the fitted weights and the
    posterior factors must agree (the grid is relative to the smallest noise, so the same)."""
    rng = np.random.default_rng(3)
    b = 60
    scale = rng.uniform(0.2, 5.0, b)
    noise = rng.uniform(0.5, 2.0, b) * 1e-3
    dims = rng.integers(1, 5, b)
    theta = [rng.normal(0, math.sqrt(2e-3 * s), size=d) * (rng.random() < 0.3)
             for s, d in zip(scale, dims, strict=True)]
    resid = [t + rng.normal(0, math.sqrt(v), size=t.size)
             for t, v in zip(theta, noise, strict=True)]
    grid, w, f = fit_mixture(resid, noise, scale=scale)
    grid1, w1, f1 = fit_mixture([r / math.sqrt(s) for r, s in zip(resid, scale, strict=True)],
                                 noise / scale)
    assert np.allclose(grid, grid1) and np.allclose(w, w1, atol=1e-9)
    assert np.allclose(f, f1, atol=1e-9)


def test_the_high_capacity_block_keeps_more_of_the_same_evidence():
    """Among pure-noise blocks, two with the same r^2 / v: the one whose attributes can
    interact strongly (capacity 20x) keeps more of it."""
    rng = np.random.default_rng(0)
    noise = np.full(80, 1e-3)
    resid = [rng.normal(0, math.sqrt(1e-3), size=1) for _ in range(78)]
    resid += [np.array([math.sqrt(8e-3)]), np.array([math.sqrt(8e-3)])]
    scale = np.ones(80)
    scale[-2] = 20.0
    _, _, f = fit_mixture(resid, noise, scale=scale)
    assert f[-2] > 3 * f[-1] and f[-2] > f[-1] + 0.05, f[-2:]
    _, _, flat = fit_mixture(resid, noise)
    assert math.isclose(flat[-2], flat[-1])


def test_mean_capacity_is_the_mean_over_every_set_of_the_order():
    rng = np.random.default_rng(1)
    dom = Domain(tuple(f"x{i}" for i in range(7)), (2, 3, 2, 4, 2, 2, 5))
    marg = {a: rng.dirichlet(np.full(c, 0.7)) for a, c in zip(dom.attributes, dom.sizes,
                                                               strict=True)}
    st = Structure(dom, marg, {}, {2: 1e-3, 3: 1e-4}, capacity=(2, 3))
    for order in range(1, 5):
        sets = list(itertools.combinations(dom.attributes, order))
        brute = np.mean([st.capacity_of(s) for s in sets])
        assert math.isclose(st.mean_capacity(order), brute, rel_tol=1e-12)


def test_unmeasured_energies_follow_capacity_and_keep_the_order_mean():
    rng = np.random.default_rng(2)
    dom = Domain(tuple(f"x{i}" for i in range(6)), (2,) * 6)
    marg = {a: np.array([p, 1 - p]) for a, p in zip(dom.attributes, rng.uniform(0.02, 0.5, 6),
                                                    strict=True)}
    st = Structure(dom, marg, {}, {2: 1e-3, 3: 1e-4}, capacity=(2, 3))
    flat = Structure(dom, marg, {}, {2: 1e-3, 3: 1e-4})
    for order, mean in ((2, 1e-3), (3, 1e-4)):
        sets = list(itertools.combinations(dom.attributes, order))
        e = np.array([st.energy_of(s) for s in sets])
        assert math.isclose(e.mean(), mean, rel_tol=1e-9)
        cap = np.array([st.capacity_of(s) for s in sets])
        assert np.allclose(e / cap, e[0] / cap[0])  # proportional to capacity
        assert all(flat.energy_of(s) == mean for s in sets)
    # a measured set keeps its own energy
    st.energy[frozenset(("x0", "x1"))] = 0.5
    assert st.energy_of(("x0", "x1")) == 0.5


def test_orders_beyond_the_known_ones_decay_at_least_by_order_decay():
    """Beyond the largest known order, each order keeps the last two known orders' ratio, at
    most ORDER_DECAY of the one below (noisy reports overstate triples against pairs)."""
    dom = Domain(tuple(f"x{i}" for i in range(8)), (2,) * 8)
    steep = Structure.prior(dom, {2: 1e-3, 3: 1e-5})          # ratio 0.01 < ORDER_DECAY
    assert math.isclose(steep.order_mean(5), 1e-5 * 0.01**2)
    flat = Structure.prior(dom, {2: 1e-3, 3: 8e-4})           # ratio 0.8: capped
    assert 0 < ORDER_DECAY < 0.5
    for order in (4, 5, 6):
        assert math.isclose(flat.order_mean(order), 8e-4 * ORDER_DECAY ** (order - 3))
    pairs_only = Structure.prior(dom, {2: 1e-3})              # one order: the cap itself
    assert math.isclose(pairs_only.order_mean(3), 1e-3 * ORDER_DECAY)
    assert pairs_only.order_mean(2) == 1e-3                   # known orders are kept


def test_orders_between_known_ones_lie_between_them():
    """An order between two given ones is interpolated (geometrically), never extrapolated
    from the top one downward (which made order 3 of {2: 1e-4, 9: 1} 0.2^-6 = 15,625)."""
    dom = Domain(tuple(f"x{i}" for i in range(10)), (2,) * 10)
    gap = Structure.prior(dom, {2: 1e-4, 9: 1.0})
    inside = [gap.order_mean(j) for j in range(3, 9)]
    assert all(1e-4 < e < 1.0 for e in inside)
    assert np.all(np.diff(inside) > 0)
    assert math.isclose(gap.order_mean(5), 1e-4 * (1.0 / 1e-4) ** (3 / 7))
    assert math.isclose(gap.order_mean(10), 1.0 * ORDER_DECAY)   # beyond: the decay
    zero = Structure.prior(dom, {2: 0.0, 4: 1e-3})              # linear when one is 0
    assert math.isclose(zero.order_mean(3), 5e-4)
