"""The collection spine: group assignment, and the per-user vs. aggregate paths."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpmarginals import Dataset, Domain
from dpmarginals.errors import DPMarginalsError
from dpmarginals.local.calm import group_specs
from dpmarginals.local.collect import assign_groups, collect, group_supports
from dpmarginals.plan import Plan


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
