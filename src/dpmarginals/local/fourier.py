"""Fourier (Hadamard) methods: FT = InpHT, and MargHT (CALM §3.5; Cormode et al. §4.2-4.3).

**InpHT / FT** (Cormode et al. Alg. 1-2, Lemma 3.7; CALM §3.5 and appendix A.1 as
reconstructed in ``notes/calm-missing-pieces.md`` §5).  A user with bits j in {0,1}^d is
assigned one coefficient index alpha from T = {alpha : 1 <= |alpha| <= k}, computes
s = (-1)^{popcount(alpha & j)} and sends (alpha, b) with b = s w.p. p = e^eps / (1 + e^eps)
and -s otherwise.  The aggregator estimates f_alpha = E[s] by
``sum(b) / (N_alpha (2p - 1))`` (unbiased) and answers a marginal over bits beta by the
inverse Walsh-Hadamard transform ``C[gamma] = 2^-|beta| sum_{alpha <= beta}
(-1)^{popcount(alpha & gamma)} f_alpha`` (f_0 = 1).  CALM's FT and Cormode et al.'s InpHT
are this one algorithm; :class:`FT` differs from :class:`InpHT` only in its name.

**Collection** (:mod:`dpmarginals.protocol.formats`, format ``ht``): the plan has one
group (every attribute) whose support counts the reports per (coefficient, sign), 2 |T|
numbers, and :meth:`InpHT.release` is the estimator above.  A client samples its
coefficient uniformly from T with the OS's randomness (Cormode et al.'s original); the
seeded simulation of :meth:`InpHT.simulate` splits users evenly over the coefficients by a
uniformly random partition instead (as CALM and AM split users into groups: the same
unbiased estimator, a slightly smaller variance since no coefficient is left without
reports).  MargHT's plan has one ``ht`` group per k-way marginal.

Non-binary attributes are binary-encoded (:class:`~.binary_encoding.BinaryEncoding`).
``support="bits"`` (default) collects every coefficient of weight <= k2 over the d2 bits,
as CALM §5.3 does (8 ternary attributes: d2 = 16, k2 = 6, 14,892 coefficients, "14893
Var0"); ``support="attributes"`` collects only coefficients touching at most k attributes
(1,788 for the same data), all a k-way query needs.  Answers drop the cells of invalid
codes (true mass 0), which keeps them unbiased.

**Variance** (f -> 0, our algebra; CALM eq. 6 is the approximation ``sum_{s<=k} C(d, s)
Var0``): each coefficient has ``Var f_alpha <= 1 / ((2p-1)^2 N_alpha)`` with N_alpha ~ n/|T|,
and ``1/(2p-1)^2 = 1 + 4e^eps/(e^eps-1)^2``, i.e. ``n Var0 + 1`` with CALM's OUE Var0.  A
b-bit marginal sums 2^b - 1 coefficients with weight 2^-b per cell, so its expected SSE is
``(1 - 2^-b) |T| / ((2p-1)^2 n)``: for d = 8, k = 3, ``80.5 (Var0 + 1/n)`` against CALM's
93 Var0 (CALM counts the constant coefficient and the 2^k-th term).

**MargHT** (Cormode et al. §4.3): users split over the C(d, k) marginals; within marginal
beta, over its 2^k - 1 non-constant coefficients; no sharing between marginals.  Expected
SSE ``(2^k - 1)^2 C(d, k) / (2^k (2p-1)^2 n)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..core.table import MarginalTable
from ..inference.views import NoisyView
from ..oracles import fwht
from ..protocol import formats
from ..protocol.counts import Counts
from ..protocol.formats import bits_for, group_oracle, rr_keep
from ..protocol.plan import GroupSpec, Plan
from ..synopsis.base import Synopsis
from .binary_encoding import BinaryEncoding
from .collect import assign_groups
from .direct import (
    POSTPROCESS,
    apply_postprocess,
    check_choice,
    check_k,
    check_positive_int,
    check_view_inference,
    every_record,
    release_views,
)

__all__ = [
    "FT",
    "FourierSynopsis",
    "InpHT",
    "MargHT",
    "coefficient_masks",
    "query_masks",
    "rr_keep",
]

SUPPORTS = formats.SUPPORTS


def rr_coefficient_variance(epsilon: float, n: int) -> float:
    """4 e^eps / ((e^eps - 1)^2 n), the variance of one coefficient's estimate from n
    randomized signs, written with e^-eps so that no finite epsilon overflows."""
    t = math.exp(-epsilon)
    return 4 * t / ((1 - t) ** 2 * n)


def coefficient_count(enc: BinaryEncoding, k: int, support: str) -> int:
    """|T| without enumerating it (:func:`~dpmarginals.protocol.formats.coefficient_count`)."""
    return formats.coefficient_count(enc.domain.sizes, k, support)


def coefficient_masks(enc: BinaryEncoding, k: int, support: str) -> np.ndarray:
    """The sorted coefficient set T as int64 bit masks over the encoded code (what the
    protocol's ``ht`` format rebuilds from the plan).

    >>> enc = BinaryEncoding(Domain(("a", "b", "c"), (2, 2, 2)))
    >>> coefficient_masks(enc, 2, "bits").tolist()
    [1, 2, 3, 4, 5, 6]
    """
    return formats.coefficient_masks(enc.domain.sizes, k, support)


def _masks_at(positions: Sequence[int]) -> np.ndarray:
    """The mask with bits at ``positions`` of every local index 0..2^b-1 over b bits
    (``positions[0]`` the local index's most significant bit)."""
    b = len(positions)
    local = np.arange(1 << b, dtype=np.int64)
    gmask = np.zeros(1 << b, dtype=np.int64)
    for pos, gb in enumerate(positions):
        gmask |= ((local >> (b - 1 - pos)) & 1) << gb
    return gmask


def _local_masks(enc: BinaryEncoding, attrs: Sequence[str]) -> np.ndarray:
    """The mask over ``enc``'s code of every local index 0..2^b-1 of the bits of ``attrs``
    (first attribute most significant: the C order of their binary grid)."""
    return _masks_at(enc.global_bits(attrs))


def query_masks(domain: Domain, attrs: Sequence[str]) -> np.ndarray:
    """The coefficients a marginal over ``attrs`` is made of: the bit mask over the code of
    ``domain``'s binary encoding of every local index 0..2^b-1 of the bits of ``attrs``
    (first attribute most significant).

    >>> query_masks(Domain(("a", "b", "c"), (2, 2, 2)), ["c", "a"]).tolist()
    [0, 1, 4, 5]
    """
    return _local_masks(BinaryEncoding(domain), attrs)


@functools.lru_cache(maxsize=256)
def _grid_masks(sizes: tuple[int, ...]) -> np.ndarray:
    """:func:`_local_masks` of a group of attributes of ``sizes`` over its own code (the
    ``ht`` format's: first attribute least significant), cached per shape."""
    bits = formats.attribute_bits(sizes)
    offsets = np.concatenate(([0], np.cumsum(bits)[:-1])).astype(int).tolist()
    out = _masks_at([off + t for off, nb in zip(offsets, bits, strict=True)
                     for t in reversed(range(nb))])
    out.setflags(write=False)
    return out


def _ht_oracles(plan: Plan, counts: Counts) -> list[Any]:
    """Every group's ``ht`` format, once the counts are checked against them."""
    bad = [g.oracle for g in plan.groups if g.oracle != "ht"]
    if bad:
        raise DPMarginalsError(f"{plan.method}: a group reports through {bad[0]!r}, not "
                               "Hadamard coefficients (ht)")
    oracles = formats.plan_oracles(plan)
    counts.check([o.size for o in oracles])
    return oracles


def _rr_estimates(by_bit: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """(f, N) per coefficient: f = (N+ - N-) / (N (2p - 1)) (Cormode et al. Alg. 2), 0 for a
    coefficient without reports."""
    reported = by_bit.sum(axis=1)
    signed = by_bit[:, 0] - by_bit[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(reported > 0, signed / (reported * (2 * p - 1)), 0.0)
    return values, reported


def _expected_sse_query(cells: int, b: int, per_coeff_users: float, p: float) -> float:
    """Expected SSE of a b-bit marginal with ``cells`` valid cells (f -> 0 bound)."""
    if b == 0:
        return 0.0
    return cells * ((1 << b) - 1) / (4.0**b * (2 * p - 1) ** 2 * per_coeff_users)


@dataclass(eq=False)
class FourierSynopsis(Synopsis):
    """Estimated Hadamard coefficients f_alpha (alpha as bit masks over the binary encoding).

    ``counts[i]`` is the number of reports behind ``values[i]``.  Marginals come from the
    inverse Walsh-Hadamard transform over the query's bits (invalid codes dropped).
    """

    kind: ClassVar[str] = "fourier"
    domain: Domain
    masks: np.ndarray
    values: np.ndarray
    counts: np.ndarray
    method: str = "inp_ht"
    info: dict[str, Any] = field(default_factory=dict)
    postprocess: str = "none"

    def __post_init__(self) -> None:
        self.masks = np.asarray(self.masks, dtype=np.int64)
        self.values = np.asarray(self.values, dtype=np.float64)
        self.counts = np.asarray(self.counts, dtype=np.int64)
        if not (self.masks.shape == self.values.shape == self.counts.shape):
            raise DPMarginalsError("masks, values and counts must have the same length")
        if self.masks.size > 1 and (np.diff(self.masks) <= 0).any():
            order = np.argsort(self.masks)
            self.masks, self.values, self.counts = (self.masks[order], self.values[order],
                                                    self.counts[order])
        check_choice(self.postprocess, "postprocess", POSTPROCESS)

    def coefficients(self, global_masks: np.ndarray) -> np.ndarray:
        """f_alpha for each mask (f_0 = 1); a mask not collected is an error."""
        pos = np.searchsorted(self.masks, global_masks)
        pos_c = np.minimum(pos, max(self.masks.size - 1, 0))
        found = (pos < self.masks.size) & (self.masks[pos_c] == global_masks)
        missing = ~found & (global_masks != 0)
        if missing.any():
            raise DPMarginalsError(
                f"the {self.method} synopsis has no coefficient for bit mask "
                f"{int(global_masks[missing][0]):#x}: it was collected for smaller marginals "
                f"(k = {self.info.get('k')}); collect with a larger k")
        return np.where(global_masks == 0, 1.0, np.where(found, self.values[pos_c], 0.0))

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        attrs = tuple(attrs)
        if not attrs:
            raise DPMarginalsError("a marginal needs at least one attribute")
        sub = self.domain.project(attrs)
        enc = BinaryEncoding(self.domain)
        b = len(enc.global_bits(attrs))
        if b == 0:
            return MarginalTable(sub, np.ones(sub.shape))
        cells = fwht(self.coefficients(_local_masks(enc, attrs))) / float(1 << b)
        values = enc.decode(attrs, cells)
        return MarginalTable(sub, apply_postprocess(values, self.postprocess))

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "postprocess": self.postprocess,
                "masks": self.masks.tolist(), "values": self.values.tolist(),
                "counts": self.counts.tolist()}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        return cls(domain, np.asarray(payload["masks"], np.int64),
                   np.asarray(payload["values"], float), np.asarray(payload["counts"], np.int64),
                   method, dict(payload.get("info", {})), str(payload.get("postprocess", "none")))


@dataclass
class InpHT:
    """Input Hadamard transform (Cormode et al. §4.2) = CALM's FT (§3.5); module docstring.

    ``per_user``: the Fourier methods always randomize every user's report (it is O(n)
    vectorized work); with ``per_user=True`` and ``rng=None`` the randomization draws from
    the OS CSPRNG.  ``max_coefficients`` bounds |T| (memory and plan size).

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> params = InpHT(epsilon=1.0, k=3).plan(dom, 2**16).params
    >>> params["coefficients"], params["variance_factor"], params["report_bits"]
    (92, 93, 8)
    """

    epsilon: float
    k: int = 3
    support: str = "bits"
    per_user: bool = False
    postprocess: str = "none"
    max_coefficients: int = 2**22
    name: ClassVar[str] = "inp_ht"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.support, "support", SUPPORTS)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)
        self.max_coefficients = check_positive_int(self.max_coefficients, "max_coefficients")

    def _check(self, domain: Domain, n: int) -> tuple[BinaryEncoding, int]:
        d = len(domain)
        check_k(self.k, d)
        enc = BinaryEncoding(domain)
        count = coefficient_count(enc, self.k, self.support)
        if count == 0:
            raise DPMarginalsError("every attribute has a single value: nothing to estimate")
        if count > self.max_coefficients:
            raise DPMarginalsError(
                f"{self.name} needs {count:,} Fourier coefficients for k = {self.k} over "
                f"{enc.d2} bits (over the limit max_coefficients = {self.max_coefficients:,})"
                f" and at least as many users; use calm")
        if n < count:
            raise DPMarginalsError(
                f"{self.name} needs at least {count:,} users (one per Fourier coefficient of "
                f"weight <= {enc.k_bits(self.k)} over {enc.d2} bits); the data has {n:,}")
        if enc.d2 > 62:
            raise DPMarginalsError(f"{self.name} supports at most 62 encoded bits, got {enc.d2}")
        return enc, count

    def plan(self, domain: Domain, n: int) -> Plan:
        """One group of every attribute reporting a Hadamard coefficient (format ``ht``);
        T is determined by (domain, k, support), all public."""
        enc, count = self._check(domain, n)
        p = rr_keep(self.epsilon)
        var0 = rr_coefficient_variance(self.epsilon, n)
        if self.support == "bits":
            factor = sum(math.comb(enc.d2, s) for s in range(enc.k_bits(self.k) + 1))
        else:
            factor = count + 1
        sse = _mean_over_queries(domain, self.k, lambda cells, b: _expected_sse_query(
            cells, b, n / count, p))
        params = {"k": self.k, "n": int(n), "support": self.support, "coefficients": count,
                  "k_bits": enc.k_bits(self.k), "d_bits": enc.d2, "p": p,
                  "report_bits": bits_for(count) + 1, "table2_bits": enc.d2 + 1,
                  "var0": var0, "variance_factor": factor, "expected_sse": sse}
        group = GroupSpec(tuple(domain.attributes), "ht", self.epsilon, domain.cells())
        return Plan(self.name, self.epsilon, domain, (group,), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> FourierSynopsis:
        """Plan, simulated collection (:meth:`simulate`), release."""
        plan = self.plan(data.domain, data.n)
        return self.release(plan, self.simulate(data, plan, rng=rng))

    def simulate(self, data: Dataset, plan: Plan, *, rng: RNGLike = None) -> Counts:
        """The Counts of ``plan``'s collection with every row of ``data`` as one user, each
        report made by the ``ht`` format's randomizer, as a device makes it (a coefficient
        uniform over T, its sign through eps-RR; OS entropy when ``per_user=True`` and
        ``rng`` is None)."""
        fmt = group_oracle(plan, 0)
        src = client_rng(None) if (self.per_user and rng is None) else simulation_rng(rng)
        codes = fmt.encode(data.project(plan.domain.attributes).codes)
        return Counts([fmt.support(fmt.perturb(codes, rng=src))], [data.n])

    def release(self, plan: Plan, counts: Counts) -> FourierSynopsis:
        """Every coefficient of T estimated from the reports per (coefficient, sign):
        f_alpha = (N+ - N-) / (N_alpha (2p - 1)), unbiased (Cormode et al. Alg. 2).  A
        coefficient without reports (possible when clients sample theirs) is estimated 0
        and counted in ``info["unreported_coefficients"]``."""
        if plan.m != 1:
            raise DPMarginalsError(f"{self.name} releases a plan of one ht group, got {plan.m}")
        (oracle,) = _ht_oracles(plan, counts)
        values, reported = _rr_estimates(counts.supports[0].reshape(-1, 2), oracle.p)
        info = {"plan_hash": plan.hash, **plan.params}
        if (reported == 0).any():
            info["unreported_coefficients"] = int((reported == 0).sum())
        return FourierSynopsis(plan.domain, oracle.masks, values, reported, self.name, info,
                               self.postprocess)

    def output_distribution(self, domain: Domain) -> np.ndarray:
        """P[(alpha, b) | record] for every record of ``domain`` (rows: cells in C order;
        columns: the ``ht`` format's outputs, 2 i + b over the coefficient set T)."""
        count = coefficient_count(BinaryEncoding(domain), self.k, self.support)
        fmt = group_oracle(self.plan(domain, count), 0)
        codes = fmt.encode(every_record(domain).codes)
        return np.stack([fmt.output_distribution(int(c)) for c in codes])


@dataclass
class FT(InpHT):
    """CALM's FT (§3.5): the same algorithm as :class:`InpHT`, under CALM's name."""

    name: ClassVar[str] = "ft"


def _mean_over_queries(domain: Domain, k: int, sse: Any, limit: int = 20_000) -> float | None:
    """Mean of ``sse(valid cells, bits)`` over the k-sets of attributes (None if too many)."""
    enc = BinaryEncoding(domain)
    if math.comb(len(domain), k) > limit:
        return None
    vals = [sse(math.prod(domain.sizes[i] for i in idx), sum(enc.bits[i] for i in idx))
            for idx in combinations(range(len(domain)), k)]
    return float(np.mean(vals))


@dataclass
class MargHT:
    """Hadamard transform of a random marginal (Cormode et al. §4.3); module docstring.
    ``inference``: as :class:`~dpmarginals.local.direct.AM`'s.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> params = MargHT(epsilon=1.0, k=3).plan(dom, 2**16).params
    >>> params["report_bits"], params["table2_bits"]
    (10, 12)
    """

    epsilon: float
    k: int = 3
    per_user: bool = False
    postprocess: str = "none"
    inference: str = "views"
    name: ClassVar[str] = "marg_ht"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)
        check_view_inference(self)

    def plan(self, domain: Domain, n: int) -> Plan:
        """One group per k-way marginal, each reporting one of its 2^b - 1 non-constant
        Hadamard coefficients (format ``ht``)."""
        d = len(domain)
        k = check_k(self.k, d)
        enc = BinaryEncoding(domain)
        m = math.comb(d, k)
        groups, widths = [], []
        for idx in combinations(range(d), k):
            attrs = tuple(domain.attributes[i] for i in idx)
            groups.append(GroupSpec(attrs, "ht", self.epsilon, domain.project(attrs).cells()))
            widths.append(sum(enc.bits[i] for i in idx))
            if not widths[-1]:
                raise DPMarginalsError(f"the marginal over {list(attrs)} has a single cell")
        most = (1 << max(widths)) - 1
        if n // m < most:
            raise DPMarginalsError(
                f"{self.name} needs at least C({d}, {k}) x {most} = {m * most:,} users (one "
                f"per non-constant coefficient of each {k}-way marginal); the data has {n:,}")
        p = rr_keep(self.epsilon)
        sse = float(np.mean([_expected_sse_query(g.cells, b, (n / m) / ((1 << b) - 1), p)
                             for g, b in zip(groups, widths, strict=True)]))
        params = {"k": k, "n": int(n), "m": m, "p": p,
                  "report_bits": bits_for(m) + max(widths) + 1,
                  "table2_bits": enc.d2 + enc.k_bits(k) + 1,
                  "var0": rr_coefficient_variance(self.epsilon, n),
                  "variance_factor": None, "expected_sse": sse}
        return Plan(self.name, self.epsilon, domain, tuple(groups), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        """Plan, simulated collection (:meth:`simulate`), release."""
        plan = self.plan(data.domain, data.n)
        return self.release(plan, self.simulate(data, plan, rng=rng))

    def simulate(self, data: Dataset, plan: Plan, *, rng: RNGLike = None) -> Counts:
        """The Counts of ``plan``'s collection with every row of ``data`` as one user: users
        split evenly over the marginals (a random partition), each report made by the group's
        ``ht`` format as a device makes it (a coefficient uniform over the marginal's
        2^b - 1, its sign through eps-RR)."""
        sim = simulation_rng(rng)
        src = client_rng(None) if (self.per_user and rng is None) else sim
        data = data.project(plan.domain.attributes)
        groups = assign_groups(data.n, plan.m, rng=sim)
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(plan.m + 1))
        supports = []
        for g, (spec, fmt) in enumerate(zip(plan.groups, formats.plan_oracles(plan),
                                            strict=True)):
            members = order[bounds[g] : bounds[g + 1]]
            values = data.codes[members][:, list(plan.domain.indices(spec.attributes))]
            supports.append(fmt.support(fmt.perturb(fmt.encode(values), rng=src)))
        return Counts(supports, np.diff(bounds))

    def release(self, plan: Plan, counts: Counts) -> Synopsis:
        """Each marginal's coefficients estimated as InpHT's, inverted by the Walsh-Hadamard
        transform (invalid codes dropped), released by ``inference``.  Every group needs
        reports; a coefficient without any is estimated 0 with the variance of one report."""
        oracles = _ht_oracles(plan, counts)
        empty = np.flatnonzero(counts.users <= 0)
        if empty.size:
            raise DPMarginalsError(f"{plan.method}: {empty.size} of the plan's {plan.m} groups "
                                   f"have no reports yet (group {int(empty[0])} first); every "
                                   "group must report before the release")
        views = []
        enc = BinaryEncoding(plan.domain)
        for g, (spec, oracle) in enumerate(zip(plan.groups, oracles, strict=True)):
            b = len(enc.global_bits(spec.attributes))
            grid = _grid_masks(tuple(plan.domain.size(a) for a in spec.attributes))[1:]
            by_bit = counts.supports[g].reshape(-1, 2)
            in_order = by_bit[np.searchsorted(oracle.masks, grid)]  # C order of the grid
            values, reported = _rr_estimates(in_order, oracle.p)
            coeffs = np.ones(1 << b)
            coeffs[1:] = values
            var = float((1.0 / ((2 * oracle.p - 1) ** 2 * np.maximum(reported, 1))).sum()
                        / 4.0**b)
            table = enc.decode(spec.attributes, fwht(coeffs) / float(1 << b))
            views.append(NoisyView(spec.attributes, table, int(counts.users[g]), var))
        # no population: a coefficient's reporters are a sample of the n users, and
        # 1 / ((2p - 1)^2 R) bounds its variance about the population's coefficient, that
        # sampling included (1 - (2p - 1)^2 theta^2 over (2p - 1)^2 R)
        return release_views(plan.domain, plan, views, self.name, self.postprocess,
                             self.inference)

    def output_distribution(self, domain: Domain) -> np.ndarray:
        """P[(marginal beta, alpha, b) | record] for every record of ``domain`` (rows: cells
        in C order), Cormode et al. §4.3: beta uniform over the plan's C(d, k) marginals (a
        random partition, independent of the record), then the group's ``ht`` format.
        Columns: beta by beta in plan order, each block the format's outputs."""
        plan = self.plan(domain, 2**40)  # the groups do not depend on n
        records = every_record(domain).codes
        blocks = []
        for spec, fmt in zip(plan.groups, formats.plan_oracles(plan), strict=True):
            codes = fmt.encode(records[:, list(domain.indices(spec.attributes))])
            blocks.append(np.stack([fmt.output_distribution(int(c)) for c in codes]))
        return np.concatenate(blocks, axis=1) / plan.m
