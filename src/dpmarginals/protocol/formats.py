"""Every group's report format, rebuilt from the plan alone: what a device sends, and what
the aggregator counts and unbiases (numpy + stdlib only).

A plan group names a frequency oracle of :mod:`dpmarginals.oracles` (the user reports her
cell of the group's marginal: :class:`CellReports`) or one of the formats below.  Each has
one interface -- ``name``, ``epsilon``, ``size`` (the length of its support vector, the
group's part of :class:`~dpmarginals.protocol.counts.Counts`), ``report_bits``, ``encode``
(the group's attribute values -> the randomizer's input), ``perturb`` (a fresh report per
input: the device's randomizer, also what simulation and the per-user release run;
``rng=None`` draws from the OS CSPRNG), ``support`` (aggregator) and
``output_distribution`` (exact law, for privacy checks).  A memoized plan
(``longitudinal_epsilon`` not null) adds ``permanent`` (the response a device keeps per
value) and ``instantaneous`` (fresh noise on it for every report); its ``perturb`` is
both at once (a new user), and the aggregator's law is their composition.  Every random
choice is one of :mod:`.samplers`' exact primitives:

=======  ===================  ===========================  ============  =================
format   method               input, and what is sent      payload       support (length)
=======  ===================  ===========================  ============  =================
``ht``   InpHT/FT (one        her code in binary (the      ``[i, b]``    reports per
         group of every       group's first attribute      0 <= i < |T|  (i, b): 2 |T|
         attribute), MargHT   least significant); i =      b in {0, 1}
         (one group per       uniform(|T|), then a coin
         k-way marginal)      at P: b = parity(T[i] &
                              code), flipped unless kept
``cms``  InpHTCMS (one group  her cell x of the full       ``[i, b]``    reports per
         of every attribute)  table; i = uniform(g w) =    0 <= i < g w  (i, b): 2 g w
                              j w + l, then a coin at P:
                              b = parity(l & h_j(x))
``em``   EM, InpEM (one       every attribute's value      ``[y_0, ...,  the histogram of
         group of every       through its own oracle       y_{d-1}]``    the reported
         attribute)           (grr, oue or sue) at eps/d,  one class     classes on every
                              attribute after attribute:   per           k-set of
                              GRR sends the value,         attribute     attributes, one
                              OUE/SUE the bit vector as                  after the other
                              an integer (bit v = value v)
matrix   WFM (one group of    her cell x of the full       integer o,    reports per
         every attribute)     table; u = uniform63, o the  0 <= o < m    output: m
                              first row whose cumulative
                              weight in column x exceeds u
=======  ===================  ===========================  ============  =================

P is binary randomized response's 32-bit keep threshold (p = P / 2^32, the largest with
p / (1 - p) <= e^eps exactly: :func:`~dpmarginals.oracles._base.binary_keep`).  T (``ht``)
is every non-constant Hadamard coefficient of the group's binary code touching at most
``params["k"]`` attributes (``params["support"] = "attributes"``, the default; for MargHT's
k-attribute groups: all 2^b - 1 of them) or of weight at most the bits of the k widest
attributes (``"bits"``, CALM §5.3), sorted as integers (Cormode et al. Alg. 1; CALM §3.5).
The sketch hashes h_j (``cms``) are degree-2 polynomials mod 2^31 - 1 whose coefficients
the plan lists (``params["hash_coefficients"]``: [a, b, c], each g integers below P;
version 1 plans derived them from ``params["hash_seed"]``; Cormode et al. B.2).  EM's
per-attribute oracles are ``params["attribute_oracles"]`` ("none" for a single-valued
attribute: nothing is sent), each at exactly eps / d (its thresholds derived from that
rational), eps-LDP by composition; its sufficient statistics are the histograms of the
reported classes on the k-sets of attributes (CALM §3.6), so a unary-encoded attribute of
c values has 2^c classes.  The strategy of ``matrix`` (the workload factorization
mechanism, McKenna et al. PVLDB 2020) is ``params["strategy"]``: ``{"rows": m, "columns":
cells, "uint64": [...]}``, its m x cells integer weights, row by row, as little-endian
uint64 in base64 strings of at most 4,096 characters each (3,072 bytes; the service caps
every string in a plan).  The client checks it in integers before any draw
(:class:`StrategyMatrix`): every column sums to exactly 2^63 (the cell's distribution is
column / 2^63), and in every row the largest weight is at most e^eps times the smallest
(a row of zeros is never sent).

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> dom = Domain(("a", "b"), (2, 3))
>>> plan = Plan("marg_ht", 1.0, dom, (GroupSpec(("a", "b"), "ht", 1.0, 6),), {"k": 2})
>>> ht = group_oracle(plan, 0)
>>> ht.masks.tolist(), ht.size
([1, 2, 3, 4, 5, 6, 7], 14)
>>> ht.encode(np.array([[1, 2]])).tolist()    # a + 2 b: a's bit least significant
[5]
>>> int(ht.support(ht.perturb([5, 5, 0], rng=1)).sum())
3
"""

from __future__ import annotations

import base64
import binascii
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from itertools import accumulate, combinations, product
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import DPMarginalsError, check_epsilon
from ..core.exact import WORD, exp_lower_bound, rational
from ..core.hashing import PRIME
from ..core.randomness import RandomSource, RNGLike, client_rng
from ..oracles import ORACLES, FrequencyOracle, make_oracle, oracle_at
from ..oracles._base import as_report_columns, binary_keep, check_range, parity
from ..oracles.memoized import MEMOIZED, memoized
from . import randomizers
from .plan import Plan
from .samplers import coins, uniform, uniform63

