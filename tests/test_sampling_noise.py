"""Shrinkage counts the groups' sampling error (CALM §4.3) when told the population."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpmarginals import Domain
from dpmarginals.inference.helmert import helmert, project
from dpmarginals.inference.shrinkage import eb_shrink, sampling_variance
from dpmarginals.inference.views import NoisyView
from dpmarginals.local.adaptive import Adaptive, calibrated_views
from dpmarginals.local.calm import CALM
from dpmarginals.local.collect import collect
from dpmarginals.local.error_sources import noiseless_views, population_views
from test_pgm import chain_data

POPULATIONS = [([0, 0, 1, 2, 2, 2], 2), ([0, 1, 1, 3, 3, 3, 2], 3), ([0, 0, 0, 0, 1, 1], 4)]


@pytest.mark.parametrize("population, users", POPULATIONS)
def test_sampling_variance_is_the_exact_mean_over_every_sample(population, users):
    """Every sample of ``users`` of the population's records without replacement, in exact
    arithmetic.  The C - 1 non-constant contrasts of an orthonormal basis span the
    complement of the constant vector, and a sample's marginal sums to 1, so their summed
    variance is the trace of the marginal's covariance: the formula must give that trace
    over C - 1 exactly; and, in floating point, the mean over the Helmert contrasts."""
    cells = max(population) + 1
    truth = [Fraction(population.count(x), len(population)) for x in range(cells)]
    samples = list(itertools.combinations(population, users))
    trace = Fraction(0)
    for x in range(cells):
        shares = [Fraction(sample.count(x), users) for sample in samples]
        trace += sum((s - truth[x]) ** 2 for s in shares) / len(samples)
    got = sampling_variance(np.array([float(p) for p in truth]), users, len(population))
    assert got == pytest.approx(float(trace / (cells - 1)), rel=1e-12)
    assert trace > 0

    contrasts = helmert(cells)[1:]
    marginals = np.array([[sample.count(x) / users for x in range(cells)] for sample in samples])
    coefficients = marginals @ contrasts.T
    assert got == pytest.approx(float(coefficients.var(axis=0).mean()), rel=1e-12)


def test_no_sampling_error_when_the_group_is_the_population_or_the_attribute_constant():
    assert sampling_variance(np.array([0.2, 0.8]), 500, 500) == 0.0
    assert sampling_variance(np.array([1.0, 0.0]), 10, 500) == 0.0
    assert sampling_variance(np.array([0.5, 0.5]), 0, 500) == 0.0


def test_eb_shrink_adds_each_sets_sampling_error_only_when_told_the_population():
    dom = Domain(("a", "b", "c"), (2, 2, 2))
    rng = np.random.default_rng(3)
    views = [NoisyView(attrs, rng.dirichlet(np.ones(4)).reshape(2, 2), 250, 1e-3)
             for attrs in (("a", "b"), ("b", "c"), ("a", "c"), ("a", "b"))]
    plain = eb_shrink(dom, views)
    counted = eb_shrink(dom, views, population=1000)
    assert plain.noise.keys() == counted.noise.keys()
    for sub, noise in plain.noise.items():
        inside = [v for v in views if set(sub) <= set(v.attributes)]
        # equal variances and equal complements: the pooled table is the plain mean
        pooled = np.mean([project(v.attributes, v.table, sub) for v in inside], axis=0)
        if len(sub) == 1:
            pooled = pooled - (pooled.sum() - 1.0) / pooled.size
        extra = sampling_variance(pooled, 250 * len(inside), 1000)
        assert extra > 0
        assert counted.noise[sub] == pytest.approx(noise + extra, rel=1e-12), sub


def test_views_that_are_not_samples_add_no_sampling_error():
    """The error split's clean views (a group's exact marginal claiming its sampling error
    as its variance, or the population's own) are not ``sampled``: calm-pgm's release,
    which tells shrinkage the population, must not count that error again."""

    data = chain_data(3000, 4, seed=2)
    plan = CALM(epsilon=1.0, k=2).plan(data.domain, data.n)
    views = collect(data, plan, rng=4)
    for clean in (noiseless_views(data, plan, rng=4),
                  population_views(data, plan, [v.users for v in views])):
        assert not any(v.sampled for v in clean)
        plain, told = eb_shrink(data.domain, clean), eb_shrink(data.domain, clean,
                                                               population=data.n)
        assert told.noise == plain.noise
    assert all(v.sampled for v in views)
    assert eb_shrink(data.domain, views, population=data.n).noise != eb_shrink(
        data.domain, views).noise


def test_releases_pass_their_population_and_directly_given_views_do_not(monkeypatch):
    """The adaptive release (numpy and graphical model) and calm-pgm shrink with the
    collection's n as the population; views handed in directly (the error split's cleaner
    ones, which claim their own sampling error or none) keep the oracles' noise only."""
    import dpmarginals.inference.pgm as pgm_module
    import dpmarginals.local.adaptive as adaptive_module

    seen: list[int | None] = []

    def spy(original):
        def wrapped(*args, **kwargs):
            seen.append(kwargs.get("population"))
            return original(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(adaptive_module, "eb_shrink", spy(adaptive_module.eb_shrink))
    data = chain_data(4000, 5, seed=1)
    method = Adaptive(epsilon=1.0, k=2, phases=2)
    phases = method.collect(data, rng=5)
    plans, counts = [p.plan for p in phases], [p.counts for p in phases]
    method.release(plans, counts)
    assert seen == [4000]
    views = [v for p in phases for v in calibrated_views(p.plan, p.counts)]
    method.release_views(data.domain, views, {})
    assert seen == [4000, None]

    pytest.importorskip("mbi")
    monkeypatch.setattr(pgm_module, "eb_shrink", spy(pgm_module.eb_shrink))
    seen.clear()
    calm = CALM(epsilon=1.0, k=2, inference="pgm")
    plan = calm.plan(data.domain, data.n)
    synopsis = calm.release(plan, collect(data, plan, rng=7), data.n)
    assert seen == [4000]
    assert synopsis.options["population"] == 4000  # so a bootstrap re-fit repeats it
    seen.clear()
    Adaptive(epsilon=1.0, k=2, phases=2, inference="pgm").release(plans, counts)
    assert seen == [4000]


def test_marginal_baselines_count_sampling_only_where_their_variance_leaves_it_out(monkeypatch):
    """AM and its Cormode kin (MargRR, MargPS) release through the graphical model with the
    collection's n as the population: each group reports its marginal through an oracle
    whose variance is its noise alone.  MargHT's coefficient variance ``1 / ((2p - 1)^2 R)``
    already bounds the sampling of its reporters, so it passes none."""
    pytest.importorskip("mbi")
    import dpmarginals.inference.pgm as pgm_module
    from dpmarginals.local.cormode import MargPS
    from dpmarginals.local.direct import AM
    from dpmarginals.local.fourier import MargHT

    seen: list[int | None] = []
    original = pgm_module.eb_shrink

    def spy(*args, **kwargs):
        seen.append(kwargs.get("population"))
        return original(*args, **kwargs)

    monkeypatch.setattr(pgm_module, "eb_shrink", spy)
    data = chain_data(3000, 4, seed=2)
    for method, expected in [(AM(epsilon=1.0, k=2, inference="pgm"), 3000),
                             (MargPS(epsilon=1.0, k=2, inference="pgm"), 3000),
                             (MargHT(epsilon=1.0, k=2, inference="pgm"), None)]:
        seen.clear()
        synopsis = method.run(data, rng=3)
        assert seen == [expected], method.name
        assert synopsis.options.get("population") == expected
