"""Applications on synopses: chi-squared tests, Chow-Liu trees, synthetic data, SVM error."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from dpmarginals.applications import (
    chi_squared_test,
    chow_liu_tree,
    compare_trees,
    independence_test,
    mutual_information,
    pairwise_mutual_information,
    tree_mutual_information,
)
from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.table import MarginalTable
from dpmarginals.synopsis.synthetic import network, sample_marginal, synthesize


def chain_data(n: int = 20_000, seed: int = 0) -> Dataset:
    """a -> b -> c (strong links), e independent, f a 3-valued child of c."""
    gen = np.random.default_rng(seed)
    a = gen.integers(0, 2, n)
    b = np.where(gen.random(n) < 0.9, a, 1 - a)
    c = np.where(gen.random(n) < 0.8, b, 1 - b)
    e = gen.integers(0, 2, n)
    f = np.where(gen.random(n) < 0.7, c * 2, gen.integers(0, 3, n))
    return Dataset(np.column_stack([a, b, c, e, f]),
                   Domain(("a", "b", "c", "e", "f"), (2, 2, 2, 2, 3)),
                   {"f": ("low", "mid", "high")})


# -- chi-squared -------------------------------------------------------------------------------
def test_chi_squared_matches_scipy_on_exact_counts():
    data = chain_data()
    for pair in (("a", "b"), ("a", "e"), ("c", "f")):
        counts = data.counts(list(pair))
        ref = stats.chi2_contingency(counts, correction=False)
        res = chi_squared_test(data.marginal(list(pair)), data.n)
        assert res.statistic == pytest.approx(ref.statistic, rel=1e-9)
        assert res.pvalue == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-300)
        assert res.dof == ref.dof and res.n == data.n
    assert chi_squared_test(data.marginal(["a", "b"]), data.n).dependent
    assert not chi_squared_test(data.marginal(["a", "e"]), data.n).dependent


def test_chi_squared_states_dof_n_and_critical_value():
    t = MarginalTable(Domain(("x", "y"), (3, 4)), np.full((3, 4), 1 / 12))
    res = chi_squared_test(t, 500, alpha=0.01)
    assert res.dof == 6 and res.n == 500 and res.statistic == pytest.approx(0.0)
    assert res.critical_value == pytest.approx(stats.chi2.ppf(0.99, 6))
    assert "6 degree(s) of freedom and n = 500" in str(res)
    # a row with no mass is dropped and the degrees of freedom reduced
    v = np.array([[0.5, 0.2, 0.0], [0.0, 0.0, 0.0], [0.1, 0.1, 0.1]])
    assert chi_squared_test(MarginalTable(Domain(("x", "y"), (3, 3)), v), 100).dof == 2


def test_chi_squared_statistic_scales_with_n():
    t = MarginalTable(Domain(("x", "y"), (2, 2)), np.array([[0.3, 0.2], [0.2, 0.3]]))
    assert chi_squared_test(t, 400).statistic == pytest.approx(
        4 * chi_squared_test(t, 100).statistic)


def test_chi_squared_on_raw_noisy_estimate():
    # negative cells and a total off 1: projected onto the simplex first
    t = MarginalTable(Domain(("x", "y"), (2, 2)), np.array([[0.62, -0.03], [0.05, 0.40]]))
    res = chi_squared_test(t, 1000)
    assert np.isfinite(res.statistic) and res.dependent


def test_chi_squared_errors():
    t3 = MarginalTable(Domain(("x", "y", "z"), (2, 2, 2)), np.full((2, 2, 2), 1 / 8))
    with pytest.raises(DPMarginalsError, match="2-way"):
        chi_squared_test(t3, 10)
    t2 = t3.project(["x", "y"])
    for bad in (0, -5, 2.5, True):
        with pytest.raises(DPMarginalsError, match="n "):
            chi_squared_test(t2, bad)
    with pytest.raises(DPMarginalsError, match="alpha"):
        chi_squared_test(t2, 10, alpha=1.5)
    with pytest.raises(DPMarginalsError, match="two attributes"):
        independence_test(chain_data(100), ["a"], 100)


def test_independence_test_on_a_private_synopsis():
    from dpmarginals.methods import make

    data = chain_data(2**15)
    syn = make("inp_ht", epsilon=2.0, k=2).run(data, rng=1)
    res = independence_test(syn, ["a", "b"], data.n)
    assert res.dependent and res.attributes == ("a", "b")


@pytest.mark.needs_data
def test_taxi_pairs_on_the_real_trips():
    """§6.1's pairs on the 5,589 real trips (n = 5,589): the expected decisions, except
    Far-Night_pick, whose weak association is significant at 5% (p = 0.014)."""
    from dpmarginals.datasets import load

    trips = load("nyc-taxis")
    for pair in (("Night_pick", "Night_drop"), ("Toll", "Far"), ("CC", "Tip")):
        assert independence_test(trips, pair, trips.n).dependent
    for pair in (("M_drop", "CC"), ("Toll", "Night_pick")):
        assert not independence_test(trips, pair, trips.n).dependent
    far = independence_test(trips, ("Far", "Night_pick"), trips.n)
    assert far.dependent and 0.001 < far.pvalue < 0.05


# -- mutual information and Chow-Liu ------------------------------------------------------------
def test_mutual_information_values():
    dom = Domain(("x", "y"), (2, 2))
    assert mutual_information(MarginalTable(dom, np.full((2, 2), 0.25))) == pytest.approx(0.0)
    assert mutual_information(MarginalTable(dom, np.array([[0.5, 0], [0, 0.5]]))) == \
        pytest.approx(np.log(2))
    data = chain_data()
    a, b = data.column("a"), data.column("b")
    p = np.histogram2d(a, b, bins=2)[0] / data.n
    ref = sum(p[i, j] * np.log(p[i, j] / (p[i].sum() * p[:, j].sum()))
              for i in range(2) for j in range(2))
    assert mutual_information(data.marginal(["a", "b"])) == pytest.approx(ref)


def _brute_force_best_tree(mi: np.ndarray) -> float:
    d = mi.shape[0]
    best = -1.0
    for edges in itertools.combinations(itertools.combinations(range(d), 2), d - 1):
        parent = list(range(d))

        def find(x: int, parent: list[int] = parent) -> int:
            while parent[x] != x:
                x = parent[x]
            return x

        ok = True
        for i, j in edges:
            ri, rj = find(i), find(j)
            if ri == rj:
                ok = False
                break
            parent[ri] = rj
        if ok:
            best = max(best, sum(mi[i, j] for i, j in edges))
    return best


def test_chow_liu_is_the_maximum_spanning_tree():
    data = chain_data()
    tree = chow_liu_tree(data)
    _, mi = pairwise_mutual_information(data)
    assert len(tree.edges) == data.d - 1
    assert tree.total_mutual_information == pytest.approx(_brute_force_best_tree(mi))
    edges = {frozenset(e[:2]) for e in tree.edges}
    assert {frozenset("ab"), frozenset("bc"), frozenset("cf")} <= edges
    # independent attributes still join the tree (MI ~ 0 edges are kept)
    assert any("e" in e[:2] for e in tree.edges)
    parents = tree.parents("a")
    assert parents["a"] is None and parents["b"] == "a" and parents["c"] == "b"


def test_chow_liu_from_a_synopsis_vs_nonprivate():
    from dpmarginals.methods import make

    data = chain_data(2**16)
    syn = make("inp_ht", epsilon=2.0, k=2).run(data, rng=3)
    cmp = compare_trees(syn, data)
    assert cmp["nonprivate"] == pytest.approx(chow_liu_tree(data).total_mutual_information)
    assert 0.9 <= cmp["ratio"] <= 1.0 + 1e-12
    assert cmp["private"] == pytest.approx(tree_mutual_information(chow_liu_tree(syn), data))
    assert compare_trees(data, data)["ratio"] == pytest.approx(1.0)


def test_chow_liu_errors():
    data = chain_data(100)
    with pytest.raises(DPMarginalsError, match="at least two"):
        chow_liu_tree(data, ["a"])
    with pytest.raises(DPMarginalsError):
        chow_liu_tree(data, ["a", "nope"])
    with pytest.raises(DPMarginalsError, match="synopsis or a Dataset"):
        chow_liu_tree(object())


# -- synthetic data ------------------------------------------------------------------------------
def test_sample_marginal_follows_the_table():
    """Goodness of fit at p >= 1e-4 (seeded; would fail by chance with probability 1e-4)."""
    dom = Domain(("x", "y"), (2, 3))
    p = np.array([[0.1, 0.2, 0.05], [0.25, 0.15, 0.25]])
    ds = sample_marginal(MarginalTable(dom, p), 50_000, rng=7, labels={"x": ("no", "yes")})
    assert ds.n == 50_000 and ds.domain == dom.with_labels({"x": ("no", "yes")})
    assert stats.chisquare(ds.counts(["x", "y"]).ravel(), p.ravel() * ds.n).pvalue >= 1e-4
    assert set(ds.to_frame(labels=True)["x"]) == {"no", "yes"}
    same = sample_marginal(MarginalTable(dom, p), 1000, rng=7)
    assert np.array_equal(same.codes, sample_marginal(MarginalTable(dom, p), 1000, rng=7).codes)


def test_sample_marginal_of_a_raw_estimate():
    dom = Domain(("x",), (3,))
    ds = sample_marginal(MarginalTable(dom, np.array([0.7, -0.1, 0.4])), 1000, rng=1)
    assert ds.counts(["x"])[1] == 0


def test_synthesize_keeps_the_low_order_marginals():
    data = chain_data(40_000)
    fake = synthesize(data, 40_000, rng=11, degree=2)
    assert fake.domain == data.domain and fake.n == 40_000
    for q in (["a", "b"], ["b", "c"], ["c", "f"], ["a"], ["e"]):
        assert fake.marginal(q).total_variation(data.marginal(q)) < 0.02
    assert fake.labels == data.labels == {"f": ("low", "mid", "high")}  # the source's labels kept
    labelled = synthesize(data, 100, rng=1, labels=data.labels)
    assert set(labelled.to_frame(labels=True)["f"]) <= {"low", "mid", "high"}
    again = synthesize(data, 500, rng=5)
    assert np.array_equal(again.codes, synthesize(data, 500, rng=5).codes)


def test_synthesize_joint_and_subset():
    data = chain_data(10_000)
    joint = synthesize(data, 10_000, rng=2, degree=None, attributes=["a", "b", "c"])
    assert joint.domain.attributes == ("a", "b", "c")
    assert joint.marginal(["a", "b", "c"]).total_variation(
        data.marginal(["a", "b", "c"])) < 0.03
    order = network(data, degree=1)
    assert len(order) == data.d and order[0][1] == ()
    assert all(len(parents) == 1 for _, parents in order[1:])


def test_synthesize_from_a_calm_synopsis():
    from dpmarginals.datasets import load
    from dpmarginals.methods import make

    data = load("randhie", d=5)
    syn = make("calm", epsilon=2.0, k=2).run(data, rng=0)
    fake = synthesize(syn, 5000, rng=1, labels=data.labels)
    assert fake.domain == data.domain
    for q in (["visits"], ["visits", "coinsurance"]):
        assert fake.marginal(q).total_variation(data.marginal(q)) < 0.15


def test_synthesize_errors():
    data = chain_data(100)
    for bad in (0, -1, 1.5):
        with pytest.raises(DPMarginalsError, match="n "):
            synthesize(data, bad)
    with pytest.raises(DPMarginalsError, match="degree"):
        synthesize(data, 10, degree=-1)
    with pytest.raises(DPMarginalsError, match="synopsis"):
        synthesize(object(), 10)


# -- classification (CALM §5.4) ----------------------------------------------------------------
def _label_data(n: int = 6000, seed: int = 0) -> Dataset:
    gen = np.random.default_rng(seed)
    x = gen.integers(0, 3, size=(n, 2))
    y = ((x[:, 0] == 2) ^ (gen.random(n) < 0.1)).astype(int)
    return Dataset(np.column_stack([x, y]), Domain(("f", "g", "label"), (3, 3, 2)))


def test_misclassification_and_baselines():
    pytest.importorskip("sklearn")
    from dpmarginals.applications.classification import (
        best_possible_error,
        majority_error,
        misclassification,
        nonprivate_error,
    )

    data = _label_data()
    train, test = data.take(np.arange(4000)), data.take(np.arange(4000, 6000))
    nonpriv = nonprivate_error(train, ["f", "g"], "label", test)
    best = best_possible_error(train, ["f", "g"], "label", test)
    maj = majority_error(train, "label", test)
    assert best <= nonpriv + 1e-12 and 0.05 < nonpriv < 0.15 and maj > 0.25
    syn = misclassification(train.marginal(["f", "g", "label"]), "label", test, n=4000, rng=1)
    assert abs(syn - nonpriv) < 0.03
    # a synthetic training set with one label predicts it everywhere
    one = np.zeros((3, 3, 2))
    one[:, :, 0] = 1 / 9
    t = MarginalTable(Domain(("f", "g", "label"), (3, 3, 2)), one)
    assert misclassification(t, "label", test, n=100, rng=0) == pytest.approx(
        float(np.mean(test.column("label") != 0)))
    with pytest.raises(DPMarginalsError, match="label"):
        misclassification(t.project(["f", "g"]), "label", test, n=10)
