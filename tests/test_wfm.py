"""Issue #20.3: the workload factorization mechanism (McKenna et al., PVLDB 2020) as ``wfm``.

The optimizer's pieces are checked against their definitions (the workload's Gram matrix,
the gradient by finite differences, the projection by bisection); the optimized strategy
must be exactly eps-LDP and beat randomized response over the full domain; the client
refuses a strategy that is not; the simulation's exact multinomial draw agrees with the
per-user reports; the release is unbiased and its closed-form variance is the truth.
(The exact enumerated privacy test and the client's report distribution are in
``tests/test_privacy_enumerated.py``; the service and engines in ``tests/test_spine.py``.)
Statistical tests are seeded; their error budgets are stated where they are made.
"""

from __future__ import annotations

import math
from itertools import combinations, product

import numpy as np
import pytest
from scipy import stats

from dpmarginals import Dataset, Domain, make
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.local.wfm import WFM, WFMSynopsis, covariance, reconstruction, sample_outputs
from dpmarginals.planning import factorization as fz
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.formats import (
    STRATEGY_TOTAL,
    StrategyMatrix,
    decode_matrix,
    encode_matrix,
    group_oracle,
)
from dpmarginals.protocol.ledger import PlanRefused
from dpmarginals.protocol.plan import Plan
from dpmarginals.synopsis.base import load_synopsis

BIN3 = Domain(("a", "b", "c"), (2, 2, 2))
MIXED = Domain(("a", "b", "c"), (2, 3, 2))


def _workload(sizes: tuple[int, ...], k: int) -> np.ndarray:
    """W explicitly: one row per cell of every k-way marginal, over the full table."""
    cells = list(product(*[range(s) for s in sizes]))
    rows = []
    for attrs in combinations(range(len(sizes)), k):
        for target in product(*[range(sizes[a]) for a in attrs]):
            rows.append([all(c[a] == t for a, t in zip(attrs, target, strict=True))
                         for c in cells])
    return np.asarray(rows, dtype=np.float64)


def _data(domain: Domain, n: int, seed: int = 3) -> Dataset:
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, s, n) for s in domain.sizes])
    codes[:, -1] = np.where(rng.random(n) < 0.7, codes[:, 0] % domain.sizes[-1], codes[:, -1])
    return Dataset(codes, domain)


# -- the optimizer ---------------------------------------------------------------------------
def test_marginal_gram_is_w_transpose_w():
    for sizes, k in (((2, 3, 2), 2), ((3, 2), 1), ((2, 2, 2, 2), 3)):
        W = _workload(sizes, k)
        np.testing.assert_array_equal(fz.marginal_gram(sizes, k), W.T @ W)
        B = fz.workload_factor(W.T @ W)
        np.testing.assert_allclose(B @ B.T, W.T @ W, atol=1e-9)


def test_gradient_matches_central_differences():
    rng = np.random.default_rng(0)
    gram = fz.marginal_gram((2, 3, 2), 2)
    factor = fz.workload_factor(gram)
    Q = rng.random((30, 12)) + 0.1
    value, grad = fz.objective_and_gradient(Q, factor)
    assert value == pytest.approx(fz.objective(Q, factor), rel=1e-12)
    for _ in range(5):
        direction = rng.standard_normal(Q.shape)
        h = 1e-6
        numeric = (fz.objective(Q + h * direction, factor)
                   - fz.objective(Q - h * direction, factor)) / (2 * h)
        assert numeric == pytest.approx(float(np.sum(grad * direction)), rel=1e-6)


def test_projection_is_the_euclidean_projection_onto_the_bounded_simplex():
    rng = np.random.default_rng(1)
    m, n, e = 40, 25, math.exp(1.3)
    low = rng.uniform(0.5, 1.5, m) * (1 + 1 / e) / (2 * m)  # sum low < 1 < sum high
    high = e * low
    R = rng.normal(0, 0.05, (m, n))
    P = fz.project_columns(R, low, high)
    np.testing.assert_allclose(P.sum(axis=0), 1.0, atol=1e-12)
    assert (low[:, None] <= P).all() and (high[:, None] >= P).all()
    for j in range(n):  # the projection is clip(r + lam) with sum 1: lam by bisection
        lo, hi = -1.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.clip(R[:, j] + mid, low, high).sum() < 1 else (lo, mid)
        np.testing.assert_allclose(P[:, j], np.clip(R[:, j] + lo, low, high), atol=1e-12)


@pytest.mark.parametrize(("sizes", "k", "eps", "gain"), [
    ((2, 2, 2, 2), 2, 1.0, 0.5), ((2, 3, 2), 2, 0.5, 0.7),
    ((2, 2, 2, 2), 3, 3.0, 1.0)])  # e^3 + 1 > 16 cells: randomized response's regime
