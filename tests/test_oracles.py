"""Frequency oracles: unbiasedness, variance, exact privacy, path agreement, validation.

Every statistical test is seeded, so a pass/fail is reproducible; the bounds are
chosen so that a correct implementation fails with probability <= ~1e-4 per check
(the error budget of each test is stated in a comment).  The heavy statistics use
``sample_support``; ``perturb`` + ``support`` get smaller checks and a
distributional comparison with ``sample_support``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.linalg import hadamard

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.randomness import SecureRandom, client_rng
from dpmarginals.oracles import (
    GRR,
    HR,
    OLH,
    ORACLES,
    OUE,
    SUE,
    adaptive_oracle,
    best_oracle,
    fwht,
    make_oracle,
)
from dpmarginals.oracles.olh import PRIME
from dpmarginals.protocol import randomizers

NAMES = ["grr", "oue", "olh", "hr", "sue"]


def perturb(oracle, values, rng=None):
    """The device's randomizer of ``oracle`` (:mod:`dpmarginals.protocol.randomizers`)."""
    return randomizers.perturb(oracle, np.asarray(values), client_rng(rng))
# (epsilon, true counts): a skewed distribution with an empty cell; n = 1200 and 1000.
CONFIGS = [
    (1.0, np.array([500, 300, 200, 150, 50, 0])),
    (0.5, np.array([100, 0, 80, 60, 40, 20, 10, 90, 150, 50, 30, 70, 120, 110, 40, 30])),
    (3.0, np.array([0, 250, 250, 250, 250])),
]


def _trials_sampled(oracle, counts, trials, seed):
    rng = np.random.default_rng(seed)
    n = int(counts.sum())
    return np.stack([oracle.sample_support(counts, rng=rng) for _ in range(trials)]), n


def _trials_per_user(oracle, counts, trials, seed):
    """Support vectors of `trials` independent populations, through perturb + support."""
    n = int(counts.sum())
    values = np.tile(np.repeat(np.arange(counts.size), counts), trials)
    reports = perturb(oracle, values, rng=seed)
    return np.stack([oracle.support(reports[t * n : (t + 1) * n]) for t in range(trials)]), n


# --- (1) + (2) unbiasedness and variance, heavy: exact sampler ----------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_unbiased_and_variance_sampled(name, config):
    # Budget: T = 4000 trials.  Mean: |mean - f| <= 4 sd / sqrt(T) per cell (two-sided
    # normal tail 6e-5 per cell).  Variance: the sample variance of T draws has relative
    # sd ~ sqrt(2 / T) = 2.2%, so the 15% tolerance is ~6.7 sd.
    eps, counts = CONFIGS[config]
    oracle = make_oracle(name, eps, counts.size)
    trials = 4000
    supports, n = _trials_sampled(oracle, counts, trials, seed=100 + config)
    est = oracle.estimate(supports, n)  # (T, L): estimate broadcasts over leading axes
    np.testing.assert_allclose(est[0], oracle.estimate(supports[0], n))
    truth = counts / n
    var = oracle.variance(n, truth)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * np.sqrt(var / trials))
    np.testing.assert_allclose(est.var(axis=0, ddof=1), var, rtol=0.15)


# --- (1) + (2) unbiasedness and variance, light: the client path ---------------------------


@pytest.mark.parametrize("name", NAMES)
def test_unbiased_and_variance_per_user(name):
    # Budget: T = 500 populations of n = 1200.  Mean: 4 sd / sqrt(T) per cell (6e-5 each).
    # Variance: mean of z^2 over T x L standardized cells; its sd is ~ sqrt(2 / (T L)) ~ 2.6%
    # (a little more with the cells' correlation), so the 15% tolerance is > 5 sd.
    eps, counts = CONFIGS[0]
    oracle = make_oracle(name, eps, counts.size)
    trials = 500
    supports, n = _trials_per_user(oracle, counts, trials, seed=8)
    est = oracle.estimate(supports, n)
    truth = counts / n
    var = oracle.variance(n, truth)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * np.sqrt(var / trials))
    z2 = (est - truth) ** 2 / var
    assert abs(z2.mean() - 1) <= 0.15


