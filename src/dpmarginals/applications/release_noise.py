"""The noise of a two-way table answered by a local-DP release, read off its synopsis.

A local release answers a measured pair (A, B) with a weighted average of unbiased
estimates, each made by a disjoint group of users; :func:`release_noise` rebuilds that
average as a :class:`PairRelease` (a :class:`~.noise_models.NoiseModel`) from what the
synopsis records -- which groups reported A and B together, their oracle, epsilon and
number of users -- so the noise-aware tests can simulate the release under independence:

=====================================  ===================================================
synopsis (methods)                     the pair's table
=====================================  ===================================================
full table (FC, InpRR, InpPS, InpOLH)  projection of one group's full table
marginals (AM, MargRR, MargPS, MargHT) the views that contain the pair, weighted
                                       ``1 / (C Var)`` as the synopsis answers
fourier (FT, InpHT)                    inverse Hadamard transform of the pair's
                                       coefficients, each from its own users
views (CALM)                           the covering groups, weighted ``1 / (C Var)`` as
                                       consistency pools them (approximate: below)
=====================================  ===================================================

Every group is simulated with its oracle's exact aggregate sampler
(``oracle.sample_support``), on the group's whole marginal with the attributes outside the
pair held at their first value: for GRR, OUE, SUE and OLH (under the ideal-hash law its
sampler draws) a report's projection on the pair depends only on the user's pair cell, so
this is the release's exact law; for Hadamard response (HR) the mean and covariance are
exact and the higher moments differ by O(1/sqrt(n)).  A Hadamard coefficient's estimate
is a binomial count of kept signs among its users (exact).  MargHT records its users per
marginal, not per coefficient; they were split evenly, so each coefficient gets
``users / (2^b - 1)`` (exact up to one user).

What is refused, with the reason: a pair no group reported together (the table is a
reconstruction: no test of its association is valid), InpHTCMS (hash collisions tie the
pair's noise to every cell), graphical-model and binary-encoded releases (their answer is
a fitted model, not an average of measurements), PriView (its consistency clips whole
views), the Uniform baseline.  The EM methods need no model: a report of every attribute
through its own channel keeps independence, so the test runs on the reports themselves
(:func:`reported_pair_counts`).

CALM is approximate: consistency also pools the one-way margins of A and B with groups
that did not report the pair and clips views at 0 (Norm-Sub); both leave the pair's
interaction -- what the test measures -- to the covering groups, and the simulated margins
are noisier than the released ones, which makes the test conservative, not liberal
(measured in tests/test_association.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError, check_positive_int
from ..core.randomness import RNGLike, simulation_rng
from ..local.binary_encoding import BinaryEncoding
from ..local.direct import FullTableSynopsis, MarginalsSynopsis
from ..local.em import EMSynopsis
from ..local.fourier import FourierSynopsis, query_masks
from ..oracles import FrequencyOracle, fwht, make_oracle
from ..protocol.formats import rr_keep
from ..synopsis.base import ViewSynopsis
from .noise_models import NoiseModel, check_probabilities

__all__ = ["HadamardGroup", "OracleGroup", "PairRelease", "release_noise",
           "reported_pair_counts"]

ONE_HOT = ("grr",)                  # one report supports one value: multinomial counts
INDEPENDENT = ("oue", "sue", "olh")  # every value supported independently (OLH: ideal hash)


@dataclass(frozen=True)
class OracleGroup:
    """``users`` people reporting their cell of a marginal of ``shape`` through ``oracle``;
    the pair is the axes ``axes`` (first, second attribute) of that marginal."""

    oracle: FrequencyOracle
    users: int
    shape: tuple[int, ...]
    axes: tuple[int, int]

    def _lifted(self, pair_shape: tuple[int, int]) -> np.ndarray:
        """The group cell of each pair cell, every other attribute at its first value."""
        rows, cols = np.indices(pair_shape)
        coords = [np.zeros(rows.size, dtype=np.int64)] * len(self.shape)
        coords[self.axes[0]], coords[self.axes[1]] = rows.ravel(), cols.ravel()
        return np.ravel_multi_index(coords, self.shape)

    def _project(self, table: np.ndarray) -> np.ndarray:
        other = tuple(i for i in range(len(self.shape)) if i not in self.axes)
        pair = table.reshape(self.shape).sum(axis=other)
        return pair if self.axes[0] < self.axes[1] else pair.T

    def estimates(self, probabilities: np.ndarray, replicates: int,
                  gen: np.random.Generator) -> np.ndarray:
        """``replicates`` of the group's unbiased pair table (fractions)."""
        p = np.asarray(probabilities, dtype=np.float64)
        cells = self._lifted(p.shape)
        true = gen.multinomial(self.users, p.ravel(), size=replicates)
        out = np.empty((replicates, *p.shape))
        counts = np.zeros(math.prod(self.shape), dtype=np.int64)
        for i in range(replicates):
            counts[cells] = true[i]
            support = self.oracle.sample_support(counts, rng=gen)
            out[i] = self._project(self.oracle.estimate(support, self.users))
        return out

    def covariance(self, probabilities: np.ndarray) -> np.ndarray:
        """The covariance of the group's pair table (fractions, C order): per user,
        ``E Cov(s | x) / (p - q)^2 + diag(f) - f f^T`` with ``s`` the report's support summed
        over each pair cell's B = |group| / |pair| cells (law of total covariance)."""
        f = np.asarray(probabilities, dtype=np.float64).ravel()
        p, q, name = self.oracle.p, self.oracle.q, self.oracle.name
        block = math.prod(self.shape) / f.size
        if name in ONE_HOT:  # s = one-hot with mean B q + (p - q) [cell = x]
            mean = block * q + (p - q) * f
            second = (block**2 * q**2 + block * q * (p - q) * (f[:, None] + f[None, :])
                      + (p - q) ** 2 * np.diag(f))
            noise = np.diag(mean) - second
        elif name in INDEPENDENT:
            noise = np.diag(block * q * (1 - q) + f * (p * (1 - p) - q * (1 - q)))
        else:
            raise DPMarginalsError(f"no analytic covariance for a {name!r} group; use the "
                                   "Monte-Carlo test")
        return (noise / (p - q) ** 2 + np.diag(f) - np.outer(f, f)) / self.users

    def describe(self) -> str:
        return f"{self.users:,} users through {self.oracle.name.upper()} on {self.shape}"


