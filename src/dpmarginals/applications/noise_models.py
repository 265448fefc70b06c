"""How a released two-way table came about: the interface of the noise-aware association tests.

A :class:`NoiseModel` describes the whole release of one ``r x c`` table of counts from the
records of its ``n`` people -- the people themselves being a sample, plus whatever noise the
mechanism adds -- through two methods:

* :meth:`NoiseModel.simulate` ``(probabilities, n, replicates, rng)``: released tables of
  ``n`` people drawn independently from ``probabilities`` (shape ``(replicates, r, c)``,
  counts, floats).  The Monte-Carlo test simulates its null hypothesis with it.
* :meth:`NoiseModel.covariance` ``(probabilities, n)``: the ``(rc, rc)`` covariance of those
  released counts (cells in C order), sampling and noise together.  The asymptotic test
  (a weighted sum of chi-squares, Gaboardi et al. 2016) needs only this.

Noise added to the counts of a central table, independently of the data, is an
:class:`AdditiveNoise`: implement ``sample(true_counts, rng)`` (the released counts given
the true ones) and ``cell_variance()``, and ``simulate``/``covariance`` follow (a
multinomial draw of the true counts, then the noise).  Two are provided, each continuous or
on the integers (``discrete=True``: what OpenDP's ``make_gaussian``/``make_laplace`` add to
integer counts):

* :class:`GaussianNoise` ``(sigma)`` -- sigma a number or one per cell;
* :class:`LaplaceNoise` ``(scale)``.

Local releases are read off their synopsis by :mod:`dpmarginals.applications.release_noise`
(the exact aggregate samplers of the frequency oracles).  The noise drawn here only
simulates a test's null hypothesis; it never releases anything, so numpy's generators are
the right tool (a release's noise comes from OpenDP).

>>> import numpy as np
>>> noise = GaussianNoise(sigma=10.0)
>>> noise.simulate(np.full((2, 2), 0.25), 1000, 3, rng=0).shape
(3, 2, 2)
>>> np.diag(noise.covariance(np.full((2, 2), 0.25), 1000)).tolist()
[287.5, 287.5, 287.5, 287.5]
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..core.errors import DPMarginalsError, check_positive_int
from ..core.randomness import RNGLike, simulation_rng

__all__ = ["AdditiveNoise", "GaussianNoise", "LaplaceNoise", "NoiseModel", "check_probabilities",
           "sampling_covariance"]


def check_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """A 2-D table of non-negative cells summing to 1 (as float64)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2 or not np.isfinite(p).all() or (p < 0).any() or abs(p.sum() - 1) > 1e-9:
        raise DPMarginalsError(f"probabilities must be a 2-D table of non-negative cells "
                               f"summing to 1, got shape {p.shape} and total {p.sum():.6g}")
    return p


def sampling_covariance(probabilities: np.ndarray, n: int) -> np.ndarray:
    """The multinomial covariance ``n (diag p - p p^T)`` of n people's counts (C order)."""
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    return n * (np.diag(p) - np.outer(p, p))


class NoiseModel(ABC):
    """How a released two-way table of counts comes from its ``n`` people (module docstring)."""

    @abstractmethod
    def simulate(self, probabilities: np.ndarray, n: int, replicates: int, *,
                 rng: RNGLike = None) -> np.ndarray:
        """``replicates`` released tables (counts) of ``n`` people drawn from ``probabilities``."""

    @abstractmethod
    def covariance(self, probabilities: np.ndarray, n: int) -> np.ndarray:
        """The ``(rc, rc)`` covariance of the released counts, sampling and noise together."""

    @abstractmethod
    def describe(self) -> str:
        """One line naming the noise, for results and reports."""


class AdditiveNoise(NoiseModel):
    """Noise added to every count independently of the data (a central release)."""

    discrete: bool = False

    @abstractmethod
    def sample(self, true_counts: np.ndarray, *, rng: RNGLike = None) -> np.ndarray:
        """The released counts given the true ones (any shape; a new float array)."""

    @abstractmethod
    def cell_variance(self) -> float | np.ndarray:
        """The noise variance of a count (a number, or one per cell of the table)."""

    def simulate(self, probabilities: np.ndarray, n: int, replicates: int, *,
                 rng: RNGLike = None) -> np.ndarray:
        p = check_probabilities(probabilities)
        n = check_positive_int(n, "n")
        gen = simulation_rng(rng)
        counts = gen.multinomial(n, p.ravel(), size=check_positive_int(replicates, "replicates"))
        return self.sample(counts.reshape(-1, *p.shape), rng=gen)

    def covariance(self, probabilities: np.ndarray, n: int) -> np.ndarray:
        p = check_probabilities(probabilities)
        var = np.broadcast_to(np.asarray(self.cell_variance(), dtype=np.float64), p.shape)
        return sampling_covariance(p, check_positive_int(n, "n")) + np.diag(var.ravel())


