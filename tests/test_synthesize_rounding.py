"""Rounded synthetic records: every conditional's counts are its expected counts, rounded.

``synthesize(..., sampling="rounded")`` (the default) draws each attribute by systematic
sampling within the rows that share its parents' values; the counts property is checked
exactly on the implemented sampler's output, and the one statistical test (the rows stay
exchangeable: no dependence the network does not have) states its error budget.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.table import MarginalTable
from dpmarginals.local.calm_pgm import PGMSynopsis
from dpmarginals.synopsis.synthetic import sample_marginal, synthesize
from test_synthesize_models import loopy_model


def assert_rounded(counts: np.ndarray, expected: np.ndarray) -> None:
    """Every count is floor or ceil of its expected count (1e-9 slack for the float sums)."""
    assert np.all(counts >= np.floor(expected - 1e-9)), (counts, expected)
    assert np.all(counts <= np.ceil(expected + 1e-9)), (counts, expected)


@pytest.mark.parametrize("n", [1, 7, 1000, 10_007])
def test_every_conditional_gets_its_expected_counts_rounded(n):
    model = loopy_model(3)
    fake = synthesize(PGMSynopsis(model.domain, model), n, rng=n)
    dom = model.domain
    for a, parents in model.sampling_network():
        both = model.marginal([*parents, a]).reshape(-1, dom.size(a))
        cond = both / both.sum(axis=1, keepdims=True)
        config = (np.ravel_multi_index([fake.codes[:, dom.index(b)] for b in parents],
                                       [dom.size(b) for b in parents])
                  if parents else np.zeros(n, dtype=np.int64))
        child = fake.codes[:, dom.index(a)]
        for c in np.unique(config):
            rows = config == c
            counts = np.bincount(child[rows], minlength=dom.size(a))
            assert_rounded(counts, rows.sum() * cond[c])


def test_iid_draws_do_not_round():
    """The i.i.d. sampler is what it says: a 50/50 attribute over 10,001 records is not
    split 5,000/5,001 (probability of that under i.i.d. draws: 0.8%; seeded)."""
    dom = Domain(("x",), (2,))
    table = MarginalTable(dom, np.array([0.5, 0.5]))
    rounded = sample_marginal(table, 10_001, rng=3).counts(["x"])
    iid = sample_marginal(table, 10_001, rng=3, sampling="iid").counts(["x"])
    assert sorted(rounded.tolist()) == [5000, 5001]
    assert sorted(iid.tolist()) != [5000, 5001] and iid.sum() == 10_001


def test_sample_marginal_rounds_every_cell():
    dom = Domain(("x", "y"), (3, 4))
    p = np.random.default_rng(5).dirichlet(np.ones(12)).reshape(3, 4)
    for n in (1, 13, 9_999):
        fake = sample_marginal(MarginalTable(dom, p), n, rng=n)
        assert_rounded(np.asarray(fake.counts(["x", "y"])).ravel(), n * p.ravel())


def test_the_rows_stay_exchangeable():
    """c's parent is b alone, so in the records c must not depend on a given b, however the
    rows sharing b are ordered.  Error budget: a chi-squared independence test of (a, c)
    within each value of b at level 1e-6 each (seeded)."""
    rng = np.random.default_rng(8)
    n = 60_000
    a = rng.integers(0, 3, n)
    b = (a + (rng.random(n) < 0.3)) % 3
    c = (b + (rng.random(n) < 0.2)) % 2
    data = Dataset(np.column_stack([a, b, c]), Domain(("a", "b", "c"), (3, 3, 2)))
    fake = synthesize(data, n, rng=9, degree=1)
    for value in range(3):
        rows = fake.codes[:, 1] == value
        table = np.zeros((3, 2))
        np.add.at(table, (fake.codes[rows, 0], fake.codes[rows, 2]), 1)
        table = table[table.sum(axis=1) > 0]
        assert chi2_contingency(table).pvalue > 1e-6


def test_an_unknown_sampling_is_refused():
    dom = Domain(("x",), (2,))
    with pytest.raises(DPMarginalsError, match="sampling must be one of rounded, iid, got 'round'"):
        sample_marginal(MarginalTable(dom, np.array([0.5, 0.5])), 10, sampling="round")
    with pytest.raises(DPMarginalsError, match="sampling"):
        synthesize(Dataset(np.zeros((4, 1), dtype=np.int64), dom), 10, sampling="exact")


def test_the_cli_takes_either_sampling(capsys, tmp_path):
    from dpmarginals.datasets import load
    from dpmarginals.methods import make
    from test_cli import run_cli

    syn = tmp_path / "syn.json"
    make("calm", epsilon=1.0, k=2).run(load("randhie", d=4), rng=0).save(syn)
    out = tmp_path / "fake.csv"
    base = ("synthesize", str(syn), "--n", "200", "--out", str(out), "--seed", "1",
            "--simulation")
    assert run_cli(capsys, *base)[0] == 0
    rounded = out.read_text()
    assert run_cli(capsys, *base, "--sampling", "iid")[0] == 0
    assert out.read_text() != rounded
    code, _, err = run_cli(capsys, *base, "--sampling", "round")
    assert code == 2 and "--sampling" in err and "rounded" in err
