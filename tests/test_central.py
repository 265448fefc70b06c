"""Central DP marginals (Gopi–Mahabadi–Yekhanin): accounting, noise, input, algorithm, CLI.

Error budgets: statistical checks are seeded; distribution checks use chi-square at
p >= 1e-4 (a false failure about once in 10,000 runs per check); means use
``|mean - expected| <= 4 sd / sqrt(trials)``.  Tests on the OpenDP (release) path are
not seedable; their assertions hold with probability > 1 - 1e-6.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import itertools
import json
import math
from decimal import Decimal, getcontext

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from command_line import dpmarginals, one_error_line
from dpmarginals.central import (
    DPMarginals,
    DPMarginalsResult,
    SparseRecords,
    dp_marginals,
    plan_budget,
    read_records,
    spurious_fraction,
    true_counts,
    zcdp_epsilon,
    zcdp_rho,
)
from dpmarginals.central import noise as noise_module
from dpmarginals.central.accounting import rdp_epsilon
from dpmarginals.central.noise import (
    OpenDPNoise,
    SimulationNoise,
    apply_to_vector,
    dg_log_sf,
    dg_sf,
    dg_threshold,
    gaussian_measurement,
    laplace_measurement,
    noise_source,
    sample_binomial,
    sample_dg_tail,
)
from dpmarginals.central.tuples import (
    _bounded,
    _count_candidates,
    _sample_unheld,
    _TupleIndex,
    _UserTuples,
)
from dpmarginals.cli import commands as cli
from dpmarginals.cli.central import register
from dpmarginals.core.errors import DPMarginalsError

needs_opendp = pytest.mark.skipif(importlib.util.find_spec("opendp") is None,
                                  reason="the release path needs OpenDP: pip install opendp")


# -- accounting ---------------------------------------------------------------------------
def _exact_rho(eps: str, delta: str) -> Decimal:
    getcontext().prec = 50
    e, d = Decimal(eps), Decimal(delta)
    log_inv = -(d.ln())
    return ((e + log_inv).sqrt() - log_inv.sqrt()) ** 2


def test_zcdp_conversion_pinned_to_exact_numbers():
    # (eps, delta) = (1, 1e-6): the conversion runs at delta / 2 (the other half pays
    # for the thresholding), so rho = (sqrt(1 + log(2e6)) - sqrt(log(2e6)))^2.
    exact = _exact_rho("1", "5E-7")
    assert abs(Decimal(zcdp_rho(1.0, 5e-7)) - exact) < Decimal("1e-17")
    assert zcdp_rho(1.0, 5e-7) == pytest.approx(0.016661676695158, rel=1e-13)
    for eps, delta in [("0.1", "1E-9"), ("1", "1E-5"), ("8", "1E-6"), ("0.5", "0.01")]:
        assert float(_exact_rho(eps, delta)) == pytest.approx(
            zcdp_rho(float(eps), float(delta)), rel=1e-12)
        # rho + 2 sqrt(rho log(1/delta)) = epsilon exactly (BS16 Prop. 1.3, inverted)
        assert zcdp_epsilon(zcdp_rho(float(eps), float(delta)), float(delta)) == pytest.approx(
            float(eps), rel=1e-12)
    # The budget of Remark 1.2 for T = 3: sigma and epsilon_Q pinned.
    b = plan_budget(1.0, 1e-6, 3)
    rho = float(exact)
    assert b.rho == pytest.approx(rho, rel=1e-13)
    assert b.sigmas == pytest.approx((math.sqrt(3 / (2 * 0.9 * rho)),) * 3, rel=1e-13)
    assert b.sigmas[0] == pytest.approx(10.0014973276840, rel=1e-12)
    assert b.epsilon_q == pytest.approx(0.0333283429882716, rel=1e-12)
    assert b.max_k * b.epsilon_q**2 / 2 == pytest.approx(rho / 10, rel=1e-12)
    assert b.zcdp_spent() == pytest.approx(rho, rel=1e-13)
    assert b.delta_conversion + b.delta_threshold == pytest.approx(1e-6, rel=1e-15)


def test_the_papers_unsquared_bound_would_overspend():
    log_inv = math.log(2 / 1e-6)
    unsquared = math.sqrt(1 + log_inv) - math.sqrt(log_inv)  # Theorem 1.1 as printed
    assert unsquared == pytest.approx(math.sqrt(zcdp_rho(1.0, 5e-7)), rel=1e-12)
    assert zcdp_epsilon(unsquared, 5e-7) > 2.8  # it would certify epsilon ~ 2.87, not 1


def test_conversion_agrees_with_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import compute_epsilon

    for eps, delta in [(0.3, 1e-8), (1.0, 5e-7), (4.0, 1e-6)]:
        rho = zcdp_rho(eps, delta)
        # BS16 equals Mironov's RDP conversion min_a (a rho + log(1/delta) / (a - 1)),
        # which is exact at a* = 1 + sqrt(log(1/delta) / rho); dp-accounting's RDP
        # accountant (a tighter conversion) must certify at most epsilon.
        a_star = 1 + math.sqrt(math.log(1 / delta) / rho)
        assert a_star * rho + math.log(1 / delta) / (a_star - 1) == pytest.approx(eps, rel=1e-12)
        acc = dpa.rdp.RdpAccountant()
        acc.compose(dpa.ZCDpEvent(rho))
        assert 0.75 * eps < acc.get_epsilon(delta) <= eps
        tight, _ = compute_epsilon([a_star], [a_star * rho], delta)
        assert tight <= eps
    # the "rdp" accountant spends exactly epsilon by dp-accounting, with more rho
    b = plan_budget(1.0, 1e-6, 3, accountant="rdp")
    assert rdp_epsilon(b.zcdp_spent(), 5e-7) == pytest.approx(1.0, abs=1e-6)
    assert b.rho > 1.3 * zcdp_rho(1.0, 5e-7)
    assert b.epsilon_spent() <= 1.0
    # percentiles: epsilon_Q-bounded-range => epsilon_Q^2 / 8 zCDP, 10% of rho in all
    assert b.max_k * b.epsilon_q**2 / 8 == pytest.approx(b.rho / 10, rel=1e-12)


def test_opendp_measurements_spend_what_the_budget_says():
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    b = plan_budget(1.0, 1e-6, 3)
    # Stage noise scale sigma * sqrt(Delta); with Delta = 9 one user moves the histogram
    # by l2 distance 3: OpenDP's own map of the measurement the release applies must give
    # 1 / (2 sigma^2) zCDP.
    meas = gaussian_measurement(b.sigmas[0] * 3)
    assert meas.map(3) == pytest.approx(1 / (2 * b.sigmas[0] ** 2), rel=1e-9)
    assert meas.output_measure == dp.zero_concentrated_divergence()
    assert meas.input_domain == dp.vector_domain(dp.atom_domain(T="i64"))
    assert laplace_measurement(4.0).map(2) == pytest.approx(0.5, rel=1e-12)
    # The percentile: OpenDP's exponential mechanism calibrated to epsilon_Q is
    # epsilon_Q-DP, and its zCDP map is epsilon_Q^2 / 8 (what the rdp accountant uses).
    from dpmarginals.central.noise import percentile_candidates

    space = (dp.vector_domain(dp.atom_domain(T="i64")), dp.symmetric_distance())
    cands = percentile_candidates(1000).tolist()
    one = dp.m.make_private_quantile(*space, dp.max_divergence(), cands, 0.99, 1.0)
    scale = one.map(1) / b.epsilon_q
    pure = dp.m.make_private_quantile(*space, dp.max_divergence(), cands, 0.99, scale)
    conc = dp.m.make_private_quantile(*space, dp.zero_concentrated_divergence(), cands,
                                      0.99, scale)
    assert pure.map(1) == pytest.approx(b.epsilon_q, rel=1e-9)
    assert conc.map(1) == pytest.approx(b.epsilon_q**2 / 8, rel=1e-9)


def test_budget_rejects_bad_parameters():
    for bad in [dict(epsilon=0.0), dict(epsilon=-1.0), dict(delta=1.0), dict(delta=0.0),
                dict(delta=1.5), dict(max_k=0)]:
        kwargs = dict(epsilon=1.0, delta=1e-6, max_k=2) | bad
        with pytest.raises(DPMarginalsError):
            DPMarginals(**kwargs)
    with pytest.raises(DPMarginalsError, match="eta"):
        DPMarginals(1.0, 1e-6, 2, eta=1.0)
    with pytest.raises(DPMarginalsError, match="accountant"):
        DPMarginals(1.0, 1e-6, 2, accountant="nope")


# -- noise --------------------------------------------------------------------------------
def _dg_pmf(scale: float, lo: int = -2000, hi: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    z = np.arange(lo, hi + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2 * scale**2))
    return z, w / w.sum()


@pytest.mark.parametrize("scale", [0.7, 3.0, 25.0])
def test_discrete_gaussian_tail_is_exact(scale):
    z, pmf = _dg_pmf(scale)
    for t in [-3, 0, 1, 5, int(3 * scale)]:
        assert dg_sf(t, scale) == pytest.approx(pmf[z > t].sum(), rel=1e-9)
    p = 1e-7
    t = dg_threshold(p, scale)
    assert dg_sf(t, scale) <= p < dg_sf(t - 1, scale)
    # the discrete counterpart of scale * Phi^-1(1 - p): within one step of it
    assert abs(t - scale * stats.norm.isf(p)) <= 1.5 + 0.05 * scale
    assert dg_log_sf(10**6, scale) < -1e6


def test_first_threshold_is_the_papers_rho1_for_the_discrete_noise():
    sigma, delta_half = plan_budget(1.0, 1e-6, 3).sigmas[0], 5e-7
    for bound in [1, 6, 90]:
        scale = sigma * math.sqrt(bound)
        per_item = -math.expm1(math.log1p(-delta_half) / bound)  # 1 - (1 - d/2)^(1/D)
        t = dg_threshold(per_item, scale)
        # a count-1 item passes rho_1 = 1 + t with probability <= per_item, so a user's
        # Delta unique items all stay hidden with probability >= 1 - delta/2
        assert (1 - dg_sf(t, scale)) ** bound >= 1 - delta_half
        paper = 1 + scale * stats.norm.ppf((1 - delta_half) ** (1 / bound))
        assert abs((1 + t) - paper) <= 2


def test_simulated_discrete_gaussian_has_the_right_law():
    noise = SimulationNoise(7)
    for scale in [0.8, 2.5, 40.0]:
        x = noise.add_discrete_gaussian(np.zeros(200_000, np.int64), scale)
        z, pmf = _dg_pmf(scale)
        var = float((pmf * z**2).sum())
        assert abs(x.mean()) <= 4 * math.sqrt(var / x.size)
        keep = pmf * x.size >= 20  # chi-square on the cells with enough mass
        observed = np.array([(x == v).sum() for v in z[keep]] + [0])
        expected = np.append(pmf[keep] * x.size, 0.0)
        observed[-1] = x.size - observed[:-1].sum()
        expected[-1] = x.size - expected[:-1].sum()
        assert stats.chisquare(observed, expected).pvalue > 1e-4


@needs_opendp
def test_opendp_noise_is_integer_with_the_right_spread():
    noise = OpenDPNoise()
    x = noise.add_discrete_gaussian(np.full(20_000, 100, np.int64), 10.0)
    assert x.dtype == np.int64
    assert abs(x.mean() - 100) < 4 * 10 / math.sqrt(x.size)
    assert abs(x.std() - 10.0) < 0.5  # sd of the sample sd ~ 10 / sqrt(2 * 20000) = 0.05
    values = np.repeat([3, 5, 8], [9000, 900, 100])
    assert noise.percentile(values, 50, 1.0, 100) == 3


@needs_opendp
def test_opendp_noise_on_a_vector_split_across_threads(monkeypatch):
    # A long vector goes to OpenDP in contiguous parts, one per core, each part noised by
    # the same measurement: the entries stay in place and the noise is the discrete
    # Gaussian (chi-square on the cells with >= 20 expected, p >= 1e-4; OpenDP is not
    # seedable, so a correct sampler fails this about once in 10,000 runs).
    monkeypatch.setattr(noise_module, "_PART_ENTRIES", 1000)
    monkeypatch.setattr(noise_module, "_cores", lambda: 2)
    meas, calls = gaussian_measurement(1.5), []

    def counted(part: np.ndarray) -> list[int]:
        calls.append(part.size)
        return meas(part)

    counts = np.arange(30_000, dtype=np.int64) * 100
    out = apply_to_vector(counted, counts)
    assert calls == [15_000, 15_000] and out.dtype == np.int64
    noise = out - counts
    assert np.abs(noise).max() < 50  # P(|Z| >= 50) < 1e-240 at scale 1.5: order kept
    z, pmf = _dg_pmf(1.5, -50, 50)
    keep = pmf * noise.size >= 20
    observed = np.array([(noise == v).sum() for v in z[keep]])
    expected = pmf[keep] * noise.size
    observed = np.append(observed, noise.size - observed.sum())
    expected = np.append(expected, noise.size - expected.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert apply_to_vector(meas, np.zeros(0, np.int64)).size == 0


def test_tail_and_binomial_samplers():
    rng = np.random.default_rng(3)
    scale, t = 6.0, 10
    draws = sample_dg_tail(t, scale, rng.random(100_000))
    assert draws.min() > t
    z, pmf = _dg_pmf(scale)
    cond = pmf[z > t] / pmf[z > t].sum()
    support = z[z > t][: 12]
    observed = np.array([(draws == v).sum() for v in support] + [(draws > support[-1]).sum()])
    expected = np.append(cond[:12], cond[12:].sum()) * draws.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    n, p = 10**9, 3e-8
    b = np.array([sample_binomial(n, p, u) for u in rng.random(4000)])
    assert abs(b.mean() - n * p) <= 4 * math.sqrt(n * p / b.size)
    assert sample_binomial(0, 0.5, 0.3) == 0


@needs_opendp
def test_seeds_only_in_simulation_mode():
    with pytest.raises(DPMarginalsError, match="simulation=True"):
        noise_source(0)
    assert not noise_source(0, simulation=True).private
    assert noise_source().private
    recs = SparseRecords.from_lists([[1, 2]] * 10)
    with pytest.raises(DPMarginalsError, match="non-private"):
        DPMarginals(1.0, 1e-6, 2).fit(recs, rng=1)


# -- sparse input -------------------------------------------------------------------------
def test_transactional_files_plain_gzip_zip_and_msnbc(tmp_path):
    text = b"5 3 5\n\n3 9\n7\n"
    plain = tmp_path / "t.dat"
    plain.write_bytes(text)
    gz = tmp_path / "t.dat.gz"
    gz.write_bytes(gzip.compress(text))
    import zipfile

    zp = tmp_path / "t.zip"
    with zipfile.ZipFile(zp, "w") as zf:
        zf.writestr("inner.dat", text)
    for path in (plain, gz, zp):
        r = read_records(path)
        assert r.n == 4 and r.binary
        assert [r.item_label(i) for i in r.items] == ["3", "5", "3", "9", "7"]
        assert r.lengths().tolist() == [2, 0, 2, 1]
    seq = tmp_path / "m.seq"
    seq.write_bytes(b"% header\n\nfrontpage news tech\n\n% Sequences:\n\n1 1 \n2 3 1\n")
    m = read_records(seq)
    assert m.n == 2 and m.columns == ("frontpage", "news", "tech")
    assert m.lengths().tolist() == [1, 3]


def test_tables_with_empty_cells(tmp_path):
    frame = pd.DataFrame({"os": ["mac", None, "linux", "mac"], "app": [1.0, 2.0, None, None],
                          "lang": ["", "en", "fr", None]})
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    pq = tmp_path / "t.parquet"
    frame.to_parquet(pq)
    for path in (csv, pq):
        r = read_records(path)
        assert not r.binary and r.n == 4
        rows = [[r.item_label(i) for i in r.items[r.indptr[j]:r.indptr[j + 1]]]
                for j in range(r.n)]
        assert rows == [["os=mac", "app=1"], ["app=2", "lang=en"], ["os=linux", "lang=fr"],
                        ["os=mac"]]


def test_bad_input_gets_one_line_errors(tmp_path):
    empty = tmp_path / "empty.dat"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.dat"
    blank.write_bytes(b"\n\n\n")
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"1 2\n3 x\n")
    for path, msg in [(empty, "empty"), (blank, "empty"), (bad, "line 2"),
                      (tmp_path / "missing.dat", "no such")]:
        with pytest.raises(DPMarginalsError, match=msg) as info:
            read_records(path)
        assert "\n" not in str(info.value)


# -- building blocks of the algorithm -----------------------------------------------------
def test_contribution_bounding_keeps_a_uniform_sample():
    noise = SimulationNoise(11)
    u = np.repeat(np.arange(4), [5, 2, 0, 3])
    per_user = np.bincount(u, minlength=4)
    hits = np.zeros(u.size)
    trials = 20_000
    for _ in range(trials):
        keep = _bounded(u, per_user, 2, noise)
        assert np.bincount(u[keep], minlength=4).tolist() == [2, 2, 0, 2]
        hits += keep
    assert stats.chisquare(hits[:5], np.full(5, trials * 2 / 5)).pvalue > 1e-4
    assert stats.chisquare(hits[7:], np.full(3, trials * 2 / 3)).pvalue > 1e-4


def _brute_candidates(levels: list[set[tuple[int, ...]]], cols: np.ndarray, k: int) -> set:
    out = set()
    for combo in itertools.combinations(range(cols.size), k):
        if len({int(cols[i]) for i in combo}) < k:
            continue
        if all(sub in levels[k - 1] for sub in itertools.combinations(combo, k - 1)):
            out.add(combo)
    return out


def test_apriori_candidates_and_per_record_tuples_match_brute_force():
    rng = np.random.default_rng(5)
    cols = np.array([0, 0, 1, 2, 2, 3, 4, 5, 5, 6])  # tabular: items sharing columns
    index = _TupleIndex(cols)
    levels: list[set] = [set(), {(i,) for i in range(cols.size)}]
    for k in (2, 3, 4):
        count, keys = _count_candidates(index, k, limit=10**6)
        truth = _brute_candidates(levels, cols, k)
        assert count == len(truth)
        got = {tuple(int(x) for x in t) for t in
               np.hstack([index.tuples[k - 1][keys // index.m1], (keys % index.m1)[:, None]])}
        assert got == truth
        assert (np.diff(keys) > 0).all()
        chosen = np.sort(keys[rng.random(keys.size) < 0.7])
        # users' tuples: records = random subsets with distinct columns
        records = []
        for _ in range(40):
            items = [int(rng.choice(np.flatnonzero(cols == c))) for c in range(7)
                     if rng.random() < 0.8]
            records.append(sorted(items))
        held_u, held_i = [], []
        for ui, rec in enumerate(records):
            for sub in itertools.combinations(rec, k - 1):
                j = index.lookup(np.array([sub]))[0]
                if j >= 0:
                    held_u.append(ui)
                    held_i.append(j)
        users = _UserTuples(index, k, np.array(held_u, np.int64), np.array(held_i, np.int64))
        got_rows = {(int(a), int(b)) for cu, ck in users for a, b in zip(cu, ck, strict=True)}
        want_rows = set()
        for ui, rec in enumerate(records):
            for combo in itertools.combinations(rec, k):
                if combo in truth:
                    key = index.lookup(np.array([combo[:-1]]))[0] * index.m1 + combo[-1]
                    want_rows.add((ui, int(key)))
        assert got_rows == want_rows
        index.add_level(chosen)
        levels.append({tuple(int(x) for x in t) for t in index.tuples[k]})


def test_unheld_candidates_are_drawn_uniformly():
    cols = np.arange(8)
    index = _TupleIndex(cols)
    _, keys2 = _count_candidates(index, 2, 10**6)
    held = np.sort(keys2[::3])
    noise = SimulationNoise(2)
    unheld = np.setdiff1d(keys2, held)
    hits = dict.fromkeys(unheld.tolist(), 0)
    for _ in range(3000):
        draw = _sample_unheld(index, 2, 4, held, noise)
        assert draw.size == 4 and np.unique(draw).size == 4
        assert not np.isin(draw, held).any()
        for key in draw.tolist():
            hits[key] += 1
    counts = np.array(list(hits.values()))
    assert stats.chisquare(counts).pvalue > 1e-4
    index.add_level(keys2[: 20])  # k = 3: triangles of a partial S_2
    count3, keys3 = _count_candidates(index, 3, 10**6)
    draws = np.concatenate([_sample_unheld(index, 3, 1, keys3[:1], noise) for _ in range(2000)])
    assert np.isin(draws, keys3[1:]).all()
    assert stats.chisquare(np.bincount(np.searchsorted(keys3[1:], draws),
                                       minlength=count3 - 1)).pvalue > 1e-4


# -- the algorithm on planted data with known truth ---------------------------------------
def _planted(seed: int, n: int = 100_000, patterns: int = 30, size: int = 4,
             rare: int = 2, universe: int = 10**6) -> SparseRecords:
    """Every record: one of ``patterns`` disjoint ``size``-item patterns (items
    ``0..patterns*size-1``) plus ``rare`` items from a huge universe (each held by ~0.2
    records).  All records have the same length, so contribution bounding drops nothing
    and the truth of every count is its raw count."""
    rng = np.random.default_rng(seed)
    pat = rng.integers(0, patterns, n)
    items = np.hstack([pat[:, None] * size + np.arange(size),
                       1000 + rng.integers(0, universe, (n, rare))])
    indptr = np.arange(n + 1, dtype=np.int64) * items.shape[1]
    return SparseRecords.from_transactions(indptr, items.ravel(), name=f"planted{seed}")


def _pattern_items_found(res: DPMarginalsResult) -> bool:
    found = {int(col) for col, _ in res.items}
    return set(range(120)) <= found and len(found) <= 122


@pytest.fixture(scope="module")
def planted() -> SparseRecords:
    return _planted(0)


def test_spurious_fraction_at_most_eta_and_counts_within_noise(planted):
    eta = 0.1
    algo = DPMarginals(1.0, 1e-6, max_k=3, eta=eta)
    fractions, spurious, prev_sizes = [], [], []
    for seed in range(8):
        res = algo.fit(planted, rng=seed, simulation=True)
        truth = true_counts(res, planted)
        fractions.append([float((c == 0).mean()) if c.size else 0.0 for c in truth])
        spurious.append([int((c == 0).sum()) for c in truth])
        prev_sizes.append([0, *res.found()[:-1]])
        assert _pattern_items_found(res)  # every pattern item, (almost) no rare item
        assert (truth[0] > 0).all()  # no spurious 1-tuple, ever
        for level, c in zip(res.levels, truth, strict=True):
            assert level.contribution_bound == (6, 6, 4)[level.k - 1]  # no truncation
            # every extracted count is within 6 noise scales of the truth
            assert np.abs(level.counts - c).max(initial=0) <= 6 * level.noise_scale
    mean_fraction = np.mean(fractions, axis=0)
    assert (mean_fraction <= eta).all(), mean_fraction
    assert np.mean(spurious, axis=0)[1] > 0  # the check is not vacuous
    # Proposition 1.1: E[spurious_k] <= eta * |S_{k-1}|
    assert (np.mean(spurious, axis=0) <= eta * np.mean(prev_sizes, axis=0) + 2).all()


def test_implicit_candidates_match_the_materialised_path(planted):
    eta = 0.3  # more spurious tuples, a sharper comparison
    full = DPMarginals(1.0, 1e-6, 3, eta=eta)
    lazy = DPMarginals(1.0, 1e-6, 3, eta=eta, max_materialized=0)
    seeds = range(12)
    a = np.array([[int((c == 0).sum()) for c in true_counts(r, planted)]
                  for r in (full.fit(planted, rng=s, simulation=True) for s in seeds)])
    runs = [lazy.fit(planted, rng=100 + s, simulation=True) for s in seeds]
    assert all(r.levels[1].implicit and r.levels[2].implicit for r in runs)
    b = np.array([[int((c == 0).sum()) for c in true_counts(r, planted)] for r in runs])
    # spurious pairs ~ Binomial(~7000, p) in both paths: means agree within 4 sd
    for k in (1, 2):
        sd = math.sqrt((a[:, k].var(ddof=1) + b[:, k].var(ddof=1) + 1) / len(seeds))
        assert abs(a[:, k].mean() - b[:, k].mean()) <= 4 * sd
    assert b[:, 1].mean() > 3


def test_no_spurious_variant_never_outputs_spurious_tuples(planted):
    algo = DPMarginals(1.0, 1e-6, 3, eta=0.3, no_spurious=True)
    eta_mode = DPMarginals(1.0, 1e-6, 3, eta=0.3).fit(planted, rng=0, simulation=True)
    for seed in range(3):
        res = algo.fit(planted, rng=seed, simulation=True)
        assert spurious_fraction(res, planted) == [0.0, 0.0, 0.0]
        assert res.found()[1:] == [180, 120]  # the planted pairs and triples
        assert res.levels[1].threshold > eta_mode.levels[1].threshold


@needs_opendp
def test_private_release_path_end_to_end(planted):
    res = DPMarginals(1.0, 1e-6, 3).fit(planted)
    assert res.private
    assert _pattern_items_found(res) and res.found()[1] >= 180 and res.found()[2] >= 120
    frac = spurious_fraction(res, planted)
    assert frac[0] == 0.0 and frac[1] < 0.3


@needs_opendp
@pytest.mark.parametrize("params", [
    {}, {"accountant": "rdp"}, {"no_spurious": True}, {"max_materialized": 0}])
def test_the_release_records_the_rho_opendp_certifies_equal_to_the_hand_derived(params):
    """Issue 35: every stage runs as an OpenDP measurement inside one OpenDP composition;
    the (rho, delta) its map certifies equals Theorem 1.1's hand-derived split (to OpenDP's
    rounding up, 1e-9 relative), and OpenDP's conversion gives at most the target epsilon."""
    planted = _planted(1, n=20_000)
    algo = DPMarginals(1.0, 1e-6, 3, **params)
    res = algo.fit(planted)
    hand = algo.budget
    rho, delta = res.budget["privacy_map_rho"], res.budget["privacy_map_delta"]
    assert rho == pytest.approx(hand.zcdp_spent(), rel=1e-9) and rho >= hand.zcdp_spent()
    assert rho == pytest.approx(hand.rho, rel=1e-9)
    assert delta == pytest.approx(hand.delta_threshold, rel=1e-9) and delta <= hand.delta
    assert res.budget["epsilon_certified"] <= 1.0 + 1e-9
    # the thresholds OpenDP accepted are the hand-derived ones (delta-tail of Remark 1.1)
    level = res.levels[0]
    run = dp_marginals._Run(algo, planted, SimulationNoise(0), None)
    assert level.threshold == run._set_union_threshold(level.noise_scale,
                                                       level.contribution_bound)
    assert level.noise_scale == pytest.approx(hand.sigmas[0] * math.sqrt(
        level.contribution_bound), rel=1e-9)
    saved = DPMarginalsResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert saved.budget["privacy_map_rho"] == rho


