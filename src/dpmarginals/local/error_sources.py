"""Where an LDP synopsis's error comes from: noise, sampling or reconstruction.

Run the same inference on cleaner inputs than the noisy views of a collection:

* :func:`noiseless_views`: every group's exact marginal of its *own* users (the same
  split of users into groups as :func:`~.collect.collect` with the same ``rng``, the
  oracle noise removed) -> the answer's error is sampling + reconstruction;
* :func:`population_views`: the exact marginals of *all* users on the plan's attribute
  sets -> reconstruction (and estimator bias) only;

so noise = total - no-noise, sampling = no-noise - population and reconstruction =
population (:func:`split_error`).  This is a simulation diagnostic: it reads the raw data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.dataset import Dataset
from ..core.randomness import RNGLike, simulation_rng
from ..inference.views import NoisyView
from ..protocol.plan import Plan
from .collect import assign_groups

__all__ = ["noiseless_views", "population_views", "split_error"]

#: The variance a population view claims: ~0, but positive so that variance weights exist.
EXACT_VARIANCE = 1e-12


def noiseless_views(data: Dataset, plan: Plan, *, rng: RNGLike) -> list[NoisyView]:
    """The groups' exact marginals of their own users, split as ``collect(..., rng=rng)``.

    Each view claims the variance of its sampling error (~1/(n_g L) per cell), so that
    inference weighs the views as it would weigh noisy ones of that quality (and, not
    ``sampled``, shrinkage told the population does not add that error again).
    """
    groups = assign_groups(data.n, plan.m, rng=simulation_rng(rng))
    views = []
    for g, spec in enumerate(plan.groups):
        members = data.take(np.flatnonzero(groups == g))
        table = members.marginal(spec.attributes).values
        views.append(NoisyView(spec.attributes, table, members.n, 1.0 / (members.n * table.size),
                               sampled=False))
    return views


def population_views(data: Dataset, plan: Plan, users: Sequence[int]) -> list[NoisyView]:
    """The exact marginals of every user on the plan's attribute sets (``users``: the group
    sizes the views claim, for standard errors; no sampling error: not ``sampled``)."""
    return [NoisyView(spec.attributes, data.marginal(spec.attributes).values, int(n_g),
                      EXACT_VARIANCE, sampled=False)
            for spec, n_g in zip(plan.groups, users, strict=True)]


def split_error(total: float, no_noise: float, population: float) -> dict[str, float]:
    """Noise, sampling and reconstruction shares of a mean SSE (differences of the three
    runs; a share may come out slightly negative by chance)."""
    return {"noise": total - no_noise, "sampling": no_noise - population,
            "reconstruction": population}
