"""CALM end to end: plan, collection, consistency, reconstruction, accuracy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpmarginals import CALM, Dataset, Domain, load_synopsis
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference import project
from dpmarginals.planning.error_model import noise_error, sampling_error
from dpmarginals.synopsis.base import UniformSynopsis
from dpmarginals.synopsis.evaluate import evaluate, random_queries
from populations import correlated_binary


def test_plan_is_the_papers_worked_example():
    dom = Domain(tuple(f"a{j}" for j in range(8)), (2,) * 8)
    plan = CALM(epsilon=2.0, k=3).plan(dom, 65536)
    assert (plan.params["l"], plan.m) == (4, 14)
    covered = {frozenset(s) for g in plan.groups for s in itertools.combinations(g.attributes, 3)}
    assert len(covered) == math.comb(8, 3)  # every 3-way marginal is inside some group
    for eps in (0.2, 0.6, 1.0, 1.4):
        assert CALM(epsilon=eps, k=3).plan(dom, 65536).params["l"] == 2


def test_plan_round_trips_through_json():
    from dpmarginals.protocol.plan import Plan

    dom = Domain(("x", "y", "z", "w"), (3, 2, 4, 2))
    plan = CALM(epsilon=1.0, k=2).plan(dom, 10_000)
    again = Plan.from_dict(__import__("json").loads(plan.to_json()))
    assert again == plan and again.hash == plan.hash
    tampered = plan.to_dict()
    tampered["epsilon"] = 5.0
    with pytest.raises(DPMarginalsError, match="hash"):
        Plan.from_dict(tampered)


def test_views_are_consistent_and_non_negative_after_run():
    data = correlated_binary(2**14, 8, seed=1)
    syn = CALM(epsilon=0.5, k=3).run(data, rng=7)
    assert syn.info["consistent"] and syn.info["max_inconsistency"] <= 1e-9
    assert 1 < syn.info["consistency_rounds"] <= 60 and syn.info["min_cell"] >= 0
    assert 0 <= syn.info["consistency_gap"] < 0.1 and 0 <= syn.info["consistency_mixing"] < 1e-6
    assert 0 <= syn.info["consistency_dual_rounds"] < syn.info["consistency_rounds"]
    sizes = data.domain.sizes
    views = [(data.domain.indices(a), t) for a, t in syn.views]
    for (a1, t1), (a2, t2) in itertools.combinations(views, 2):
        shared = tuple(sorted(set(a1) & set(a2)))
        if shared:
            assert np.allclose(project(a1, t1, shared), project(a2, t2, shared), atol=1e-9)
    for _, t in views:
        assert t.min() >= -1e-12
        assert abs(t.sum() - 1) < 1e-9
    assert len(sizes) == 8


def test_sse_matches_the_error_analysis_when_every_query_is_covered():
    # l >= k: no reconstruction error, so the SSE of a k-way query is noise + sampling.
    # CALM §4.3 predicts k*NE (eq. 7) + SE (eq. 8, an upper bound).  Budget: within 2x.
    n, d, k, eps = 2**16, 8, 3, 2.0
    data = correlated_binary(n, d, seed=2)
    method = CALM(epsilon=eps, k=k)
    plan = method.plan(data.domain, n)
    l, m = plan.params["l"], plan.m
    assert l >= k
    predicted = k * noise_error(n, d, eps, l) + sampling_error(n, m)
    queries = random_queries(data.domain, k, 20, rng=3)
    sse = [evaluate(method.run(data, rng=s), data, queries).sse_mean for s in range(10)]
    measured = float(np.mean(sse))
    assert predicted / 2 <= measured <= 2 * predicted, (measured, predicted)


def test_per_user_and_aggregate_paths_give_the_same_accuracy():
    # Same data, same plan; both paths' mean SSE over 8 seeds agree within 35%
    # (each mean has a relative sd of about 10% here).
    data = correlated_binary(2**13, 6, seed=4)
    queries = random_queries(data.domain, 2, 15, rng=5)
    agg = [evaluate(CALM(epsilon=1.0, k=2).run(data, rng=s), data, queries).sse_mean
           for s in range(8)]
    per = [evaluate(CALM(epsilon=1.0, k=2, per_user=True).run(data, rng=s), data,
                    queries).sse_mean for s in range(8)]
    assert abs(np.mean(agg) / np.mean(per) - 1) < 0.35


def test_error_falls_as_epsilon_grows_and_beats_uniform():
    data = correlated_binary(2**15, 8, seed=6)
    queries = random_queries(data.domain, 3, 20, rng=8)
    uniform = evaluate(UniformSynopsis(data.domain), data, queries).sse_mean
    sse = {eps: np.mean([evaluate(CALM(epsilon=eps, k=3).run(data, rng=s), data,
                                  queries).sse_mean for s in range(3)])
           for eps in (0.2, 1.0, 2.0)}
    assert sse[0.2] > sse[1.0] > sse[2.0]
    assert sse[1.0] * 10 < uniform


def test_reconstructs_queries_larger_than_planned_and_non_binary():
    rng = np.random.default_rng(9)
    dom = Domain(("a", "b", "c", "d", "e"), (3, 2, 4, 3, 2))
    codes = np.column_stack([rng.integers(0, s, 4000) for s in dom.sizes])
    data = Dataset(codes, dom)
    syn = CALM(epsilon=1.0, k=2).run(data, rng=1)
    table = syn.marginal(["e", "a", "c", "b"])
    assert table.values.shape == (2, 3, 4, 2)
    assert abs(table.values.sum() - 1) < 1e-6 and table.values.min() >= 0


def test_k8_over_32_binary_attributes():
    data = correlated_binary(2**14, 32, seed=10)
    syn = CALM(epsilon=1.0, k=8).run(data, rng=2)
    q = random_queries(data.domain, 8, 3, rng=4)
    for attrs in q:
        t = syn.marginal(attrs)
        assert t.values.shape == (2,) * 8 and abs(t.values.sum() - 1) < 1e-6


def test_synopsis_save_and_load(tmp_path):
    data = correlated_binary(4000, 5, seed=11)
    syn = CALM(epsilon=1.0, k=2).run(data, rng=3)
    path = tmp_path / "s.json"
    syn.save(path)
    back = load_synopsis(path)
    for attrs in (["a0", "a3"], ["a4", "a1", "a2"]):
        assert np.allclose(back.marginal(attrs).values, syn.marginal(attrs).values)


def test_bad_parameters_are_named():
    dom = Domain(("a", "b"), (2, 2))
    with pytest.raises(DPMarginalsError, match="epsilon"):
        CALM(epsilon=0.0, k=2)
    with pytest.raises(DPMarginalsError, match="k = 3 exceeds"):
        CALM(epsilon=1.0, k=3).plan(dom, 100)
    with pytest.raises(DPMarginalsError, match="oracle"):
        CALM(epsilon=1.0, k=2, oracle="magic")
    with pytest.raises(DPMarginalsError, match="unknown attribute 'zz'"):
        CALM(epsilon=1.0, k=1).run(Dataset(np.zeros((50, 2), int), dom), rng=0).marginal(["zz"])


needs_data = pytest.mark.needs_data


@needs_data
@pytest.mark.parametrize(("name", "d", "n", "ratio_at_1"), [("msnbc", 16, 65536, 10.0),
                                                           ("adult3", 8, None, 2.0)])
def test_real_data_error_falls_with_epsilon(name, d, n, ratio_at_1):
    # Seeded; 20 queries x 2 runs per epsilon.  msnbc must be >= 10x below Uniform at
    # eps = 1 (issue #3).  adult3 (45,222 users, 28 groups of 9-cell marginals) cannot be:
    # Algorithm 1's own noise term k*NE is already 0.008 there, against a Uniform SSE of
    # 0.05, so we assert the factor the analysis allows (measured: 3-4x).
    from dpmarginals.datasets import load

    data = load(name, d=d, n=n, rng=0)
    queries = random_queries(data.domain, 3, 20, rng=1)
    uniform = evaluate(UniformSynopsis(data.domain), data, queries).sse_mean
    sse = [np.mean([evaluate(CALM(epsilon=eps, k=3).run(data, rng=s), data, queries).sse_mean
                    for s in range(2)]) for eps in (0.2, 1.0, 2.0)]
    assert sse[0] > sse[1] > sse[2]
    assert sse[1] * ratio_at_1 < uniform


def test_plan_hash_depends_on_attribute_order():
    a = CALM(epsilon=1.0, k=1, l=1, m=2).plan(Domain(("x", "y"), (2, 3)), 100)
    b = CALM(epsilon=1.0, k=1, l=1, m=2).plan(Domain(("y", "x"), (3, 2)), 100)
    assert a.hash != b.hash
