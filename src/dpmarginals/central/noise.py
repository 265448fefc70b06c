"""Noise for the central DP marginals: discrete Gaussian, DP percentile, exact tails.

Two sources, kept apart on purpose (see :func:`noise_source`):

* :class:`OpenDPNoise` -- the **release** path.  The discrete Gaussian is OpenDP's
  ``make_gaussian`` on integer vectors (an exact sampler after Canonne–Kamath–Steinke
  2020 on the OS's randomness; no floating-point noise, so no Mironov 2012 attack).  The
  percentile is OpenDP's ``make_private_quantile``: the exponential mechanism for
  quantiles of Smith 2011 (score ``|#(x < c) - alpha (n - #(x = c))|``, sampled by
  report-noisy-max with Gumbel noise), pure ``epsilon``-DP under adding/removing one
  value.  Uniform draws (contribution bounding) come from :class:`SecureRandom`.
* :class:`SimulationNoise` -- an explicitly **non-private** seeded simulation (tests,
  experiments): the same distributions sampled with a seeded numpy Generator.  Results
  made with it are labelled ``private=False``.

The module also computes the discrete Gaussian's exact tail (``dg_log_sf``) so that
thresholds are set for the noise actually used, and samples from that tail for the
"implicit" path of :mod:`.dp_marginals` (candidates no user holds, never materialised).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
from scipy import special, stats

from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, SecureRandom, simulation_rng

__all__ = [
    "NoiseSource",
    "OpenDPNoise",
    "SimulationNoise",
    "apply_to_vector",
    "dg_log_sf",
    "dg_sf",
    "dg_threshold",
    "gaussian_measurement",
    "laplace_measurement",
    "noise_source",
    "percentile_candidates",
    "sample_binomial",
    "sample_dg_tail",
]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# -- exact tail of the discrete Gaussian N_Z(0, s^2): P(Z = z) ∝ exp(-z^2 / (2 s^2)) ------
def _dg_log_norm(scale: float) -> float:
    """``log sum_{z in Z} exp(-z^2 / (2 s^2))``.

    For ``s >= 2`` by Poisson summation, ``s sqrt(2 pi) (1 + 2 sum_k exp(-2 pi^2 s^2 k^2))``,
    whose ``k >= 2`` terms are below 1e-300; otherwise by direct summation.
    """
    if scale >= 2:
        correction = math.log1p(2 * math.exp(-2 * math.pi**2 * scale**2))
        return math.log(scale) + _LOG_SQRT_2PI + correction
    z = np.arange(-40, 41, dtype=np.float64)
    return float(special.logsumexp(-(z**2) / (2 * scale**2)))


def dg_log_sf(t: int, scale: float) -> float:
    """``log P(Z > t)`` for ``Z ~ N_Z(0, scale^2)`` and an integer ``t`` (exact up to rounding).

    >>> round(math.exp(dg_log_sf(0, 5.0)), 6)  # P(Z > 0) = (1 - P(Z = 0)) / 2
    0.460106
    """
    t = int(t)
    if scale <= 0:
        raise DPMarginalsError(f"noise scale must be > 0, got {scale!r}")
    if t < 0:  # P(Z > t) = 1 - P(Z <= t) = 1 - P(Z >= -t) = 1 - P(Z > -t - 1)
        return math.log1p(-math.exp(dg_log_sf(-t - 1, scale)))
    span = math.ceil(12 * scale) + 2  # later terms are < exp(-72) of the first
    z = np.arange(t + 1, t + 1 + span, dtype=np.float64)
    return float(special.logsumexp(-(z**2) / (2 * scale**2))) - _dg_log_norm(scale)


def dg_sf(t: int, scale: float) -> float:
    """``P(Z > t)`` for ``Z ~ N_Z(0, scale^2)``."""
    return math.exp(dg_log_sf(t, scale))


def dg_threshold(p: float, scale: float) -> int:
    """The smallest integer ``t`` with ``P(Z > t) <= p`` for ``Z ~ N_Z(0, scale^2)``.

    The discrete counterpart of ``scale * Phi^{-1}(1 - p)`` in Algorithm 1: a count of 0
    plus this noise exceeds ``t`` with probability at most ``p``.  A safety factor of
    ``1 - 1e-9`` on ``p`` absorbs the rounding of the tail sum.

    >>> t = dg_threshold(1e-6, 10.0)
    >>> dg_sf(t, 10.0) <= 1e-6 < dg_sf(t - 1, 10.0)
    True
    """
    if not 0 < p < 1:
        raise DPMarginalsError(f"tail probability must be in (0, 1), got {p!r}")
    target = math.log(p) + math.log1p(-1e-9)
    lo = -math.ceil(12 * scale) - 2  # P(Z > lo) ~ 1 > p
    hi = max(1, math.ceil(scale * math.sqrt(2 * math.log(1 / p))) + 2)
    while dg_log_sf(hi, scale) > target:
        hi *= 2
    while hi - lo > 1:  # invariant: sf(lo) > p >= sf(hi)
        mid = (lo + hi) // 2
        if dg_log_sf(mid, scale) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# -- samplers for the implicit path (inversion on uniforms from the given source) ---------
def percentile_candidates(upper: int) -> np.ndarray:
    """The candidate contribution bounds: every integer up to 32, then a 5% geometric grid
    up to ``upper`` (included).

    A coarse grid above 32 keeps the exponential mechanism from wandering into the long
    flat region above the data's largest value (every candidate there has the same score,
    and their number multiplies the chance of picking one); the bound is off by at most 5%.

    >>> c = percentile_candidates(1000)
    >>> c[:3].tolist(), int(c[-1]), int(c.size)
    ([1, 2, 3], 1000, 103)
    """
    if upper < 1:
        raise DPMarginalsError(f"max_contribution must be >= 1, got {upper}")
    small = np.arange(1, min(upper, 32) + 1)
    steps = np.ceil(32 * 1.05 ** np.arange(1, 400)).astype(np.int64)
    big = np.unique(steps[(steps > 32) & (steps < upper)])
    tail = [upper] if upper > 32 else []
    return np.concatenate([small, big, tail]).astype(np.int64)


def sample_binomial(n: int, p: float, uniform: float) -> int:
    """Binomial(n, p) by inversion of its CDF at ``uniform`` in [0, 1).

    Used only for the number of never-held candidates that cross the threshold when the
    candidate set is too large to materialise.  The CDF is computed in float64 (relative
    error ~1e-13) and inverted at a 53-bit uniform, so the sampled law is within ~1e-12
    in total variation of the exact binomial.
    """
    if n <= 0 or p <= 0:
        return 0
    mean = n * p
    top = int(min(n, math.ceil(mean + 40 * math.sqrt(mean + 1) + 60)))
    k = np.arange(top + 1, dtype=np.float64)
    cdf = np.cumsum(np.exp(stats.binom.logpmf(k, n, p)))
    return int(min(np.searchsorted(cdf, uniform, side="right"), top))


def sample_dg_tail(t: int, scale: float, uniforms: np.ndarray) -> np.ndarray:
    """Draws of ``Z ~ N_Z(0, scale^2)`` conditioned on ``Z > t``, by inversion at ``uniforms``.

    >>> z = sample_dg_tail(30, 10.0, np.random.default_rng(0).random(1000))
    >>> bool(z.min() >= 31)
    True
    """
    t = int(t)
    start = t + 1
    span = math.ceil(14 * scale) + 2 + max(0, -start)
    z = np.arange(start, start + span, dtype=np.int64)
    logp = -(z.astype(np.float64) ** 2) / (2 * scale**2)
    cdf = np.cumsum(np.exp(logp - logp.max()))
    idx = np.searchsorted(cdf, np.asarray(uniforms) * cdf[-1], side="right")
    return z[np.minimum(idx, z.size - 1)]


# -- noise sources ------------------------------------------------------------------------
class NoiseSource(Protocol):
    """What Algorithm 1 draws: discrete Gaussian noise, a DP percentile, uniforms."""

    private: bool

    def add_discrete_gaussian(self, counts: np.ndarray, scale: float) -> np.ndarray: ...

    def percentile(self, values: np.ndarray, q: float, epsilon: float, upper: int) -> int: ...

    def random(self, size: int) -> np.ndarray: ...

    def integers(self, high: int, size: int) -> np.ndarray: ...


def _require_opendp() -> Any:
    from ..core.extras import require

    dp = require("opendp.prelude", extra="central", what="central DP noise (OpenDP's samplers)")
    dp.enable_features("contrib")
    return dp


def gaussian_measurement(scale: float) -> Any:
    """OpenDP's discrete Gaussian ``make_gaussian`` on int64 vectors with the l2 metric:
    ``d^2 / (2 scale^2)``-zCDP when one user moves the vector by l2 distance ``d``."""
    dp = _require_opendp()
    return dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                              dp.l2_distance(T="i64"), scale=float(scale))


def laplace_measurement(scale: float) -> Any:
    """OpenDP's discrete Laplace ``make_laplace`` on int64 vectors with the l1 metric:
    ``d / scale``-DP when one user moves the vector by l1 distance ``d``."""
    dp = _require_opendp()
    return dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T="i64")),
                             dp.l1_distance(T="i64"), scale=float(scale))


_PART_ENTRIES = 1 << 13  # a vector is split across threads only in parts at least this long


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def apply_to_vector(meas: Any, values: np.ndarray) -> np.ndarray:
    """Apply :func:`gaussian_measurement` or :func:`laplace_measurement` to an int64 vector.

    The vector reaches OpenDP as one buffer (no per-entry cast in Python), and a long
    one is cut into one contiguous part per core, noised concurrently (OpenDP's sampler
    runs in its library, outside the GIL).  Both measurements add independent noise to
    each entry, so the output has exactly the law of one call on the whole vector, and
    the privacy spent is the same: a user's change ``d`` splits into ``d_A, d_B`` with
    ``||d_A||_2^2 + ||d_B||_2^2 = ||d||_2^2`` (``||.||_1`` adds up likewise), so the parts'
    zCDP (or epsilon) add up to the whole vector's map.  Only for these two measurements.
    """
    values = np.ascontiguousarray(values, dtype=np.int64)
    if values.size == 0:
        return values.copy()
    parts = min(_cores(), values.size // _PART_ENTRIES)
    if parts < 2:
        return np.asarray(meas(values), dtype=np.int64)
    chunks = np.array_split(values, parts)
    with ThreadPoolExecutor(parts) as pool:
        noisy = list(pool.map(meas, chunks))
    return np.concatenate([np.asarray(x, dtype=np.int64) for x in noisy])


class OpenDPNoise:
    """Release-path noise: OpenDP's discrete Gaussian and private quantile, OS randomness."""

    private = True

    def __init__(self) -> None:
        self._dp = _require_opendp()
        self._secure = SecureRandom()

    def add_discrete_gaussian(self, counts: np.ndarray, scale: float) -> np.ndarray:
        """``counts + N_Z(0, scale^2)`` per entry: OpenDP's ``make_gaussian`` on the whole
        int64 vector (:func:`gaussian_measurement`, applied by :func:`apply_to_vector`)."""
        return apply_to_vector(gaussian_measurement(scale), counts)

    def percentile(self, values: np.ndarray, q: float, epsilon: float, upper: int) -> int:
        """The ``q``-th percentile (0 < q <= 100) of ``values`` among
        :func:`percentile_candidates` ``(upper)``, ``epsilon``-DP by OpenDP's
        ``make_private_quantile`` (exponential mechanism)."""
        dp = self._dp
        clipped = np.minimum(np.asarray(values, dtype=np.int64), upper + 1)
        alpha = q / 100.0
        candidates = percentile_candidates(upper).tolist()

        def make(scale: float) -> Any:
            return dp.m.make_private_quantile(
                dp.vector_domain(dp.atom_domain(T="i64")), dp.symmetric_distance(),
                dp.max_divergence(), candidates=candidates, alpha=alpha, scale=scale,
            )

        scale = float(make(1.0).map(1)) / epsilon
        meas = make(scale)
        while meas.map(1) > epsilon:  # guard against rounding in the calibration
            scale *= 1 + 1e-9
            meas = make(scale)
        return int(meas(np.ascontiguousarray(clipped)))  # the int64 vector, no per-item cast

    def random(self, size: int) -> np.ndarray:
        return self._secure.random(size)

    def integers(self, high: int, size: int) -> np.ndarray:
        return self._secure.integers(0, high, size=size)


