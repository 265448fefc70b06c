"""Hadamard randomized response (HR): Cormode et al. §4 "HT" on a one-hot input.

K is the smallest power of two >= L + 1 and value x is row x + 1 of the Sylvester
Hadamard matrix H_K, H[i, j] = (-1)^popcount(i & j) (row 0, all ones, is unused).
A user samples a coefficient index j uniformly in [K], computes the sign
s = H[x + 1, j] and releases it through binary randomized response with
p = P / 2^32, the largest 32-bit threshold with p / (1 - p) <= e^eps (Cormode et al.
Alg. 1 with T = all K coefficients).

**Report format**: int64 array of shape (n, 2): column 0 the index j in 0..K-1,
column 1 the bit b in {0, 1}, with reported sign (-1)^b; without noise b is the
parity of popcount((x + 1) & j).  1 + log2 K bits per user.

Aggregation: N_j and the signed sums S_j per index (one bincount), the unbiased
coefficients theta_j = K S_j / (n (2p - 1)), inverted by a fast Walsh-Hadamard
transform.  Equivalently, a report (j, b) "supports" every value x whose parity at j
equals b: the own value w.p. p and any other w.p. exactly 1/2 (distinct Hadamard rows
agree on half the columns), so HR is a pure protocol with q = 1/2 and
C(x) = (n + (H S)[x + 1]) / 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.exact import WORD
from ..core.randomness import RNGLike, simulation_rng
from ._base import (
    FrequencyOracle,
    as_counts,
    as_report_columns,
    as_value,
    binary_keep,
    check_range,
    parity,
)

__all__ = ["HR", "fwht"]

_MAX_MULTINOMIAL_CELLS = 1 << 22


def fwht(a: ArrayLike) -> np.ndarray:
    """Unnormalized fast Walsh-Hadamard transform H_K a along the last axis (Sylvester order).

    >>> fwht([1, 0, 0, 0]).tolist(), fwht([0, 1, 0, 0]).tolist()
    ([1, 1, 1, 1], [1, -1, 1, -1])
    """
    out = np.array(a)
    k = out.shape[-1]
    lead = out.shape[:-1]
    h = 1
    while h < k:
        blocks = out.reshape(*lead, k // (2 * h), 2, h)
        top, bottom = blocks[..., 0, :], blocks[..., 1, :]
        out = np.stack((top + bottom, top - bottom), axis=-2).reshape(*lead, k)
        h *= 2
    return out


@dataclass(frozen=True)
class HR(FrequencyOracle):
    """Hadamard randomized response (Cormode et al. §4, Alg. 1-2); see the module docstring.

    p = e^eps / (1 + e^eps), q = 1/2.  Variance at f -> 0:
    (e^eps + 1)^2 / ((e^eps - 1)^2 n) (pure-protocol variance with q = 1/2).

    >>> oracle = HR(epsilon=1.0, size=6)
    >>> oracle.K, oracle.report_bits, round(oracle.p, 6)
    (8, 4, 0.731059)
    """

    name: ClassVar[str] = "hr"

    @property
    def K(self) -> int:
        """Smallest power of two >= L + 1."""
        return 1 << self.size.bit_length()

    @property
    def p_exact(self) -> Fraction:
        """P / 2^32 (:func:`~._base.binary_keep`): the sign is kept (binary RR)."""
        return Fraction(binary_keep(self.epsilon), WORD)

    @property
    def q_exact(self) -> Fraction:
        """1/2: another value's row agrees with the report's sign on half the indices."""
        return Fraction(1, 2)

    def privacy_ratio(self) -> Fraction:
        """p / (1 - p): the one output bit's odds."""
        return self.p_exact / (1 - self.p_exact)

    @property
    def report_bits(self) -> int:
        """1 + log2 K: the index and the bit."""
        return self.K.bit_length()

    def support(self, reports: ArrayLike) -> np.ndarray:
        """C(x) = (n + (H S)[x + 1]) / 2 with S_j the signed sum of reports at index j."""
        arr = as_report_columns(reports, 2, self.name)
        check_range(arr[:, 0], self.K, "hr index")
        check_range(arr[:, 1], 2, "hr bit")
        by_bit = np.bincount(2 * arr[:, 0] + arr[:, 1], minlength=2 * self.K)
        return self._support_from_bits(by_bit.reshape(self.K, 2))

    def _support_from_bits(self, by_bit: np.ndarray) -> np.ndarray:
        """Supports from the (K, 2) counts of reports per (index, bit)."""
        signed = by_bit[:, 0] - by_bit[:, 1]
        n = int(by_bit.sum())
        return (n + fwht(signed)[1 : self.size + 1]) // 2

    def coefficients(self, support: ArrayLike, n: int) -> np.ndarray:
        """Unbiased Hadamard coefficients theta_j = sum_x f_x H[x+1, j], j = 0..K-1."""
        t = np.zeros(self.K)
        t[1 : self.size + 1] = self.estimate(support, n)
        return fwht(t)

    def output_distribution(self, value: int) -> np.ndarray:
        """P[(j, b) | value] for all 2K outputs, index 2 j + b."""
        x = as_value(value, self.size)
        true_bit = parity((x + 1) & np.arange(self.K, dtype=np.int64))
        probs = np.where(np.arange(2)[None, :] == true_bit[:, None], self.p, 1 - self.p)
        return (probs / self.K).ravel()

    def sample_support(self, true_counts: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Exact draw via per-coefficient counts.

        Users of value x spread over the K indices as Multinomial(n_x, 1/K); at index
        j those whose true bit is 0 (M0_j of them) report 0 w.p. p, the M1_j others
        w.p. 1 - p.  For L K > 2^22 the same law is drawn user by user (O(n)).
        """
        counts = as_counts(true_counts, self.size)
        gen = simulation_rng(rng)
        if self.size * self.K > _MAX_MULTINOMIAL_CELLS:  # the same law user by user
            values = np.repeat(np.arange(self.size), counts)
            j = gen.integers(0, self.K, size=values.size)
            flip = gen.random(values.size) >= self.p
            bits = parity((values + 1) & j) ^ flip
            return self._support_from_bits(np.bincount(2 * j + bits, minlength=2 * self.K)
                                           .reshape(self.K, 2))
        per_index = gen.multinomial(counts, np.full(self.K, 1.0 / self.K))  # (L, K)
        rows = np.arange(1, self.size + 1)[:, None] & np.arange(self.K)[None, :]
        true_bit = parity(rows)
        m1 = (per_index * true_bit).sum(axis=0)
        m0 = per_index.sum(axis=0) - m1
        zeros = gen.binomial(m0, self.p) + gen.binomial(m1, 1 - self.p)
        by_bit = np.stack((zeros, m0 + m1 - zeros), axis=1)
        return self._support_from_bits(by_bit)
