"""The device's random choices, each an exact function of uniform random words.

Every randomizer of :mod:`.randomizers` draws through these few primitives, so its law is
exactly the rationals the oracles declare, and every client that maps the same words the
same way makes the same report (docs/device-spec.md is the language-neutral statement;
``tests/vectors/device.json`` pins it).  The words are 32-bit; 16-bit *units* are the
halves of a word, its low half first (a request for an odd count drops the last high
half).  With ``count`` users at once a primitive draws their first words in the users'
order, then the rare extra words (rejections, ties), again in the users' order: for one
user, exactly the specification's sequence.

* :func:`words` -- ``count`` units of 16 or 32 bits;
* :func:`coins` -- ``[w < T]`` for a 32-bit threshold ``T`` (probability exactly T/2^32);
* :func:`uniform` -- Lemire's multiply-shift with rejection: exactly uniform on [0, n);
* :class:`ByteSampler` -- 8 independent Bernoulli(q) bits, the inverse of their exact CDF
  at a uniform read 16 bits, then 32 at a time, until it decides;
* :func:`keep_or_uniform` -- GRR's report: the value w.p. T/2^32, else uniform over all L;
* :func:`uniform63` -- a 63-bit uniform integer from two words (the matrix format).

>>> src = WordStream([0x0001_0002, 7, 0xFFFF_FFFF])
>>> words(src, 3, 16).tolist()     # the low half of word 0, its high half, word 1's low half
[2, 1, 7]
>>> bool(coins(WordStream([5]), 6, 1)[0]), bool(coins(WordStream([6]), 6, 1)[0])
(True, False)
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.exact import WORD
from ..core.randomness import RandomSource, random_words

__all__ = ["ByteSampler", "WordStream", "byte_sampler", "coins", "keep_or_uniform",
           "uniform", "uniform63", "words"]

_CELL_BITS = 16  # a byte's first draw: one 16-bit unit
_FINE_BITS = 48  # a straddling cell refined by one more word
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1)
_BLOCK = 1 << 17  # users per step of keep_or_uniform: the temporaries stay small


class WordStream:
    """A source that replays given 32-bit words (test vectors, exact enumeration); it
    raises when a sampler asks for more than it holds."""

    def __init__(self, stream: Sequence[int]) -> None:
        self.stream = [int(w) for w in stream]
        if any(not 0 <= w < WORD for w in self.stream):
            raise DPMarginalsError("a word stream holds integers in [0, 2^32)")
        self.used = 0

    def words(self, count: int, bits: int) -> np.ndarray:
        need = count if bits == 32 else -(-count // 2)
        if self.used + need > len(self.stream):
            raise DPMarginalsError(f"the word stream ran out: {need} more words asked after "
                                   f"{self.used} of {len(self.stream)}")
        taken = np.asarray(self.stream[self.used : self.used + need], dtype="<u4")
        self.used += need
        return taken if bits == 32 else taken.view("<u2")[:count]

    def random(self, size: object = None) -> np.ndarray:
        raise DPMarginalsError("the device's samplers draw only random words")

    def integers(self, low: object, high: object = None, size: object = None) -> np.ndarray:
        raise DPMarginalsError("the device's samplers draw only random words")


def words(src: RandomSource, count: int, bits: int) -> np.ndarray:
    """``count`` uniform units of ``bits`` (16 or 32) bits: uint16 or uint32."""
    if bits not in (16, 32):
        raise DPMarginalsError(f"units have 16 or 32 bits, got {bits}")
    return random_words(src, count, bits)


def coins(src: RandomSource, threshold: int, count: int) -> np.ndarray:
    """``count`` draws of [w < threshold], one word each: Bernoulli(threshold / 2^32)."""
    if not 0 <= threshold <= WORD:
        raise DPMarginalsError(f"a coin's threshold lies in [0, 2^32], got {threshold}")
    return words(src, count, 32).astype(np.uint64) < np.uint64(threshold)


def uniform(src: RandomSource, n: int, count: int) -> np.ndarray:
    """``count`` integers exactly uniform on [0, n), 1 <= n <= 2^32 (int64).

    Lemire's method: a word w gives floor(w n / 2^32) unless w n mod 2^32 < 2^32 mod n,
    in which case that user draws another word (all rejected users redraw together, in
    their order).  Each value is the image of exactly floor(2^32 / n) accepted words.
    """
    if not 1 <= n <= WORD:
        raise DPMarginalsError(f"uniform draws need 1 <= n <= 2^32, got {n}")
    out = np.empty(count, dtype=np.int64)
    todo = np.arange(count)
    reject = np.uint64(WORD % n)
    span = np.uint64(n)
    while todo.size:
        scaled = words(src, todo.size, 32).astype(np.uint64) * span
        ok = (scaled & np.uint64(WORD - 1)) >= reject
        out[todo[ok]] = (scaled[ok] >> np.uint64(32)).astype(np.int64)
        todo = todo[~ok]
    return out


def uniform63(src: RandomSource, count: int) -> np.ndarray:
    """``count`` integers uniform on [0, 2^63) (uint64): word 2i is the low 32 bits, the
    low 31 bits of word 2i + 1 the high ones."""
    pair = words(src, 2 * count, 32).astype(np.uint64).reshape(count, 2)
    return pair[:, 0] | ((pair[:, 1] & np.uint64(0x7FFF_FFFF)) << np.uint64(32))


def keep_or_uniform(src: RandomSource, values: np.ndarray, keep: int, size: int) -> np.ndarray:
    """GRR on [size]: each value kept w.p. keep / 2^32, else uniform over all ``size``.

    For size <= 2^16 one word per user: its low half is the coin (a unit below
    ``keep >> 16`` keeps; equal to it, a tie, decided by one more word against the low
    16 bits of ``keep``), its high half the uniform value by multiply-shift (the
    2^16 mod size biased halves draw :func:`uniform` instead).  Per block of users: the
    words, then the redraws of biased halves, then the tie words.  Larger domains: a coin
    word, then a :func:`uniform` draw.
    """
    if not 0 <= keep <= WORD:
        raise DPMarginalsError(f"a keep threshold lies in [0, 2^32], got {keep}")
    out = np.empty(values.size, dtype=np.int64)
    for start in range(0, values.size, _BLOCK):
        part = values[start : start + _BLOCK]
        out[start : start + _BLOCK] = (_small_block if size <= 1 << 16 else _large_block)(
            src, part, keep, size)
    return out


def _small_block(src: RandomSource, values: np.ndarray, keep: int, size: int) -> np.ndarray:
    n = values.size
    pair = words(src, n, 32)
    coin, low = pair & np.uint32(0xFFFF), pair >> np.uint32(16)
    if size & (size - 1) == 0:  # a power of two: the top bits of the high half
        index = (low >> np.uint32(17 - size.bit_length())).astype(np.int64)
    else:
        scaled = low * np.uint32(size)
        index = (scaled >> np.uint32(16)).astype(np.int64)
        biased = np.flatnonzero((scaled & np.uint32(0xFFFF)) < (1 << 16) % size)
        if biased.size:
            index[biased] = uniform(src, size, biased.size)
    whole, rest = keep >> 16, keep & 0xFFFF
    kept = coin < np.uint32(whole) if whole < 1 << 16 else np.ones(n, dtype=bool)
    if rest and whole < 1 << 16:
        tie = np.flatnonzero(coin == np.uint32(whole))
        if tie.size:
            kept[tie] = coins(src, rest << 16, tie.size)
    return np.where(kept, values, index)


def _large_block(src: RandomSource, values: np.ndarray, keep: int, size: int) -> np.ndarray:
    kept = coins(src, keep, values.size)
    return np.where(kept, values, uniform(src, size, values.size))


class ByteSampler:
    """Bytes of 8 independent, exactly Bernoulli(``prob``) bits, for a rational ``prob``.

    ``cdf[v]`` = P(byte < v), exactly (value v has probability
    ``prob^popcount(v) (1 - prob)^(8 - popcount(v))``); a byte is the value whose CDF
    interval holds a uniform U.  U's first 16 bits name a cell of width 2^-16 through a
    bijection of the unit: units below ``clean`` are the cells inside one value's interval
    (in increasing order; ``table`` holds their values), the others the straddling cells
    (``straddling``, increasing).  A straddling cell reads one more word (U to 48 bits)
    and, while U's interval still straddles a boundary, 32 bits at a time.  Drawing
    ``count`` bytes reads ``count`` units, then one word per straddling byte in order, then
    the words of every still-open byte, byte after byte.

    >>> s = ByteSampler(Fraction(1, 4))
    >>> bits = np.unpackbits(s.sample(1 << 16, np.random.default_rng(1)))
    >>> bool(abs(bits.mean() - 0.25) < 0.005)
    True
    """

    def __init__(self, prob: Fraction) -> None:
        q = Fraction(prob)
        if not 0 <= q <= 1:
            raise DPMarginalsError(f"a bit probability lies in [0, 1], got {q}")
        weights = [q**k * (1 - q) ** (8 - k) for k in range(9)]
        cdf = [Fraction(0)]
        for v in range(256):
            cdf.append(cdf[-1] + weights[_POPCOUNT[v]])
        self.prob = q
        self.cdf = cdf  # cdf[256] == 1 exactly
        first = [_ceil_scaled(c, _CELL_BITS) for c in cdf[:-1]]  # first cell inside value v
        end = [_floor_scaled(c, _CELL_BITS) for c in cdf[1:]]  # first cell past value v
        inside = np.maximum(np.asarray(end) - np.asarray(first), 0)
        owner = np.full(1 << _CELL_BITS, -1, dtype=np.int64)
        for v in np.flatnonzero(inside):
            owner[first[v] : end[v]] = v
        self.clean = int(inside.sum())
        self.table = np.zeros(1 << _CELL_BITS, dtype=np.uint8)
        self.table[: self.clean] = np.repeat(np.arange(256), inside)
        self.straddling = np.flatnonzero(owner < 0).astype(np.int64)
        self.fine_first = np.array([_ceil_scaled(c, _FINE_BITS) for c in cdf[:-1]], np.int64)
        self.fine_end = np.array([_floor_scaled(c, _FINE_BITS) for c in cdf[1:]], np.int64)

    def sample(self, count: int, src: RandomSource, out: np.ndarray | None = None) -> np.ndarray:
        """``count`` bytes (uint8) of independent Bernoulli(prob) bits (into ``out``)."""
        index = words(src, count, _CELL_BITS)
        out = self.table.take(index, out=out)
        late = np.flatnonzero(index >= self.clean)
        if late.size:
            out[late] = self._straddling(index[late].astype(np.int64) - self.clean, src)
        return out

    def _straddling(self, which: np.ndarray, src: RandomSource) -> np.ndarray:
        """The byte for U in straddling cells ``which``: U refined by 32 more bits."""
        fine = (self.straddling[which] << 32) + words(src, which.size, 32).astype(np.int64)
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
            prefix = (prefix << 32) + int(words(src, 1, 32)[0])
            bits += 32


def _ceil_scaled(x: Fraction, bits: int) -> int:
    return -((-x.numerator << bits) // x.denominator)


def _floor_scaled(x: Fraction, bits: int) -> int:
    return (x.numerator << bits) // x.denominator


@lru_cache(maxsize=64)
def byte_sampler(prob: Fraction) -> ByteSampler:
    """The (cached) :class:`ByteSampler` of ``prob``: built once per probability."""
    return ByteSampler(prob)