def test_a_simulation_certifies_nothing(planted):
    res = DPMarginals(1.0, 1e-6, 2).fit(planted, rng=0, simulation=True)
    assert res.budget["privacy_map_rho"] is None and not res.private


def test_tabular_release_and_marginal_tables():
    rng = np.random.default_rng(1)
    n = 80_000
    frame = pd.DataFrame({
        "browser": rng.choice(["chrome", "firefox", None], n, p=[0.6, 0.3, 0.1]),
        "os": rng.choice(["win", "mac", "linux", None], n, p=[0.5, 0.3, 0.15, 0.05]),
        "rare": np.where(rng.random(n) < 0.0001, "x", None),
    })
    frame.loc[frame.browser == "firefox", "os"] = rng.choice(["linux", None],
                                                             (frame.browser == "firefox").sum())
    res = DPMarginals(2.0, 1e-6, 2).fit(frame, rng=4, simulation=True)
    assert set(res.columns()) == {"browser", "os"}
    pairs = res.tuples(2)
    assert set(pairs.columns) == {"item1", "item2", "count"}
    assert all(p.split("=")[0] != q.split("=")[0] for p, q in zip(pairs.item1, pairs.item2,
                                                                  strict=True))
    table = res.marginal(["browser", "os"], n=n)
    assert table.domain.sizes == (len(res.values("browser")), len(res.values("os"))) == (3, 4)
    truth = pd.crosstab(frame.browser.fillna("(other)"), frame.os.fillna("(other)"),
                        normalize=True)
    b, o = res.values("browser"), res.values("os")
    for i, bv in enumerate(b):
        for j, ov in enumerate(o):
            want = truth.loc[bv, ov] if (bv in truth.index and ov in truth.columns) else 0.0
            assert abs(table.values[i, j] - want) < 0.01
    assert res.count([("browser", "chrome"), ("os", "win")]) is not None