__all__ = [
    "FORMATS",
    "INTEGER_PAYLOADS",
    "KNOWN",
    "MAX_CODE_BITS",
    "MAX_GROUP_SUPPORT",
    "MAX_STRATEGY_ENTRIES",
    "STRATEGY_TOTAL",
    "SUPPORTS",
    "AttributeReports",
    "CellReports",
    "CountMeanSketch",
    "HadamardCoefficients",
    "StrategyMatrix",
    "attribute_bits",
    "binary_codes",
    "bits_for",
    "coefficient_count",
    "coefficient_masks",
    "decode_matrix",
    "encode_matrix",
    "group_oracle",
    "integer_strategy",
    "kset_histograms",
    "memoizable",
    "plan_oracles",
    "rr_keep",
    "sketch_coefficients",
    "sketch_hash",
    "support_sizes",
]

MAX_CODE_BITS = 62
"""A binary code (``ht``) is one int64."""
MAX_GROUP_SUPPORT = 1 << 23
"""The longest support vector a group of these formats may have (a 64 MiB count tensor)."""
MAX_STRATEGY_ENTRIES = 1 << 24
"""The largest strategy matrix a plan may carry (m x cells entries: 128 MiB of uint64)."""
STRATEGY_TOTAL = 1 << 63
"""Every column of a strategy's integer weights sums to exactly this."""
STRATEGY_CHUNK = 3072
"""Bytes per base64 string of a published strategy (4,096 characters)."""
STRATEGY_TEXT = 4 * STRATEGY_CHUNK // 3
SUPPORTS = ("bits", "attributes")
UNARY = ("oue", "sue")
INTEGER_PAYLOADS = ("grr", "matrix")
"""Oracles and formats whose report is one integer below their support's length."""
EM_ORACLES = ("grr", "oue", "sue")
"""The oracles an ``em`` attribute may report through."""


# -- small shared arithmetic ----------------------------------------------------------------
def bits_for(count: int) -> int:
    """ceil(log2 count): bits to name one of ``count`` things (0 for count <= 1)."""
    return max(int(count) - 1, 0).bit_length()


def rr_keep(epsilon: float) -> float:
    """p of binary randomized response: the exact 32-bit rational the device realizes,
    P / 2^32 <= e^eps / (1 + e^eps)."""
    return binary_keep(epsilon) / WORD

