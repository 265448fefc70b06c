"""The residual basis of ResidualPlanner (Xiao, He, Zhang, Kifer, "An Optimal and Scalable
Matrix Mechanism for Noisy Marginals under Convex Loss Functions", VLDB 2023).

Every marginal over a set ``W`` of attributes is the sum of orthogonal *residuals*, one per
subset ``A`` of ``W``: the part of the A-marginal that no smaller marginal explains.  With
``Q_i`` an orthonormal basis of the vectors of attribute ``i``'s ``n_i`` values that sum
to 0 (here the normalised Helmert contrasts: row ``j`` is ``(1, ..., 1, -j, 0, ...) /
sqrt(j (j + 1))``), the residual coefficients of ``A`` are ``y_A = (⊗_{i in A} Q_i) m_A``
(``prod (n_i - 1)`` numbers; ``y_() = n``), and

    m_W = sum_{A ⊆ W} (⊗_{i in A} Q_i^T ⊗_{i in W \\ A} 1 / n_i) y_A.

Adding or removing one record moves ``y_A`` by a vector of squared length
``p_A = prod_{i in A} (1 - 1/n_i)`` whatever the record (the diagonal of the projection
onto the residual space), so measuring every ``y_A`` with i.i.d. noise of variance
``sigma_A^2`` is ``sum_A p_A / (2 sigma_A^2)``-zCDP (the paper's privacy cost ``p_A /
sigma_A^2``, halved), and each cell of ``m_W`` then has variance

    Var = sum_{A ⊆ W} sigma_A^2 p_A prod_{i in W \\ A} 1 / n_i^2

(the paper's ``var_coeff``).  Minimising the workload's total variance ``sum_A v_A
sigma_A^2`` (``v_A`` = sum over workload marginals ``W ⊇ A`` of ``cells(W) p_A prod_{W \\ A}
1/n_i^2``, times ``W``'s weight) under the budget has the closed form (Cauchy-Schwarz)
``sigma_A^2 = sqrt(p_A / v_A) sum_B sqrt(p_B v_B) / (2 rho)``, the paper's sum-of-variances
solution; it is optimal among all Gaussian mechanisms for that loss (the paper's Theorem).
Checked against the authors' code (``dkifer/ResidualPlanner``: ``pcost_coeff``,
``var_coeff``, ``find_var_sum_cauchy``), which uses consecutive differences in place of
our orthonormal contrasts: the same mechanism up to an invertible map of each ``y_A``.

>>> helmert(3)[0].tolist(), [round(float(x * x), 6) for x in helmert(3)[1]]
([[1.0, -1.0, 0.0], [1.0, 1.0, -2.0]], [2.0, 6.0])
>>> q = contrasts(4); bool(np.allclose(q @ q.T, np.eye(3)) and np.allclose(q.sum(axis=1), 0))
True
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["closure", "contrasts", "helmert", "keep_share", "marginal_variance",
           "optimal_variances", "reconstruct", "residual_coefficients", "variance_weights"]

Subset = tuple[int, ...]


@functools.cache
def helmert(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(H, norms)``: the ``(n - 1) x n`` integer Helmert contrasts and their lengths."""
    h = np.zeros((n - 1, n))
    for j in range(1, n):
        h[j - 1, :j] = 1.0
        h[j - 1, j] = -float(j)
    return h, np.sqrt(np.arange(1, n) * np.arange(2, n + 1, dtype=np.float64))


@functools.cache
def contrasts(n: int) -> np.ndarray:
    """``Q``: the orthonormal contrasts of ``n`` values, ``(n - 1) x n``."""
    h, norms = helmert(n)
    return h / norms[:, None]


def keep_share(sizes: Sequence[int]) -> float:
    """``p_A = prod (1 - 1/n_i)``: the squared change of ``y_A`` when one record moves."""
    return float(np.prod([1.0 - 1.0 / n for n in sizes])) if len(sizes) else 1.0


