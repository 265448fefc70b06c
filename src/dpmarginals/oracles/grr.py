"""Generalized randomized response (GRR): CALM §2.2.1, Cormode et al. §3.1 "PS"."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.exact import WORD
from ..core.randomness import RNGLike, simulation_rng
from ._base import FrequencyOracle, as_counts, as_value, check_law, check_range, grr_keep

__all__ = ["GRR"]


@dataclass(frozen=True)
class GRR(FrequencyOracle):
    """Generalized randomized response, a.k.a. direct encoding, k-RR, preferential sampling.

    A user keeps her value w.p. ``beta`` and otherwise reports a uniform value of all L
    (her own included): p = beta + (1 - beta) / L for her value, q = (1 - beta) / L for
    each other, which is GRR's law (CALM §2.2.1; Cormode et al. §3.1, Fact 3.1) with
    p / q = 1 + beta L / (1 - beta).  ``beta`` is the exact rational the device's
    sampler realizes: ``keep / 2^32`` with the largest 32-bit threshold whose p / q is at
    most e^eps (:func:`~._base.grr_keep`), or, for a memoized plan, the product of the
    permanent and the instantaneous randomizations' (``beta=`` given).

    **Report format**: an int64 array of shape (n,), the reported value of each user.

    >>> oracle = GRR(epsilon=1.0, size=4)
    >>> round(oracle.p, 6), round(oracle.q, 6)   # e / (e + 3), 1 / (e + 3)
    (0.475367, 0.174878)
    >>> round(oracle.variance(1000), 6)  # CALM eq. 1: (L - 2 + e^eps) / ((e^eps - 1)^2 n)
    0.001598
    """

    beta: Fraction | None = field(default=None, repr=False)
    name: ClassVar[str] = "grr"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta is None:
            object.__setattr__(self, "beta", Fraction(grr_keep(self.epsilon, self.size), WORD))
        check_law(self.p_exact, self.q_exact, self.epsilon, self.name)

    @property
    def keep(self) -> Fraction:
        """beta, the probability of reporting the true value outright."""
        assert self.beta is not None
        return self.beta

    @property
    def p_exact(self) -> Fraction:
        """beta + (1 - beta) / L."""
        return self.keep + (1 - self.keep) / self.size

    @property
    def q_exact(self) -> Fraction:
        """(1 - beta) / L."""
        return (1 - self.keep) / self.size

    def privacy_ratio(self) -> Fraction:
        """p / q."""
        return self.p_exact / self.q_exact

    @property
    def report_bits(self) -> int:
        """ceil(log2 L): one value."""
        return (self.size - 1).bit_length()

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
        """Exact draw of the support vector: C = Binomial(n_x, beta) per x plus a uniform
        multinomial of the remaining reports (exact jointly: each report is its value w.p.
        beta, else uniform over all L values)."""
        counts = as_counts(true_counts, self.size)
        gen = simulation_rng(rng)
        kept = gen.binomial(counts, float(self.keep))
        rest = int(counts.sum() - kept.sum())
        return kept + gen.multinomial(rest, np.full(self.size, 1.0 / self.size))
