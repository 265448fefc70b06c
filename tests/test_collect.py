"""The collection spine: group assignment, and the per-user vs. aggregate paths."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpmarginals import Dataset, Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.local.calm import group_specs
from dpmarginals.local.collect import assign_groups, collect, group_supports
from dpmarginals.protocol.plan import Plan


def test_groups_are_near_equal_and_random():
    groups = assign_groups(1003, 10, rng=0)
    sizes = np.bincount(groups)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 1003
    assert not np.array_equal(groups, assign_groups(1003, 10, rng=1))
    with pytest.raises(DPMarginalsError, match="cannot fill"):
        assign_groups(5, 10, rng=0)


def small_plan(oracle: str) -> tuple[Dataset, Plan]:
    rng = np.random.default_rng(3)
    dom = Domain(("a", "b", "c"), (2, 3, 2))
    codes = np.column_stack([rng.integers(0, s, 3000) for s in dom.sizes])
    codes[:, 2] = np.where(rng.random(3000) < 0.7, codes[:, 0], codes[:, 2])
    data = Dataset(codes, dom)
    specs = group_specs(dom, [("a", "b"), ("b", "c"), ("a", "c")], 1.0, oracle)
    return data, Plan("test", 1.0, dom, specs)


@pytest.mark.parametrize("oracle", ["grr", "oue", "olh", "hr"])
def test_per_user_and_aggregate_supports_agree_in_distribution(oracle):
    # 300 seeded repetitions of each path; for every (group, cell) the two samples of the
    # support count are compared with a two-sample KS test.  With about 16 cells, a
    # Bonferroni threshold of 1e-4/cells keeps the family-wise false alarm below 1e-4.
    data, plan = small_plan(oracle)
    reps = 300
    agg = [np.concatenate(group_supports(data, plan, rng=s)[0]) for s in range(reps)]
    per = [np.concatenate(group_supports(data, plan, rng=10_000 + s, per_user=True)[0])
           for s in range(reps)]
    agg, per = np.array(agg), np.array(per)
    cells = agg.shape[1]
    for j in range(cells):
        assert stats.ks_2samp(agg[:, j], per[:, j]).pvalue > 1e-4 / cells, j


def test_noisy_views_are_unbiased():
    # Mean over 400 seeds of each noisy cell is within 4 sd/sqrt(400) of the truth
    # (sd from the oracle's exact variance of a group of this size).
    data, plan = small_plan("grr")
    reps = 400
    tables = [collect(data, plan, rng=s) for s in range(reps)]
    for g, spec in enumerate(plan.groups):
        truth = data.marginal(spec.attributes).values
        est = np.array([t[g].table for t in tables])
        sd = est.std(axis=0, ddof=1)
        assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * sd / np.sqrt(reps) + 1e-12)


def test_noiseless_views_split_users_as_collect_does():
    """At eps = 60 GRR reports the truth with probability 1 - 1e-26, so a collection's
    unbiased views are exactly its groups' own marginals: the no-noise views (same rng)
    must equal them, and the population views must equal the whole data's marginals."""
    from dpmarginals.local.error_sources import noiseless_views, population_views, split_error

    data, plan = small_plan("grr")
    plan = Plan("test", 60.0, plan.domain, group_specs(
        plan.domain, [g.attributes for g in plan.groups], 60.0, "grr"))
    seed = np.random.SeedSequence(11)
    views = collect(data, plan, rng=seed)
    clean = noiseless_views(data, plan, rng=seed)
    for v, c in zip(views, clean, strict=True):
        assert v.attributes == c.attributes and v.users == c.users
        np.testing.assert_allclose(v.table, c.table, atol=1e-12)
    other = noiseless_views(data, plan, rng=np.random.SeedSequence(12))
    assert not all(np.allclose(o.table, c.table) for o, c in zip(other, clean, strict=True))
    pop = population_views(data, plan, [v.users for v in views])
    for p in pop:
        np.testing.assert_allclose(p.table, data.marginal(p.attributes).values)
    assert split_error(5.0, 2.0, 0.5) == {"noise": 3.0, "sampling": 1.5, "reconstruction": 0.5}


def test_reports_collected_once_release_as_run_does():
    """CALM.run = plan + collect + release, so one collection can feed both inferences."""
    from dpmarginals.local.calm import CALM

    data, _ = small_plan("grr")
    calm = CALM(epsilon=1.0, k=2, l=2, m=3)
    plan = calm.plan(data.domain, data.n)
    ran = calm.run(data, rng=5)
    released = calm.release(plan, collect(data, plan, rng=5), data.n)
    for attrs, table in ran.views:
        np.testing.assert_array_equal(table, released.marginal(list(attrs)).values)
    assert ran.info["plan_hash"] == released.info["plan_hash"] == plan.hash


def test_true_counts_in_one_pass_equal_each_groups_own():
    """The streaming count equals counting each group's members, for sets of different
    sizes and orders, on stored and on drawn users."""
    from dpmarginals.local.collect import _group_labels, true_counts

    rng = np.random.default_rng(40)
    sizes = (3, 2, 5, 2, 4, 3)
    codes = np.column_stack([rng.integers(0, s, 700) for s in sizes])
    data = Dataset(codes, Domain(tuple("abcdef"), sizes))
    sets = [("a", "c"), ("f", "b", "e"), ("d",), ("e", "a", "c", "b"), ("a", "c")]
    for users in (data, data.sample(3000, rng=41)):
        labels = _group_labels(users.n, len(sets), np.random.default_rng(42))
        got = true_counts(users, sets, labels)
        for g, attrs in enumerate(sets):
            members = users.take(np.flatnonzero(labels == g))
            np.testing.assert_array_equal(got[g], members.counts(attrs).ravel())
    np.testing.assert_array_equal(assign_groups(1003, 10, rng=0),
                                  _group_labels(1003, 10, np.random.default_rng(0)))
