"""Synthetic records from a graphical-model release are draws from the model itself."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmarginals.core.domain import Domain
from dpmarginals.inference.graphical_model import GraphicalModel
from dpmarginals.local.calm_pgm import PGMSynopsis
from dpmarginals.synopsis.synthetic import network, synthesize


def loopy_model(seed: int) -> GraphicalModel:
    """Triples over six attributes, as AIM selects them: a loopy graph of treewidth 3 that
    must be triangulated."""
    rng = np.random.default_rng(seed)
    dom = Domain(("a", "b", "c", "d", "e", "f"), (3, 2, 4, 3, 2, 2))
    cliques = [("a", "b", "c"), ("c", "d", "e"), ("a", "e", "f"), ("b", "d", "f")]
    return GraphicalModel(dom, [(c, rng.normal(0, 1.5, dom.project(c).shape))
                                for c in cliques])


def chain_rule_joint(model: GraphicalModel, steps) -> np.ndarray:
    """prod_a P(a | parents), every conditional a ratio of the model's marginals."""
    dom = model.domain
    joint = np.ones(dom.shape)
    for a, parents in steps:
        both = model.marginal([*parents, a])
        cond = both / both.sum(axis=-1, keepdims=True)
        order = [*parents, a]
        for cell in itertools.product(*map(range, dom.shape)):
            joint[cell] *= cond[tuple(cell[dom.index(x)] for x in order)]
    return joint


@pytest.mark.parametrize("seed", range(4))
def test_the_sampling_network_factorizes_the_model_exactly(seed):
    model = loopy_model(seed)
    steps = model.sampling_network()
    assert sorted(a for a, _ in steps) == sorted(model.domain.attributes)
    drawn: set[str] = set()
    for a, parents in steps:
        assert set(parents) <= drawn  # parents come first
        drawn.add(a)
    np.testing.assert_allclose(chain_rule_joint(model, steps), model.joint(), atol=1e-12)


def test_a_chow_liu_network_of_degree_2_does_not_factorize_it():
    """Why the model's own network is needed: the degree-2 tree approximation is not exact
    on a loopy model (the synthetic records were 4.2x AIM's model error on Adult)."""
    model = loopy_model(0)
    synopsis = PGMSynopsis(model.domain, model)
    approx = chain_rule_joint(model, network(synopsis, degree=2))
    assert 0.5 * np.abs(approx - model.joint()).sum() > 1e-3


def test_synthetic_records_of_a_graphical_model_are_draws_from_it():
    """Seeded; error budget: a chi-squared goodness-of-fit test at level 1e-6 per run."""
    model = loopy_model(1)
    synopsis = PGMSynopsis(model.domain, model)
    n = 200_000
    fake = synthesize(synopsis, n, rng=2024)
    counts = np.bincount(np.ravel_multi_index(fake.codes.T, model.domain.shape),
                         minlength=model.domain.cells())
    expected = model.joint().ravel() * n
    assert chisquare(counts, expected).pvalue > 1e-6
    subset = synthesize(synopsis, 1000, rng=1, attributes=["e", "a"])
    assert subset.domain.attributes == ("e", "a") and subset.codes.shape == (1000, 2)
    again = synthesize(synopsis, 1000, rng=1, attributes=["e", "a"])
    assert np.array_equal(subset.codes, again.codes)