class SimulationNoise:
    """Non-private simulation: the same distributions from a seeded numpy Generator.

    The package's only hand-written noise samplers, kept because OpenDP's samplers draw
    from the OS's randomness and take no seed, while tests and experiments need
    reproducible runs: they serve seeded simulations only (results marked not private;
    every private path draws from :class:`OpenDPNoise` or, for PriView, OpenDP's
    ``make_laplace``).  The discrete Laplace is a difference of two geometric draws; the
    discrete Gaussian is Canonne–Kamath–Steinke's Algorithm 3 (that discrete Laplace as the
    proposal, rejection) in floating point; the percentile is the same exponential
    mechanism as OpenDP's, sampled with Gumbel noise.
    """

    private = False

    def __init__(self, rng: RNGLike) -> None:
        self.rng = simulation_rng(rng)

    def add_discrete_gaussian(self, counts: np.ndarray, scale: float) -> np.ndarray:
        counts = np.asarray(counts, dtype=np.int64)
        return counts + self.discrete_gaussian(scale, counts.size)

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        """``size`` draws with P[Z = z] proportional to exp(-|z| / scale)."""
        p_geo = -math.expm1(-1.0 / scale)
        return self.rng.geometric(p_geo, size) - self.rng.geometric(p_geo, size)

    def discrete_gaussian(self, scale: float, size: int) -> np.ndarray:
        rng = self.rng
        t = math.floor(scale) + 1
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            m = todo.size
            y = self.discrete_laplace(t, m)
            keep = rng.random(m) < np.exp(-((np.abs(y) - scale**2 / t) ** 2) / (2 * scale**2))
            out[todo[keep]] = y[keep]
            todo = todo[~keep]
        return out

    def percentile(self, values: np.ndarray, q: float, epsilon: float, upper: int) -> int:
        x = np.sort(np.minimum(np.asarray(values, dtype=np.int64), upper + 1))
        cand = percentile_candidates(upper)
        den = 10_000
        num = round(q / 100.0 * den)
        lt = np.searchsorted(x, cand, side="left")
        eq = np.searchsorted(x, cand, side="right") - lt
        score = np.abs(den * lt - num * (x.size - eq)).astype(np.float64)
        sensitivity = 2.0 * max(num, den - num)
        noisy = -score / (sensitivity / epsilon) + self.rng.gumbel(size=cand.size)
        return int(cand[int(np.argmax(noisy))])

    def random(self, size: int) -> np.ndarray:
        return self.rng.random(size)

    def integers(self, high: int, size: int) -> np.ndarray:
        return self.rng.integers(0, high, size=size)


def noise_source(rng: RNGLike = None, *, simulation: bool = False) -> NoiseSource:
    """OpenDP noise for a release (``rng=None``); a seeded simulation only on request.

    A seed makes every noise draw predictable, so it is refused unless
    ``simulation=True`` says the run is a non-private simulation.
    """
    if simulation:
        return SimulationNoise(rng)
    if rng is not None and not isinstance(rng, SecureRandom):
        raise DPMarginalsError(
            "a seeded rng makes the noise predictable and the release non-private; pass "
            "simulation=True for a non-private simulation, or leave rng=None"
        )
    return OpenDPNoise()
