"""Optimized local hashing (OLH): Wang et al., USENIX Security 2017, §4.4.

Each user draws a hash function H from a universal family, hashes her value into
[g], g = round(e^eps) + 1, and reports (H, GRR_g(H(v))).

**Hash family** (Carter-Wegman over the Mersenne prime P = 2^31 - 1):
``H_{a,b}(v) = ((a v + b) mod P) mod g`` with a uniform in [1, P), b uniform in
[0, P).  For v != v' < P the pair ((a v + b) mod P, (a v' + b) mod P) is uniform over
distinct pairs, so the collision probability c = P[H(v) = H(v')] is the same for
every pair and known exactly (~ 1/g, off by < g/P).  The estimator uses that exact c,
so it is exactly unbiased for this family.  Clients need only int64 numpy arithmetic
(a v + b < 2^62); the aggregator recomputes H for all (report, value) pairs
vectorized.

**Report format**: int64 array of shape (n, 2): column 0 the seed ``a * 2^32 + b``,
column 1 the reported hash value y in 0..g-1.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.exact import WORD, exp_lower_bound, rational
from ..core.hashing import PRIME, distinct_collision_exact
from ..core.randomness import RNGLike, simulation_rng
from ._base import (
    FrequencyOracle,
    as_counts,
    as_report_columns,
    as_value,
    check_law,
    check_range,
    grr_keep,
)

__all__ = ["OLH"]

_SEED_SHIFT = 32
_LOW_MASK = (1 << _SEED_SHIFT) - 1
_USERS_PER_BLOCK = 1 << 15
_FLOAT_MOD_LIMIT = 1 << 22
_DEFAULT_SEEDS = 256


def _split(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return seeds >> _SEED_SHIFT, seeds & _LOW_MASK


def _checked_split(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of each seed; raise naming the first seed outside the family."""
    a, b = _split(seeds)
    bad = (a < 1) | (a >= PRIME) | (b >= PRIME)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DPMarginalsError(
            f"olh seed {int(seeds[i])} at index {i} is not in the hash family: need "
            f"1 <= seed >> 32 < {PRIME} and seed & 0xFFFFFFFF < {PRIME}"
        )
    return a, b


@lru_cache(maxsize=4096)
def hash_range(epsilon: float) -> int:
    """g = round(e^eps) + 1 (Wang et al. 2017, §4.4), at most P: e^eps rounded half up from
    its exact lower bound (:func:`~dpmarginals.core.exact.exp_lower_bound`), so every
    client computes the same g.  The hashed values lie in [0, P), so a larger range adds
    nothing."""
    bound = exp_lower_bound(rational(epsilon))
    return min(int(bound + Fraction(1, 2)) + 1, PRIME)


