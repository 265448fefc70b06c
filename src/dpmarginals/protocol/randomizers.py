"""The randomizers of the frequency oracles: what a device does to one cell of a marginal.

Each is a pure function of (law, inputs, random words) whose output law is exactly the
oracle's (:mod:`dpmarginals.oracles`: its thresholds are 32-bit integers over 2^32), built
from the word-level primitives of :mod:`.samplers`.  ``count`` users at once for
simulation; one user is the device's case, and its word sequence is the one
docs/device-spec.md states.  The report formats of :mod:`.formats` (ht, cms, em, matrix)
randomize through the same primitives, and a memoized plan's two layers (permanent and
instantaneous response, :mod:`dpmarginals.oracles.memoized`) are :func:`perturb` at the
longitudinal epsilon, then :func:`instantaneous`.

================  ==============================================================  =========
oracle            one report (words in the order drawn)                           output
================  ==============================================================  =========
``grr``           :func:`.samplers.keep_or_uniform` at ``keep``                    value
``oue``, ``sue``  ceil(L/8) bytes of Bernoulli(q) bits (:class:`.samplers.           packed bits
                  ByteSampler`), padding cleared, then the own bit := a coin at p
``olh``           a = 1 + uniform(P - 1), b = uniform(P), then keep-or-uniform     (a 2^32 + b,
                  on [g] of ((a x + b) mod P) mod g                                 y)
``hr``            j = uniform(K), then a coin at p: b = parity((x + 1) & j),       (j, b)
                  flipped unless the coin holds
================  ==============================================================  =========

>>> from dpmarginals.oracles import GRR, OUE
>>> from dpmarginals.protocol.samplers import WordStream
>>> perturb(GRR(1.0, 4), np.array([2]), WordStream([0x0000_0000])).tolist()  # coin 0: kept
[2]
>>> perturb(OUE(1.0, 8), np.array([3]), WordStream([0, 0])).tolist()  # zeros, own bit kept
[[8]]
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.exact import WORD
from ..core.hashing import PRIME
from ..core.randomness import RandomSource
from ..oracles import GRR, HR, OLH, FrequencyOracle
from ..oracles._base import as_values, parity
from ..oracles.unary import _UnaryEncoding
from .samplers import byte_sampler, coins, keep_or_uniform, uniform

__all__ = ["flip_bits", "instantaneous", "perturb", "threshold"]

_CHUNK_BYTES = 1 << 17  # bytes sampled per step: the random words stay in cache
_BLOCK = 1 << 15  # users whose own bit is set per step
_ONE_BIT = (1 << np.arange(8)).astype(np.uint8)  # the byte with only bit t set
_SEED_SHIFT = 32


def threshold(prob: Fraction, what: str) -> int:
    """``prob`` as a count of 32-bit words (it must be a multiple of 2^-32)."""
    scaled = prob * WORD
    if scaled.denominator != 1 or not 0 <= scaled <= WORD:
        raise DPMarginalsError(f"{what} = {prob} is not a 32-bit threshold; a memoized law "
                               "is drawn as its two layers")
    return int(scaled)


def perturb(oracle: FrequencyOracle, values: np.ndarray, src: RandomSource) -> np.ndarray:
    """Every user's report of her value (0..L-1) through ``oracle``'s randomizer."""
    x = as_values(values, oracle.size)
    if isinstance(oracle, GRR):
        return keep_or_uniform(src, x, threshold(oracle.keep, "grr keep"), oracle.size)
    if isinstance(oracle, _UnaryEncoding):
        return _unary(oracle, x, src)
    if isinstance(oracle, OLH):
        a = uniform(src, PRIME - 1, x.size) + 1
        b = uniform(src, PRIME, x.size)
        y = keep_or_uniform(src, (a * x + b) % PRIME % oracle.g,
                            threshold(oracle.keep, "olh keep"), oracle.g)
        return np.column_stack(((a << _SEED_SHIFT) | b, y))
    if isinstance(oracle, HR):
        j = uniform(src, oracle.K, x.size)
        kept = coins(src, threshold(oracle.p_exact, "hr p"), x.size)
        return np.column_stack((j, parity((x + 1) & j) ^ ~kept))
    raise DPMarginalsError(f"no randomizer for oracle {oracle.name!r}")


def _unary(oracle: _UnaryEncoding, x: np.ndarray, src: RandomSource) -> np.ndarray:
    """Packed noisy one-hot vectors, uint8 (n, ceil(L/8)): every bit Bernoulli(q) a byte at
    a time, padding cleared, then each own bit replaced by a Bernoulli(p) coin."""
    width = oracle.report_bytes
    out = _bernoulli_bytes(oracle.q_exact, x.size, width, oracle.size, src)
    own = threshold(oracle.p_exact, f"{oracle.name} p")
    starts = np.arange(0, min(x.size, _BLOCK) * width, width)
    for start in range(0, x.size, _BLOCK):
        v = x[start : start + _BLOCK]
        cells = out[start : start + _BLOCK].reshape(-1)
        at = starts[: v.size] + (v >> 3)
        bit = _ONE_BIT.take(v & 7)
        hit = coins(src, own, v.size)
        cells[at] = (cells[at] & ~bit) | (bit * hit)
    return out


def _bernoulli_bytes(prob: Fraction, n: int, width: int, size: int,
                     src: RandomSource) -> np.ndarray:
    """(n, width) uint8 of independent Bernoulli(prob) bits, the bits past ``size`` 0."""
    out = np.empty((n, width), dtype=np.uint8)
    flat, sampler = out.reshape(-1), byte_sampler(Fraction(prob))
    for start in range(0, flat.size, _CHUNK_BYTES):
        sampler.sample(min(_CHUNK_BYTES, flat.size - start), src,
                       out=flat[start : start + _CHUNK_BYTES])
    if size % 8:
        out[:, -1] &= np.uint8((1 << (size % 8)) - 1)
    return out


def flip_bits(packed: np.ndarray, flip: int, size: int, src: RandomSource) -> np.ndarray:
    """Every bit of the packed reports flipped independently w.p. flip / 2^32 (padding
    bits stay 0): the unary encodings' instantaneous response."""
    arr = np.ascontiguousarray(packed, dtype=np.uint8)
    noise = _bernoulli_bytes(Fraction(flip, WORD), arr.shape[0], arr.shape[1], size, src)
    return arr ^ noise


def instantaneous(oracle: FrequencyOracle, permanent: np.ndarray, inst: int,
                  src: RandomSource) -> np.ndarray:
    """A memoized plan's report: fresh noise on the permanent responses (GRR: kept w.p.
    inst / 2^32, else uniform; unary: every bit flipped w.p. inst / 2^32)."""
    if isinstance(oracle, GRR):
        return keep_or_uniform(src, as_values(permanent, oracle.size), inst, oracle.size)
    if isinstance(oracle, _UnaryEncoding):
        return flip_bits(permanent, inst, oracle.size, src)
    raise DPMarginalsError(f"oracle {oracle.name!r} is not memoized")
