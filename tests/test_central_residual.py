"""Issue 35: ResidualPlanner (Xiao, He, Zhang, Kifer, VLDB 2023), ``--method residual``.

The variance checks draw 200 releases of a small table: with the seeded simulation
(numpy normal noise) and with OpenDP's (unseeded: its sampler takes no seed).  Budget: the
mean over a marginal's cells of the per-cell sample variance is within 4 standard errors
of the predicted variance (standard error of one cell's sample variance: var sqrt(2 / 199);
the mean over correlated cells has at most that error), so a false failure has
probability below 1e-4 per marginal.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from command_line import dpmarginals as cli
from dpmarginals import Dataset, Domain, load_synopsis, make, release
from dpmarginals.central.residual import ResidualPlanner
from dpmarginals.central.residual_basis import (
    closure,
    keep_share,
    marginal_variance,
    optimal_variances,
    reconstruct,
    residual_coefficients,
    variance_weights,
)

opendp = pytest.importorskip("opendp")

DOM = Domain(("a", "b", "c", "d"), (2, 3, 4, 3))


def small(n: int = 3000, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, s, n) for s in DOM.sizes], axis=1)
    codes[:, 1] = (codes[:, 0] + codes[:, 1] * (rng.random(n) < 0.7)) % 3
    codes[:, 0][codes[:, 3] == 2] = 1  # a few empty cells: the noise makes them negative
    return Dataset(codes, DOM)


def test_residuals_reconstruct_every_marginal_exactly():
    data = small()
    sizes = DOM.sizes
    residuals = {a: residual_coefficients(data.counts([DOM.attributes[i] for i in a]))
                 if a else np.array([float(data.n)])
                 for a in closure(itertools.combinations(range(4), 3))}
    for w in [(0, 1, 2), (2, 0), (3,), (1, 3, 2)]:
        exact = data.counts([DOM.attributes[i] for i in w])
        assert np.allclose(reconstruct(w, residuals, sizes), exact, atol=1e-8)


def test_the_closed_form_is_the_minimum_and_spends_the_budget():
    sizes = DOM.sizes
    v = variance_weights({w: 1.0 for w in itertools.combinations(range(4), 2)}, sizes)
    sigma2 = optimal_variances(v, sizes, rho=0.05)
    p = {a: keep_share([sizes[i] for i in a]) for a in v}
    assert sum(p[a] / (2 * sigma2[a]) for a in v) == pytest.approx(0.05, rel=1e-12)
    best = sum(v[a] * sigma2[a] for a in v)
    rng = np.random.default_rng(0)
    for _ in range(200):  # any other split of the same budget has more total variance
        other = {a: s * math.exp(rng.normal(0, 0.3)) for a, s in sigma2.items()}
        scale = sum(p[a] / (2 * other[a]) for a in v) / 0.05
        other = {a: s * scale for a, s in other.items()}
        assert sum(v[a] * other[a] for a in v) >= best * (1 - 1e-12)


def _variance_check(syn_runs, method):
    sizes = DOM.sizes
    for w in itertools.combinations(range(4), 3):
        draws = np.stack([reconstruct(w, s.residuals, sizes).ravel() for s in syn_runs])
        predicted = marginal_variance(w, syn_runs[0].variances, sizes)
        observed = draws.var(axis=0, ddof=1).mean()
        se = predicted * math.sqrt(2 / (len(syn_runs) - 1))
        assert abs(observed - predicted) <= 4 * se, (method, w, observed, predicted)


def test_per_marginal_variances_match_200_seeded_runs():
    data = small()
    method = ResidualPlanner(epsilon=1.0, delta=1e-9, k=3, postprocess="none")
    _variance_check([method.run(data, rng=seed) for seed in range(200)], "simulation")


def test_per_marginal_variances_match_200_opendp_runs():
    data = small()
    method = ResidualPlanner(epsilon=1.0, delta=1e-9, k=3, postprocess="none")
    runs = [method.run(data) for _ in range(200)]
    assert all(r.info["noise_sampler"] == "opendp" for r in runs)
    _variance_check(runs, "opendp")


def test_opendp_certifies_the_budget_and_the_release_is_consistent_and_nonnegative():
    data = small()
    method = ResidualPlanner(epsilon=1.0, delta=1e-9, k=3)
    syn = method.run(data)
    assert syn.info["privacy_map_rho"] <= method.rho
    assert syn.info["privacy_map_rho"] == pytest.approx(method.rho, rel=1e-9)
    assert syn.info["epsilon_certified"] <= 1.0 + 1e-12
    for w in itertools.combinations(DOM.attributes, 3):
        assert syn.marginal(list(w)).values.min() >= 0
    abc, abd = syn.marginal(["a", "b", "c"]).values, syn.marginal(["a", "b", "d"]).values
    assert np.allclose(abc.sum(axis=2), abd.sum(axis=2), atol=1e-12)  # consistent
    assert np.allclose(syn.marginal(["b", "a"]).values, abc.sum(axis=2).T, atol=1e-12)


def test_a_stated_workload_and_its_standard_errors():
    data = small()
    syn = make("residual", epsilon=1.0, delta=1e-9, workload=[("a", "b"), ("c",)]).run(
        data, rng=1)
    assert syn.measurement_std(["b", "a"]).shape == (3, 2)
    with pytest.raises(Exception, match="no calibrated standard error"):
        syn.measurement_std(["a", "c"])
    assert syn.marginal(["a", "c"]).values.shape == (2, 4)  # answered, a and c independent


def test_release_query_std_and_reload_on_the_cli(tmp_path):
    data = small()
    frame = pd.DataFrame(data.codes, columns=list(DOM.attributes))
    frame.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "d.json").write_text(json.dumps(dict(zip(DOM.attributes, DOM.sizes,
                                                         strict=True))))
    proc = cli("release", tmp_path / "d.csv", "--domain", tmp_path / "d.json", "--model",
               "central", "--method", "residual", "--epsilon", 1, "--delta", "1e-9", "--out",
               tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    syn = load_synopsis(tmp_path / "r.json")
    assert syn.privacy.model == "central" and syn.privacy.method == "residual"
    assert syn.info["privacy_map_rho"] <= syn.info["rho"]
    proc = cli("query", tmp_path / "r.json", "--attributes", "a,c", "--std", "--format",
               "json")
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    expected = syn.measurement_std(["a", "c"])
    assert np.allclose(np.asarray(body["std"]).ravel(), expected.ravel())
    r = release(frame, {a: s for a, s in zip(DOM.attributes, DOM.sizes, strict=True)},
                model="central", method="residual", epsilon=1.0, delta=1e-9, k=2)
    assert r.privacy.private and "seconds" not in json.dumps(r.info)


def test_counting_from_contiguous_columns_is_exact():
    from dpmarginals.central.residual_measure import count_all

    data = small()
    subsets = closure(itertools.combinations(range(4), 3))
    for a, counts in zip(subsets, count_all(data, subsets), strict=True):
        names = [DOM.attributes[i] for i in a]
        expected = data.counts(names) if a else data.n
        assert np.array_equal(counts, expected), a


def test_parts_in_parallel_processes_are_one_certified_composition():
    """``jobs=2``: two spawned workers measure disjoint halves of the residuals.  OpenDP's
    map of the composition is the budget (as for one measurement), and every noisy
    coefficient is its true value plus noise of its own sigma: the standardized errors'
    sum of squares is chi-square with one degree per coefficient (bounds at 1e-6 each
    side)."""
    from scipy import stats

    from dpmarginals.central.residual_measure import split

    data = small()
    method = ResidualPlanner(epsilon=1.0, delta=1e-9, k=3, postprocess="none", jobs=2)
    syn = method.run(data)
    assert syn.info["opendp_parts"] == 2
    assert syn.info["privacy_map_rho"] <= method.rho
    assert syn.info["privacy_map_rho"] == pytest.approx(method.rho, rel=1e-9)
    subsets = closure(itertools.combinations(range(4), 3))
    parts = split(subsets, DOM.sizes, data.n, 2)
    assert [a for p in parts for a in p] == subsets and len(parts) == 2
    z2, df = 0.0, 0
    for a in subsets:
        truth = residual_coefficients(data.counts([DOM.attributes[i] for i in a])
                                      if a else np.asarray(float(data.n)))
        z = (syn.residuals[a] - truth) / math.sqrt(syn.variances[a])
        z2, df = z2 + float(z @ z), df + z.size
    assert stats.chi2.ppf(1e-6, df) < z2 < stats.chi2.ppf(1 - 1e-6, df)
