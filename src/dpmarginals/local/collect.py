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

import math

import numpy as np

from ..core.dataset import Dataset
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..inference.views import NoisyView
from ..oracles import ORACLES
from ..protocol.counts import Counts
from ..protocol.formats import group_oracle
from ..protocol.plan import Plan

__all__ = ["Counts", "assign_groups", "collect", "estimate_views", "group_supports",
           "true_counts"]


def assign_groups(n: int, m: int, *, rng: RNGLike = None) -> np.ndarray:
    """A uniformly random split of n users into m groups whose sizes differ by at most 1."""
    return _group_labels(n, m, simulation_rng(rng)).astype(np.int64, copy=False)


def _group_labels(n: int, m: int, gen: np.random.Generator) -> np.ndarray:
    """:func:`assign_groups` in the smallest integer type (the same labels: a shuffle's
    permutation does not depend on the type)."""
    if m < 1:
        raise DPMarginalsError(f"the plan has no groups (m = {m})")
    if n < m:
        raise DPMarginalsError(f"{n} users cannot fill {m} groups: need at least one user each")
    dtype = np.int16 if m <= 2**15 else np.int32 if m <= 2**31 else np.int64
    groups = (np.arange(n, dtype=np.int64 if n > 2**31 else np.int32) % m).astype(dtype)
    gen.shuffle(groups)
    return groups


#: Records per chunk of the counting pass (a few MB of codes and index arrays).
_CHUNK = 2**16


def true_counts(data: Dataset, attribute_sets: list[tuple[str, ...]], labels: np.ndarray
                ) -> list[np.ndarray]:
    """Each group's exact counts of its own users (``labels[u]`` = user u's group) over its
    attribute set, in one pass over the records.

    Every record's cell in its group's marginal is read straight from its row (no per-group
    gather of the records), and one ``bincount`` over (group, cell) counts every group at
    once, chunk by chunk: memory traffic is one read of the codes (of the drawn row numbers
    and the small table, for users drawn from one).
    """
    sizes = data.domain.sizes
    columns = [data.domain.indices(attrs) for attrs in attribute_sets]
    width = max((len(c) for c in columns), default=0)
    cells = np.array([math.prod(sizes[i] for i in c) for c in columns], dtype=np.int64)
    offset = np.concatenate([[0], np.cumsum(cells)])
    column = np.zeros((len(columns), max(width, 1)), dtype=np.int64)
    radix = np.zeros_like(column)  # 0 pads the shorter sets
    for g, c in enumerate(columns):
        column[g, :len(c)] = c
        radix[g, :len(c)] = [math.prod(sizes[i] for i in c[j + 1:]) for j in range(len(c))]
    drawn = data.drawn_from  # users drawn from a small table: read it, not their copies
    table = data.codes if drawn is None else drawn[0]
    flat = np.ascontiguousarray(table).reshape(-1)
    d = data.d
    counts = np.zeros(int(offset[-1]), dtype=np.int64)
    for start in range(0, data.n, _CHUNK):
        group = labels[start:start + _CHUNK]
        rows = np.arange(start, start + len(group), dtype=np.int64) if drawn is None else \
            drawn[1][start:start + _CHUNK].astype(np.int64)
        where = column[group]
        where += (rows * d)[:, None]
        cell = offset[group]
        for j in range(width):
            cell += flat[where[:, j]] * radix[group, j]
        counts += np.bincount(cell, minlength=len(counts))
    return [counts[offset[g]:offset[g + 1]] for g in range(len(columns))]


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
    labels = _group_labels(data.n, plan.m, sim)
    users = np.bincount(labels, minlength=plan.m)
    # Client randomness: OS entropy unless the caller seeded the simulation.
    source = client_rng(None) if (per_user and rng is None) else sim
    sampled = [g for g, spec in enumerate(plan.groups)
               if spec.oracle in ORACLES and not per_user]
    exact = dict(zip(sampled, true_counts(data, [plan.groups[g].attributes for g in sampled],
                                          labels), strict=True)) if sampled else {}
    if len(sampled) < plan.m:  # users one by one: each group's members
        order = np.argsort(labels, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(users)])
    supports = []
    for g, spec in enumerate(plan.groups):
        oracle = group_oracle(plan, g)
        if g in exact:
            supports.append(np.asarray(oracle.sample_support(exact[g], rng=sim)))
            continue
        members = data.take(order[bounds[g]:bounds[g + 1]])
        if spec.oracle not in ORACLES:  # a report format: every report made as the client does
            values = members.codes[:, list(data.domain.indices(spec.attributes))]
            native = oracle.perturb(oracle.encode(values), rng=source)
            supports.append(np.asarray(oracle.support(native)))
        else:
            cells = members.cell_indices(spec.attributes)
            supports.append(np.asarray(oracle.support(oracle.perturb(cells, rng=source))))
    return Counts(supports, users)


def estimate_views(plan: Plan, supports: list[np.ndarray] | Counts,
                   users: np.ndarray | None = None) -> list[NoisyView]:
    """Unbias each group's support counts into a noisy marginal (CALM §4.2 step 2).

    ``estimate_views(plan, counts)`` or ``estimate_views(plan, supports, users)``; every
    group reports through a frequency oracle."""
    if isinstance(supports, Counts):
        supports, users = supports
    views = []
    for g, (spec, support, n_g) in enumerate(zip(plan.groups, supports, users, strict=True)):
        if spec.oracle not in ORACLES:
            raise DPMarginalsError(f"group {g} reports through {spec.oracle!r}, not a "
                                   "frequency oracle")
        oracle = group_oracle(plan, g).oracle  # a memoized plan's: the composed law
        shape = plan.domain.project(spec.attributes).shape
        est = np.asarray(oracle.estimate(support, int(n_g)), dtype=np.float64).reshape(shape)
        views.append(NoisyView(spec.attributes, est, int(n_g), float(oracle.variance(int(n_g)))))
    return views


def collect(
    data: Dataset, plan: Plan, *, rng: RNGLike = None, per_user: bool = False
) -> list[NoisyView]:
    """Run the whole collection of ``plan`` with every row of ``data`` as one user."""
    return estimate_views(plan, group_supports(data, plan, rng=rng, per_user=per_user))