def test_optimized_strategy_is_exactly_ldp_and_beats_randomized_response(sizes, k, eps, gain):
    # Exact checks (no randomness beyond the seeded start): columns are distributions,
    # every row's max/min <= e^eps in float64, and the paper's objective is at most
    # ``gain`` times full-domain randomized response's (a feasible strategy) and below the
    # optimizer's own start.
    s = fz.optimize_strategy(sizes, k, eps, iterations=150, cache=False)
    n = math.prod(sizes)
    assert s.matrix.shape == (4 * n, n)
    np.testing.assert_allclose(s.matrix.sum(axis=0), 1.0, atol=1e-12)
    assert fz.ldp_ratio(s.matrix) <= math.exp(eps)
    assert fz.ldp_ratio(s.matrix) >= math.exp(eps) * (1 - 1e-9)  # the budget is used
    gram = fz.marginal_gram(sizes, k)
    rr = (np.ones((n, n)) + (math.exp(eps) - 1) * np.eye(n)) / (math.exp(eps) + n - 1)
    assert s.average_error <= gain * fz.average_user_error(rr, gram) * (1 + 1e-9)
    assert s.average_error == pytest.approx(fz.average_user_error(s.matrix, gram))
    assert s.objective <= s.history[0] * (1 + 1e-9)


def test_the_strategy_is_cached_by_its_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("DPMARGINALS_CACHE", str(tmp_path))
    monkeypatch.setattr(fz, "DISK_CACHE_CELLS", 2)
    monkeypatch.setattr(fz, "_MEMORY", {})  # this test's own memory cache
    first = fz.optimize_strategy((2, 2), 1, 1.0, iterations=20)
    assert list((tmp_path / "wfm").glob("*.npz"))
    fz._MEMORY.clear()
    again = fz.optimize_strategy((2, 2), 1, 1.0, iterations=20)
    np.testing.assert_array_equal(first.matrix, again.matrix)
    other = fz.optimize_strategy((2, 2), 1, 1.0, iterations=20, seed=1)
    assert not np.array_equal(first.matrix, other.matrix)


# -- the plan and the client -----------------------------------------------------------------
def test_plan_carries_the_strategy_and_large_domains_are_refused_by_size():
    method = WFM(epsilon=1.0, k=2)
    plan = method.plan(MIXED, 1000)
    (group,) = plan.groups
    assert (group.oracle, group.cells, group.attributes) == ("matrix", 12, MIXED.attributes)
    published = decode_matrix(plan.params["strategy"], 12)  # integer weights over 2^63
    assert (published.astype(object).sum(axis=0) == STRATEGY_TOTAL).all()
    np.testing.assert_allclose(published / float(STRATEGY_TOTAL),
                               method.strategy(MIXED).matrix, rtol=1e-5, atol=1e-9)
    assert Plan.from_dict(plan.to_dict()).hash == plan.hash
    assert plan.params["expected_sse"] > 0 and plan.params["report_bits"] == 6
    big = Domain(tuple(f"x{i}" for i in range(13)), (2,) * 13)
    with pytest.raises(DPMarginalsError, match="8,192 cells"):
        WFM(epsilon=1.0, k=2).plan(big, 1000)
    with pytest.raises(DPMarginalsError, match="rows >= the 12 cells"):
        WFM(epsilon=1.0, k=2, rows=8).plan(MIXED, 1000)


def _tampered(plan: Plan, matrix: np.ndarray) -> dict:
    body = plan.to_dict(with_hash=False)
    body["params"]["strategy"] = encode_matrix(matrix)
    return {**body, "hash": Plan.from_dict(body).hash}


@pytest.fixture
def no_draws(monkeypatch):
    """Fail on any draw from the OS CSPRNG (the client must refuse before randomizing)."""
    def refuse(self, count, bits):
        raise AssertionError("the client drew randomness before refusing the plan")

    monkeypatch.setattr(SecureRandom, "words", refuse)


def test_client_refuses_a_strategy_that_is_not_ldp_or_not_distributions(no_draws):
    plan = WFM(epsilon=1.0, k=2).plan(BIN3, 1000)
    W = decode_matrix(plan.params["strategy"], 8).astype(object)
    leaky = W.copy()
    row = int(np.argmax(W[:, 0]))
    other = (row + 1) % W.shape[0]
    shift = W[other, 0] // 2  # moved within column 0: its sum stays 2^63, a row breaks
    leaky[row, 0] += shift
    leaky[other, 0] -= shift
    long = W.copy()
    long[0, 0] += 1
    hole = W.copy()
    hole[1, 0], hole[2, 0] = 0, hole[2, 0] + hole[1, 0]
    cases = {r"not 1.0-LDP: row \d+ has max/min = [\d.]+ > e\^eps": leaky,
             "column 0 of the strategy sums to 9223372036854775809": long,
             r"row 1 has max/min = inf": hole}
    phone = Device(None, max_epsilon=1.0, max_total_epsilon=5.0)
    for reason, matrix in cases.items():
        with pytest.raises(PlanRefused, match=reason):
            phone.report(_tampered(plan, np.array(matrix, dtype=np.uint64)),
                         {"a": 1, "b": 0, "c": 1}, origin="o", campaign="w")
    assert phone.ledger.total() == 0
    body = plan.to_dict(with_hash=False)
    body["params"]["strategy"] = {**body["params"]["strategy"], "rows": 31}
    with pytest.raises(PlanRefused, match="holds 2,048 bytes, not the 1,984 of 31 x 8"):
        check_plan({**body, "hash": Plan.from_dict(body).hash}, max_epsilon=1.0)
    assert check_plan(plan.to_dict(), max_epsilon=1.0).hash == plan.hash