# --- (3) exact privacy -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [2, 3, 5, 8])
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_exact_privacy(name, size, eps):
    # The law's exact ratio (Fractions) is at most e^eps (a rational lower bound of it,
    # within 2^-127) and uses the budget up to the 32-bit thresholds (1e-7 relative); the
    # float output distributions sum to 1 (1e-12), are positive and agree with the ratio.
    from dpmarginals.core.exact import exp_lower_bound

    oracle = make_oracle(name, eps, size)
    ratio = oracle.privacy_ratio()
    assert ratio <= exp_lower_bound(Fraction(eps))
    assert float(ratio) >= math.exp(eps) * (1 - 1e-7)
    dists = np.stack([oracle.output_distribution(x) for x in range(size)])
    np.testing.assert_allclose(dists.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (dists > 0).all()
    worst = (dists.max(axis=0) / dists.min(axis=0)).max()
    assert worst == pytest.approx(float(ratio), rel=1e-9)


def _output_index(oracle, reports, value):
    """Map reports to the index space of output_distribution (OLH: y relative to H(x))."""
    if oracle.name == "grr":
        return reports
    if oracle.name in ("oue", "sue"):
        return reports[:, 0].astype(np.int64)  # L <= 8: the single byte is the index
    if oracle.name == "hr":
        return 2 * reports[:, 0] + reports[:, 1]
    return (reports[:, 1] - oracle.hash_values(reports[:, 0], value)) % oracle.g


def _expected_probs(oracle, value):
    if oracle.name != "olh":
        return oracle.output_distribution(value)
    # Given any seed: y = H(x) w.p. p, each other residue w.p. (1 - p) / (g - 1).
    probs = np.full(oracle.g, (1 - oracle.p) / (oracle.g - 1))
    probs[0] = oracle.p
    return probs


@pytest.mark.parametrize("name", NAMES)
def test_perturb_follows_output_distribution(name):
    # Budget: chi-squared goodness of fit of 100k reports per input, p >= 1e-4 (three
    # inputs, so a correct sampler fails with probability ~3e-4 for a fresh seed).
    oracle = make_oracle(name, 1.0, 3)
    for value in range(3):
        reports = perturb(oracle, np.full(100_000, value), rng=40 + value)
        probs = _expected_probs(oracle, value)
        observed = np.bincount(_output_index(oracle, reports, value), minlength=probs.size)
        assert stats.chisquare(observed, probs * observed.sum()).pvalue >= 1e-4


@pytest.mark.parametrize(("eps", "size"), [(0.5, 1000), (2.0, 70_000)])
def test_grr_large_domains_follow_output_distribution(eps, size):
    # L not a power of two (Lemire's rejection) and L > 2^16 (two 32-bit words): 200k
    # reports of value 7; chi-squared of (value, the other values in 20 equal bins),
    # p >= 1e-4.
    oracle = GRR(eps, size)
    reports = perturb(oracle, np.full(200_000, 7), rng=17)
    others = np.delete(np.arange(size), 7)
    bins = np.array_split(others, 20)
    observed = [(reports == 7).sum()] + [np.isin(reports, b).sum() for b in bins]
    expected = [oracle.p] + [b.size * oracle.q for b in bins]
    assert sum(observed) == reports.size
    assert stats.chisquare(observed, np.array(expected) * reports.size).pvalue >= 1e-4


@pytest.mark.parametrize("name", ["oue", "sue"])
def test_unary_report_bytes_follow_the_product_law(name):
    # L = 20: bytes 0 and 1 hold 8 bits each, byte 2 the own bit (value 19 = bit 3) and
    # four padding bits.  For 100k reports: each full byte's 256 values against the law of
    # 8 independent Bernoulli(q) bits, and the last byte's 16 values against Bernoulli(q)
    # bits with bit 3 Bernoulli(p) (chi-squared, cells expecting >= 5, p >= 1e-4 each).
    oracle = make_oracle(name, 1.0, 20)
    reports = perturb(oracle, np.full(100_000, 19), rng=23)
    assert not (reports[:, 2] >> 4).any()
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    for column, width in ((0, 8), (1, 8), (2, 4)):
        rate = np.full(width, oracle.q)
        if column == 2:
            rate[3] = oracle.p
        law = np.where(bits[: 1 << width, :width], rate, 1 - rate).prod(axis=1)
        observed = np.bincount(reports[:, column], minlength=1 << width)
        keep = law * reports.shape[0] >= 5
        obs = np.append(observed[keep], observed[~keep].sum())
        exp = np.append(law[keep], law[~keep].sum()) * reports.shape[0]
        assert stats.chisquare(obs[exp > 0], exp[exp > 0]).pvalue >= 1e-4


# --- (4) the per-user path and the exact sampler agree in distribution ----------------------


@pytest.mark.parametrize("name", NAMES)
def test_per_user_path_matches_sampler(name):
    # Budget: T = 2000 populations per path.  For a populated and an empty cell: the means
    # agree within 4 sd of their difference (6e-5), the variances within 4 sd of theirs
    # (sd of a sample variance ~ sigma^2 sqrt(2 / T)), and a two-sample KS test gives
    # p >= 1e-4 (KS is conservative on discrete data).  For OLH only the per-cell
    # marginals are compared: sample_support is exact per cell, not jointly (docstring).
    counts = np.array([150, 60, 0, 90])
    oracle = make_oracle(name, 1.0, counts.size)
    trials = 2000
    per_user, _ = _trials_per_user(oracle, counts, trials, seed=11)
    sampled, _ = _trials_sampled(oracle, counts, trials, seed=12)
    for cell in (0, 2):
        a, b = per_user[:, cell].astype(float), sampled[:, cell].astype(float)
        assert abs(a.mean() - b.mean()) <= 4 * math.sqrt((a.var() + b.var()) / trials)
        pooled = (a.var() + b.var()) / 2
        assert abs(a.var() - b.var()) <= 4 * pooled * math.sqrt(2 / trials) * math.sqrt(2)
        assert stats.ks_2samp(a, b).pvalue >= 1e-4


def _report_of_output(oracle, index):
    """The report whose output_distribution index is ``index`` (GRR, OUE/SUE, HR)."""
    index = np.asarray(index, dtype=np.int64)
    if oracle.name == "grr":
        return index
    if oracle.name in ("oue", "sue"):
        return index.astype(np.uint8)[:, None]  # L <= 8: one byte
    return np.column_stack((index // 2, index % 2))


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "hr"])
def test_sampler_exact_jointly_small_population(name):
    # The exact law of the whole support vector for 3 users (values 0, 1, 1; L = 5),
    # built from output_distribution one user at a time, against 10k sample_support
    # draws: chi-squared goodness of fit (rarest outcomes merged until the bin expects
    # >= 5), p >= 1e-4.  This checks the joint law, not just each cell (OLH is exact per
    # cell only, so it is not here).  L = 5 < K - 1 matters for HR: with L = K - 1 its
    # support vector happens to have independent cells.
    oracle = make_oracle(name, 1.0, 5)
    values = [0, 1, 1]
    outputs = np.arange(oracle.output_distribution(0).size)
    single = [tuple(oracle.support(_report_of_output(oracle, [o])).tolist()) for o in outputs]
    exact: dict[tuple[int, ...], float] = {(0,) * 5: 1.0}
    for value in values:
        dist = oracle.output_distribution(value)
        step: dict[tuple[int, ...], float] = {}
        for state, prob in exact.items():
            for o in outputs:
                key = tuple(a + b for a, b in zip(state, single[o], strict=True))
                step[key] = step.get(key, 0.0) + prob * dist[o]
        exact = step
    assert math.isclose(sum(exact.values()), 1.0, abs_tol=1e-12)
    rng = np.random.default_rng(31)
    draws = 10_000
    seen: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        key = tuple(oracle.sample_support([1, 2, 0, 0, 0], rng=rng).tolist())
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) <= set(exact)
    keys = sorted(exact, key=exact.__getitem__)
    expected = np.array([exact[k] * draws for k in keys])
    observed = np.array([seen.get(k, 0) for k in keys])
    cut = int(np.searchsorted(np.cumsum(expected), 5.0)) + 1
    expected = np.concatenate(([expected[:cut].sum()], expected[cut:]))
    observed = np.concatenate(([observed[:cut].sum()], observed[cut:]))
    assert stats.chisquare(observed, expected).pvalue >= 1e-4


