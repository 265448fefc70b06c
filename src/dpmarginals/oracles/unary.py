"""Unary encoding oracles: OUE (CALM §2.2.2) and SUE (Cormode et al. §3.1 "PRR").

Both one-hot encode the value into L bits and flip every bit independently: the
user's own 1 survives w.p. p and each 0 becomes 1 w.p. q.

**Report format** (both): a packed bit matrix, ``uint8`` of shape (n, ceil(L/8));
bit v of a report is bit ``v % 8`` of byte ``v // 8`` (little bit order, as
``np.packbits(..., bitorder="little")``), padding bits are 0.  ``support`` also accepts
the unpacked (n, L) bool/0-1 matrix; ``unpack`` converts.  Stored in Parquet as a
fixed-size binary column of ceil(L/8) bytes.

Perturbation does not draw L uniforms per user.  The zero bits are Bernoulli(q)
bits, made 32 at a time by a bit-sliced comparison of a uniform U with q's binary
expansion (bit = [U < q], decided at the first differing bit): each 32-bit word
needs ~7 random words in expectation, against 32 uniforms naively, and the result is
exactly Bernoulli(q) for the float q (no 2^-53 rounding of ``random() < q``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError
from ..core.randomness import RandomSource, RNGLike, client_rng, simulation_rng
from ._base import FrequencyOracle, as_counts, as_value, as_values, grr_probabilities

__all__ = ["OUE", "SUE", "bernoulli_words"]

_WORD = 32
_ALL_ONES = np.uint32(0xFFFFFFFF)
_MAX_ENUMERATED_BITS = 16
_ROWS_PER_CHUNK = 1 << 16
# _BYTE_BITS[b, t] = bit t of byte b (little bit order)
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")


def _binary_expansion(prob: float) -> list[int]:
    """The (finite) binary digits of a float in [0, 1), most significant first."""
    num, den = float(prob).as_integer_ratio()
    m = den.bit_length() - 1
    return [(num >> (m - k)) & 1 for k in range(1, m + 1)]


def bernoulli_words(prob: float, count: int, src: RandomSource) -> np.ndarray:
    """``count`` uint32 words of independent, exactly Bernoulli(prob) bits.

    Bit-sliced comparison U < prob, most significant digit first: a bit still tied
    with prob's prefix is decided by the next random bit (1 if it is 0 where prob's
    digit is 1, 0 if it is 1 where the digit is 0).  Only words with undecided bits
    draw again, so the expected cost is ~7 random words per output word.

    >>> import numpy as np
    >>> w = bernoulli_words(0.25, 4096, np.random.default_rng(1))
    >>> bool(abs(np.unpackbits(w.view(np.uint8)).mean() - 0.25) < 0.01)
    True
    """
    out = np.zeros(count, dtype=np.uint32)
    undecided = np.full(count, _ALL_ONES, dtype=np.uint32)
    where: np.ndarray | None = None  # indices of undecided words once compacted
    for digit in _binary_expansion(prob):
        if undecided.size == 0:
            break
        u = np.asarray(src.integers(0, 1 << _WORD, size=undecided.size)).astype(np.uint32)
        if digit:
            decided_one = undecided & ~u
            if where is None:
                out |= decided_one
            else:
                out[where] |= decided_one
            undecided &= u
        else:
            undecided &= ~u
        live = np.count_nonzero(undecided)
        if live < undecided.size // 2:
            keep = np.flatnonzero(undecided)
            where = keep if where is None else where[keep]
            undecided = undecided[keep]
    return out


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
        n, words_per_user = x.size, (self.size + _WORD - 1) // _WORD
        words = bernoulli_words(self.q, n * words_per_user, src).reshape(n, words_per_user)
        if self.size % _WORD:
            words[:, -1] &= np.uint32((1 << (self.size % _WORD)) - 1)
        own = (src.random(n) < self.p).astype(np.uint32)
        flat = words.reshape(-1)
        at = np.arange(0, n * words_per_user, words_per_user) + x // _WORD
        shift = (x % _WORD).astype(np.uint32)
        flat[at] = (flat[at] & ~(np.uint32(1) << shift)) | (own << shift)
        as_bytes = words.astype("<u4", copy=False).view(np.uint8).reshape(n, 4 * words_per_user)
        return np.ascontiguousarray(as_bytes[:, : self.report_bytes])

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

        Packed reports: one bincount of (byte column, byte value) pairs, then a
        256 x 8 bit table; unpacked (n, L) 0/1 matrices: a column sum.
        """
        arr = np.asarray(reports)
        if arr.ndim == 2 and arr.shape[1] == self.size and arr.dtype.kind in "biu":
            if arr.dtype != bool and arr.size and arr.max() > 1:
                raise DPMarginalsError(f"{self.name} bit-matrix reports must be 0/1")
            return arr.sum(axis=0, dtype=np.int64)
        packed = self._packed(arr)
        width = self.report_bytes
        per_byte = np.zeros((width, 256), dtype=np.int64)
        offsets = np.arange(width, dtype=np.intp) * 256
        for start in range(0, packed.shape[0], _ROWS_PER_CHUNK):
            chunk = packed[start : start + _ROWS_PER_CHUNK]
            idx = (chunk + offsets).ravel()  # promotes uint8 -> intp
            per_byte += np.bincount(idx, minlength=width * 256).reshape(width, 256)
        return (per_byte @ _BYTE_BITS).ravel()[: self.size]

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