def test_result_round_trip(tmp_path, planted):
    res = DPMarginals(1.0, 1e-6, 2).fit(planted, rng=0, simulation=True)
    path = tmp_path / "r.json"
    res.save(path)
    back = DPMarginalsResult.load(path)
    assert back.found() == res.found() and back.items == res.items
    assert np.array_equal(back.levels[1].tuples, res.levels[1].tuples)
    assert back.budget["epsilon"] == 1.0 and back.private is False
    data = json.loads(path.read_text())
    assert len(data["items"]) == res.found()[0]  # only the extracted items are saved
    m = back.marginal([res.items[0][0], res.items[1][0]], n=planted.n)
    assert m.values.shape == (2, 2) and abs(m.values.sum() - 1) < 1e-9


def test_a_saved_release_carries_its_digest_and_an_edit_is_refused(tmp_path, planted):
    """A k-tuple release is sealed as the synopses are: an edited epsilon is refused in one
    line, and a file without its digest is read as not private (it was read as private
    whatever was edited)."""
    from dpmarginals.private_release import load_release

    res = DPMarginals(1.0, 1e-6, 2).fit(planted, rng=0, simulation=True)
    res.private = True  # as a private release would be marked (no OpenDP run needed here)
    path = tmp_path / "r.json"
    res.save(path)
    assert load_release(path).provenance.private
    body = json.loads(path.read_text())
    body["budget"]["epsilon"] = 0.01
    (tmp_path / "edited.json").write_text(json.dumps(body))
    with pytest.raises(DPMarginalsError, match="was altered after it was saved"):
        load_release(tmp_path / "edited.json")
    del body["digest"]
    (tmp_path / "bare.json").write_text(json.dumps(body))
    with pytest.warns(UserWarning, match="NOT a private release: it records no digest"):
        bare = load_release(tmp_path / "bare.json")
    assert not bare.provenance.private
    bare.save(tmp_path / "resaved.json")  # sealed again, it must not turn private again
    with pytest.warns(UserWarning, match="NOT a private release: it records no digest"):
        assert not load_release(tmp_path / "resaved.json").provenance.private


