"""Memoized randomization as laws: a permanent randomized response kept per value, and an
instantaneous one drawn afresh for every report (RAPPOR, Erlingsson, Pihur, Korolova,
CCS 2014, §3: PRR + IRR).

A device that reports the same value again and again sends fresh noise around one fixed
permanent response, so its reports differ (no payload is a stable identifier) and all of
them together say no more about the value than the permanent response: at most the
*longitudinal* epsilon, however many reports.  One report says at most the *per-report*
epsilon, the composed channel's.  The plan states both; here the instantaneous layer is
chosen, in exact 32-bit thresholds, so that the composed channel is eps-LDP for the
per-report epsilon, and the aggregator unbiases with the composed law:

=========  ================================  ================================  ==============
oracle     permanent (eps_perm)              instantaneous (per report)        composed law
=========  ================================  ================================  ==============
``grr``    keep-or-uniform, beta_perm        keep-or-uniform, beta_inst        beta_perm beta_inst
``oue``    OUE (p1 = 1/2, q1)                every bit flipped w.p. f          p = 1/2,
                                                                               q = q1 + f (1 - 2 q1)
``sue``    SUE (p1 = 1 - q1)                 every bit flipped w.p. f          q as OUE's, p = 1 - q
=========  ================================  ================================  ==============

Each composed law has the same form as the oracle's own at the per-report epsilon, so at
equal per-report epsilon it is as accurate (up to the 32-bit rounding of the two layers:
q is at most 2^-32 away).  Other oracles and report formats are not memoized: their
payloads carry a fresh hash seed or index, and a device charges each of their reports in
full.

>>> prr, inst, composed = memoized("grr", 1.0, 4.0, 8)
>>> float(composed.privacy_ratio()) <= 2.718281828459045, composed.epsilon
(True, 1.0)
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from ..core.errors import DPMarginalsError
from ..core.exact import WORD, exp_lower_bound, largest_integer, rational, smallest_integer
from . import oracle_at
from ._base import FrequencyOracle
from .grr import GRR
from .unary import OUE, SUE

__all__ = ["MEMOIZED", "memoized"]

MEMOIZED = ("grr", "oue", "sue")
"""The oracles whose reports can be memoized (permanent + instantaneous response)."""


@lru_cache(maxsize=4096)
def memoized(name: str, epsilon: float | Fraction, longitudinal: float | Fraction,
             size: int) -> tuple[FrequencyOracle, int, FrequencyOracle]:
    """(permanent oracle, instantaneous threshold, composed oracle) of ``name`` on ``size``
    values with per-report budget ``epsilon`` and longitudinal budget ``longitudinal``
    (at least ``epsilon``); both may be exact rationals (an ``em`` attribute's shares).

    The threshold is GRR's instantaneous keep threshold (a word below it keeps the
    permanent value) or the unary encodings' flip threshold (a word below it flips a bit),
    out of 2^32: the one that leaves the most signal while the composed channel's ratio
    stays at most e^epsilon exactly.
    """
    if name not in MEMOIZED:
        raise DPMarginalsError(f"oracle {name!r} cannot be memoized (only {list(MEMOIZED)})")
    if not rational(longitudinal) >= rational(epsilon):
        raise DPMarginalsError(f"the longitudinal epsilon {longitudinal!r} must be at least "
                               f"the per-report epsilon {epsilon!r}")
    bound = exp_lower_bound(rational(epsilon))
    if name == "grr":
        prr = oracle_at("grr", longitudinal, size)
        assert isinstance(prr, GRR)
        perm = prr.keep

        def grr_ok(t: int) -> bool:  # composed p / q = 1 + beta L / (1 - beta) <= e^eps
            beta = perm * Fraction(t, WORD)
            return beta < 1 and 1 + beta * size / (1 - beta) <= bound

        keep = largest_integer(0, WORD, grr_ok)
        composed: FrequencyOracle = GRR(float(epsilon), size,
                                        beta=perm * Fraction(keep, WORD))
        return prr, keep, composed
    kind = OUE if name == "oue" else SUE
    prr = oracle_at(name, longitudinal, size)
    q1 = prr.q_exact

    def law(t: int) -> tuple[Fraction, Fraction]:
        f = Fraction(t, WORD)
        q = q1 + f * (1 - 2 * q1)
        return (Fraction(1, 2) if name == "oue" else 1 - q), q

    def unary_ok(t: int) -> bool:
        p, q = law(t)
        return p * (1 - q) <= bound * q * (1 - p)

    flip = smallest_integer(0, WORD // 2, unary_ok)
    return prr, flip, kind(float(epsilon), size, law=law(flip))

