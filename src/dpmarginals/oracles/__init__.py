"""LDP frequency oracles over a domain of L values (0..L-1) with budget epsilon.

=========  ==========================================  ======================  ==================
name       mechanism                                   report (per user)       bits
=========  ==========================================  ======================  ==================
``grr``    generalized RR (CALM §2.2.1, CKS "PS")      int64 value, (n,)       ceil(log2 L)
``oue``    optimized unary encoding (CALM §2.2.2)      uint8 packed bits,      L
                                                       (n, ceil(L/8))
``sue``    symmetric unary enc. (CKS "PRR", RAPPOR)    as OUE                  L
``olh``    optimized local hashing (Wang et al. '17)   int64 (seed, y), (n,2)  62 + ceil(log2 g)
``hr``     Hadamard RR (CKS §4 "HT")                   int64 (j, bit), (n,2)   1 + log2 K
=========  ==========================================  ======================  ==================

Every oracle is a frozen dataclass ``(epsilon, size)``: the *law* of the device's
randomizer and the aggregator's side, with ``p_exact``/``q_exact`` (the exact rationals
the randomizer realizes) and their floats ``p``, ``q``, ``privacy_ratio`` (exact, at most
e^eps), ``name``, ``report_bits``, ``support`` / ``estimate`` (aggregator), ``variance``,
``output_distribution`` (for privacy checks) and ``sample_support`` (exact aggregate
sampler for simulation).  The randomizers themselves, one per report format, live in
:mod:`dpmarginals.protocol.randomizers`.

**Exact budgets.**  Every probability is a 32-bit threshold over 2^32 (or a product of
two, for a memoized plan) derived in integer arithmetic from a rational lower bound of
e^eps (:mod:`dpmarginals.core.exact`), so every ratio is at most e^eps exactly and every
client derives the same thresholds.  Beyond eps ~ 22 the thresholds saturate (p -> 1,
q -> 2^-32-ish); every release, plan and device refuses eps above
:data:`dpmarginals.core.errors.EPSILON_CEILING` = 20 (no privacy is left long before that).

>>> oracle = adaptive_oracle(1.0, 4)
>>> oracle.name
'grr'
>>> oracle.estimate(oracle.support([0, 1, 1, 3]), 4).shape
(4,)
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from ..core.errors import DPMarginalsError, check_epsilon
from ..core.exact import WORD, rational
from ._base import FrequencyOracle, check_size, grr_beats_oue, grr_keep, grr_probabilities
from .grr import GRR
from .hr import HR, fwht
from .olh import OLH
from .unary import OUE, SUE, unary_law

__all__ = [
    "GRR",
    "HR",
    "OLH",
    "ORACLES",
    "OUE",
    "SUE",
    "FrequencyOracle",
    "adaptive_oracle",
    "best_oracle",
    "fwht",
    "grr_beats_oue",
    "grr_probabilities",
    "make_oracle",
    "oracle_at",
]

ORACLES: dict[str, type[FrequencyOracle]] = {
    "grr": GRR,
    "oue": OUE,
    "olh": OLH,
    "hr": HR,
    "sue": SUE,
}


def make_oracle(name: str, epsilon: float, size: int) -> FrequencyOracle:
    """The oracle called ``name`` ("grr", "oue", "olh", "hr", "sue"; case-insensitive).

    >>> make_oracle("OUE", 1.0, 8)
    OUE(epsilon=1.0, size=8)
    """
    key = str(name).strip().lower()
    if key not in ORACLES:
        raise DPMarginalsError(f"oracle must be one of {sorted(ORACLES)}, got {name!r}")
    return ORACLES[key](epsilon, size)


def oracle_at(name: str, budget: Fraction | float, size: int) -> FrequencyOracle:
    """The oracle ``name`` whose thresholds come from the exact rational ``budget`` (e.g.
    an attribute's share eps / d, which no float holds exactly: its law is then eps / d
    exactly, and d of them compose to at most e^eps).

    >>> oracle_at("grr", Fraction(1, 3), 4).privacy_ratio() <= 1.3956124250860895
    True
    """
    exact = rational(budget)
    key = str(name).strip().lower()
    if key == "grr":
        return GRR(float(exact), size, beta=Fraction(grr_keep(exact, size), WORD))
    if key in ("oue", "sue"):
        return ORACLES[key](float(exact), size, law=unary_law(exact, key == "sue"))
    if Fraction(float(exact)) != exact:
        raise DPMarginalsError(f"oracle {name!r} takes a float budget, got {exact}")
    return make_oracle(key, float(exact), size)


def adaptive_oracle(epsilon: float, size: int) -> FrequencyOracle:
    """CALM §2.2.3: GRR when L - 2 < 3 e^eps (eq. 1 beats eq. 2), otherwise OUE.

    >>> adaptive_oracle(1.0, 10).name, adaptive_oracle(1.0, 11).name
    ('grr', 'oue')
    """
    eps, size = check_epsilon(epsilon), check_size(size)
    return GRR(eps, size) if grr_beats_oue(eps, size) else OUE(eps, size)


def best_oracle(
    epsilon: float,
    size: int,
    candidates: Iterable[str] = ("grr", "oue", "olh", "hr"),
    max_report_bits: int | None = None,
) -> FrequencyOracle:
    """The candidate with the least ``variance(n)`` (f -> 0) whose report fits the bit limit.

    Ties go to the earlier candidate.

    >>> best_oracle(1.0, 64).name, best_oracle(1.0, 64, max_report_bits=16).name
    ('oue', 'hr')
    """
    oracles = [make_oracle(name, epsilon, size) for name in candidates]
    if not oracles:
        raise DPMarginalsError("candidates must name at least one oracle")
    if max_report_bits is not None:
        oracles = [o for o in oracles if o.report_bits <= max_report_bits]
        if not oracles:
            raise DPMarginalsError(
                f"no candidate oracle reports in max_report_bits={max_report_bits} bits"
            )
    return min(oracles, key=lambda o: o.variance(1))