def test_hr_sampler_large_domain_fallback():
    # L K > 2^22 switches to the O(n) per-user draw; it must still return valid supports.
    oracle = HR(1.0, 2048)
    counts = np.zeros(2048, dtype=np.int64)
    counts[:10] = 100
    support = oracle.sample_support(counts, rng=3)
    assert support.shape == (2048,)
    assert ((support >= 0) & (support <= 1000)).all()


# --- (5) the secure client path -------------------------------------------------------------


def _assert_valid_reports(oracle, reports, n):
    if oracle.name == "grr":
        assert reports.shape == (n,)
        assert ((reports >= 0) & (reports < oracle.size)).all()
    elif oracle.name in ("oue", "sue"):
        assert reports.shape == (n, (oracle.size + 7) // 8)
        assert reports.dtype == np.uint8
        if oracle.size % 8:
            assert not (reports[:, -1] >> (oracle.size % 8)).any()
    elif oracle.name == "olh":
        a, b = reports[:, 0] >> 32, reports[:, 0] & 0xFFFFFFFF
        assert ((a >= 1) & (a < PRIME)).all()
        assert ((b >= 0) & (b < PRIME)).all()
        assert ((reports[:, 1] >= 0) & (reports[:, 1] < oracle.g)).all()
    else:
        assert ((reports[:, 0] >= 0) & (reports[:, 0] < oracle.K)).all()
        assert np.isin(reports[:, 1], [0, 1]).all()


@pytest.mark.parametrize("name", NAMES)
def test_secure_default_rng(name):
    # rng=None draws from the OS CSPRNG: unseeded, so the statistical check is loose:
    # each cell within 6 sd (failure probability ~2e-9 per cell).
    oracle = make_oracle(name, 1.0, 10)
    values = np.repeat(np.arange(10), 2000)
    reports = perturb(oracle, values)
    _assert_valid_reports(oracle, reports, values.size)
    est = oracle.estimate(oracle.support(reports), values.size)
    assert np.all(np.abs(est - 0.1) <= 6 * np.sqrt(oracle.variance(values.size, 0.1)))


class _OnlyWords(SecureRandom):
    """A secure source that records what a randomizer asks of it."""

    def __init__(self) -> None:
        self.calls: set[str] = set()

    def random(self, size=None):
        self.calls.add("random")
        return super().random(size)

    def integers(self, low, high=None, size=None):
        self.calls.add("integers")
        return super().integers(low, high, size)

    def words(self, count, bits):
        self.calls.add(f"words{bits}")
        return super().words(count, bits)


@pytest.mark.parametrize("name", NAMES)
def test_randomizers_draw_only_random_words(name):
    source = _OnlyWords()
    oracle = make_oracle(name, 1.0, 40)
    reports = perturb(oracle, np.arange(40), rng=source)
    _assert_valid_reports(oracle, reports, 40)
    assert source.calls <= {"words16", "words32"} and source.calls


@pytest.mark.parametrize("name", NAMES)
def test_seeded_perturb_is_reproducible(name):
    oracle = make_oracle(name, 1.0, 7)
    values = np.arange(7).repeat(3)
    np.testing.assert_array_equal(perturb(oracle, values, rng=5), perturb(oracle, values, rng=5))
    np.testing.assert_array_equal(
        oracle.sample_support([3, 0, 1, 2, 5, 0, 1], rng=5),
        oracle.sample_support([3, 0, 1, 2, 5, 0, 1], rng=5),
    )


@settings(max_examples=40, deadline=None, database=None)
@given(
    name=st.sampled_from(NAMES),
    eps=st.floats(0.05, 6.0),
    size=st.integers(2, 70),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 50),
)
def test_reports_valid_for_any_parameters(name, eps, size, seed, n):
    oracle = make_oracle(name, eps, size)
    values = np.random.default_rng(seed).integers(0, size, n)
    reports = perturb(oracle, values, rng=seed)
    _assert_valid_reports(oracle, reports, n)
    support = oracle.support(reports)
    assert support.shape == (size,)
    assert ((support >= 0) & (support <= n)).all()
    if name == "grr":
        assert support.sum() == n


