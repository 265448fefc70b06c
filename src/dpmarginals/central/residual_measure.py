"""Measuring ResidualPlanner's residuals: counting and OpenDP's Gaussian, in parts.

The residuals of the workload's closure are split into ``jobs`` contiguous parts of about
equal cost.  Each part is one OpenDP measurement: the records -> that part's residual
coefficients divided by their noise scales ``sigma_A`` (``make_user_transformation``, l2
sensitivity ``sqrt(sum_A p_A / sigma_A^2)`` over the part, with a 1e-9 relative margin
for float rounding) >> ``make_gaussian`` (the discrete Gaussian on the lattice 2^-40,
OpenDP's exact sampler; its map accounts for rounding to the lattice).  The release is
OpenDP's composition of the parts (``make_composition``, zCDP: the parts' rho add up to
what one measurement of every residual would cost), and the rho it records is that
composition's map.  With ``jobs > 1`` each part runs in a fresh (spawned, never forked:
OpenDP's generator state must not be copied) process, which rebuilds its part's
measurement, checks that its map is the one the composition summed, and invokes it once.
That is what makes a wide table affordable: counting 161,700 3-way marginals of 10^6 rows
and drawing 15 million discrete Gaussians are each minutes of one core.

**Counting.**  Each marginal is one ``np.bincount`` over the rows' codes in the smallest
integer type that holds its cells, from contiguous columns (a Dataset stores rows; a
column of a row-major table is read 6x slower), 3-way marginals from each pair's codes,
computed once per pair.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

import numpy as np

from ..core.dataset import Dataset, code_dtype
from ..core.errors import DPMarginalsError
from .residual_basis import Subset, helmert, keep_share, residual_coefficients

__all__ = ["auto_jobs", "count_all", "measure", "split"]

#: OpenDP's noise granularity (2^GRANULARITY): the lattice of its discrete Gaussian.
GRANULARITY = -40
#: Relative margin on the transformation's sensitivity for float64 rounding of the scaling.
ROUNDING_MARGIN = 1e-9
#: Measured costs that size the parts: OpenDP's discrete Gaussian per coefficient (about
#: 12 us on this project's 2-core machine, any granularity) and one bincount per row.
SECONDS_PER_COEFFICIENT = 12e-6
SECONDS_PER_ROW = 1.5e-9
#: Below this estimated cost one process measures everything (a worker's start is ~2 s).
PARALLEL_ABOVE_SECONDS = 20.0


def coefficients(subsets: Sequence[Subset], sizes: Sequence[int]) -> list[int]:
    """The number of residual coefficients of each subset: ``prod (n_i - 1)``."""
    return [math.prod(sizes[i] - 1 for i in a) for a in subsets]


def _cost(subsets: Sequence[Subset], sizes: Sequence[int], rows: int) -> np.ndarray:
    """Estimated seconds to count and noise each subset."""
    return (np.array(coefficients(subsets, sizes)) * SECONDS_PER_COEFFICIENT
            + np.array([rows * SECONDS_PER_ROW if a else 0.0 for a in subsets]))


def auto_jobs(subsets: Sequence[Subset], sizes: Sequence[int], rows: int) -> int:
    """One process for small releases; else one per available core (at most 8)."""
    if float(_cost(subsets, sizes, rows).sum()) < PARALLEL_ABOVE_SECONDS:
        return 1
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)  # the cores this process may use (Linux), else all
    return max(1, min(8, cores))


def split(subsets: Sequence[Subset], sizes: Sequence[int], rows: int, jobs: int
          ) -> list[list[Subset]]:
    """``subsets`` in ``jobs`` contiguous parts of about equal estimated cost (contiguous:
    a pair's 3-way marginals stay together and share its codes)."""
    cost = np.cumsum(_cost(subsets, sizes, rows))
    cuts = np.searchsorted(cost, cost[-1] * np.arange(1, jobs) / jobs)
    bounds = [0, *sorted(set(int(c) for c in cuts if 0 < c < len(subsets))), len(subsets)]
    return [list(subsets[lo:hi]) for lo, hi in itertools.pairwise(bounds)]


def count_all(data: Dataset, subsets: Sequence[Subset]) -> Iterator[np.ndarray]:
    """The count tables of ``subsets`` (in order), by ``np.bincount``."""
    codes = np.asfortranarray(data.codes)  # contiguous columns
    sizes = data.domain.sizes
    pair: tuple[Subset, np.ndarray] | None = None
    for a in subsets:
        if not a:
            yield np.asarray(float(codes.shape[0]))
            continue
        shape = tuple(sizes[i] for i in a)
        dtype = code_dtype([math.prod(shape)])  # holds every cell index
        if len(a) == 1:
            index = codes[:, a[0]]
        elif len(a) == 2:
            index = codes[:, a[0]].astype(dtype) * dtype.type(sizes[a[1]]) + codes[:, a[1]]
        else:
            if pair is None or pair[0] != a[:-1]:
                prefix = np.ravel_multi_index([codes[:, i] for i in a[:-1]], shape[:-1])
                pair = (a[:-1], prefix)
            index = pair[1].astype(dtype) * dtype.type(sizes[a[-1]]) + codes[:, a[-1]]
        yield np.bincount(index, minlength=math.prod(shape)).reshape(shape)


def _outer(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The flattened outer product of ``vectors`` (``[1.0]`` for none)."""
    out = np.ones(1)
    for v in vectors:
        out = np.multiply.outer(out, v).ravel()
    return out


def unit_coefficients(data: Dataset, part: Sequence[Subset], sigma2: Mapping[Subset, float]
                      ) -> np.ndarray:
    """The part's residual coefficients (orthonormal basis) divided by ``sigma_A``, as one
    vector: the transformation each part's measurement applies."""
    sizes = data.domain.sizes
    out = []
    for a, counts in zip(part, count_all(data, part), strict=True):
        scale = _outer([1.0 / helmert(sizes[i])[1] for i in a]) / math.sqrt(sigma2[a])
        out.append(residual_coefficients(counts, integer=True) * scale)
    return np.concatenate(out)


def sensitivity(part: Sequence[Subset], sizes: Sequence[int],
                sigma2: Mapping[Subset, float]) -> float:
    """The l2 sensitivity of :func:`unit_coefficients` (add or remove one record), with
    the rounding margin."""
    return math.sqrt(sum(keep_share([sizes[i] for i in a]) / sigma2[a] for a in part)) * (
        1 + ROUNDING_MARGIN)


def _opendp() -> Any:
    from ..core.extras import require

    dp = require("opendp.prelude", extra="central", what="residual (OpenDP's Gaussian)")
    dp.enable_features("contrib", "honest-but-curious")
    return dp


def part_measurement(part: Sequence[Subset], sizes: Sequence[int],
                     sigma2: Mapping[Subset, float], factor: float) -> Any:
    """The OpenDP measurement of one part: coefficients / sigma >> Gaussian of scale
    ``factor``."""
    dp = _opendp()
    size = sum(coefficients(part, sizes))
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
    l2 = dp.l2_distance(T=float)
    records = dp.user_domain("DPMarginalsDataset", lambda x: isinstance(x, Dataset))
    bound = sensitivity(part, sizes, sigma2)
    to_vector = dp.t.make_user_transformation(
        records, dp.symmetric_distance(), space, l2,
        function=lambda data: unit_coefficients(data, part, sigma2),
        stability_map=lambda d_in: math.nextafter(d_in * bound, math.inf))
    return to_vector >> dp.m.make_gaussian(space, l2, scale=factor, k=GRANULARITY)


def _run_part(data: Dataset, part: list[Subset], sigma2: dict[Subset, float], factor: float,
              rho: float) -> np.ndarray:
    """In a worker: rebuild the part's measurement, check its map, invoke it once."""
    meas = part_measurement(part, data.domain.sizes, sigma2, factor)
    if float(meas.map(1)) != rho:
        raise DPMarginalsError(f"a worker's measurement costs {float(meas.map(1))!r}, not "
                               f"the {rho!r} the composition certified")
    return np.asarray(meas(data), dtype=np.float64)


def measure(data: Dataset, subsets: Sequence[Subset], sigma2: Mapping[Subset, float],
            rho: float, jobs: int | None = None) -> tuple[np.ndarray, float, float, int]:
    """OpenDP's noisy unit-scaled coefficients of every subset (in order); returns them,
    the Gaussian's scale, the rho OpenDP's map of the composition certifies, and the number
    of parts.  The scale starts at 1 and is raised until that rho is at most ``rho``."""
    sizes = data.domain.sizes
    jobs = auto_jobs(subsets, sizes, data.n) if jobs is None else max(1, int(jobs))
    parts = split(subsets, sizes, data.n, jobs)
    dp = _opendp()

    def composed(f: float) -> tuple[Any, list[Any]]:
        members = [part_measurement(p, sizes, sigma2, f) for p in parts]
        return dp.c.make_composition(members), members

    factor = 1.0
    release, _ = composed(factor)
    factor = max(1.0, math.sqrt(float(release.map(1)) / rho))
    release, members = composed(factor)
    while float(release.map(1)) > rho:
        factor *= 1 + 1e-12
        release, members = composed(factor)
    spent = float(release.map(1))
    if len(parts) == 1:
        noisy = [np.asarray(v, dtype=np.float64) for v in release(data)]
    else:
        with ProcessPoolExecutor(len(parts), mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(_run_part, data, p,
                                   {a: sigma2[a] for a in p}, factor, float(m.map(1)))
                       for p, m in zip(parts, members, strict=True)]
            try:
                noisy = [f.result() for f in futures]
            except BrokenProcessPool as exc:
                raise DPMarginalsError(
                    "residual: a worker process measuring the residuals died (killed, or out "
                    "of memory); nothing was released: rerun it") from exc
    return np.concatenate(noisy), factor, spent, len(parts)
