"""What analysts do with released marginals: the applications the papers evaluate.

Every function takes any synopsis (or, for the non-private reference, a
:class:`~dpmarginals.core.dataset.Dataset`, which answers marginals exactly):

* :func:`chi_squared_test` / :func:`independence_test` -- association between two
  attributes from a private 2-way marginal (Cormode et al. §6.1), by the paper's test or,
  for a synopsis by default, by a test that accounts for the release's noise (a
  Monte-Carlo null through the mechanism, or Gaboardi et al.'s asymptotic one):
  :func:`release_noise` rebuilds a local release's mechanism, and a central table's noise
  is a :class:`NoiseModel` such as :class:`GaussianNoise` or :class:`LaplaceNoise`;
* :func:`chow_liu_tree`, :func:`compare_trees` -- dependency trees from private 2-way
  marginals, with the true total mutual information vs. the non-private tree (§6.2);
* :func:`misclassification` (in :mod:`.classification`) -- CALM §5.4: a linear SVM
  trained on synthetic records sampled from a private k-way marginal;
* synthetic records: :func:`dpmarginals.synopsis.synthetic.synthesize`.
"""

from __future__ import annotations

from .association import ChiSquaredResult, chi_squared_test, independence_test
from .chow_liu import (
    ChowLiuTree,
    chow_liu_tree,
    compare_trees,
    mutual_information,
    pairwise_mutual_information,
    tree_mutual_information,
)
from .noise_models import AdditiveNoise, GaussianNoise, LaplaceNoise, NoiseModel
from .release_noise import release_noise

__all__ = [
    "AdditiveNoise",
    "ChiSquaredResult",
    "ChowLiuTree",
    "GaussianNoise",
    "LaplaceNoise",
    "NoiseModel",
    "chi_squared_test",
    "chow_liu_tree",
    "compare_trees",
    "independence_test",
    "mutual_information",
    "pairwise_mutual_information",
    "release_noise",
    "tree_mutual_information",
]
