"""Non-negative, consistent marginals from noisy residuals (ResidualPlanner's answers).

Every answer is reconstructed from one set of residual coefficients
(:func:`~.residual_basis.reconstruct`), so answers are consistent by construction: two
marginals agree on the attributes they share, exactly.  Non-negativity of the workload's
marginals is reached in two steps, each keeping that property:

1. alternating projections (as CALM §4.4 and PriView do): Norm-Sub every workload
   marginal with a negative cell (its total kept), then project back onto the consistent
   marginals by least squares with equal weight per cell.  In the residual basis that
   projection is a sparse update: from a marginal ``W`` alone the least-squares residual
   of ``A ⊆ W`` is ``Q_A marg_A(x_W)``, and the projection averages these over ``W ⊇ A``
   with weights ``prod_{W \\ A} 1 / n_i``, so only the marginals Norm-Sub changed move the
   residuals (their totals do not change, so neither does the empty set's);
2. the last negative cells go by mixing every marginal with the uniform table of the same
   total, by the smallest weight that makes the workload non-negative: in the residual
   basis, every residual but the total's is scaled by ``1 - lambda`` (consistent tables
   stay consistent).  Only when that weight is small (at most ``max_mix``): where the
   rounds stopped far from non-negative (``max_rounds`` or ``max_seconds``), mixing would
   pull every answer toward the uniform table (on Adult's 3-way marginals at eps 1 the
   workload error went from 0.27 to 0.79), so each answer is Norm-Sub'ed when asked
   instead (``per_answer_norm_sub``): non-negative exactly, consistent up to the negative
   mass the rounds left (``negative_mass``, a fraction of the total).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence

import numpy as np

from ..inference.nonneg import norm_sub_rows
from .residual_basis import Subset, contrasts, reconstruct

__all__ = ["make_nonnegative"]


def _marg(x: np.ndarray, w: Subset, a: Subset) -> np.ndarray:
    """The A-marginal of a table over ``w`` (axes in ``w``'s order, ``a`` sorted)."""
    axes = tuple(j for j, i in enumerate(w) if i not in a)
    return x.sum(axis=axes) if axes else x


def _project(m: np.ndarray, a: Subset, sizes: Sequence[int]) -> np.ndarray:
    for axis, i in enumerate(a):
        m = np.moveaxis(np.tensordot(contrasts(sizes[i]), m, axes=([1], [axis])), 0, axis)
    return m.ravel()


def make_nonnegative(residuals: dict[Subset, np.ndarray], workload: Sequence[Subset],
                     sizes: Sequence[int], *, max_rounds: int = 100,
                     max_seconds: float = 60.0, tol: float = 1e-9,
                     max_mix: float = 1e-3) -> dict[str, float | bool]:
    """Adjust ``residuals`` in place so the workload's marginals are non-negative (see the
    module docstring); returns how it went (rounds, the mixing weight, seconds)."""
    start = time.perf_counter()
    workload = [tuple(sorted(w)) for w in workload]
    subsets = {w: [a for r in range(len(w) + 1) for a in itertools.combinations(w, r)
                   if a in residuals] for w in workload}
    weight: dict[Subset, float] = {}
    for w in workload:
        for a in subsets[w]:
            weight[a] = weight.get(a, 0.0) + math.prod(1.0 / sizes[i] for i in w if i not in a)
    total = float(residuals[()][0])
    rounds = 0
    for rounds in range(1, max_rounds + 1):  # noqa: B007 - the count is reported
        delta: dict[Subset, np.ndarray] = {}
        changed = 0
        for w in workload:
            if time.perf_counter() - start > max_seconds:  # a wide workload's round is long
                break
            x = reconstruct(w, residuals, sizes)
            if x.min() >= -tol * max(total, 1.0):
                continue
            changed += 1
            fixed = norm_sub_rows(x.reshape(1, -1), x.sum())[0].reshape(x.shape)
            diff = fixed - x
            for a in subsets[w]:
                if not a:
                    continue
                c = math.prod(1.0 / sizes[i] for i in w if i not in a)
                step = c * _project(_marg(diff, w, a), a, sizes)
                delta[a] = delta[a] + step if a in delta else step
        for a, step in delta.items():
            residuals[a] = residuals[a] + step / weight[a]
        if not changed or time.perf_counter() - start > max_seconds:
            break
    # the last negatives: mix with the uniform table (scale every residual but the total's)
    lam, negative = 0.0, 0.0
    if total > 0:
        for w in workload:
            x = reconstruct(w, residuals, sizes)
            low = float(x.min())
            if low < 0:
                uniform = total / x.size
                lam = max(lam, -low / (uniform - low))
                negative = max(negative, float(-x[x < 0].sum()) / total)
        lam = min(1.0, lam * (1 + 1e-6))  # a margin over float rounding of the zeros
    per_answer = lam > max_mix
    if 0 < lam <= max_mix:
        for a in residuals:
            if a:
                residuals[a] = residuals[a] * (1.0 - lam)
    return {"nonneg_rounds": rounds, "uniform_mix": 0.0 if per_answer else lam,
            "per_answer_norm_sub": per_answer, "negative_mass": negative,
            "nonneg_seconds": time.perf_counter() - start}
