"""Exact arithmetic behind every privacy bound of a randomizer: e^x from below, and the
32-bit thresholds the samplers compare random words with.

A randomizer's law is exactly eps-LDP only if its probabilities, as the rationals the
sampler realizes, have ratios at most e^eps.  e^eps is irrational, so every bound here
is checked against :func:`exp_lower_bound`, a rational at most e^x (a Taylor sum in fixed
point, every term rounded down, then truncated to 128 binary digits): a ratio at most
that rational is at most e^x.  Everything is integer arithmetic on the exact value of a
float, so every client (the TypeScript one too) derives the same thresholds bit for bit.

>>> lb = exp_lower_bound(Fraction(1))
>>> float(lb), lb <= Fraction(27182818284590453, 10**16)
(2.718281828459045, True)
>>> largest_integer(0, 10, lambda t: t * t <= 50)
7
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

from .errors import DPMarginalsError

__all__ = ["WORD", "exp_lower_bound", "largest_integer", "rational", "smallest_integer"]

WORD = 1 << 32
"""A random word has 32 bits; every threshold is an integer count of words out of 2^32."""
_FIXED = 192  # fractional bits of the Taylor sum's fixed point
_KEPT = 128  # fractional bits of the published lower bound
_MAX_EXPONENT = 64  # e^64 ~ 6e27: far beyond any budget a plan may carry


def rational(x: float | int | Fraction) -> Fraction:
    """The exact rational value of a float (or int, or Fraction); NaN and inf refused."""
    try:
        return Fraction(x)
    except (ValueError, OverflowError):
        raise DPMarginalsError(f"{x!r} is not a finite number") from None


@lru_cache(maxsize=1024)
def exp_lower_bound(x: Fraction) -> Fraction:
    """A rational <= e^x for x >= 0, within 2^-127 of it (relative) for x <= 64.

    sum_k x^k / k!, each term computed from the previous one in fixed point with 192
    fractional bits and rounded down, so the sum is below e^x; it stops at the first term
    that rounds to zero, then is truncated to a multiple of 2^-128.  Beyond x = 64 it is
    the bound of 64 (e^64 ~ 6e27: no 32-bit threshold tells the two apart).

    >>> exp_lower_bound(Fraction(0)), exp_lower_bound(Fraction(10**6)) == exp_lower_bound(64)
    (Fraction(1, 1), True)
    """
    if x < 0:
        raise DPMarginalsError(f"exp_lower_bound needs x >= 0, got {x}")
    x = min(Fraction(x), Fraction(_MAX_EXPONENT))
    num, den = x.numerator, x.denominator
    term = 1 << _FIXED
    total = term
    k = 0
    while term:
        k += 1
        term = term * num // (den * k)
        total += term
    return Fraction(total >> (_FIXED - _KEPT), 1 << _KEPT)


def largest_integer(low: int, high: int, ok: Callable[[int], bool]) -> int:
    """The largest t in [low, high] with ``ok(t)``, for ``ok`` true up to some point and
    false after it (binary search); ``ok(low)`` must hold."""
    if not ok(low):
        raise DPMarginalsError(f"no integer in [{low}, {high}] satisfies the bound")
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def smallest_integer(low: int, high: int, ok: Callable[[int], bool]) -> int:
    """The smallest t in [low, high] with ``ok(t)``, for ``ok`` false up to some point and
    true after it (binary search); ``ok(high)`` must hold."""
    if not ok(high):
        raise DPMarginalsError(f"no integer in [{low}, {high}] satisfies the bound")
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low
