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

from ..core.dataset import Dataset, cell_indices
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..inference.views import NoisyView
from ..oracles import ORACLES, make_oracle
from ..protocol.counts import Counts
from ..protocol.formats import group_oracle
from ..protocol.plan import Plan

__all__ = ["Counts", "assign_groups", "collect", "estimate_views", "group_supports",
           "split_groups"]


def assign_groups(n: int, m: int, *, rng: RNGLike = None) -> np.ndarray:
    """A uniformly random split of n users into m groups whose sizes differ by at most 1."""
    if m < 1:
        raise DPMarginalsError(f"the plan has no groups (m = {m})")
    if n < m:
        raise DPMarginalsError(f"{n} users cannot fill {m} groups: need at least one user each")
    groups = np.arange(n, dtype=np.int64) % m
    simulation_rng(rng).shuffle(groups)
    return groups


def split_groups(n: int, m: int, *, rng: RNGLike = None) -> tuple[np.ndarray, np.ndarray]:
    """The split of :func:`assign_groups` (same distribution) as ``(rows, bounds)``: group g's
    users are ``rows[bounds[g]:bounds[g + 1]]``.  One permutation, no sort.

    >>> rows, bounds = split_groups(10, 3, rng=0)
    >>> np.diff(bounds).tolist(), sorted(rows.tolist()) == list(range(10))
    ([4, 3, 3], True)
    """
    if m < 1:
        raise DPMarginalsError(f"the plan has no groups (m = {m})")
    if n < m:
        raise DPMarginalsError(f"{n} users cannot fill {m} groups: need at least one user each")
    rows = simulation_rng(rng).permutation(n)
    sizes = np.full(m, n // m, dtype=np.int64)
    sizes[: n % m] += 1
    return rows, np.concatenate([[0], np.cumsum(sizes)])


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
    rows, bounds = split_groups(data.n, plan.m, rng=sim)
    # Client randomness: OS entropy unless the caller seeded the simulation.
    source = client_rng(None) if (per_user and rng is None) else sim
    supports = []
    for g, spec in enumerate(plan.groups):
        # The group's records, gathered once (whole rows: one cache line each).
        block = data.codes[rows[bounds[g] : bounds[g + 1]]]
        columns = data.domain.indices(spec.attributes)
        oracle = group_oracle(plan, g)
        if spec.oracle not in ORACLES:  # a report format: every report made as the client does
            native = oracle.perturb(oracle.encode(block[:, list(columns)]), rng=source)
            supports.append(np.asarray(oracle.support(native)))
        elif per_user:
            cells = cell_indices(block, columns, data.domain.sizes, dtype=np.int64)
            supports.append(np.asarray(oracle.support(oracle.perturb(cells, rng=source))))
        else:
            true_counts = np.bincount(cell_indices(block, columns, data.domain.sizes),
                                      minlength=spec.cells)
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
