"""Shared machinery of the frequency oracles: validation, the pure-protocol estimator.

Every oracle here is a *pure* protocol in the sense of Wang et al. (USENIX Security
2017, Def. 2): a report y "supports" a set of values, the user's own value is
supported with probability ``p`` and any other value with probability ``q``, and the
users' reports are independent.  Hence one unbiased estimator and one exact variance
serve all of them (CALM §2.2, eqs. 1-2; Wang et al. eq. (2) and Thm. 2).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError, check_epsilon
from ..core.randomness import RandomSource, RNGLike, random_words

__all__ = ["FrequencyOracle"]


def check_size(size: object) -> int:
    """Validate a domain size L: an integer >= 2."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer):
        raise DPMarginalsError(f"size must be an integer >= 2, got {size!r}")
    if size < 2:
        raise DPMarginalsError(f"size must be an integer >= 2, got {size!r}")
    return int(size)


def grr_probabilities(epsilon: float, size: int) -> tuple[float, float]:
    """(p, q) of randomized response on ``size`` values, finite for every finite epsilon.

    p = e^eps / (e^eps + L - 1) and q = 1 / (e^eps + L - 1), computed as
    1 / (1 + (L - 1) t) and t / (1 + (L - 1) t) with t = e^-eps, which never overflows
    (t underflows to 0 for eps > ~745: p = 1, q = 0).

    >>> grr_probabilities(1000.0, 4)
    (1.0, 0.0)
    """
    t = math.exp(-epsilon)
    den = 1.0 + (size - 1) * t
    return 1.0 / den, t / den


def grr_beats_oue(epsilon: float, cells: float) -> bool:
    """CALM §2.2.3: GRR has the smaller variance when L - 2 < 3 e^eps (as (L-2) e^-eps < 3).

    >>> grr_beats_oue(1.0, 10), grr_beats_oue(1.0, 11), grr_beats_oue(1e308, 2**60)
    (True, False, True)
    """
    return (cells - 2) * math.exp(-epsilon) < 3


def check_users(n: object, field: str = "n") -> int:
    """Validate a number of users: an integer >= 1."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DPMarginalsError(f"{field} must be an integer >= 1, got {n!r}")
    return int(n)


def _as_int_array(values: ArrayLike, field: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f" and arr.size and np.isfinite(arr).all():
        as_int = arr.astype(np.int64)
        bad = np.flatnonzero(as_int != arr)
        if bad.size == 0:
            return as_int
        raise DPMarginalsError(f"{field} must be integers, got {arr.flat[bad[0]]!r}")
    if arr.size == 0:
        return arr.astype(np.int64)
    raise DPMarginalsError(f"{field} must be integers, got dtype {arr.dtype}")


def check_range(arr: np.ndarray, high: int, field: str) -> None:
    """Raise naming the first entry of ``arr`` outside 0..high-1 (cheap when all are fine)."""
    if arr.size and (arr.min() < 0 or arr.max() >= high):
        i = int(np.flatnonzero((arr < 0) | (arr >= high))[0])
        raise DPMarginalsError(
            f"{field}: value {int(arr.flat[i])} at index {i} is outside 0..{high - 1}"
        )


def as_values(values: ArrayLike, size: int) -> np.ndarray:
    """Users' values as a 1-D int64 array, each in 0..size-1."""
    arr = _as_int_array(np.atleast_1d(np.asarray(values)), "values")
    if arr.ndim != 1:
        raise DPMarginalsError(f"values must be a 1-D array, got shape {arr.shape}")
    check_range(arr, size, "values")
    return arr


