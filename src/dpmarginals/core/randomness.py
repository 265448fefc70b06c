"""Sources of randomness.

Two kinds, kept apart on purpose:

* **Client randomization** (a user's device perturbing her own record) must not be
  predictable by the aggregator.  The default, :class:`SecureRandom`, draws every bit
  from the operating system's CSPRNG (``os.urandom``), as RAPPOR, OpenDP and
  diffprivlib do.  It offers only the two primitives randomizers need -- uniform
  floats and uniform integers -- and samples both exactly (integers by rejection).
* **Simulation** (many simulated users in one process, experiments, tests) uses a
  seeded :class:`numpy.random.Generator`; any value :func:`numpy.random.default_rng`
  accepts (an int, a ``SeedSequence``, a ``Generator``) selects this path.

``rng=None`` means "secure" wherever a function randomizes on a user's behalf.
"""

from __future__ import annotations

import math
import os
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np

__all__ = [
    "RNGLike",
    "RandomSource",
    "SecureRandom",
    "client_rng",
    "random_words",
    "simulation_rng",
]

_FLOAT_BITS = 53
_FLOAT_SCALE = 2.0**-_FLOAT_BITS


@runtime_checkable
class RandomSource(Protocol):
    """What a randomizer may draw from: uniform floats and uniform integers.

    Both :class:`numpy.random.Generator` and :class:`SecureRandom` satisfy it.
    """

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray: ...

    def integers(
        self,
        low: int | np.ndarray,
        high: int | np.ndarray | None = None,
        size: int | tuple[int, ...] | None = None,
    ) -> np.ndarray: ...


RNGLike: TypeAlias = (
    RandomSource | np.random.Generator | np.random.SeedSequence | int | None
)


class SecureRandom:
    """Uniform draws from the OS CSPRNG (``os.urandom``), vectorized with numpy.

    >>> r = SecureRandom()
    >>> x = r.integers(0, 6, size=1000)
    >>> bool(((x >= 0) & (x < 6)).all())
    True
    """

    def _words(self, count: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * count), dtype=np.uint64)

    def words(self, count: int, bits: int) -> np.ndarray:
        """``count`` units of 16 or 32 bits from the OS: the 32-bit words' little-endian
        bytes, so a 16-bit unit is a word's low half, then its high half."""
        if bits not in (16, 32):
            raise ValueError(f"bits must be 16 or 32, got {bits!r}")
        words32 = count if bits == 32 else -(-count // 2)
        raw = np.frombuffer(os.urandom(4 * words32), dtype="<u4")
        return raw if bits == 32 else raw.view("<u2")[:count]

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        """Uniform floats on [0, 1) with 53 random bits each."""
        shape = () if size is None else size
        count = int(np.prod(shape))
        words = self._words(count) >> np.uint64(64 - _FLOAT_BITS)
        return (words.astype(np.float64) * _FLOAT_SCALE).reshape(shape)

    def integers(
        self,
        low: int | np.ndarray,
        high: int | np.ndarray | None = None,
        size: int | tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Exactly uniform integers in [low, high): a span of 2^8, 2^16 or 2^32 takes that
        many bits of the OS words, any other span rejection sampling (no modulo bias)."""
        if high is None:
            low, high = 0, low
        low_a = np.asarray(low, dtype=np.int64)
        high_a = np.asarray(high, dtype=np.int64)
        if size is None:
            size = np.broadcast_shapes(low_a.shape, high_a.shape)
        shape = (size,) if isinstance(size, int) else tuple(size)
        if low_a.ndim == 0 and high_a.ndim == 0:
            width = int(high_a - low_a).bit_length() - 1
            if width in (8, 16, 32) and int(high_a - low_a) == 1 << width:
                # a span of 2^8, 2^16 or 2^32: exactly that many random bits per value
                count = math.prod(shape)
                packed = self._words(-(-count * width // 64)).view(f"<u{width // 8}")
                result = packed[:count].astype(np.int64)
                if low_a:
                    result += low_a
                return result.reshape(shape) if shape else result[0]
        span = np.broadcast_to(high_a - low_a, shape).astype(np.uint64).ravel()
        if (span == 0).any():
            raise ValueError("integers: high must be greater than low")
        # Accept a 64-bit word w when w < limit, the largest multiple of span <= 2^64.
        limit = np.uint64(2**64 - 1) - (np.uint64(2**64 - 1) % span + np.uint64(1)) % span
        out = np.empty(span.shape, dtype=np.uint64)
        todo = np.arange(span.size)
        while todo.size:
            words = self._words(todo.size)
            ok = words <= limit[todo]
            out[todo[ok]] = words[ok] % span[todo[ok]]
            todo = todo[~ok]
        result = out.astype(np.int64).reshape(shape) + np.broadcast_to(low_a, shape)
        return result


def random_words(src: RandomSource, count: int, bits: int = 32) -> np.ndarray:
    """``count`` uniform random words of ``bits`` (8, 16 or 32) bits, as that unsigned dtype.

    A numpy Generator fills them from full 64-bit draws (a view, no per-word call); any
    other source (:class:`SecureRandom`) through ``integers(0, 2**bits)``.

    >>> w = random_words(np.random.default_rng(0), 5, 16)
    >>> w.dtype, w.shape
    (dtype('uint16'), (5,))
    """
    if bits not in (8, 16, 32):
        raise ValueError(f"bits must be 8, 16 or 32, got {bits!r}")
    dtype = np.dtype(f"<u{bits // 8}")
    if isinstance(src, np.random.Generator):
        full = src.integers(0, 2**64, size=-(-count * bits // 64), dtype=np.uint64)
        return full.view(dtype)[:count]
    own = getattr(src, "words", None)  # the OS source, a replayed word stream
    if own is not None and bits in (16, 32):
        return own(count, bits)
    return np.asarray(src.integers(0, 1 << bits, size=count)).astype(dtype)


def client_rng(rng: RNGLike = None) -> RandomSource:
    """The source a randomizer draws from: OS entropy unless a seed/Generator is given."""
    if rng is None:
        return SecureRandom()
    if isinstance(rng, SecureRandom | np.random.Generator) or hasattr(rng, "words"):
        return rng  # type: ignore[return-value]
    return np.random.default_rng(rng)  # type: ignore[arg-type]


def simulation_rng(rng: RNGLike = None) -> np.random.Generator:
    """A numpy Generator for simulation (exact aggregate samplers, group assignment).

    ``None`` seeds it from OS entropy; a :class:`SecureRandom` is not accepted here
    because simulation draws (binomials, permutations) need the full Generator API.
    """
    if isinstance(rng, SecureRandom):
        return np.random.default_rng()
    return np.random.default_rng(rng)  # type: ignore[arg-type]
