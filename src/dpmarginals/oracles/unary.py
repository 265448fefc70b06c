"""Unary encoding oracles: OUE (CALM §2.2.2) and SUE (Cormode et al. §3.1 "PRR").

Both one-hot encode the value into L bits and flip every bit independently: the
user's own 1 survives w.p. p and each 0 becomes 1 w.p. q.

**Report format** (both): a packed bit matrix, ``uint8`` of shape (n, ceil(L/8));
bit v of a report is bit ``v % 8`` of byte ``v // 8`` (little bit order, as
``np.packbits(..., bitorder="little")``), padding bits are 0.  ``support`` also accepts
the unpacked (n, L) bool/0-1 matrix; ``unpack`` converts.  Stored in Parquet as a
fixed-size binary column of ceil(L/8) bytes.

Perturbation does not draw L uniforms per user.  The zero bits are made a byte at a
time (:class:`ByteSampler`): a byte of 8 independent Bernoulli(q) bits is the inverse of
its exact CDF at a uniform U, and a table over U's first 16 bits answers every U whose
2^-16 cell lies inside one byte value's interval (all but at most 255 of the 65,536
cells); a U in one of the others draws 32 more bits (and, in the rare case that still
straddles, more).  So a byte costs 16 random bits and one table lookup, and its law is
exactly that of 8 Bernoulli(q) bits for the float q (no rounding of ``random() < q``).
The own bit is an exact Bernoulli(p) (:func:`~._base.below`).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.randomness import RandomSource, RNGLike, client_rng, random_words, simulation_rng
from ._base import FrequencyOracle, as_counts, as_value, as_values, below, grr_probabilities

__all__ = ["OUE", "SUE", "ByteSampler", "bernoulli_words"]

_MAX_ENUMERATED_BITS = 16
_CELL_BITS = 16  # the table is indexed by U's first 16 bits
_FINE_BITS = 48  # a straddling cell is refined to 2^-48 in one vectorized step
_CHUNK_BYTES = 1 << 17  # bytes sampled per step: the random words stay in cache
_BLOCK = 1 << 15  # users whose own bit is set per step
_SUM_ROWS = 255  # unpacked rows summed in uint8 before they are added up
_SUM_BYTES = 1 << 19  # unpacked bits counted per step
_ONE_BIT = (1 << np.arange(8)).astype(np.uint8)  # the byte with only bit t set
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1)


def _ceil_scaled(x: Fraction, bits: int) -> int:
    return -((-x.numerator << bits) // x.denominator)


def _floor_scaled(x: Fraction, bits: int) -> int:
    return (x.numerator << bits) // x.denominator


class ByteSampler:
    """Bytes of 8 independent, exactly Bernoulli(``prob``) bits (see the module docstring).

    ``cdf[v]`` = P(byte < v) (exact rationals; value v has probability
    ``prob^popcount(v) (1 - prob)^(8 - popcount(v))``).  ``table[i]`` for ``i < clean``
    is the value of the i-th cell (of 2^-16) that lies inside one value's interval; index
    ``i >= clean`` stands for the straddling cell ``straddling[i - clean]`` (a bijection of
    the 16-bit index, so the cell is still uniform).

    >>> s = ByteSampler(0.25)
    >>> bits = np.unpackbits(s.sample(1 << 16, np.random.default_rng(1)))
    >>> bool(abs(bits.mean() - 0.25) < 0.005)
    True
    """

    def __init__(self, prob: float) -> None:
        q = Fraction(prob)
        weights = [q**k * (1 - q) ** (8 - k) for k in range(9)]
        cdf = [Fraction(0)]
        for v in range(256):
            cdf.append(cdf[-1] + weights[_POPCOUNT[v]])
        self.cdf = cdf  # cdf[256] == 1 exactly
        cells = 1 << _CELL_BITS
        first = [_ceil_scaled(c, _CELL_BITS) for c in cdf[:-1]]  # first cell inside value v
        end = [_floor_scaled(c, _CELL_BITS) for c in cdf[1:]]  # first cell past value v
        inside = np.maximum(np.asarray(end) - np.asarray(first), 0)
        owner = np.full(cells, -1, dtype=np.int64)
        for v in np.flatnonzero(inside):
            owner[first[v]:end[v]] = v
        self.clean = int(inside.sum())
        self.table = np.zeros(cells, dtype=np.uint8)
        self.table[: self.clean] = np.repeat(np.arange(256), inside)
        self.straddling = np.flatnonzero(owner < 0).astype(np.int64)
        self.fine_first = np.array([_ceil_scaled(c, _FINE_BITS) for c in cdf[:-1]], np.int64)
        self.fine_end = np.array([_floor_scaled(c, _FINE_BITS) for c in cdf[1:]], np.int64)

    def sample(self, count: int, src: RandomSource, out: np.ndarray | None = None) -> np.ndarray:
        """``count`` bytes (uint8) of independent Bernoulli(prob) bits (into ``out``)."""
        index = random_words(src, count, _CELL_BITS)
        out = self.table.take(index, out=out)
        late = np.flatnonzero(index >= self.clean)
        if late.size:
            out[late] = self._straddling(index[late].astype(np.int64) - self.clean, src)
        return out

    def _straddling(self, which: np.ndarray, src: RandomSource) -> np.ndarray:
        """The byte for U in straddling cells ``which``: U refined by 32 more bits."""
        fine = (self.straddling[which] << 32) + random_words(src, which.size, 32)
        value = np.searchsorted(self.fine_first, fine, side="right") - 1
        open_ = np.flatnonzero(fine >= self.fine_end[value])  # the 2^-48 cell still straddles
        for i in open_:
            value[i] = self._exact(int(fine[i]), src)
        return value.astype(np.uint8)

    def _exact(self, prefix: int, src: RandomSource) -> int:
        """The value for U in [prefix, prefix + 1) / 2^48, drawing 32 bits at a time."""
        bits = _FINE_BITS
        while True:
            low = Fraction(prefix, 1 << bits)
            value = bisect_right(self.cdf, low) - 1
            if Fraction(prefix + 1, 1 << bits) <= self.cdf[value + 1]:
                return value
            prefix = (prefix << 32) + int(random_words(src, 1, 32)[0])
            bits += 32


@lru_cache(maxsize=64)
def byte_sampler(prob: float) -> ByteSampler:
    """The (cached) :class:`ByteSampler` of ``prob``: built once per probability."""
    return ByteSampler(prob)


def bernoulli_words(prob: float, count: int, src: RandomSource) -> np.ndarray:
    """``count`` uint32 words of independent, exactly Bernoulli(prob) bits.

    >>> import numpy as np
    >>> w = bernoulli_words(0.25, 4096, np.random.default_rng(1))
    >>> bool(abs(np.unpackbits(w.view(np.uint8)).mean() - 0.25) < 0.01)
    True
    """
    return byte_sampler(float(prob)).sample(4 * count, src).view(np.uint32)


@dataclass(frozen=True)
class _UnaryEncoding(FrequencyOracle):
    """Shared perturb/support/sampling of the unary encodings."""

    @property
    def report_bits(self) -> int:
        """L: one bit per value."""
        return self.size

    @property
    def report_bytes(self) -> int:
        """ceil(L / 8): bytes of a packed report."""
        return (self.size + 7) // 8

    def perturb(self, values: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Packed noisy one-hot vectors, uint8 (n, ceil(L/8)) (OS entropy when rng is None)."""
        x = as_values(values, self.size)
        src = client_rng(rng)
        width = self.report_bytes
        out = np.empty((x.size, width), dtype=np.uint8)
        flat, zeros = out.reshape(-1), byte_sampler(self.q)
        for start in range(0, flat.size, _CHUNK_BYTES):  # every bit Bernoulli(q)
            zeros.sample(min(_CHUNK_BYTES, flat.size - start), src,
                         out=flat[start : start + _CHUNK_BYTES])
        pad = np.uint8((1 << (self.size % 8)) - 1) if self.size % 8 else None
        # the own bit, Bernoulli(q) so far, becomes Bernoulli(p) when OR-ed with an independent
        # Bernoulli((p - q) / (1 - q)): 1 - (1 - q)(1 - (p - q) / (1 - q)) = p (p >= q here)
        q = Fraction(self.q)
        extra = (Fraction(self.p) - q) / (1 - q)
        starts = np.arange(0, min(x.size, _BLOCK) * width, width)
        for start in range(0, x.size, _BLOCK):
            block, v = out[start : start + _BLOCK], x[start : start + _BLOCK]
            if pad is not None:  # padding bits are 0
                block[:, -1] &= pad
            hit = np.flatnonzero(below(extra, v.size, src))
            at = starts[hit] + (v[hit] >> 3)
            cells = block.reshape(-1)
            cells[at] |= _ONE_BIT.take(v[hit] & 7)
        return out

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
    >>> reports = oracle.perturb([0, 9, 3], rng=1)
    >>> reports.shape, reports.dtype, oracle.unpack(reports).shape
    ((3, 2), dtype('uint8'), (3, 10))
    """

    name: ClassVar[str] = "oue"

    @property
    def p(self) -> float:
        """1/2 (CALM §2.2.2)."""
        return 0.5

    @property
    def q(self) -> float:
        """1 / (e^eps + 1) (CALM §2.2.2)."""
        return grr_probabilities(self.epsilon, 2)[1]


@dataclass(frozen=True)
class SUE(_UnaryEncoding):
    """Symmetric unary encoding = Cormode et al.'s parallel RR (§3.1, Fact 3.2) = basic RAPPOR.

    Every bit goes through eps/2-randomized response: p = e^{eps/2} / (1 + e^{eps/2})
    keeps the own 1, q = 1 - p turns a 0 into 1.  Variance at f -> 0:
    e^{eps/2} / ((e^{eps/2} - 1)^2 n) (Wang et al. 2017 §4.3).  Report format: see
    the module docstring.
    """

    name: ClassVar[str] = "sue"

    @property
    def p(self) -> float:
        """e^{eps/2} / (1 + e^{eps/2})."""
        return grr_probabilities(self.epsilon / 2, 2)[0]

    @property
    def q(self) -> float:
        """1 / (1 + e^{eps/2})."""
        return grr_probabilities(self.epsilon / 2, 2)[1]