@dataclass(frozen=True)
class HadamardGroup:
    """Users split over the pair's non-constant Hadamard coefficients (InpHT, MargHT):
    ``users[a]`` reported coefficient ``a`` (local index over the pair's bits, first
    attribute most significant; ``users[0]`` unused) by eps-RR keeping the sign w.p.
    ``keep``; ``bits``/``sizes`` of the two attributes."""

    keep: float
    users: np.ndarray
    bits: tuple[int, int]
    sizes: tuple[int, int]

    def _coefficients(self, probabilities: np.ndarray) -> np.ndarray:
        grid = np.zeros((1 << self.bits[0], 1 << self.bits[1]))
        grid[: self.sizes[0], : self.sizes[1]] = probabilities
        return fwht(grid.ravel())

    def _decode(self, coefficients: np.ndarray) -> np.ndarray:
        cells = fwht(coefficients) / coefficients.shape[-1]
        grid = cells.reshape(*cells.shape[:-1], 1 << self.bits[0], 1 << self.bits[1])
        return grid[..., : self.sizes[0], : self.sizes[1]]

    def estimates(self, probabilities: np.ndarray, replicates: int,
                  gen: np.random.Generator) -> np.ndarray:
        """Each coefficient's users draw signs of mean f_a, kept w.p. ``keep``: the kept
        '+' count is Binomial(N_a, (1 + (2 keep - 1) f_a) / 2) (Cormode et al. Alg. 2)."""
        f = self._coefficients(probabilities)
        n_a, gain = np.asarray(self.users[1:], dtype=np.int64), 2 * self.keep - 1
        plus = gen.binomial(n_a, np.clip((1 + gain * f[1:]) / 2, 0, 1),
                            size=(replicates, n_a.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            fhat = np.where(n_a > 0, (2 * plus - n_a) / (n_a * gain), 0.0)
        return self._decode(np.concatenate([np.ones((replicates, 1)), fhat], axis=1))

    def covariance(self, probabilities: np.ndarray) -> np.ndarray:
        """Independent coefficients, Var f_a = (1 - (2 keep - 1)^2 f_a^2) / (N_a (2 keep - 1)^2)."""
        f = self._coefficients(probabilities)
        n_a, gain = np.asarray(self.users, dtype=np.float64), 2 * self.keep - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            var = np.where(n_a > 0, (1 - gain**2 * f**2) / (n_a * gain**2), 0.0)
        var[0] = 0.0
        basis = self._decode(np.eye(f.size)).reshape(f.size, -1)  # row a: coefficient a's cells
        return basis.T @ np.diag(var) @ basis

    def describe(self) -> str:
        return (f"{int(np.sum(self.users)):,} users over {len(self.users) - 1} Hadamard "
                f"coefficients, p = {self.keep:.4g}")


Part = OracleGroup | HadamardGroup


@dataclass(frozen=True)
class PairRelease(NoiseModel):
    """A released pair table: ``sum_g w_g T_g / sum_g w_g`` over independent groups (``parts``
    of ``(w_g, group)``), reported as counts of the release's ``n`` people."""

    parts: tuple[tuple[float, Part], ...]
    n: int
    attributes: tuple[str, str]
    method: str

    def _check(self, n: int) -> None:
        if check_positive_int(n, "n") != self.n:
            raise DPMarginalsError(f"n = {n} does not match the release, made from {self.n:,} "
                                   "users")

    def simulate(self, probabilities: np.ndarray, n: int, replicates: int, *,
                 rng: RNGLike = None) -> np.ndarray:
        self._check(n)
        p = check_probabilities(probabilities)
        gen = simulation_rng(rng)
        replicates = check_positive_int(replicates, "replicates")
        total = sum(w for w, _ in self.parts)
        return self.n * sum(w * part.estimates(p, replicates, gen)
                            for w, part in self.parts) / total

    def covariance(self, probabilities: np.ndarray, n: int) -> np.ndarray:
        self._check(n)
        p = check_probabilities(probabilities)
        total = sum(w for w, _ in self.parts)
        return self.n**2 * sum((w / total) ** 2 * part.covariance(p) for w, part in self.parts)

    def describe(self) -> str:
        groups = "; ".join(part.describe() for _, part in self.parts)
        return f"{self.method} release of {', '.join(self.attributes)}: {groups}"


def _pair(synopsis: Any, attributes: Sequence[str]) -> tuple[str, str]:
    attrs = tuple(attributes)
    if len(attrs) != 2:
        raise DPMarginalsError(f"give exactly two attributes, got {list(attrs)}")
    synopsis.domain.project(attrs)  # unknown or repeated attributes are errors
    return attrs  # type: ignore[return-value]


def _collection(synopsis: Any, key: str) -> list[dict[str, Any]]:
    groups = (getattr(synopsis, "info", None) or {}).get(key)
    if not groups or "n" not in synopsis.info:
        raise DPMarginalsError(
            f"this {synopsis.method} synopsis does not record which users reported what "
            f"(info[{key!r}]); re-run the release with this version of dpmarginals")
    return list(groups)


def _oracle_group(domain: Any, group: dict[str, Any], attrs: tuple[str, str]) -> OracleGroup:
    group_attrs = tuple(group["attributes"])
    shape = domain.project(group_attrs).shape
    oracle = make_oracle(group["oracle"], float(group["epsilon"]), math.prod(shape))
    return OracleGroup(oracle, int(group["users"]), shape,
                       (group_attrs.index(attrs[0]), group_attrs.index(attrs[1])))


def _weight(domain: Any, group_attrs: Sequence[str], attrs: Sequence[str],
            variance: float) -> float:
    """``1 / (C Var)``: C the group cells summed per pair cell (CALM §4.4's weights)."""
    summed = math.prod(domain.size(a) for a in group_attrs if a not in attrs)
    return 1.0 / (summed * max(variance, 1e-300))


def _hadamard(domain: Any, attrs: tuple[str, str], keep: float,
              users: np.ndarray) -> HadamardGroup:
    enc = BinaryEncoding(domain)
    bits = tuple(len(enc.global_bits([a])) for a in attrs)
    return HadamardGroup(keep, users, bits, tuple(domain.size(a) for a in attrs))  # type: ignore


def _full_table(synopsis: FullTableSynopsis, attrs: tuple[str, str]) -> PairRelease:
    if synopsis.method == "inp_htcms":
        raise DPMarginalsError("InpHTCMS hashes the full table into a sketch: hash collisions "
                               "tie a pair's noise to every cell, so there is no noise model "
                               "of the pair to test against")
    (group,) = _collection(synopsis, "collection")
    part = _oracle_group(synopsis.domain, group, attrs)
    return PairRelease(((1.0, part),), int(synopsis.info["n"]), attrs, synopsis.method)


def _marginals(synopsis: MarginalsSynopsis, attrs: tuple[str, str]) -> PairRelease:
    groups = _collection(synopsis, "collection")
    domain, parts = synopsis.domain, []
    for (view_attrs, _), variance, group in zip(synopsis.views, synopsis.variances or [],
                                               groups, strict=True):
        if not set(attrs) <= set(view_attrs):
            continue
        weight = _weight(domain, view_attrs, attrs, variance)
        if group["oracle"] == "ht":  # MargHT: the group's users split over its coefficients
            coefficients = (1 << len(BinaryEncoding(domain).global_bits(view_attrs))) - 1
            pair_bits = len(BinaryEncoding(domain).global_bits(attrs))
            users = np.full(1 << pair_bits, round(int(group["users"]) / coefficients))
            parts.append((weight, _hadamard(domain, attrs, rr_keep(float(group["epsilon"])),
                                            users)))
        else:
            parts.append((weight, _oracle_group(domain, group, attrs)))
    if not parts:
        raise DPMarginalsError(f"{synopsis.method} collected no marginal containing "
                               f"{list(attrs)}: there is nothing to test")
    return PairRelease(tuple(parts), int(synopsis.info["n"]), attrs, synopsis.method)


def _fourier(synopsis: FourierSynopsis, attrs: tuple[str, str]) -> PairRelease:
    masks = query_masks(synopsis.domain, attrs)
    synopsis.coefficients(masks)  # a coefficient not collected is an error
    users = np.zeros(masks.size, dtype=np.int64)
    users[1:] = synopsis.counts[np.searchsorted(synopsis.masks, masks[1:])]
    part = _hadamard(synopsis.domain, attrs, float(synopsis.info["p"]), users)
    return PairRelease(((1.0, part),), int(synopsis.info["n"]), attrs, synopsis.method)


def _views(synopsis: ViewSynopsis, attrs: tuple[str, str]) -> PairRelease:
    if synopsis.info.get("model") == "central":
        raise DPMarginalsError(
            f"{synopsis.method} is central: its views are clipped at 0 as a whole "
            "(consistency, Norm-Sub), so the pair's noise depends on the other attributes; "
            "test the noisy counts of a measured table with chi_squared_test(counts, n, "
            "noise=LaplaceNoise(scale, discrete=True)) instead")
    groups = [g for g in _collection(synopsis, "groups") if set(attrs) <= set(g["attributes"])]
    if not groups:
        measured = sorted({tuple(g["attributes"]) for g in synopsis.info["groups"]})
        raise DPMarginalsError(
            f"no group of users reported {attrs[0]} and {attrs[1]} together (measured: "
            f"{'; '.join(', '.join(m) for m in measured)}): the released table is "
            "reconstructed by maximum entropy, which builds in the associations of the "
            "measured views only, so no test of its association is valid")
    parts = []
    for group in groups:
        part = _oracle_group(synopsis.domain, group, attrs)
        variance = float(part.oracle.variance(part.users))
        parts.append((_weight(synopsis.domain, group["attributes"], attrs, variance), part))
    return PairRelease(tuple(parts), int(synopsis.info["n"]), attrs, synopsis.method)


def release_noise(synopsis: Any, attributes: Sequence[str]) -> PairRelease:
    """How ``synopsis`` released its table over the two ``attributes`` (module docstring);
    a clear error says why when it cannot be rebuilt."""
    attrs = _pair(synopsis, attributes)
    for kind, build in ((FullTableSynopsis, _full_table), (MarginalsSynopsis, _marginals),
                        (FourierSynopsis, _fourier), (ViewSynopsis, _views)):
        if isinstance(synopsis, kind):
            return build(synopsis, attrs)  # type: ignore[operator]
    if isinstance(synopsis, EMSynopsis):
        raise DPMarginalsError(f"{synopsis.method}'s reports are tested directly: use "
                               "reported_pair_counts or independence_test")
    method = getattr(synopsis, "method", type(synopsis).__name__)
    raise DPMarginalsError(
        f"no noise model of a {method} release ({type(synopsis).__name__}): its answer is "
        "fitted by a model or measures nothing, so the noise-aware test cannot simulate it; "
        "noise=None runs the paper's noise-unaware test (its level is not alpha)")


def reported_pair_counts(synopsis: EMSynopsis, attributes: Sequence[str]) -> np.ndarray:
    """The users' reported classes of the two ``attributes`` (rows: the first), counted.

    Each attribute went through its own channel (eps/d randomized response or unary
    encoding), so the reported pair has law ``K_A P K_B^T``: a product whenever P is.  Under
    independence the reports are independent draws from a product table, and Pearson's
    test of them is the classical one (Gaboardi & Rogers, ICML 2018, test local randomized
    response reports this way)."""
    attrs = _pair(synopsis, attributes)
    found = next(((a, h) for a, h in synopsis.views if set(attrs) <= set(a)), None)
    if found is None:
        raise DPMarginalsError(f"{synopsis.method} kept no reports' histogram containing "
                               f"{list(attrs)}")
    view_attrs, hist = found
    axes = [view_attrs.index(a) for a in attrs]
    other = tuple(i for i in range(len(view_attrs)) if i not in axes)
    pair = np.asarray(hist).sum(axis=other)
    return pair if axes[0] < axes[1] else pair.T