def attribute_bits(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """ceil(log2 c) bits per attribute of c values (CALM §5.3's binary encoding)."""
    return tuple(bits_for(c) for c in sizes)


def _offsets(bits: tuple[int, ...]) -> tuple[int, ...]:
    return (0, *accumulate(bits))[: len(bits)]


def binary_codes(values: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """Each row of ``values`` (one column per attribute) as one int64: attribute j's value
    at bit offset ``bits[0] + ... + bits[j-1]`` (the first attribute least significant)."""
    bits = attribute_bits(sizes)
    if sum(bits) > MAX_CODE_BITS:
        raise DPMarginalsError(f"the binary encoding has {sum(bits)} bits; at most "
                               f"{MAX_CODE_BITS} are supported")
    arr = np.asarray(values, dtype=np.int64)
    code = np.zeros(arr.shape[0], dtype=np.int64)
    for j, off in enumerate(_offsets(bits)):
        if bits[j]:
            code |= arr[:, j] << off
    return code


def coefficient_count(sizes: tuple[int, ...], k: int, support: str) -> int:
    """|T| of :func:`coefficient_masks` without enumerating it."""
    bits = attribute_bits(sizes)
    if support == "bits":
        top = sum(sorted(bits, reverse=True)[:k])
        return sum(math.comb(sum(bits), s) for s in range(1, top + 1))
    k = min(k, len(bits))  # the sums of more attributes than there are are 0; a plan's k
    e = [1] + [0] * k      # may be 1e9: elementary symmetric sums of (2^b_a - 1)
    for b in bits:
        for j in range(k, 0, -1):
            e[j] += e[j - 1] * ((1 << b) - 1)
    return sum(e[1:])


@lru_cache(maxsize=32)
def coefficient_masks(sizes: tuple[int, ...], k: int, support: str) -> np.ndarray:
    """The coefficient set T, sorted int64 bit masks over the binary code (module docstring;
    cached, read-only).

    >>> coefficient_masks((2, 2, 2), 2, "bits").tolist()
    [1, 2, 3, 4, 5, 6]
    """
    masks = _coefficient_masks(tuple(int(c) for c in sizes), int(k), str(support))
    masks.setflags(write=False)
    return masks


def _coefficient_masks(sizes: tuple[int, ...], k: int, support: str) -> np.ndarray:
    bits = attribute_bits(sizes)
    offsets = _offsets(bits)
    wide = [i for i, b in enumerate(bits) if b]
    top = sum(sorted(bits, reverse=True)[:k])
    if (support == "bits" and top >= sum(bits)) or (support != "bits" and k >= len(wide)):
        return np.arange(1, 1 << sum(bits), dtype=np.int64)  # every non-constant mask
    out: list[int] = []
    if support == "bits":
        for s in range(1, top + 1):
            out.extend(sum(1 << i for i in c) for c in combinations(range(sum(bits)), s))
    else:
        for s in range(1, min(k, len(wide)) + 1):
            for attrs in combinations(wide, s):
                parts = [[m << offsets[i] for m in range(1, 1 << bits[i])] for i in attrs]
                out.extend(sum(p) for p in product(*parts))
    return np.unique(np.asarray(out, dtype=np.int64))


def sketch_coefficients(seed: int, g: int) -> np.ndarray:
    """(3, g) coefficients (a, b, c) of g sketch hashes, uniform mod P = 2^31 - 1, drawn
    from ``seed`` with numpy's PCG64 (what a plan lists as ``hash_coefficients``)."""
    gen = np.random.default_rng(seed)
    return gen.integers(0, PRIME, size=(3, g, 1), dtype=np.int64)[:, :, 0]


def sketch_hash(coef: np.ndarray, x: np.ndarray, w: int) -> np.ndarray:
    """h(x) = ((a x^2 + b x + c) mod P) mod w for coefficient columns ``coef`` (3, ...)
    broadcast against ``x`` (< 2^31): 3-wise independent (Cormode et al. B.2).  Every
    product stays below 2^62."""
    t = coef[0] * x % PRIME
    t = (t * x + coef[1] * x % PRIME + coef[2]) % PRIME
    return t % w


def _int_param(plan: Plan, key: str, low: int) -> int:
    value = plan.params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise DPMarginalsError(f"plan params.{key} must be an integer >= {low}, got {value!r}")
    return value




# -- one cell of the marginal through a frequency oracle ------------------------------------
@dataclass(frozen=True, eq=False)
class CellReports:
    """A group whose users report their cell of its marginal through a frequency oracle.

    ``oracle`` is the aggregator's law (for a memoized plan, the composition of the
    permanent response ``memo[0]`` and the instantaneous one at threshold ``memo[1]``,
    :func:`~dpmarginals.oracles.memoized.memoized`); any attribute this class does not
    define (``p``, ``q``, ``g``, ``K``, ``estimate``, ``variance``, ``sample_support``, ...)
    is the oracle's.
    """

    oracle: FrequencyOracle
    sizes: tuple[int, ...]
    memo: tuple[FrequencyOracle, int] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.oracle, name)

    @property
    def name(self) -> str:
        return self.oracle.name

    @property
    def size(self) -> int:
        return self.oracle.size

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The group's attribute values (n, a) -> cells of its marginal (C order)."""
        arr = np.asarray(values, dtype=np.int64)
        return np.ravel_multi_index(tuple(arr.T), self.sizes).astype(np.int64)

    def perturb(self, inputs: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """A fresh report per cell (memoized plans: a permanent response, then fresh noise)."""
        src = client_rng(rng)
        if self.memo is None:
            return randomizers.perturb(self.oracle, np.asarray(inputs), src)
        return self.instantaneous(self.permanent(inputs, src), src)

    def permanent(self, inputs: ArrayLike, src: RandomSource) -> np.ndarray:
        """The permanent randomized response of each cell (what a device memoizes)."""
        if self.memo is None:
            raise DPMarginalsError("the plan does not memoize")
        return randomizers.perturb(self.memo[0], np.asarray(inputs), src)

    def instantaneous(self, permanent: np.ndarray, src: RandomSource) -> np.ndarray:
        """A report from permanent responses: fresh noise drawn for this report alone."""
        if self.memo is None:
            raise DPMarginalsError("the plan does not memoize")
        return randomizers.instantaneous(self.memo[0], permanent, self.memo[1], src)

    def support(self, reports: ArrayLike) -> np.ndarray:
        return self.oracle.support(reports)

    def output_distribution(self, value: int) -> np.ndarray:
        return self.oracle.output_distribution(value)


# -- the signed-index formats: ht and cms ---------------------------------------------------
@dataclass(frozen=True)
class _SignedIndex(ABC):
    """A uniform index i in [K] and one bit of the input at i through eps-randomized
    response (Cormode et al. Alg. 1); payload ``[i, b]``, support: reports per (i, b)."""

    epsilon: float
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))

    @property
    @abstractmethod
    def K(self) -> int:
        """The number of indices."""

    @abstractmethod
    def encode(self, values: np.ndarray) -> np.ndarray:
        """The group's attribute values (n, a) -> the randomizer's inputs (n,)."""

    @abstractmethod
    def true_bits(self, inputs: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The unperturbed bit of each input at its index (0: sign +1, 1: sign -1)."""

    @property
    def keep(self) -> int:
        """P: a word below it keeps the true bit (binary RR at eps, exactly)."""
        return binary_keep(self.epsilon)

    @property
    def p(self) -> float:
        return self.keep / WORD

    @property
    def size(self) -> int:
        """2 K: the support counts reports per (index, bit), at 2 i + b."""
        return 2 * self.K

    @property
    def report_bits(self) -> int:
        return bits_for(self.K) + 1

    def perturb(self, inputs: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """(i, b) per user, int64 (n, 2): i = uniform(K), then a coin at P: b is the true
        bit at i, flipped unless the coin holds."""
        x = np.asarray(inputs, dtype=np.int64).ravel()
        src = client_rng(rng)
        i = uniform(src, self.K, x.size)
        kept = coins(src, self.keep, x.size)
        return np.column_stack((i, self.true_bits(x, i) ^ ~kept))

    def check(self, reports: ArrayLike) -> np.ndarray:
        """Raise unless every report is (i, b) with 0 <= i < K and b in {0, 1}."""
        arr = as_report_columns(reports, 2, self.name)
        check_range(arr[:, 0], self.K, f"{self.name} index")
        check_range(arr[:, 1], 2, f"{self.name} bit")
        return arr

    def support(self, reports: ArrayLike) -> np.ndarray:
        arr = self.check(reports)
        return np.bincount(2 * arr[:, 0] + arr[:, 1], minlength=self.size).astype(np.int64)

    def output_distribution(self, value: int) -> np.ndarray:
        """P[(i, b) | input] for all 2K outputs, at 2 i + b."""
        index = np.arange(self.K, dtype=np.int64)
        true = self.true_bits(np.full(self.K, int(value), dtype=np.int64), index)
        probs = np.where(np.arange(2)[None, :] == true[:, None], self.p, 1 - self.p)
        return (probs / self.K).ravel()


@dataclass(frozen=True)
class HadamardCoefficients(_SignedIndex):
    """``ht``: one Hadamard coefficient of the user's binary code (InpHT/FT, MargHT)."""

    sizes: tuple[int, ...] = ()
    k: int = 1
    support_kind: str = "attributes"
    name: ClassVar[str] = "ht"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.support_kind not in SUPPORTS:
            raise DPMarginalsError(f"plan params.support must be one of {list(SUPPORTS)}, got "
                                   f"{self.support_kind!r}")
        if sum(attribute_bits(self.sizes)) > MAX_CODE_BITS:
            raise DPMarginalsError(f"ht codes have at most {MAX_CODE_BITS} bits, got "
                                   f"{sum(attribute_bits(self.sizes))}")

    @cached_property
    def K(self) -> int:
        return coefficient_count(self.sizes, self.k, self.support_kind)

    @cached_property
    def masks(self) -> np.ndarray:
        """T: the sorted coefficient masks."""
        return coefficient_masks(self.sizes, self.k, self.support_kind)

    def encode(self, values: np.ndarray) -> np.ndarray:
        return binary_codes(values, self.sizes)

    def true_bits(self, inputs: np.ndarray, index: np.ndarray) -> np.ndarray:
        return parity(self.masks[index] & inputs)


@dataclass(frozen=True)
class CountMeanSketch(_SignedIndex):
    """``cms``: Apple's Hadamard count-mean sketch of the user's cell (InpHTCMS); the
    coefficients (3, g) of its g hashes are public (the plan's ``hash_coefficients``)."""

    sizes: tuple[int, ...] = ()
    w: int = 256
    coefficients: tuple[tuple[int, ...], ...] = ()
    name: ClassVar[str] = "cms"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.w < 2 or self.w & (self.w - 1):
            raise DPMarginalsError(f"plan params.w must be a power of two >= 2, got {self.w}")
        if math.prod(self.sizes) >= PRIME:
            raise DPMarginalsError(f"cms hashes cells below {PRIME}; the group has "
                                   f"{math.prod(self.sizes):,}")
        rows = self.coefficients
        if (len(rows) != 3 or not rows[0] or any(len(r) != len(rows[0]) for r in rows)
                or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < PRIME
                       for r in rows for c in r)):
            raise DPMarginalsError(f"plan params.hash_coefficients must be 3 lists of g "
                                   f"integers in [0, {PRIME}), got {str(rows)[:120]}")

    @property
    def g(self) -> int:
        return len(self.coefficients[0])

    @property
    def K(self) -> int:
        return self.g * self.w

    @cached_property
    def coefficient_array(self) -> np.ndarray:
        return np.asarray(self.coefficients, dtype=np.int64)

    def encode(self, values: np.ndarray) -> np.ndarray:
        arr = np.asarray(values, dtype=np.int64)
        return np.ravel_multi_index(tuple(arr.T), self.sizes).astype(np.int64)

    def true_bits(self, inputs: np.ndarray, index: np.ndarray) -> np.ndarray:
        j, col = index // self.w, index % self.w
        return parity(col & sketch_hash(self.coefficient_array[:, j], inputs, self.w))


