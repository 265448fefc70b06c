"""The local-DP collection spine shared by every "users report one marginal" method.

plan -> users split into groups -> each user projects her record on her group's
marginal and randomizes it through the group's frequency oracle -> support counts
per (group, cell) -> unbiased noisy marginals with their per-cell variances.

Two paths produce the support counts:

* ``per_user=True``: every user's report is made by ``oracle.perturb`` (the client
  path; OS entropy unless a seed is given) and counted by ``oracle.support``.
* ``per_user=False`` (default for simulation): the support vector is drawn from its
  exact distribution given the group's true counts (``oracle.sample_support``);
  ``tests/test_collect.py`` checks both paths agree in distribution.

A group of a report format (:mod:`dpmarginals.protocol.formats`: InpHT, MargHT,
InpHTCMS, EM) has no aggregate sampler: its users' reports are always made one by one,
as the client makes them (``per_user`` only chooses OS entropy when ``rng`` is None).
"""

from __future__ import annotations

import numpy as np

from ..core.dataset import Dataset
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..inference.views import NoisyView
from ..oracles import ORACLES, make_oracle
from ..protocol.counts import Counts
from ..protocol.formats import group_oracle
from ..protocol.plan import Plan

__all__ = ["Counts", "assign_groups", "collect", "estimate_views", "group_supports"]


def assign_groups(n: int, m: int, *, rng: RNGLike = None) -> np.ndarray:
    """A uniformly random split of n users into m groups whose sizes differ by at most 1."""
    if m < 1:
        raise DPMarginalsError(f"the plan has no groups (m = {m})")
    if n < m:
        raise DPMarginalsError(f"{n} users cannot fill {m} groups: need at least one user each")
    groups = np.arange(n, dtype=np.int64) % m
    simulation_rng(rng).shuffle(groups)
    return groups


def group_supports(
    data: Dataset, plan: Plan, *, rng: RNGLike = None, per_user: bool = False
) -> Counts:
    """The :class:`~dpmarginals.protocol.counts.Counts` of ``plan``'s collection with every
    row of ``data`` as one user: support counts per group and the group sizes."""
    if data.domain != plan.domain:
        missing = [a for a in plan.domain.attributes if a not in data.domain]
        if missing:
            raise DPMarginalsError(f"the data lacks the plan's attributes {missing}")
        data = data.project(plan.domain.attributes)
    sim = simulation_rng(rng)
    groups = assign_groups(data.n, plan.m, rng=sim)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(plan.m + 1))
    # Client randomness: OS entropy unless the caller seeded the simulation.
    source = client_rng(None) if (per_user and rng is None) else sim
    supports = []
    for g, spec in enumerate(plan.groups):
        members = order[bounds[g] : bounds[g + 1]]
        oracle = group_oracle(plan, g)
        if spec.oracle not in ORACLES:  # a report format: every report made as the client does
            values = data.take(members).codes[:, list(data.domain.indices(spec.attributes))]
            native = oracle.perturb(oracle.encode(values), rng=source)
            supports.append(np.asarray(oracle.support(native)))
            continue
        cells = data.take(members).cell_indices(spec.attributes)
        if per_user:
            supports.append(np.asarray(oracle.support(oracle.perturb(cells, rng=source))))
        else:
            true_counts = np.bincount(cells, minlength=spec.cells)
            supports.append(np.asarray(oracle.sample_support(true_counts, rng=sim)))
    return Counts(supports, np.diff(bounds))


def estimate_views(plan: Plan, supports: list[np.ndarray] | Counts,
                   users: np.ndarray | None = None) -> list[NoisyView]:
    """Unbias each group's support counts into a noisy marginal (CALM §4.2 step 2).

    ``estimate_views(plan, counts)`` or ``estimate_views(plan, supports, users)``; every
    group reports through a frequency oracle."""
    if isinstance(supports, Counts):
        supports, users = supports
    views = []
    for spec, support, n_g in zip(plan.groups, supports, users, strict=True):
        oracle = make_oracle(spec.oracle, spec.epsilon, spec.cells)
        shape = plan.domain.project(spec.attributes).shape
        est = np.asarray(oracle.estimate(support, int(n_g)), dtype=np.float64).reshape(shape)
        views.append(NoisyView(spec.attributes, est, int(n_g), float(oracle.variance(int(n_g)))))
    return views


def collect(
    data: Dataset, plan: Plan, *, rng: RNGLike = None, per_user: bool = False
) -> list[NoisyView]:
    """Run the whole collection of ``plan`` with every row of ``data`` as one user."""
    return estimate_views(plan, group_supports(data, plan, rng=rng, per_user=per_user))