def as_value(value: object, size: int) -> int:
    """One input value in 0..size-1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DPMarginalsError(f"value must be an integer, got {value!r}")
    if not 0 <= value < size:
        raise DPMarginalsError(f"value {value} is outside 0..{size - 1}")
    return int(value)


def as_counts(true_counts: ArrayLike, size: int) -> np.ndarray:
    """True per-value counts: length ``size``, non-negative integers."""
    arr = _as_int_array(true_counts, "true_counts")
    if arr.shape != (size,):
        raise DPMarginalsError(f"true_counts must have shape ({size},), got {arr.shape}")
    if (arr < 0).any():
        i = int(np.flatnonzero(arr < 0)[0])
        raise DPMarginalsError(f"true_counts[{i}] = {int(arr[i])} is negative")
    return arr


def as_report_columns(reports: ArrayLike, columns: int, name: str) -> np.ndarray:
    """An (n, columns) int64 report array (malformed input raises)."""
    arr = np.asarray(reports)
    if arr.ndim != 2 or arr.shape[1] != columns or (arr.size and arr.dtype.kind not in "iu"):
        raise DPMarginalsError(
            f"{name} reports must be an integer array of shape (n, {columns}), "
            f"got {arr.dtype} {arr.shape}"
        )
    return arr.astype(np.int64, copy=False)


def parity(x: np.ndarray) -> np.ndarray:
    """popcount(x) mod 2 for non-negative int64 (portable; no np.bitwise_count)."""
    x = x.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        x ^= x >> shift
    return x & 1


def below(threshold: Fraction, count: int, src: RandomSource) -> np.ndarray:
    """``count`` exact draws of ``[U < threshold]``, U uniform on [0, 1) (a bool array).

    U's binary digits are drawn 32 at a time and compared with the threshold's (any
    rational): a draw is decided at its first word that differs from the threshold's,
    so the result is exactly Bernoulli(threshold); a word ties with probability 2^-32.

    >>> bool(below(Fraction(1, 3), 100_000, np.random.default_rng(0)).mean().round(2) == 0.33)
    True
    """
    rest = Fraction(threshold)
    if rest <= 0 or rest >= 1:
        return np.full(count, rest >= 1)
    out = np.zeros(count, dtype=bool)
    todo: np.ndarray | None = None  # the draws still tied with the threshold (None: all)
    while rest:
        rest *= 1 << 32
        digit = int(rest)  # the threshold's next 32 binary digits
        rest -= digit
        words = random_words(src, count if todo is None else todo.size, 32)
        if todo is None:
            out = words < digit
            tied = np.flatnonzero(words == digit)
        else:
            out[todo[words < digit]] = True
            tied = todo[words == digit]
        if not tied.size:
            break
        todo = tied
    return out  # a tie on every digit of a finite expansion: U >= threshold


@lru_cache(maxsize=256)
def _grr_coin(p: float, size: int, half: int) -> tuple[int, Fraction]:
    """``floor(beta 2^half)`` and the remainder, ``beta = (L p - 1) / (L - 1)``."""
    scaled = (size * Fraction(p) - 1) / (size - 1) * (1 << half)
    whole = int(scaled)
    return whole, scaled - whole


_BLOCK = 1 << 17  # users randomized per step: the temporaries stay small


def grr_perturb(src: RandomSource, values: np.ndarray, p: float, size: int) -> np.ndarray:
    """GRR on [size]: each value kept w.p. ``p``, else a uniform *other* value (CALM §2.2.1).

    One random word per report: a report is its value w.p. ``beta = (L p - 1) / (L - 1)``
    and otherwise uniform over all L values (``beta + (1 - beta) / L = p`` and
    ``(1 - beta) / L = (1 - p) / (L - 1) = q``, exactly).  The word's high half is the coin
    (``U < beta``), its low half the uniform value by Lemire's multiply-shift; the rare
    coin that ties with beta's digits draws more digits (:func:`below`) and the rare
    value in the multiply-shift's biased remainder is redrawn, so the law is exactly
    GRR's for the float ``p``.  A half has 16 bits for L <= 2^16 (a block of users draws
    its coins, then its low halves), else 32.
    """
    if size > 1 << 32:  # not a marginal anyone releases; exact, with two draws
        beta = (size * Fraction(p) - 1) / (size - 1)
        return np.where(below(beta, values.size, src), values,
                        np.asarray(src.integers(0, size, size=values.size), dtype=np.int64))
    out = np.empty(values.size, dtype=np.int64)
    for start in range(0, values.size, _BLOCK):
        out[start : start + _BLOCK] = _grr_block(src, values[start : start + _BLOCK], p, size)
    return out


def _grr_block(src: RandomSource, values: np.ndarray, p: float, size: int) -> np.ndarray:
    n = values.size
    half = 16 if size <= 1 << 16 else 32
    if half == 16:  # 32 random bits per report, as two 16-bit words
        word = random_words(src, 2 * n, 16)
        coin, low = word[:n], word[n:]
    else:
        coin, low = random_words(src, n, 32), random_words(src, n, 32)
    if size & (size - 1) == 0:  # a power of two: the top bits of the low half
        index = low >> (half - size.bit_length() + 1)
    else:
        scaled = low.astype(np.uint32 if half == 16 else np.uint64) * size
        index = scaled >> half
        biased = np.flatnonzero((scaled & ((1 << half) - 1)) < (1 << half) % size)
        if biased.size:
            index[biased] = np.asarray(src.integers(0, size, size=biased.size))
    whole, fraction = _grr_coin(p, size, half)
    keep = coin < whole
    if fraction:
        tie = np.flatnonzero(coin == whole)
        if tie.size:
            keep[tie] = below(fraction, tie.size, src)
    # index + (value - index) * keep, in the index's unsigned type (np.where would branch)
    index += (values.astype(index.dtype) - index) * keep
    return index


@dataclass(frozen=True)
class FrequencyOracle(ABC):
    """A pure LDP frequency oracle over values 0..size-1 (Wang et al. 2017, Def. 2).

    ``support(reports)[v]`` counts the reports that support value v; each user's own
    value is supported w.p. ``p``, every other value w.p. ``q``.
    """

    epsilon: float
    size: int
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "size", check_size(self.size))

    @property
    @abstractmethod
    def p(self) -> float:
        """P[a report supports the user's own value]."""

    @property
    @abstractmethod
    def q(self) -> float:
        """P[a report supports a given other value]."""

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Per-user communication in bits."""

    @abstractmethod
    def perturb(self, values: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Randomize every user's value (client side)."""

    @abstractmethod
    def support(self, reports: ArrayLike) -> np.ndarray:
        """Support counts per value (length ``size``, int64)."""

    @abstractmethod
    def output_distribution(self, value: int) -> np.ndarray:
        """Exact probability of every output for input ``value``."""

    @abstractmethod
    def sample_support(self, true_counts: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Draw the aggregate support vector given true per-value counts (simulation)."""

    def estimate(self, support: ArrayLike, n: int) -> np.ndarray:
        """Unbiased frequencies: (C(v)/n - q) / (p - q) (CALM §2.2.1-2.2.2, Wang et al. eq. 2).

        ``support`` has shape (L,) or (..., L) (e.g. many trials at once).
        """
        n = check_users(n)
        c = np.asarray(support, dtype=np.float64)
        if c.ndim < 1 or c.shape[-1] != self.size:
            raise DPMarginalsError(f"support must have shape (..., {self.size}), got {c.shape}")
        return (c / n - self.q) / (self.p - self.q)

    def variance(self, n: int, frequency: ArrayLike | None = None) -> float | np.ndarray:
        """Per-cell variance of ``estimate`` with n users.

        Exact for a cell of true frequency f:
        ``(f p(1-p) + (1-f) q(1-q)) / (n (p-q)^2)`` (Wang et al. 2017, Thm. 2 before the
        f -> 0 step).  ``frequency=None`` gives the f -> 0 form, CALM eqs. 1-2.
        """
        n = check_users(n)
        p, q = self.p, self.q
        if frequency is None:
            return q * (1 - q) / (n * (p - q) ** 2)
        f = np.asarray(frequency, dtype=np.float64)
        if not ((f >= 0) & (f <= 1)).all():
            raise DPMarginalsError(f"frequency must lie in [0, 1], got {frequency!r}")
        var = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
        return float(var) if var.ndim == 0 else var