# -- em: every attribute at eps/d ------------------------------------------------------------
@dataclass(frozen=True)
class AttributeReports:
    """``em``: every attribute through its own oracle at exactly eps / d (EM, InpEM); a
    memoized plan (``longitudinal`` not None) keeps a permanent response per attribute at
    longitudinal / d and adds fresh noise per report."""

    epsilon: float
    sizes: tuple[int, ...]
    oracles: tuple[str, ...]
    k: int
    longitudinal: float | None = None
    name: ClassVar[str] = "em"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        d = len(self.sizes)
        if len(self.oracles) != d or any(
                o != "none" and o not in EM_ORACLES for o in self.oracles):
            raise DPMarginalsError(f"plan params.attribute_oracles must name {d} oracles of "
                                   f"{list(EM_ORACLES)} (or 'none'), got "
                                   f"{list(self.oracles)!r:.120}")
        for o, c in zip(self.oracles, self.sizes, strict=True):
            if (o == "none") != (c < 2):
                raise DPMarginalsError(f"an attribute of {c} values cannot report with "
                                       f"oracle {o!r}")
            if o in UNARY and c > MAX_CODE_BITS:
                raise DPMarginalsError(f"a unary report of {c} bits does not fit one class "
                                       "integer")
        if not 1 <= self.k <= d:
            raise DPMarginalsError(f"plan params.k must be in 1..{d}, got {self.k}")

    @property
    def d(self) -> int:
        return len(self.sizes)

    @property
    def share(self) -> Fraction:
        """Each attribute's budget, exactly eps / d."""
        return rational(self.epsilon) / self.d

    @cached_property
    def layers(self) -> tuple[tuple[FrequencyOracle, int] | None, ...]:
        """Per attribute: (permanent oracle, instantaneous threshold) of a memoized plan."""
        if self.longitudinal is None:
            return (None,) * self.d
        perm = rational(self.longitudinal) / self.d
        return tuple(None if o == "none" else memoized(o, self.share, perm, c)[:2]
                     for o, c in zip(self.oracles, self.sizes, strict=True))

    @cached_property
    def attribute_oracles(self) -> tuple[FrequencyOracle | None, ...]:
        """Per attribute: the aggregator's law (a memoized plan's composition)."""
        if self.longitudinal is not None:
            perm = rational(self.longitudinal) / self.d
            return tuple(None if o == "none" else memoized(o, self.share, perm, c)[2]
                         for o, c in zip(self.oracles, self.sizes, strict=True))
        return tuple(None if o == "none" else oracle_at(o, self.share, c)
                     for o, c in zip(self.oracles, self.sizes, strict=True))

    @cached_property
    def classes(self) -> tuple[int, ...]:
        """Reported classes per attribute: 1 (none), c (GRR) or 2^c (a unary bit vector)."""
        return tuple(1 if o == "none" else (1 << c) if o in UNARY else c
                     for o, c in zip(self.oracles, self.sizes, strict=True))

    @cached_property
    def ksets(self) -> tuple[tuple[int, ...], ...]:
        return tuple(combinations(range(self.d), self.k))

    @cached_property
    def size(self) -> int:
        return sum(math.prod(self.classes[i] for i in q) for q in self.ksets)

    @property
    def report_bits(self) -> int:
        return sum(o.report_bits for o in self.attribute_oracles if o is not None)

    def encode(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    def _inputs(self, values: ArrayLike) -> np.ndarray:
        arr = np.asarray(values, dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != self.d:
            raise DPMarginalsError(f"em inputs must have shape (n, {self.d}), got {arr.shape}")
        return arr

    def perturb(self, values: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """Every user's class per attribute, int64 (n, d): attribute j through its oracle,
        attribute after attribute (memoized plans: every permanent response, then every
        attribute's fresh noise)."""
        src = client_rng(rng)
        if self.longitudinal is not None:
            return self.instantaneous(self.permanent(values, src), src)
        arr = self._inputs(values)
        return self._each(arr, src, lambda j, o, col: randomizers.perturb(o, col, src),
                          self.attribute_oracles)

    def permanent(self, values: ArrayLike, src: RandomSource) -> np.ndarray:
        """The permanent responses (classes, (n, d)) a device memoizes."""
        if self.longitudinal is None:
            raise DPMarginalsError("the plan does not memoize")
        arr = self._inputs(values)
        return self._each(arr, src, lambda j, o, col: randomizers.perturb(o, col, src),
                          tuple(None if lay is None else lay[0] for lay in self.layers))

    def instantaneous(self, permanent: ArrayLike, src: RandomSource) -> np.ndarray:
        """A report's classes from the permanent ones, with fresh noise per attribute."""
        if self.longitudinal is None:
            raise DPMarginalsError("the plan does not memoize")
        arr = self._inputs(permanent)
        layers = self.layers

        def noise(j: int, oracle: FrequencyOracle, col: np.ndarray) -> np.ndarray:
            inst = layers[j][1]  # type: ignore[index]
            if oracle.name == "grr":
                return randomizers.instantaneous(oracle, col, inst, src)
            packed = (col[:, None] >> (8 * np.arange((oracle.size + 7) // 8))) & 0xFF
            return randomizers.instantaneous(oracle, packed.astype(np.uint8), inst, src)

        return self._each(arr, src, noise,
                          tuple(None if lay is None else lay[0] for lay in layers),
                          classes_in=True)

    def _each(self, arr: np.ndarray, src: RandomSource, step: Any,
              oracles: Sequence[FrequencyOracle | None], classes_in: bool = False
              ) -> np.ndarray:
        """``step(j, oracle, column)`` attribute after attribute; unary outputs (packed bits)
        become classes: the bits read as a little-endian integer."""
        out = np.zeros(arr.shape, dtype=np.int64)
        for j, oracle in enumerate(oracles):
            if oracle is None:
                continue
            if not classes_in:
                check_range(arr[:, j], oracle.size, f"em value of attribute {j}")
            reported = step(j, oracle, arr[:, j])
            if oracle.name in UNARY:
                shifts = 8 * np.arange(reported.shape[1], dtype=np.int64)
                reported = (reported.astype(np.int64) << shifts).sum(axis=1)
            out[:, j] = reported
        return out

    def check(self, reports: ArrayLike) -> np.ndarray:
        arr = as_report_columns(reports, self.d, self.name)
        for j, c in enumerate(self.classes):
            check_range(arr[:, j], c, f"em class of attribute {j}")
        return arr

    def support(self, reports: ArrayLike) -> np.ndarray:
        """The histograms of the reported classes on every k-set, concatenated."""
        arr = self.check(reports)
        if not arr.size:
            return np.zeros(self.size, dtype=np.int64)
        if math.prod(self.classes) < 1 << 62:
            keys, counts = np.unique(np.ravel_multi_index(tuple(arr.T), self.classes),
                                     return_counts=True)
            rows = np.column_stack(np.unravel_index(keys, self.classes))
        else:
            rows, counts = np.unique(arr, axis=0, return_counts=True)
        return self.support_of_tuples(rows.reshape(-1, self.d), counts)

    def support_of_tuples(self, tuples: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """:meth:`support` from distinct reported tuples (U, d) and their counts (U,)."""
        return np.concatenate(kset_histograms(tuples, counts, self.classes, self.ksets))

    def split(self, support: np.ndarray) -> list[np.ndarray]:
        """A support vector -> one histogram per k-set, shaped by the classes."""
        out, start = [], 0
        for q in self.ksets:
            dims = tuple(self.classes[i] for i in q)
            out.append(np.asarray(support[start : start + math.prod(dims)]).reshape(dims))
            start += math.prod(dims)
        return out

    def output_distribution(self, values: Any) -> np.ndarray:
        """P[classes | record] over every joint output (C order over the classes)."""
        dist = np.ones(1)
        for oracle, v in zip(self.attribute_oracles, np.asarray(values).ravel(), strict=True):
            if oracle is not None:
                dist = np.outer(dist, oracle.output_distribution(int(v))).ravel()
        return dist


def kset_histograms(tuples: np.ndarray, counts: np.ndarray, classes: Sequence[int],
                    ksets: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The histogram (flat, C order, int64) of class tuples (U, d) weighted by ``counts``
    on each set of columns in ``ksets`` (column j has ``classes[j]`` classes)."""
    rows = np.asarray(tuples, dtype=np.int64).reshape(-1, len(classes))
    out = []
    for q in ksets:
        dims = tuple(int(classes[i]) for i in q)
        key = np.ravel_multi_index(tuple(rows[:, list(q)].T), dims)
        hist = np.bincount(key, weights=counts, minlength=math.prod(dims))
        out.append(np.rint(hist).astype(np.int64))
    return out


# -- matrix: one output of a public strategy (WFM) ------------------------------------------
def integer_strategy(matrix: ArrayLike, epsilon: float, mix: float = 2.0**-20) -> np.ndarray:
    """Integer weights (uint64, m x cells) of a float strategy whose columns are
    distributions, that :meth:`StrategyMatrix.validate` accepts: the strategy mixed with
    the uniform distribution over its m outputs (weight ``mix``), which puts every row's
    max/min a factor ~ mix (e^eps - 1) below e^eps, then scaled so that each column sums to
    exactly 2^63 (floored; the column's remainder, under m 2^11 units, goes to its largest
    weight, a relative change under 1e-8).  The law moves by about ``mix``; a strategy
    that is not eps-LDP to begin with is still refused by the validator."""
    arr = np.array(matrix, dtype=np.float64)
    if arr.ndim != 2 or not np.isfinite(arr).all() or (arr < 0).any():
        raise DPMarginalsError("a strategy is a finite non-negative 2-D matrix")
    arr = (1 - mix) * arr / arr.sum(axis=0) + mix / arr.shape[0]
    weights = np.floor(arr * float(STRATEGY_TOTAL)).astype(np.uint64)
    short = STRATEGY_TOTAL - weights.astype(object).sum(axis=0)
    top = np.argmax(arr, axis=0)
    for x in np.flatnonzero(short).tolist():
        weights[top[x], x] = np.uint64(int(weights[top[x], x]) + int(short[x]))
    return StrategyMatrix.validate(weights, epsilon, arr.shape[1]).copy()


def encode_matrix(weights: np.ndarray) -> dict[str, Any]:
    """The plan's JSON form of a strategy's integer weights (module docstring).

    >>> spec = encode_matrix(np.array([[1 << 62, 1 << 61], [1 << 62, 3 << 61]], np.uint64))
    >>> spec["rows"], spec["columns"], decode_matrix(spec, 2).tolist() == [[2**62, 2**61],
    ...                                                                    [2**62, 3 * 2**61]]
    (2, 2, True)
    """
    arr = np.ascontiguousarray(weights, dtype="<u8")
    if arr.ndim != 2:
        raise DPMarginalsError(f"a strategy matrix is 2-D, got shape {arr.shape}")
    raw = arr.tobytes()
    return {"rows": int(arr.shape[0]), "columns": int(arr.shape[1]),
            "uint64": [base64.b64encode(raw[i : i + STRATEGY_CHUNK]).decode("ascii")
                       for i in range(0, len(raw), STRATEGY_CHUNK)]}


def decode_matrix(spec: Any, columns: int) -> np.ndarray:
    """The integer weights of :func:`encode_matrix`'s ``spec``, which must have ``columns``
    columns (the group's cells); a malformed spec is an error naming the field."""
    rows, chunks = _strategy_spec(spec, columns)
    return _decode_chunks(chunks, rows, columns)


def _decode_chunks(chunks: tuple[str, ...], rows: int, columns: int) -> np.ndarray:
    raw = []
    for i, text in enumerate(chunks):
        if len(text) > STRATEGY_TEXT:  # before decoding it
            raise DPMarginalsError(f"plan params.strategy.uint64[{i}] is a string of "
                                   f"{len(text):,} characters; at most {STRATEGY_TEXT:,}")
        try:
            part = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise DPMarginalsError(f"plan params.strategy.uint64[{i}] is not valid "
                                   "base64") from None
        last = i == len(chunks) - 1
        if (len(part) != STRATEGY_CHUNK and not last) or not part:
            raise DPMarginalsError(f"plan params.strategy.uint64[{i}] holds {len(part)} "
                                   f"bytes; every string but the last holds {STRATEGY_CHUNK}")
        raw.append(part)
    data = b"".join(raw)
    if len(data) != 8 * rows * columns:
        raise DPMarginalsError(f"plan params.strategy.uint64 holds {len(data):,} bytes, not "
                               f"the {8 * rows * columns:,} of {rows} x {columns} uint64")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64).reshape(rows, columns)


def _strategy_spec(spec: Any, columns: int) -> tuple[int, tuple[str, ...]]:
    """(rows, base64 strings) of a well-formed strategy spec of ``columns`` columns."""
    if isinstance(spec, dict) and "float64" in spec:
        raise DPMarginalsError("plan params.strategy holds float64 weights (a version 1 "
                               "plan): a device samples integer weights only; plan again")
    if not isinstance(spec, dict) or set(spec) != {"rows", "columns", "uint64"}:
        raise DPMarginalsError('plan params.strategy must be {"rows", "columns", "uint64"}, '
                               f"got {str(spec)[:80]!r}")
    rows, cols, text = spec["rows"], spec["columns"], spec["uint64"]
    for key, value in (("rows", rows), ("columns", cols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DPMarginalsError(f"plan params.strategy.{key} must be an integer >= 1, got "
                                   f"{value!r}")
    if cols != columns:
        raise DPMarginalsError(f"plan params.strategy has {cols} columns but the group's "
                               f"marginal has {columns} cells")
    if rows * cols > MAX_STRATEGY_ENTRIES:
        raise DPMarginalsError(f"plan params.strategy has {rows} x {cols} = {rows * cols:,} "
                               f"entries; at most {MAX_STRATEGY_ENTRIES:,}")
    chunks = -(-8 * rows * cols // STRATEGY_CHUNK)
    if (not isinstance(text, list) or len(text) != chunks
            or not all(isinstance(t, str) for t in text)):
        raise DPMarginalsError(f"plan params.strategy.uint64 must be {chunks} base64 strings "
                               f"(the {rows} x {cols} uint64 weights, {STRATEGY_CHUNK} bytes "
                               "a string)")
    return rows, tuple(text)


@dataclass(frozen=True, eq=False)
class StrategyMatrix:
    """``matrix``: the user in cell x reports o with probability ``W[o, x] / 2^63`` (the
    workload factorization mechanism's randomizer, McKenna et al. PVLDB 2020 §3).

    Built only from integer weights that pass :meth:`validate`: the client refuses a plan
    whose strategy is not a set of distributions or not eps-LDP before it draws anything.

    >>> w = np.array([[2, 1], [1, 2]], dtype=np.uint64) * np.uint64(STRATEGY_TOTAL // 3 + 1)
    >>> StrategyMatrix(0.5, w, (2,))
    Traceback (most recent call last):
    ...
    dpmarginals.core.errors.DPMarginalsError: column 0 of the strategy sums to ...
    """

    epsilon: float
    matrix: np.ndarray
    sizes: tuple[int, ...]
    name: ClassVar[str] = "matrix"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "matrix", self.validate(self.matrix, self.epsilon,
                                                         math.prod(self.sizes)))

    @staticmethod
    def validate(weights: ArrayLike, epsilon: float, cells: int) -> np.ndarray:
        """The weights (read-only uint64), if they are (m, cells), every column sums to
        exactly 2^63, and in every row max <= e^eps min (a row of zeros is never sent),
        all in integers against :func:`~dpmarginals.core.exact.exp_lower_bound`."""
        arr = np.array(weights)
        if arr.ndim != 2 or arr.shape[1] != cells or arr.shape[0] < 1:
            raise DPMarginalsError(f"the strategy matrix must have shape (m, {cells}), got "
                                   f"{arr.shape}")
        if arr.dtype != np.uint64:
            raise DPMarginalsError(f"the strategy's weights must be uint64, got {arr.dtype}")
        wide = arr.astype(object)
        for x in range(cells):
            total = sum(wide[:, x].tolist())
            if total != STRATEGY_TOTAL:
                raise DPMarginalsError(f"column {x} of the strategy sums to {total}, not 2^63: "
                                       "it is not a distribution")
        bound = exp_lower_bound(rational(epsilon))
        lo, hi = arr.min(axis=1), arr.max(axis=1)
        for o in np.flatnonzero(hi > 0).tolist():
            if int(hi[o]) * bound.denominator > int(lo[o]) * bound.numerator:
                ratio = math.inf if lo[o] == 0 else int(hi[o]) / int(lo[o])
                raise DPMarginalsError(f"the strategy matrix is not {epsilon}-LDP: row {o} has "
                                       f"max/min = {ratio!r} > e^eps = {math.exp(epsilon)!r}")
        arr.setflags(write=False)
        return arr

    @property
    def size(self) -> int:
        """m: the support counts the reports of each output."""
        return int(self.matrix.shape[0])

    @property
    def report_bits(self) -> int:
        return bits_for(self.size)

    @cached_property
    def _cumulative(self) -> np.ndarray:
        return np.cumsum(self.matrix, axis=0, dtype=np.uint64)

    @cached_property
    def probabilities(self) -> np.ndarray:
        """W / 2^63 as floats (the aggregator's law)."""
        return self.matrix.astype(np.float64) / float(STRATEGY_TOTAL)

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The group's attribute values (n, a) -> cells of the full table (C order)."""
        arr = np.asarray(values, dtype=np.int64)
        return np.ravel_multi_index(tuple(arr.T), self.sizes).astype(np.int64)

    def perturb(self, inputs: ArrayLike, *, rng: RNGLike = None) -> np.ndarray:
        """One output per user, int64 (n,): u = uniform63, o the first row whose cumulative
        weight in her column exceeds u (exactly W[o, x] / 2^63); a loop over distinct cells."""
        x = np.asarray(inputs, dtype=np.int64).ravel()
        check_range(x, self.matrix.shape[1], "matrix inputs")
        u = uniform63(client_rng(rng), x.size)
        out = np.empty(x.size, dtype=np.int64)
        order = np.argsort(x, kind="stable")
        cells, starts = np.unique(x[order], return_index=True)
        for cell, users in zip(cells.tolist(), np.split(order, starts[1:]), strict=True):
            out[users] = np.searchsorted(self._cumulative[:, cell], u[users], side="right")
        return out

    def check(self, reports: ArrayLike) -> np.ndarray:
        """Raise unless the reports are a 1-D integer array of outputs in 0..m-1."""
        arr = np.asarray(reports)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise DPMarginalsError(f"matrix reports must be a 1-D integer array, got "
                                   f"{arr.dtype} {arr.shape}")
        arr = arr.astype(np.int64, copy=False)
        check_range(arr, self.size, "matrix output")
        return arr

    def support(self, reports: ArrayLike) -> np.ndarray:
        return np.bincount(self.check(reports), minlength=self.size).astype(np.int64)

    def output_distribution(self, value: int) -> np.ndarray:
        """P[o | cell] for o = 0..m-1: the cell's column over 2^63."""
        return np.array(self.probabilities[:, int(value)])


@lru_cache(maxsize=4)
def _strategy_format(epsilon: float, chunks: tuple[str, ...], rows: int,
                     sizes: tuple[int, ...]) -> StrategyMatrix:
    """One validated format per published matrix (decoding and checking a 2^22-entry
    matrix takes a fraction of a second; a plan's groups and codecs ask for it often)."""
    return StrategyMatrix(epsilon, _decode_chunks(chunks, rows, math.prod(sizes)), sizes)


FORMATS = ("ht", "cms", "em", "matrix")
KNOWN = (*sorted(ORACLES), *FORMATS)


def group_oracle(plan: Plan, group: int) -> Any:
    """Group ``group``'s report format (:class:`CellReports` for a frequency oracle), from
    the plan alone; a memoized plan's groups must be memoizable (grr, oue, sue, em)."""
    spec = plan.groups[group]
    sizes = tuple(plan.domain.size(a) for a in spec.attributes)
    longitudinal = plan.longitudinal
    if longitudinal is not None and spec.oracle not in (*MEMOIZED, "em"):
        raise DPMarginalsError(f"groups[{group}].oracle = {spec.oracle!r} cannot be memoized "
                               f"(longitudinal_epsilon = {longitudinal!r}): only "
                               f"{[*MEMOIZED, 'em']} can; plan without longitudinal_epsilon")
    if spec.oracle in ORACLES:
        if longitudinal is None:
            return CellReports(make_oracle(spec.oracle, spec.epsilon, spec.cells), sizes)
        prr, inst, composed = memoized(spec.oracle, spec.epsilon, longitudinal, spec.cells)
        return CellReports(composed, sizes, (prr, inst))
    if spec.oracle == "ht":
        support = plan.params.get("support", "attributes")
        return HadamardCoefficients(spec.epsilon, sizes, _int_param(plan, "k", 1), support)
    if spec.oracle == "cms":
        return CountMeanSketch(spec.epsilon, sizes, _int_param(plan, "w", 2),
                               _hash_coefficients(plan))
    if spec.oracle == "em":
        names = plan.params.get("attribute_oracles")
        if not isinstance(names, list) or len(names) != len(plan.domain):
            raise DPMarginalsError(f"plan params.attribute_oracles must list one oracle per "
                                   f"attribute, got {names!r:.120}")
        chosen = tuple(str(names[plan.domain.index(a)]) for a in spec.attributes)
        return AttributeReports(spec.epsilon, sizes, chosen, _int_param(plan, "k", 1),
                                longitudinal)
    if spec.oracle == "matrix":
        rows, chunks = _strategy_spec(plan.params.get("strategy"), spec.cells)
        return _strategy_format(spec.epsilon, chunks, rows, sizes)
    raise DPMarginalsError(f"oracle must be one of {list(KNOWN)}, got {spec.oracle!r}")


def _hash_coefficients(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """The sketch hashes' coefficients: listed by the plan, or (version 1) drawn from its
    ``hash_seed``."""
    listed = plan.params.get("hash_coefficients")
    if listed is None and plan.version == 1:
        coef = sketch_coefficients(_int_param(plan, "hash_seed", 0), _int_param(plan, "g", 1))
        return tuple(tuple(int(c) for c in row) for row in coef)
    if not isinstance(listed, list) or not all(isinstance(r, list) for r in listed):
        raise DPMarginalsError(f"plan params.hash_coefficients must be 3 lists of integers, "
                               f"got {str(listed)[:80]!r}")
    return tuple(tuple(r) for r in listed)


def memoizable(plan: Plan) -> bool:
    """Whether every group of ``plan`` can keep a permanent response (grr, oue, sue, and
    em over those)."""
    def ok(g: int) -> bool:
        spec = plan.groups[g]
        if spec.oracle == "em":
            names = plan.params.get("attribute_oracles")
            return isinstance(names, list) and all(n in (*MEMOIZED, "none") for n in names)
        return spec.oracle in MEMOIZED

    return bool(plan.groups) and all(ok(g) for g in range(plan.m))


def plan_oracles(plan: Plan) -> list[Any]:
    """Every group's oracle or format (:func:`group_oracle`)."""
    if not isinstance(plan, Plan):
        raise DPMarginalsError(f"expected a Plan, got {type(plan).__name__}")
    return [group_oracle(plan, g) for g in range(plan.m)]


def support_sizes(plan: Plan) -> list[int]:
    """The length of every group's support vector (a frequency oracle's: its cells)."""
    return [int(o.size) for o in plan_oracles(plan)]