def _positive(value: object, field: str) -> float | np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).all() or (arr <= 0).any():
        raise DPMarginalsError(f"{field} must be finite and > 0, got {value!r}")
    return float(arr) if arr.ndim == 0 else arr


@dataclass(frozen=True)
class GaussianNoise(AdditiveNoise):
    """N(0, sigma^2) on every count; ``discrete=True``: the discrete Gaussian N_Z(0, sigma^2)
    (Canonne, Kamath, Steinke 2020), a number ``sigma`` only.  ``sigma`` is the noise's
    standard deviation (OpenDP's ``scale``), not a privacy parameter."""

    sigma: float | np.ndarray
    discrete: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _positive(self.sigma, "sigma"))
        if self.discrete and not isinstance(self.sigma, float):
            raise DPMarginalsError("a discrete Gaussian takes one sigma for every cell")

    def sample(self, true_counts: np.ndarray, *, rng: RNGLike = None) -> np.ndarray:
        counts = np.asarray(true_counts, dtype=np.float64)
        gen = simulation_rng(rng)
        if self.discrete:
            from ..central.noise import SimulationNoise

            draws = SimulationNoise(gen).discrete_gaussian(float(self.sigma), counts.size)
            return counts + draws.reshape(counts.shape)
        return counts + gen.normal(0.0, 1.0, counts.shape) * self.sigma

    def cell_variance(self) -> float | np.ndarray:
        if not self.discrete:
            return np.square(self.sigma)
        s = float(self.sigma)
        if s > 50:  # Poisson summation: the variance differs from s^2 by < exp(-2 pi^2 s^2)
            return s**2
        z = np.arange(-math.ceil(12 * s) - 2, math.ceil(12 * s) + 3, dtype=np.float64)
        w = np.exp(-(z**2) / (2 * s**2))
        return float((z**2 * w).sum() / w.sum())

    def describe(self) -> str:
        kind = "discrete Gaussian" if self.discrete else "Gaussian"
        sigma = (f"{self.sigma:.4g}" if isinstance(self.sigma, float)
                 else f"per cell {np.round(self.sigma, 4).tolist()}")
        return f"{kind} noise on the counts, sigma = {sigma}"


@dataclass(frozen=True)
class LaplaceNoise(AdditiveNoise):
    """Laplace(0, scale) on every count; ``discrete=True``: the discrete Laplace with
    P[Z = z] proportional to exp(-|z| / scale) (PriView's, OpenDP's ``make_laplace``)."""

    scale: float | np.ndarray
    discrete: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive(self.scale, "scale"))
        if self.discrete and not isinstance(self.scale, float):
            raise DPMarginalsError("a discrete Laplace takes one scale for every cell")

    def sample(self, true_counts: np.ndarray, *, rng: RNGLike = None) -> np.ndarray:
        counts = np.asarray(true_counts, dtype=np.float64)
        gen = simulation_rng(rng)
        if self.discrete:
            from ..central.noise import SimulationNoise

            draws = SimulationNoise(gen).discrete_laplace(float(self.scale), counts.size)
            return counts + draws.reshape(counts.shape)
        return counts + gen.laplace(0.0, 1.0, counts.shape) * self.scale

    def cell_variance(self) -> float | np.ndarray:
        if self.discrete:  # 2 r / (1 - r)^2 with r = e^{-1/scale}
            r = math.exp(-1.0 / float(self.scale))
            return 2 * r / (1 - r) ** 2
        return 2 * np.square(self.scale)

    def describe(self) -> str:
        kind = "discrete Laplace" if self.discrete else "Laplace"
        scale = (f"{self.scale:.4g}" if isinstance(self.scale, float)
                 else f"per cell {np.round(self.scale, 4).tolist()}")
        return f"{kind} noise on the counts, scale = {scale}"