def test_strategy_format_reports_and_support():
    quarter = STRATEGY_TOTAL // 4
    fmt = StrategyMatrix(math.log(3), np.array([[3 * quarter, quarter], [quarter, 3 * quarter]],
                                               dtype=np.uint64), (2,))
    reports = fmt.perturb([0] * 4000 + [1] * 4000, rng=5)
    support = fmt.support(reports)
    # Binomial(4000, 3/4) + Binomial(4000, 1/4) outputs 0: mean 4000, sd 38.7 (4 sd: 155)
    assert abs(support[0] - 4000) < 155 and support.sum() == 8000
    with pytest.raises(DPMarginalsError, match=r"outside 0\.\.1"):
        fmt.support([0, 2])


# -- simulation and release -------------------------------------------------------------------
def test_exact_multinomial_draw_agrees_with_the_per_user_path():
    # 300 seeded repetitions of each path; every output count compared by a two-sample KS
    # test at 1e-4 / m (Bonferroni over the m = 32 outputs: family-wise false alarm < 1e-4).
    data = _data(BIN3, 2000)
    plan = WFM(epsilon=1.0, k=2).plan(BIN3, data.n)
    agg_method, per_method = WFM(epsilon=1.0, k=2), WFM(epsilon=1.0, k=2, per_user=True)
    reps = 300
    agg = np.array([agg_method.simulate(data, plan, rng=s).supports[0] for s in range(reps)])
    per = np.array([per_method.simulate(data, plan, rng=10_000 + s).supports[0]
                    for s in range(reps)])
    m = agg.shape[1]
    assert (agg.sum(axis=1) == data.n).all() and (per.sum(axis=1) == data.n).all()
    for o in range(m):
        assert stats.ks_2samp(agg[:, o], per[:, o]).pvalue > 1e-4 / m, o


def test_release_is_unbiased_and_the_closed_form_variance_is_the_mse():
    # 400 seeded releases.  Unbiasedness per cell of every 2-way marginal: |mean - truth| <=
    # 4 sd / sqrt(400).  The closed form at the true distribution is E[SSE] exactly; the
    # mean SSE per query is within 4 sd(SSE) / sqrt(400) of it.
    data = _data(MIXED, 3000)
    method = WFM(epsilon=1.0, k=2)
    plan = method.plan(MIXED, data.n)
    Q = group_oracle(plan, 0).probabilities
    truth_p = np.bincount(data.cell_indices(MIXED.attributes), minlength=12) / data.n
    exact = WFMSynopsis(MIXED, truth_p, covariance(Q, reconstruction(Q), truth_p, data.n))
    reps = 400
    synopses = [method.run(data, rng=s) for s in range(reps)]
    for attrs in combinations(MIXED.attributes, 2):
        truth = data.marginal(attrs).values
        est = np.array([s.marginal(attrs).values for s in synopses])
        sd = est.std(axis=0, ddof=1)
        assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * sd / np.sqrt(reps))
        sse = ((est - truth) ** 2).reshape(reps, -1).sum(axis=1)
        predicted = float(np.sum(exact.standard_errors(attrs) ** 2))
        assert abs(sse.mean() - predicted) <= 4 * sse.std(ddof=1) / np.sqrt(reps)
    np.testing.assert_allclose([s.table.sum() for s in synopses], 1.0, atol=1e-12)