@dataclass(frozen=True)
class OLH(FrequencyOracle):
    """Optimized local hashing (Wang et al. 2017, §4.4); hash family in the module docstring.

    p = e^eps / (e^eps + g - 1) (GRR on [g]); q = q_g + c (p - q_g), q_g = 1/(e^eps+g-1),
    c the family's collision probability (q = 1/g for c = 1/g).  Variance at f -> 0:
    q(1-q) / ((p-q)^2 n), which is 4 e^eps / ((e^eps - 1)^2 n) (CALM's OUE eq. 2) when
    g = e^eps + 1 and slightly more for the integer g.

    The hashed value goes through GRR on [g] in keep-or-uniform form (:class:`~.grr.GRR`):
    kept w.p. ``beta`` = the largest 32-bit threshold whose p_g / q_g <= e^eps.

    >>> oracle = OLH(epsilon=1.0, size=20)
    >>> oracle.g, round(oracle.p, 6)
    (4, 0.475367)
    """

    name: ClassVar[str] = "olh"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size >= PRIME:
            raise DPMarginalsError(f"size must be < {PRIME} for OLH, got {self.size}")
        check_law(self.p_exact, self.q_exact, self.epsilon, self.name)

    @property
    def g(self) -> int:
        """The hash range (:func:`hash_range`)."""
        return hash_range(self.epsilon)

    @property
    def keep(self) -> Fraction:
        """beta: the hashed value is reported outright w.p. beta, else uniform over [g]."""
        return Fraction(grr_keep(self.epsilon, self.g), WORD)

    @property
    def p_g(self) -> Fraction:
        """P[y = H(v)] = beta + (1 - beta) / g."""
        return self.keep + (1 - self.keep) / self.g

    @property
    def p_exact(self) -> Fraction:
        """P[the report supports the own value] = p_g."""
        return self.p_g

    @property
    def q_exact(self) -> Fraction:
        """P[report supports another value] = q_g + c (p_g - q_g), with q_g = (1 - beta) / g
        and c the family's exact collision probability."""
        q_g = (1 - self.keep) / self.g
        return q_g + distinct_collision_exact(self.g) * (self.p_g - q_g)

    def privacy_ratio(self) -> Fraction:
        """p_g / q_g: given the seed (whose law does not depend on the value), the report
        is GRR on [g] of the hashed value."""
        return self.p_g / ((1 - self.keep) / self.g)

    @property
    def report_bits(self) -> int:
        """Seed (log2 of (P-1) P, 62 bits) plus ceil(log2 g) for y."""
        return (PRIME * (PRIME - 1) - 1).bit_length() + (self.g - 1).bit_length()

    def hash_values(self, seeds: ArrayLike, values: ArrayLike) -> np.ndarray:
        """H_seed(value) in [0, g), broadcasting seeds against values (int64)."""
        a, b = _split(np.asarray(seeds, dtype=np.int64))
        v = np.asarray(values, dtype=np.int64)
        return (a * v + b) % PRIME % self.g

    def _decode(self, reports: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        arr = as_report_columns(reports, 2, self.name)
        a, b = _checked_split(arr[:, 0])
        check_range(arr[:, 1], self.g, "olh hashed value")
        return a, b, arr[:, 1]

    def support(self, reports: ArrayLike) -> np.ndarray:
        """C(v) = #{reports with H_seed(v) = y}.

        Blocks of users; within a block the loop runs over values v (not users),
        updating (a v + b) mod P incrementally: O(n L) integer work.
        """
        a, b, y = self._decode(reports)
        counts = np.zeros(self.size, dtype=np.int64)
        for start in range(0, y.size, _USERS_PER_BLOCK):
            block = slice(start, start + _USERS_PER_BLOCK)
            counts += self._block_support(a[block], b[block], y[block])
        return counts

    def _block_support(self, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Support counts of one block of reports, looping over the L values."""
        out = np.empty(self.size, dtype=np.int64)
        g = self.g
        step = a - PRIME  # h + a - P < 0  <=>  no wrap-around
        h = b.copy()  # (a * 0 + b) mod P
        wrap = np.empty_like(h)
        if g >= _FLOAT_MOD_LIMIT:
            for v in range(self.size):
                out[v] = np.count_nonzero(h % g == y)
                h += step
                np.right_shift(h, 63, out=wrap)
                h += wrap & PRIME
            return out
        # h mod g in float64: h < 2^31 and g < 2^22 make floor(h / g) exact.
        target = y.astype(np.float64)
        quot = np.empty(h.shape)
        for v in range(self.size):
            np.divide(h, g, out=quot)
            np.floor(quot, out=quot)
            quot *= -g
            quot += h
            out[v] = np.count_nonzero(quot == target)
            h += step
            np.right_shift(h, 63, out=wrap)
            wrap &= PRIME
            h += wrap
        return out

    def output_distribution(self, value: int, seeds: ArrayLike | None = None) -> np.ndarray:
        """P[(seed, y) | value] with the seed uniform over ``seeds``, flattened: index s*g + y.

        The full family has ~2^62 seeds, so the enumeration runs over an explicit
        sub-family (default: 256 fixed seeds; pass your own).  Given the seed, the
        report is GRR on [g] of H_seed(value), and the seed's law does not depend on the
        value, so the ratio of any output's probabilities under two inputs is the
        same as for the full family: the LDP check over these outputs is exact.
        """
        x = as_value(value, self.size)
        s = self.default_seeds() if seeds is None else np.atleast_1d(np.asarray(seeds))
        if s.ndim != 1 or s.size == 0 or s.dtype.kind not in "iu":
            raise DPMarginalsError(f"seeds must be a non-empty 1-D integer array, got {s!r}")
        _checked_split(s.astype(np.int64))
        hashed = self.hash_values(s, x)
        q_g = float((1 - self.keep) / self.g)
        probs = np.full((s.size, self.g), q_g)
        probs[np.arange(s.size), hashed] = float(self.p_g)
        return (probs / s.size).ravel()

    @staticmethod
    def default_seeds() -> np.ndarray:
        """The fixed sub-family of ``output_distribution``: 256 seeds from a seeded Generator."""
        gen = np.random.default_rng(2017)
        a = gen.integers(1, PRIME, size=_DEFAULT_SEEDS)
        b = gen.integers(0, PRIME, size=_DEFAULT_SEEDS)
        return (a << _SEED_SHIFT) | b

    def sample_support(self, true_counts: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Draw C(v) = Binomial(n_v, p) + Binomial(n - n_v, q), independently over v.

        Each cell's marginal law is exact for this hash family (users are independent;
        another user's report supports v w.p. exactly q).  The joint law is exact under
        the ideal random-hash model, where H(v) for v != x is independent of everything
        else, which makes the cells independent.  With the real (pairwise-independent)
        family, correlations between cells can differ slightly from that model.
        """
        counts = as_counts(true_counts, self.size)
        gen = simulation_rng(rng)
        return gen.binomial(counts, self.p) + gen.binomial(counts.sum() - counts, self.q)