def closure(workload: Iterable[Subset]) -> list[Subset]:
    """Every subset of every workload marginal (the empty set included), by size then
    lexicographically."""
    out: set[Subset] = set()
    for w in workload:
        w = tuple(sorted(w))
        for r in range(len(w) + 1):
            out.update(itertools.combinations(w, r))
    return sorted(out, key=lambda a: (len(a), a))


def variance_weights(workload: Mapping[Subset, float], sizes: Sequence[int]
                     ) -> dict[Subset, float]:
    """``v_A``: the workload's total variance per unit of ``sigma_A^2`` (see the module)."""
    v: dict[Subset, float] = {}
    for w, weight in workload.items():
        w = tuple(sorted(w))
        cells = math.prod(sizes[i] for i in w)
        for r in range(len(w) + 1):
            for a in itertools.combinations(w, r):
                rest = math.prod(1.0 / sizes[i] ** 2 for i in w if i not in a)
                v[a] = v.get(a, 0.0) + weight * cells * keep_share([sizes[i] for i in a]) * rest
    return v


def optimal_variances(v: Mapping[Subset, float], sizes: Sequence[int], rho: float
                      ) -> dict[Subset, float]:
    """``sigma_A^2`` minimising ``sum_A v_A sigma_A^2`` with ``sum_A p_A / (2 sigma_A^2) =
    rho`` (closed form, see the module docstring)."""
    p = {a: keep_share([sizes[i] for i in a]) for a in v}
    total = sum(math.sqrt(p[a] * v[a]) for a in v)
    # a set with a single-valued attribute has no residual coefficient (p_A = v_A = 0):
    # nothing is measured there, so its variance is never used (1.0 keeps it finite)
    return {a: math.sqrt(p[a] / v[a]) * total / (2.0 * rho) if p[a] > 0 else 1.0 for a in v}


def marginal_variance(w: Subset, sigma2: Mapping[Subset, float], sizes: Sequence[int]) -> float:
    """The variance of each cell (a count) of marginal ``w`` reconstructed from the noisy
    residuals of its subsets."""
    w = tuple(sorted(w))
    out = 0.0
    for r in range(len(w) + 1):
        for a in itertools.combinations(w, r):
            rest = math.prod(1.0 / sizes[i] ** 2 for i in w if i not in a)
            out += sigma2[a] * keep_share([sizes[i] for i in a]) * rest
    return out


def _along(tensor: np.ndarray, matrix: np.ndarray, axis: int) -> np.ndarray:
    """``matrix`` applied along ``axis`` of ``tensor``."""
    return np.moveaxis(np.tensordot(matrix, tensor, axes=([1], [axis])), 0, axis)


def residual_coefficients(counts: np.ndarray, integer: bool = False) -> np.ndarray:
    """``y_A`` of an A-marginal ``counts`` (shaped by A's sizes), flattened; with
    ``integer=True`` the unnormalised Helmert coefficients (exact integers in float64)."""
    y = np.asarray(counts, dtype=np.float64)
    for axis, n in enumerate(y.shape):
        y = _along(y, helmert(n)[0] if integer else contrasts(n), axis)
    return y.ravel()


def reconstruct(w: Subset, residuals: Mapping[Subset, np.ndarray], sizes: Sequence[int]
                ) -> np.ndarray:
    """``m_W`` (counts, shaped by ``w``'s sizes in the order of ``w``) from the residuals
    of ``w``'s subsets (a missing one counts as 0)."""
    order = tuple(sorted(w))
    shape = tuple(sizes[i] for i in order)
    out = np.zeros(shape)
    for r in range(len(order) + 1):
        for a in itertools.combinations(order, r):
            y = residuals.get(a)
            if y is None:
                continue
            part = np.asarray(y, dtype=np.float64).reshape([sizes[i] - 1 for i in a])
            for axis, i in enumerate(a):
                part = _along(part, contrasts(sizes[i]).T, axis)
            # broadcast over the attributes of w outside a, each a uniform 1 / n_i
            full_shape = [sizes[i] if i in a else 1 for i in order]
            part = part.reshape(full_shape) / math.prod(sizes[i] for i in order if i not in a)
            out = out + part
    return np.transpose(out, [order.index(i) for i in w])