# --- (6) validation -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", [0, -1.0, float("nan"), float("inf"), "abc"])
def test_rejects_bad_epsilon(name, eps):
    with pytest.raises(DPMarginalsError, match="epsilon"):
        ORACLES[name](eps, 4)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [1, 0, -3, 2.5, True, "4"])
def test_rejects_bad_size(name, size):
    with pytest.raises(DPMarginalsError, match="size"):
        ORACLES[name](1.0, size)


@pytest.mark.parametrize("name", NAMES)
def test_rejects_bad_values(name):
    oracle = make_oracle(name, 1.0, 5)
    with pytest.raises(DPMarginalsError, match="value 7 at index 1"):
        perturb(oracle, [0, 7, 2])
    with pytest.raises(DPMarginalsError, match="-1"):
        perturb(oracle, [-1])
    with pytest.raises(DPMarginalsError, match="integers"):
        perturb(oracle, [0.5])
    with pytest.raises(DPMarginalsError, match="value 5"):
        oracle.output_distribution(5)
    with pytest.raises(DPMarginalsError, match="true_counts"):
        oracle.sample_support([1, 2, 3])
    with pytest.raises(DPMarginalsError, match="negative"):
        oracle.sample_support([1, 2, -3, 0, 0])
    with pytest.raises(DPMarginalsError, match="n must be"):
        oracle.estimate(np.zeros(5), 0)
    with pytest.raises(DPMarginalsError, match="support must have shape"):
        oracle.estimate(np.zeros(4), 10)
    with pytest.raises(DPMarginalsError, match="frequency"):
        oracle.variance(10, 1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        oracle.epsilon = 2.0


def test_rejects_malformed_reports():
    with pytest.raises(DPMarginalsError, match="grr reports: value 9"):
        GRR(1.0, 5).support(np.array([0, 9]))
    with pytest.raises(DPMarginalsError, match="shape"):
        OUE(1.0, 10).support(np.zeros((3, 3), dtype=np.uint8))
    with pytest.raises(DPMarginalsError, match="beyond value 9"):
        OUE(1.0, 10).support(np.array([[0, 0], [0, 4]], dtype=np.uint8))
    with pytest.raises(DPMarginalsError, match="0/1"):
        SUE(1.0, 3).support(np.array([[0, 2, 1]]))
    with pytest.raises(DPMarginalsError, match="olh seed 7 at index 0"):
        OLH(1.0, 5).support(np.array([[7, 0]]))  # multiplier a = 0
    with pytest.raises(DPMarginalsError, match="olh hashed value"):
        OLH(1.0, 5).support(np.array([[(1 << 32) | 5, 4]]))
    with pytest.raises(DPMarginalsError, match="not in the hash family"):
        OLH(1.0, 5).output_distribution(0, seeds=[3])
    with pytest.raises(DPMarginalsError, match="hr bit"):
        HR(1.0, 5).support(np.array([[3, 2]]))
    with pytest.raises(DPMarginalsError, match="shape"):
        HR(1.0, 5).support(np.array([1, 2, 3]))


def test_selection_errors():
    with pytest.raises(DPMarginalsError, match="oracle must be one of"):
        make_oracle("rappor", 1.0, 4)
    with pytest.raises(DPMarginalsError, match="max_report_bits"):
        best_oracle(1.0, 64, max_report_bits=2)
    with pytest.raises(DPMarginalsError, match="at least one"):
        best_oracle(1.0, 64, candidates=())


# --- formulas, selection, building blocks ---------------------------------------------------


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("size", [2, 9, 64])
def test_variance_formulas(eps, size):
    e, n = math.exp(eps), 1000
    # CALM eq. 1 and eq. 2 exactly.
    assert GRR(eps, size).variance(n) == pytest.approx((size - 2 + e) / ((e - 1) ** 2 * n))
    assert OUE(eps, size).variance(n) == pytest.approx(4 * e / ((e - 1) ** 2 * n))
    # OLH: eq. 2's value for g = e^eps + 1; the integer g costs a little (< 12% here).
    olh = OLH(eps, size)
    assert olh.variance(n) == pytest.approx(4 * e / ((e - 1) ** 2 * n), rel=0.12)
    assert olh.variance(n) >= OUE(eps, size).variance(n) * (1 - 1e-12)
    assert olh.q == pytest.approx(1 / olh.g, abs=1e-8)
    assert HR(eps, size).variance(n) == pytest.approx((e + 1) ** 2 / ((e - 1) ** 2 * n))
    h = math.exp(eps / 2)
    assert SUE(eps, size).variance(n) == pytest.approx(h / ((h - 1) ** 2 * n))
    for name in NAMES:
        oracle = make_oracle(name, eps, size)
        assert oracle.variance(n, 0.0) == pytest.approx(oracle.variance(n))
        assert oracle.variance(n, np.zeros(3)).shape == (3,)


def test_report_bits():
    assert GRR(1.0, 64).report_bits == 6
    assert GRR(1.0, 65).report_bits == 7
    assert OUE(1.0, 64).report_bits == 64
    assert SUE(1.0, 10).report_bits == 10
    assert HR(1.0, 64).report_bits == 1 + 7  # K = 128 >= L + 1
    assert HR(1.0, 63).report_bits == 1 + 6
    assert OLH(1.0, 64).report_bits == 62 + 2  # g = 4


def test_adaptive_and_best_oracle():
    # CALM §2.2.3: GRR iff L - 2 < 3 e^eps; for eps = 1 the switch is between 10 and 11.
    assert adaptive_oracle(1.0, 10) == GRR(1.0, 10)
    assert adaptive_oracle(1.0, 11) == OUE(1.0, 11)
    assert adaptive_oracle(2.0, 24).name == "grr"
    assert best_oracle(1.0, 4).name == "grr"
    assert best_oracle(1.0, 64).name == "oue"
    assert best_oracle(1.0, 64, max_report_bits=8).name == "hr"
    assert best_oracle(1.0, 64, candidates=("olh", "hr")).name == "olh"
    for eps, size in [(0.5, 3), (1.0, 12), (4.0, 40)]:
        chosen = best_oracle(eps, size)
        assert all(chosen.variance(1) <= make_oracle(c, eps, size).variance(1) for c in NAMES[:4])



@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", [1000.0, 1e308])
def test_huge_epsilon_gives_finite_probabilities(name, eps):
    # e^eps overflows a float above eps ~ 709.8: the thresholds saturate at 32 bits instead.
    oracle = make_oracle(name, eps, 6)
    assert 0.0 <= oracle.q < oracle.p <= 1.0
    assert math.isfinite(oracle.variance(10)) and math.isfinite(oracle.report_bits)
    counts = np.array([3, 0, 2, 0, 0, 1])
    for support in (oracle.sample_support(counts, rng=0),
                    oracle.support(perturb(oracle, np.repeat(np.arange(6), counts), rng=0))):
        assert np.isfinite(oracle.estimate(support, 6)).all()
    if name in ("grr", "olh"):  # beta = 1 - 2^-32: the reports are the values
        assert oracle.estimate(oracle.sample_support(counts, rng=1), 6) == pytest.approx(
            counts / 6, abs=1e-8)
    assert adaptive_oracle(eps, 2**40).name == "grr"


def test_fwht_matches_sylvester_matrix():
    vec = np.random.default_rng(0).integers(-5, 6, 16)
    np.testing.assert_array_equal(fwht(vec), hadamard(16) @ vec)


def test_hr_support_counts_consistent_reports():
    # C(x) is the number of reports (j, b) with (-1)^b = H[x + 1, j].
    oracle = HR(1.0, 6)
    reports = perturb(oracle, np.random.default_rng(1).integers(0, 6, 500), rng=2)
    signs = hadamard(oracle.K)[1:7][:, reports[:, 0]]
    brute = (signs == 1 - 2 * reports[:, 1]).sum(axis=1)
    np.testing.assert_array_equal(oracle.support(reports), brute)
    theta = oracle.coefficients(oracle.support(reports), 500)
    assert theta.shape == (8,)


def test_olh_support_matches_brute_force():
    oracle = OLH(1.0, 9)
    reports = perturb(oracle, np.random.default_rng(1).integers(0, 9, 3000), rng=4)
    hashed = oracle.hash_values(reports[:, :1], np.arange(9)[None, :])
    np.testing.assert_array_equal(oracle.support(reports), (hashed == reports[:, 1:]).sum(0))


def test_unary_packed_and_unpacked_support_agree():
    oracle = OUE(1.0, 13)
    reports = perturb(oracle, np.arange(13).repeat(50), rng=9)
    bits = oracle.unpack(reports)
    assert bits.shape == (650, 13)
    np.testing.assert_array_equal(oracle.support(reports), oracle.support(bits))
    np.testing.assert_array_equal(oracle.support(bits), bits.sum(axis=0))


def test_oue_bit_matrix_has_independent_flips():
    # Budget: over 200k users with value 0, each other bit is set w.p. q (5 sd each), and
    # two zero bits are set together w.p. q^2 (5 sd): checks the packing and independence.
    oracle = OUE(1.0, 12)
    bits = oracle.unpack(perturb(oracle, np.zeros(200_000, dtype=int), rng=5))
    n, q = bits.shape[0], oracle.q
    assert abs(bits[:, 0].mean() - 0.5) <= 5 * math.sqrt(0.25 / n)
    assert np.all(np.abs(bits[:, 1:].mean(axis=0) - q) <= 5 * math.sqrt(q * (1 - q) / n))
    both = (bits[:, 3] & bits[:, 11]).mean()
    assert abs(both - q * q) <= 5 * math.sqrt(q * q * (1 - q * q) / n)
