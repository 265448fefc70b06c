"""The signed empirical-Bayes prior for single-coefficient blocks (inference.signed_prior)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.inference import shrinkage
from dpmarginals.inference.shrinkage import eb_shrink, fit_mixture
from dpmarginals.inference.signed_prior import (
    SIGN_TEST_LEVEL,
    _components,
    fit_signed,
    prefers_sign,
    sign_statistic,
)
from dpmarginals.inference.views import NoisyView


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("r", [-0.3, -0.05, 0.0, 0.02, 0.1, 0.4])
def test_component_posterior_matches_numerical_integration(sign: float, r: float) -> None:
    """A half-normal component's marginal likelihood and posterior moments (closed form,
    truncated normals) equal the integrals of prior x likelihood, far into both tails."""
    v, g, s = 0.03**2, 0.05**2, 0.7
    loglik, first, second = _components(np.array([r]), np.array([v]), np.array([s]),
                                        np.array([sign]), np.array([g]))
    sd_prior = math.sqrt(s * g)
    lo, hi = (0.0, 12 * sd_prior) if sign > 0 else (-12 * sd_prior, 0.0)

    def joint(mu: float, power: int) -> float:
        prior = 2 * stats.norm.pdf(mu, 0.0, sd_prior)
        return mu**power * prior * stats.norm.pdf(r, mu, math.sqrt(v))

    z0, z1, z2 = (integrate.quad(joint, lo, hi, args=(p,), epsabs=0, epsrel=1e-10,
                                 points=[r] if lo < r < hi else None)[0] for p in range(3))
    assert loglik[0, 0] == pytest.approx(math.log(z0), abs=1e-7)
    assert first[0, 0] == pytest.approx(z1 / z0, rel=1e-6, abs=1e-12)
    assert second[0, 0] == pytest.approx(z2 / z0, rel=1e-6, abs=1e-12)


def test_the_null_component_is_the_normal_likelihood_at_zero() -> None:
    loglik, first, second = _components(np.array([0.1]), np.array([0.01]), np.array([1.0]),
                                        np.array([0.0]), np.array([0.0]))
    assert loglik[0, 0] == pytest.approx(stats.norm.logpdf(0.1, 0.0, 0.1))
    assert first[0, 0] == second[0, 0] == 0.0


def test_on_symmetric_residuals_it_is_the_scale_mixture() -> None:
    """Each normal of the scale mixture is its two half-normals with equal weight, so on
    residuals that come in +- pairs the two fits shrink alike."""
    gen = np.random.default_rng(3)
    half = gen.normal(0, 0.02, 200) * (gen.random(200) < 0.3) + gen.normal(0, 0.01, 200)
    resid = np.concatenate([half, -half])
    noise = np.tile(gen.uniform(0.5, 2, 200) * 1e-4, 2)
    scale = np.tile(gen.uniform(0.3, 3, 200), 2)
    signed = fit_signed(resid, noise, scale)
    _, _, factor = fit_mixture([np.array([x]) for x in resid], noise, scale=scale)
    np.testing.assert_allclose(signed.mean, factor * resid, rtol=1e-9, atol=1e-15)
    half_weights = signed.weights[1:].reshape(2, -1)   # the negative, then the positive
    np.testing.assert_allclose(half_weights[0], half_weights[1], rtol=1e-6, atol=1e-12)


def test_it_learns_the_sign_the_data_prefer() -> None:
    """Interactions that are all positive (Kosarak's pairs): over 20 seeded draws of 400
    blocks, the signed prior's squared error is below the scale mixture's in every draw and
    by at least 5% on average (measured: 0.78-0.97 of it, mean 0.86); a negative residual is
    shrunk harder than a positive one of the same size."""
    ratios = []
    for seed in range(20):
        gen = np.random.default_rng(seed)
        mu = np.abs(gen.normal(0, 0.05, 400)) * (gen.random(400) < 0.2)
        noise = np.full(400, 0.02**2) * gen.uniform(0.5, 2, 400)
        resid = mu + gen.normal(0, 1, 400) * np.sqrt(noise)
        signed = fit_signed(resid, noise)
        _, _, factor = fit_mixture([np.array([x]) for x in resid], noise)
        ratios.append(((signed.mean - mu) ** 2).sum() / ((factor * resid - mu) ** 2).sum())
        probe = fit_signed(np.append(resid, [0.04, -0.04]), np.append(noise, [4e-4, 4e-4]))
        assert probe.mean[-2] > abs(probe.mean[-1])
    assert max(ratios) < 1.0
    assert np.mean(ratios) < 0.95


def test_posterior_energy_estimates_the_total_energy() -> None:
    """Summed over 2,000 blocks, the posterior energies are within 10% of the true total
    (its sampling sd here is ~3%)."""
    gen = np.random.default_rng(7)
    mu = -np.abs(gen.normal(0, 0.03, 2000)) * (gen.random(2000) < 0.3)
    noise = np.full(2000, 0.01**2)
    fit = fit_signed(mu + gen.normal(0, 0.01, 2000), noise)
    assert fit.energy.sum() == pytest.approx((mu**2).sum(), rel=0.10)
    assert np.all((fit.kept >= 0) & (fit.kept <= 1))


def _views(data: Dataset, sets: list[tuple[str, ...]], var: float, seed: int) -> list[NoisyView]:
    gen = np.random.default_rng(seed)
    out = []
    for s in sets:
        table = data.marginal(list(s)).values
        out.append(NoisyView(s, table + gen.normal(0, math.sqrt(var), table.shape), 1000, var))
    return out


def _dataset(sizes: dict[str, int], seed: int) -> Dataset:
    gen = np.random.default_rng(seed)
    n = 4000
    base = gen.integers(0, 2, n)
    cols = {a: (base + gen.integers(0, c, n) * (gen.random(n) < 0.5)) % c
            for a, c in sizes.items()}
    return Dataset(np.column_stack(list(cols.values())), Domain.from_dict(sizes))


def test_eb_shrink_uses_it_only_for_binary_blocks() -> None:
    """``signs=True`` changes the shrinkage of orders whose blocks are one coefficient
    and leaves every other order as the scale mixture has it; the tables stay consistent."""
    sets = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    three = _dataset({"a": 3, "b": 3, "c": 3, "d": 3}, 1)
    views = _views(three, sets, 1e-4, 2)
    for sub, table in eb_shrink(three.domain, views, signs=True).tables.items():
        np.testing.assert_array_equal(table, eb_shrink(three.domain, views).tables[sub])
    binary = _dataset({"a": 2, "b": 2, "c": 2, "d": 2}, 1)
    views = _views(binary, sets, 1e-4, 2)
    signed, plain = eb_shrink(binary.domain, views, signs=True), eb_shrink(binary.domain, views)
    assert any(not np.allclose(signed.tables[s], plain.tables[s]) for s in sets)
    for s in sets:
        assert signed.tables[s].sum() == pytest.approx(1.0)
        for a in s:
            axis = tuple(i for i, b in enumerate(s) if b != a)
            np.testing.assert_allclose(signed.tables[s].sum(axis=axis), signed.tables[(a,)],
                                       atol=1e-12)


@pytest.mark.parametrize("sizes", [[1.0] * 10, [0.3, 1.0, 2.0, 0.5, 4.0, 1.5, 0.2, 3.0, 1.1, 0.7]])
def test_sign_statistic_has_mean_0_and_variance_1_over_every_sign_flip(sizes: list[float]
                                                                        ) -> None:
    """Enumerated over all 2^10 sign flips of fixed sizes (the test's null: no preferred
    sign), the statistic's mean is 0 and its variance 1, for any noise variances; with equal
    sizes it rejects exactly the binomial tail |#pos - #neg| > z sqrt(n)."""
    size = np.array(sizes)
    noise = np.linspace(0.5, 2.0, size.size) ** 2
    flips = np.array(np.meshgrid(*[[-1.0, 1.0]] * size.size)).reshape(size.size, -1).T
    t = np.array([sign_statistic(f * size * np.sqrt(noise), noise) for f in flips])
    assert t.mean() == pytest.approx(0.0, abs=1e-12)
    assert (t**2).mean() == pytest.approx(1.0, rel=1e-12)
    # scale-free, and finite where z^2 would overflow
    for f in flips[:8]:
        r = f * size * np.sqrt(noise)
        assert sign_statistic(r * 1e300, noise) == pytest.approx(sign_statistic(r, noise),
                                                                  rel=1e-12)
    if len(set(sizes)) == 1:
        cut = stats.norm.isf(SIGN_TEST_LEVEL / 2) * math.sqrt(size.size)
        expect = np.abs(flips.sum(axis=1)) > cut
        got = [prefers_sign(f * size * np.sqrt(noise), noise) for f in flips]
        np.testing.assert_array_equal(got, expect)


def test_prefers_sign_rarely_fires_without_a_preference_and_finds_one_sided_energy() -> None:
    """400 seeded orders of 40 blocks whose interactions have random signs: the test fires
    in at most 5% + 4.5 standard errors of them (the normal approximation's level; a failure
    with probability < 1e-5 if it holds).  40 blocks whose interactions (prior sd 3x the
    noise's) all take one sign: the statistic's mean is about 4.7, so missing it (|T| <
    1.96) is a > 3.5-sd event per draw; none of 50 draws of either sign may miss."""
    gen = np.random.default_rng(36)
    noise = gen.uniform(0.5, 2.0, 40) ** 2
    fired = 0
    for _ in range(400):
        mu = gen.normal(0.0, 3.0, 40) * np.sqrt(noise)
        fired += prefers_sign(mu + gen.normal(0.0, 1.0, 40) * np.sqrt(noise), noise)
    se = math.sqrt(SIGN_TEST_LEVEL * (1 - SIGN_TEST_LEVEL) / 400)
    assert fired / 400 <= SIGN_TEST_LEVEL + 4.5 * se
    for sign in (1.0, -1.0):
        for _ in range(50):
            mu = sign * np.abs(gen.normal(0.0, 3.0, 40)) * np.sqrt(noise)
            assert prefers_sign(mu + gen.normal(0.0, 1.0, 40) * np.sqrt(noise), noise)


@pytest.mark.parametrize("prefers", [True, False])
def test_eb_shrink_sign_test_picks_the_signed_prior_or_the_scale_mixture(
        prefers: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sign_test=True``: an order whose residuals pass the test is shrunk exactly as
    ``signs=True`` shrinks it, one that does not exactly as the scale mixture does."""
    sets = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    binary = _dataset({"a": 2, "b": 2, "c": 2, "d": 2}, 1)
    views = _views(binary, sets, 1e-4, 2)
    monkeypatch.setattr(shrinkage, "prefers_sign", lambda r, v: prefers)
    tested = eb_shrink(binary.domain, views, signs=True, sign_test=True)
    same = eb_shrink(binary.domain, views, signs=prefers)
    for s in sets:
        np.testing.assert_array_equal(tested.tables[s], same.tables[s])
    kind = "signed" if prefers else "mixture"  # every order here is binary
    assert tested.prior_kind == {1: kind, 2: kind} == same.prior_kind


def test_positively_associated_binary_pairs_pass_the_sign_test() -> None:
    """Four binary attributes that all copy one coin half the time: every pair is positively
    associated, the pairs' residuals pass the test and keep the signed prior (the 1-way
    marginals shrunk toward their centre, as the releases do)."""
    sets = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d"), ("b", "d")]
    binary = _dataset({"a": 2, "b": 2, "c": 2, "d": 2}, 1)
    views = _views(binary, sets, 1e-6, 2)
    tested = eb_shrink(binary.domain, views, signs=True, sign_test=True, location=True)
    signed = eb_shrink(binary.domain, views, signs=True, location=True)
    for s in sets:
        np.testing.assert_array_equal(tested.tables[s], signed.tables[s])