# -- command line -------------------------------------------------------------------------
def _main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    original = cli.build_parser

    def build() -> argparse.ArgumentParser:
        parser = original()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "central" not in sub.choices:
            register(sub)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def planted_file(tmp_path_factory, planted) -> str:
    path = tmp_path_factory.mktemp("central") / "planted.dat.gz"
    lines = (" ".join(str(planted.columns[i]) for i in planted.items[s:e])
             for s, e in zip(planted.indptr[:-1], planted.indptr[1:], strict=True))
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return str(path)


@needs_opendp
def test_cli_json_and_text(monkeypatch, capsys, planted_file, tmp_path):
    out_file = tmp_path / "res.json"
    code, out, err = _main(monkeypatch, capsys, "central", "--data", planted_file,
                           "--epsilon", "1", "--delta", "1e-6", "--max-k", "3",
                           "--eta", "0.1", "--json", "--out", str(out_file))
    assert code == 0, err
    res = json.loads(out)
    assert {"found", "spurious_fraction", "seconds"} <= set(res)
    assert len(res["found"]) == 3 and 120 <= res["found"][0] <= 122
    assert res["spurious_fraction"][0] == 0.0 and res["release_private"] is True
    assert res["private"] is False and "never this report" in res["not_private"]
    assert DPMarginalsResult.load(out_file).found() == res["found"]
    # query --tuple with an item the release does not hold: "not extracted", naming the
    # release's items (it was a TypeError)
    saved = DPMarginalsResult.load(out_file)
    a, b = (col for col, _ in saved.items[:2])
    code, out, _ = _main(monkeypatch, capsys, "query", str(out_file), "--tuple", f"{a},{b}")
    assert code == 0 and f"{a}, {b}: " in out
    code, out, _ = _main(monkeypatch, capsys, "query", str(out_file), "--tuple", f"{a},nosuch")
    assert code == 0 and "not extracted" in out and "'nosuch' is none of the release's" in out
    code, out, _ = _main(monkeypatch, capsys, "central", "--data", planted_file, "--epsilon",
                         "1", "--delta", "1e-6", "--max-k", "2", "--seed", "3")
    assert code == 0
    assert "NON-PRIVATE simulation" in out and "NON-PRIVATE evaluation" in out
    code, out, _ = _main(monkeypatch, capsys, "central", "--data", planted_file, "--epsilon",
                         "1", "--delta", "1e-6", "--max-k", "2", "--seed", "3", "--engine",
                         "duckdb", "--json")
    assert code == 0 and 120 <= json.loads(out)["found"][0] <= 122