def test_synopsis_answers_every_marginal_with_std_and_round_trips(tmp_path):
    data = _data(MIXED, 3000)
    syn = make("wfm", epsilon=2.0, k=2, postprocess="norm_sub").run(data, rng=1)
    table = syn.marginal(["c", "a"], std=True)
    assert table.values.shape == (2, 2) and table.values.min() >= 0
    assert table.values.sum() == pytest.approx(1.0)
    assert table.std.shape == (2, 2) and (table.std > 0).all()
    assert not table.reconstructed  # every report measured every attribute
    full = syn.marginal(["a", "b", "c"])  # beyond k: the whole estimated table
    assert full.values.shape == (2, 3, 2)
    # the std of a query is the closed form summed over its cells' pairs
    np.testing.assert_allclose(syn.marginal(["a", "b", "c"], std=True).std.ravel() ** 2,
                               np.diag(syn.covariance), rtol=1e-12)
    syn.save(tmp_path / "s.json")
    with pytest.warns(UserWarning):  # a simulation is marked not private
        back = load_synopsis(tmp_path / "s.json")
    np.testing.assert_array_equal(back.marginal(["a", "b"]).values,
                                  syn.marginal(["a", "b"]).values)
    np.testing.assert_array_equal(back.standard_errors(["b"]), syn.standard_errors(["b"]))


def test_sample_outputs_is_the_sum_of_multinomials():
    Q = np.array([[0.5, 0.2], [0.3, 0.3], [0.2, 0.5]])
    draws = np.array([sample_outputs(Q, [300, 700], rng=s) for s in range(400)])
    # mean Q x = [290, 300, 410]; each output's sd <= sqrt(1000 / 4) = 15.9; 4 sd/sqrt(400)
    np.testing.assert_allclose(draws.mean(axis=0), Q @ [300, 700], atol=4 * 15.9 / 20)
    assert (draws.sum(axis=1) == 1000).all()


def test_a_private_release_answers_with_its_closed_form_standard_errors():
    import pandas as pd

    from dpmarginals import release
    from dpmarginals.synopsis.intervals import with_uncertainty
    from dpmarginals.synopsis.stderr import standard_errors

    data = _data(MIXED, 2000)
    frame = pd.DataFrame(data.codes, columns=list(MIXED.attributes))
    syn = release(frame, {"a": 2, "b": 3, "c": 2}, method="wfm", epsilon=1.0, k=2)
    assert syn.privacy.private and syn.postprocess == "norm_sub"
    table = syn.marginal(["a", "b"])
    std, how = standard_errors(syn, ("a", "b"), table.values)  # what `query --std` calls
    assert how == "analytic"
    np.testing.assert_array_equal(std, syn.standard_errors(["a", "b"]))
    with_bounds = with_uncertainty(syn, table)  # `query --std`'s interval: ± 1.96 std
    np.testing.assert_allclose(with_bounds.upper - with_bounds.lower,
                               np.minimum(table.values + 1.959964 * std, 1)
                               - np.maximum(table.values - 1.959964 * std, 0))


def _pinv_error(Q: np.ndarray, gram: np.ndarray) -> float:
    """The paper's average per-user error with V = W Q^+ (strategies of deficient rank)."""
    R = Q / Q.sum(axis=1)[:, None]
    inverse = np.linalg.pinv(Q.T @ R, rcond=1e-10, hermitian=True)
    return float((np.sum(inverse * gram) - np.trace(gram)) / gram.shape[0])


def _split_over_marginals(d: int, k: int, size: int, eps: float) -> np.ndarray:
    """Users split evenly over a greedy covering of the k-sets by ``size``-sets, each
    reporting her cell of its marginal by randomized response (CALM's design with GRR):
    a member of WFM's class, as one strategy matrix."""
    cells = np.array(list(product(range(2), repeat=d)))
    need, sets = set(combinations(range(d), k)), []
    while need:
        best = max(combinations(range(d), size),
                   key=lambda s: len(need & set(combinations(s, k))))
        sets.append(best)
        need -= set(combinations(best, k))
    e, blocks = math.exp(eps), []
    for s in sets:
        width = 2 ** size
        index = np.ravel_multi_index(tuple(cells[:, list(s)].T), (2,) * size)
        block = np.full((width, 2**d), 1.0 / (e + width - 1))
        block[index, np.arange(2**d)] = e / (e + width - 1)
        blocks.append(block / len(sets))
    return np.vstack(blocks)


@pytest.mark.parametrize(("d", "k", "eps"), [(5, 2, 1.0), (5, 2, 4.0), (6, 2, 2.0)])
def test_wfm_is_as_good_as_users_split_over_covering_marginals(d, k, eps):
    # Exact (deterministic): the optimizer is local, so its strategy is not provably
    # optimal; it must be within 5% of every "users split over l-way marginals by
    # randomized response" strategy (l = k..d), whose best is often the RR over larger
    # marginals at high eps (d = 8, 2-way, eps = 4: WFM 3.161, 4-way RR groups 3.164; at
    # d = 6, 3-way, eps = 4 WFM ends 3% above 5-way groups).
    gram = fz.marginal_gram((2,) * d, k)
    wfm = fz.optimize_strategy((2,) * d, k, eps, cache=False).average_error
    best = min(_pinv_error(_split_over_marginals(d, k, size, eps), gram)
               for size in range(k, d + 1))
    assert wfm <= 1.05 * best
