"""Unary encoding oracles: OUE (CALM §2.2.2) and SUE (Cormode et al. §3.1 "PRR").

Both one-hot encode the value into L bits and flip every bit independently: the
user's own 1 survives w.p. p and each 0 becomes 1 w.p. q.

**Report format** (both): a packed bit matrix, ``uint8`` of shape (n, ceil(L/8));
bit v of a report is bit ``v % 8`` of byte ``v // 8`` (little bit order, as
``np.packbits(..., bitorder="little")``), padding bits are 0.  ``support`` also accepts
the unpacked (n, L) bool/0-1 matrix; ``unpack`` converts.  Stored in Parquet as a
fixed-size binary column of ceil(L/8) bytes.

The device's randomizer (:mod:`dpmarginals.protocol.randomizers`) draws the zero bits a
byte at a time with an exact inverse-CDF table and the own bit with one coin; ``p`` and
``q`` are the exact 32-bit rationals it realizes (:func:`unary_law`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.exact import WORD, exp_lower_bound, rational, smallest_integer
from ..core.randomness import RNGLike, simulation_rng
from ._base import FrequencyOracle, as_counts, as_value, check_law

__all__ = ["OUE", "SUE", "unary_law"]

_MAX_ENUMERATED_BITS = 16
_SUM_ROWS = 255  # unpacked rows summed in uint8 before they are added up
_SUM_BYTES = 1 << 19  # unpacked bits counted per step


@lru_cache(maxsize=4096)
def unary_law(epsilon: float, symmetric: bool) -> tuple[Fraction, Fraction]:
    """(p, q) of a unary encoding as 32-bit rationals whose ratio
    p (1 - q) / (q (1 - p)) is at most e^eps exactly.

    OUE (``symmetric=False``, CALM §2.2.2): p = 1/2, q = Q / 2^32 with the smallest Q such
    that (1 - q) / q <= e^eps.  SUE (basic RAPPOR): q = Q / 2^32, p = 1 - q with the
    smallest Q such that ((1 - q) / q)^2 <= e^eps.

    >>> [round(float(x), 6) for x in unary_law(1.0, False)]   # 1/2, 1 / (e + 1)
    [0.5, 0.268941]
    """
    bound = exp_lower_bound(rational(epsilon))
    if symmetric:
        q = smallest_integer(1, WORD // 2, lambda t: (WORD - t) ** 2 <= bound * t * t)
        return Fraction(WORD - q, WORD), Fraction(q, WORD)
    q = smallest_integer(1, WORD // 2, lambda t: WORD - t <= bound * t)
    return Fraction(1, 2), Fraction(q, WORD)


@dataclass(frozen=True)
class _UnaryEncoding(FrequencyOracle):
    """Shared law, support and sampling of the unary encodings: ``law`` is (p, q), exact
    (:func:`unary_law` of epsilon unless given, e.g. a memoized plan's composition)."""

    law: tuple[Fraction, Fraction] | None = field(default=None, repr=False)
    symmetric: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.law is None:
            object.__setattr__(self, "law", unary_law(self.epsilon, self.symmetric))
        check_law(self.p_exact, self.q_exact, self.epsilon, self.name)

    @property
    def p_exact(self) -> Fraction:
        assert self.law is not None
        return self.law[0]

    @property
    def q_exact(self) -> Fraction:
        assert self.law is not None
        return self.law[1]

    def privacy_ratio(self) -> Fraction:
        """p (1 - q) / (q (1 - p)): the own bits of two values swap places."""
        p, q = self.p_exact, self.q_exact
        return p * (1 - q) / (q * (1 - p))

    @property
    def report_bits(self) -> int:
        """L: one bit per value."""
        return self.size

    @property
    def report_bytes(self) -> int:
        """ceil(L / 8): bytes of a packed report."""
        return (self.size + 7) // 8

    def unpack(self, reports: ArrayLike) -> np.ndarray:
        """Packed reports -> (n, L) bool bit matrix."""
        packed = self._packed(reports)
        bits = np.unpackbits(packed, axis=1, count=self.size, bitorder="little")
        return bits.astype(bool)

    def _packed(self, reports: ArrayLike) -> np.ndarray:
        arr = np.asarray(reports)
        if arr.ndim != 2 or arr.shape[1] != self.report_bytes or arr.dtype != np.uint8:
            raise DPMarginalsError(
                f"{self.name} packed reports must be uint8 of shape (n, {self.report_bytes}), "
                f"got {arr.dtype} {arr.shape}"
            )
        pad = self.size % 8
        if pad and arr.size and (arr[:, -1] >> pad).any():
            i = int(np.flatnonzero(arr[:, -1] >> pad)[0])
            raise DPMarginalsError(f"{self.name} report {i} sets bits beyond value {self.size - 1}")
        return arr

    def support(self, reports: ArrayLike) -> np.ndarray:
        """C(v) = number of reports with bit v set.

        Packed reports are unpacked a cache-sized block of rows at a time and summed in
        uint8 over runs of 255 rows (no overflow), then in int64; unpacked (n, L) 0/1
        matrices: a column sum.
        """
        arr = np.asarray(reports)
        if arr.ndim == 2 and arr.shape[1] == self.size and arr.dtype.kind in "biu":
            if arr.dtype != bool and arr.size and arr.max() > 1:
                raise DPMarginalsError(f"{self.name} bit-matrix reports must be 0/1")
            return arr.sum(axis=0, dtype=np.int64)
        packed = np.ascontiguousarray(self._packed(arr))
        columns = 8 * self.report_bytes  # padding bits included: they are 0
        total = np.zeros(columns, dtype=np.int64)
        rows = _SUM_ROWS * max(1, _SUM_BYTES // (_SUM_ROWS * columns))
        for start in range(0, packed.shape[0], rows):
            chunk = packed[start : start + rows]
            bits = np.unpackbits(chunk.reshape(-1), bitorder="little").reshape(-1, columns)
            runs = bits.shape[0] // _SUM_ROWS * _SUM_ROWS
            if runs:  # 255 stacked slabs of rows, added up elementwise in uint8
                slabs = bits[:runs].reshape(_SUM_ROWS, -1).sum(axis=0, dtype=np.uint8)
                total += slabs.reshape(-1, columns).sum(axis=0, dtype=np.int64)
            total += bits[runs:].sum(axis=0, dtype=np.int64)
        return total[: self.size]

    def output_distribution(self, value: int) -> np.ndarray:
        """P[report = y | value] for all 2^L reports (L <= 16).

        Output y is indexed by the integer sum_v y_v 2^v, i.e. the packed report read
        as a little-endian integer.
        """
        x = as_value(value, self.size)
        if self.size > _MAX_ENUMERATED_BITS:
            raise DPMarginalsError(
                f"output_distribution enumerates 2^L outputs; size {self.size} > "
                f"{_MAX_ENUMERATED_BITS} is too large"
            )
        outputs = np.arange(1 << self.size)[:, None]
        bits = ((outputs >> np.arange(self.size)) & 1).astype(bool)
        one = np.full(self.size, self.q)
        one[x] = self.p
        return np.where(bits, one, 1 - one).prod(axis=1)

    def sample_support(self, true_counts: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Exact draw: C(v) = Binomial(n_v, p) + Binomial(n - n_v, q), independent over v.

        Exact jointly, since every bit of every report is flipped independently.
        """
        counts = as_counts(true_counts, self.size)
        gen = simulation_rng(rng)
        return gen.binomial(counts, self.p) + gen.binomial(counts.sum() - counts, self.q)


@dataclass(frozen=True)
class OUE(_UnaryEncoding):
    """Optimized unary encoding (CALM §2.2.2; Wang et al. 2017 §4.3).

    p = 1/2 (own bit kept), q = 1 / (e^eps + 1) (a zero becomes 1).  Variance, CALM
    eq. 2: 4 e^eps / ((e^eps - 1)^2 n).  Report format: see the module docstring.

    >>> oracle = OUE(epsilon=1.0, size=10)
    >>> reports = np.packbits(np.eye(10, dtype=bool)[[0, 9, 3]], axis=1, bitorder="little")
    >>> reports.shape, oracle.unpack(reports).shape, oracle.support(reports).tolist()
    ((3, 2), (3, 10), [1, 0, 0, 1, 0, 0, 0, 0, 0, 1])
    """

    name: ClassVar[str] = "oue"


@dataclass(frozen=True)
class SUE(_UnaryEncoding):
    """Symmetric unary encoding = Cormode et al.'s parallel RR (§3.1, Fact 3.2) = basic RAPPOR.

    Every bit goes through eps/2-randomized response: p = e^{eps/2} / (1 + e^{eps/2})
    keeps the own 1, q = 1 - p turns a 0 into 1.  Variance at f -> 0:
    e^{eps/2} / ((e^{eps/2} - 1)^2 n) (Wang et al. 2017 §4.3).  Report format: see
    the module docstring.
    """

    name: ClassVar[str] = "sue"
    symmetric: ClassVar[bool] = True