@pytest.mark.parametrize("argv, message", [
    (["--epsilon", "1", "--delta", "1e-6", "--max-k", "0"], "--max-k"),
    (["--epsilon", "1", "--delta", "1", "--max-k", "2"], "delta must be in (0, 1)"),
    (["--epsilon", "0", "--delta", "1e-6", "--max-k", "2"], "epsilon must be"),
    (["--epsilon", "-2", "--delta", "1e-6", "--max-k", "2"], "epsilon must be"),
])
def test_cli_bad_parameters(monkeypatch, capsys, planted_file, argv, message):
    code, out, err = _main(monkeypatch, capsys, "central", "--data", planted_file, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_empty_file(monkeypatch, capsys, tmp_path):
    empty = tmp_path / "empty.dat"
    empty.write_bytes(b"")
    code, _, err = _main(monkeypatch, capsys, "central", "--data", str(empty), "--epsilon",
                         "1", "--delta", "1e-6", "--max-k", "2")
    assert code == 2 and "empty" in err and len(err.strip().splitlines()) == 1


# -- real data, as a new user runs it -----------------------------------------------------
@needs_opendp
@pytest.mark.needs_data
@pytest.mark.parametrize("name, n_items", [("kosarak-prefix", None), ("msnbc", 17)])
def test_real_data_sets_within_two_minutes(monkeypatch, capsys, name, n_items):
    code, out, err = _main(monkeypatch, capsys, "central", "--data", name, "--epsilon", "1",
                           "--delta", "1e-6", "--max-k", "3", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["seconds"] < 120
    assert res["found"][0] > 5 and res["spurious_fraction"][0] == 0.0
    if n_items:
        assert res["records"] == 989_818 and res["found"][0] == n_items


@needs_opendp
def test_cli_out_into_a_missing_folder_names_the_reason(planted_file, tmp_path):
    out = tmp_path / "missing" / "res.json"
    proc = dpmarginals("central", "--data", planted_file, "--epsilon", "1", "--delta", "1e-6",
                       "--max-k", "1", "--seed", "0", "--out", out)
    line = one_error_line(proc, str(out), "no such directory")
    assert "None" not in line


def test_cli_refuses_max_k_beyond_the_records_and_delta_not_below_one_over_n(tmp_path):
    csv = tmp_path / "six.csv"
    codes = np.random.default_rng(0).integers(0, 3, (2000, 6))
    pd.DataFrame(codes, columns=list("abcdef")).to_csv(csv, index=False)
    base = ["central", "--data", csv, "--epsilon", "1", "--seed", "0"]
    one_error_line(dpmarginals(*base, "--delta", "1e-6", "--max-k", "1000000"),
                   "--max-k 1000000", "longest record (6 items)")
    one_error_line(dpmarginals(*base, "--delta", "0.5", "--max-k", "2"),
                   "--delta 0.5", "1/n = 0.0005")
