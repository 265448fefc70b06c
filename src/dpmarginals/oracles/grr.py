"""Generalized randomized response (GRR): CALM §2.2.1, Cormode et al. §3.1 "PS"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ._base import (
    FrequencyOracle,
    as_counts,
    as_value,
    as_values,
    check_range,
    grr_perturb,
    grr_probabilities,
)

__all__ = ["GRR"]


@dataclass(frozen=True)
class GRR(FrequencyOracle):
    """Generalized randomized response, a.k.a. direct encoding, k-RR, preferential sampling.

    Each user reports her value w.p. p = e^eps / (e^eps + L - 1), else a uniformly
    chosen other value (each w.p. q = 1 / (e^eps + L - 1)).  CALM §2.2.1; Cormode et
    al. §3.1, Fact 3.1 (PS with p_s = p).

    **Report format**: an int64 array of shape (n,), the reported value of each user.

    >>> oracle = GRR(epsilon=1.0, size=4)
    >>> reports = oracle.perturb([0, 1, 2, 3, 3], rng=7)
    >>> reports.shape, int(oracle.support(reports).sum())
    ((5,), 5)
    >>> round(oracle.variance(1000), 6)  # CALM eq. 1: (L - 2 + e^eps) / ((e^eps - 1)^2 n)
    0.001598
    """

    name: ClassVar[str] = "grr"

    @property
    def p(self) -> float:
        """e^eps / (e^eps + L - 1) (CALM §2.2.1)."""
        return grr_probabilities(self.epsilon, self.size)[0]

    @property
    def q(self) -> float:
        """1 / (e^eps + L - 1) (CALM §2.2.1)."""
        return grr_probabilities(self.epsilon, self.size)[1]

    @property
    def report_bits(self) -> int:
        """ceil(log2 L): one value."""
        return (self.size - 1).bit_length()

    def perturb(self, values: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Each user's randomized value, shape (n,) int64 (OS entropy when rng is None)."""
        x = as_values(values, self.size)
        return grr_perturb(client_rng(rng), x, self.p, self.size)

    def support(self, reports: ArrayLike) -> np.ndarray:
        """C(v) = number of reports equal to v (one bincount)."""
        arr = np.asarray(reports)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise DPMarginalsError(
                f"grr reports must be a 1-D integer array, got {arr.dtype} {arr.shape}"
            )
        arr = arr.astype(np.int64, copy=False)
        check_range(arr, self.size, "grr reports")
        return np.bincount(arr, minlength=self.size)

    def output_distribution(self, value: int) -> np.ndarray:
        """P[report = y | value] for y = 0..L-1 (shape (L,))."""
        x = as_value(value, self.size)
        out = np.full(self.size, self.q)
        out[x] = self.p
        return out

    def sample_support(self, true_counts: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Exact draw of the support vector.

        A GRR report is, w.p. p - q, the true value and otherwise uniform over all L
        values (p - q + q = p; (1 - p + q) / L = q).  So C = Binomial(n_x, p - q) per x
        plus a uniform multinomial of the remaining reports: exact, jointly.
        """
        counts = as_counts(true_counts, self.size)
        gen = simulation_rng(rng)
        kept = gen.binomial(counts, self.p - self.q)
        rest = int(counts.sum() - kept.sum())
        return kept + gen.multinomial(rest, np.full(self.size, 1.0 / self.size))
