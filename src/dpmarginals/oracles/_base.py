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
from ..core.exact import WORD, exp_lower_bound, largest_integer, rational
from ..core.randomness import RNGLike

__all__ = ["FrequencyOracle", "binary_keep", "check_law", "grr_keep"]


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


@lru_cache(maxsize=4096)
def grr_keep(epsilon: float, size: int) -> int:
    """T: GRR on ``size`` values keeps the value when a random word is below T, else reports
    a uniform value of all ``size`` (the value itself included).  The largest T in
    [0, 2^32] whose law is eps-LDP exactly: p / q = 1 + beta L / (1 - beta) <= e^eps with
    beta = T / 2^32, checked against :func:`~dpmarginals.core.exact.exp_lower_bound`.

    >>> round(grr_keep(1.0, 4) / 2**32, 5)   # (e - 1) / (e - 1 + 4)
    0.30049
    """
    bound = exp_lower_bound(rational(epsilon))
    return largest_integer(0, WORD, lambda t: t < WORD and (t * (size - 1) + WORD)
                           <= bound * (WORD - t))


@lru_cache(maxsize=4096)
def binary_keep(epsilon: float) -> int:
    """P: binary randomized response keeps the bit when a random word is below P; the
    largest P in [2^31, 2^32) with P / (2^32 - P) <= e^eps (exactly)."""
    bound = exp_lower_bound(rational(epsilon))
    return largest_integer(WORD // 2, WORD - 1, lambda t: t <= bound * (WORD - t))


def check_law(p: Fraction, q: Fraction, epsilon: float, name: str) -> None:
    """Raise unless 0 <= q < p <= 1: a law whose supports carry no signal (an epsilon so
    small that every 32-bit threshold rounds it away) cannot be unbiased."""
    if not 0 <= q < p <= 1:
        raise DPMarginalsError(f"{name}: epsilon = {epsilon!r} is too small for 32-bit "
                               f"randomizers (p = {float(p)!r}, q = {float(q)!r})")


@dataclass(frozen=True)
class FrequencyOracle(ABC):
    """A pure LDP frequency oracle over values 0..size-1 (Wang et al. 2017, Def. 2).

    ``support(reports)[v]`` counts the reports that support value v; each user's own
    value is supported w.p. ``p``, every other value w.p. ``q``.  The oracle is the
    *law* (exact rationals ``p_exact``, ``q_exact``, from which the floats ``p`` and ``q``
    come) and the aggregator's side; the device's randomizer that realizes the law lives
    in :mod:`dpmarginals.protocol.randomizers`.
    """

    epsilon: float
    size: int
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "size", check_size(self.size))

    @property
    @abstractmethod
    def p_exact(self) -> Fraction:
        """P[a report supports the user's own value], exactly."""

    @property
    @abstractmethod
    def q_exact(self) -> Fraction:
        """P[a report supports a given other value], exactly."""

    @property
    def p(self) -> float:
        """:attr:`p_exact` as a float."""
        return float(self.p_exact)

    @property
    def q(self) -> float:
        """:attr:`q_exact` as a float."""
        return float(self.q_exact)

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Per-user communication in bits."""

    @abstractmethod
    def privacy_ratio(self) -> Fraction:
        """max over outputs y and values x, x' of P[y | x] / P[y | x'], exactly (at most
        e^epsilon: the threshold derivations guarantee it, the tests enumerate it)."""

    @abstractmethod
    def support(self, reports: ArrayLike) -> np.ndarray:
        """Support counts per value (length ``size``, int64)."""

    @abstractmethod
    def output_distribution(self, value: int) -> np.ndarray:
        """Exact probability of every output for input ``value`` (as floats)."""

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
