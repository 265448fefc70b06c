"""Centralized PriView (Qardaji, Yang, Li, SIGMOD'14 as summarised in CALM §4.1).

The curator holds the data.  PriView publishes m views (l-way marginals chosen by a
covering design so every t-set of attributes lies in one, t = k by default), each count
perturbed by Laplace noise of scale m / eps, then makes the views consistent and
non-negative and answers any marginal by maximum entropy -- the same steps CALM uses
(:func:`dpmarginals.local.calm.consistent_synopsis`).  CALM §5.6 (Figure 8) uses it as the
central-model reference point.

**Privacy.**  Neighbouring data sets differ by adding or removing one record, which changes
one count in each of the m views: the count vectors have L1 sensitivity m, so integer
noise from the discrete Laplace with scale >= m / eps makes the release eps-DP.  The number
of records n is **not** published (it would break add/remove-one DP): the release's n is
the mean of the noisy views' totals, post-processing of the noisy counts, and fractions are
noisy counts / that n.  The noise is never a floating-point Laplace (Mironov 2012):

* ``sampler="opendp"``: OpenDP's ``make_laplace`` on integer vectors (its exact discrete
  Laplace sampler on the OS's randomness); its privacy map is checked to give at most
  eps / m per view.  Every private run draws its noise here.
* ``sampler="simulation"``: a **non-private** seeded simulation (tests, experiments without
  OpenDP): the same discrete Laplace drawn by
  :meth:`~dpmarginals.central.noise.SimulationNoise.discrete_laplace` from a seeded numpy
  generator (OpenDP's samplers take no seed).
* ``sampler="auto"`` (default): OpenDP when it is installed, otherwise the simulation when
  a seed is given; without OpenDP and without a seed it is an error.

``synopsis.info["noise_sampler"]`` says which one ran.

**Views.**  ``l`` defaults to min(8, d) ("setting l to be around 8 works well", CALM §4.1),
reduced for wide attributes until a view has at most 2^20 cells; ``m`` defaults to the size
of the covering design of the t-sets by l-sets (d = 8, l = 8: one view, the full table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError, check_epsilon
from dpmarginals.core.randomness import RNGLike
from dpmarginals.planning.covering import cover_design
from dpmarginals.planning.error_model import select_marginals
from dpmarginals.protocol.plan import GroupSpec, Plan, attribute_names

from .noise import SimulationNoise, apply_to_vector, laplace_measurement

__all__ = ["PriView", "discrete_laplace_variance"]

SAMPLERS = ("auto", "opendp", "simulation")
SCALE_DENOMINATOR = 1000
DEFAULT_VIEW_CELLS = 2**20


def discrete_laplace_variance(scale: float) -> float:
    """Var of the discrete Laplace with scale b: 2 e^{-1/b} / (1 - e^{-1/b})^2."""
    r = math.exp(-1.0 / scale)
    return 2 * r / (1 - r) ** 2


def _rational_scale(m: int, epsilon: float) -> tuple[int, int]:
    """(t, s) with t/s >= m/eps exactly, s = SCALE_DENOMINATOR (rounding up = more noise)."""
    exact = Fraction(m) / Fraction(epsilon)
    return math.ceil(exact * SCALE_DENOMINATOR), SCALE_DENOMINATOR


def _opendp_noisy(counts: np.ndarray, scale: float, per_view_epsilon: float) -> np.ndarray:
    meas = laplace_measurement(scale)
    spent = float(meas.map(1))
    if spent > per_view_epsilon * (1 + 1e-9):
        raise DPMarginalsError(f"OpenDP's discrete Laplace spends {spent} > {per_view_epsilon}")
    return apply_to_vector(meas, counts)


def _opendp_available() -> bool:
    try:
        import opendp.prelude  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class PriView:
    """Centralized PriView; see the module docstring.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> plan = PriView(epsilon=1.0, k=3).plan(dom, 2**16)
    >>> plan.params["l"], plan.m, plan.params["scale"]
    (8, 1, 1.0)
    >>> PriView(epsilon=1.0, k=3, l=4).plan(dom, 2**16).m
    14
    """

    epsilon: float
    k: int = 3
    l: int | None = None
    m: int | None = None
    cover: int | None = None
    sampler: str = "auto"
    #: as consistent_synopsis: Adult's 15 views converge in 202 rounds (100 left -2e-7)
    max_rounds: int = 1000
    max_view_cells: int = DEFAULT_VIEW_CELLS
    name: ClassVar[str] = "priview"

    def __post_init__(self) -> None:
        from dpmarginals.core.errors import check_choice, check_k

        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.sampler, "sampler", SAMPLERS)
        for field_name in ("l", "m", "cover"):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, int | np.integer) or value < 1):
                raise DPMarginalsError(f"{field_name} must be an integer >= 1, got {value!r}")

    def _sizes(self, domain: Domain) -> tuple[int, int]:
        d = len(domain)
        if self.k > d:
            raise DPMarginalsError(f"k = {self.k} exceeds the number of attributes d = {d}")
        if self.l is not None:
            l = self.l
            if l > d:
                raise DPMarginalsError(f"l = {l} exceeds the number of attributes d = {d}")
        else:
            widest = sorted(domain.sizes, reverse=True)
            l = min(8, d)
            floor = min(self.cover or self.k, d)
            while l > floor and math.prod(widest[:l]) > self.max_view_cells:
                l -= 1
        t = self.cover if self.cover is not None else min(self.k, l)
        if t > l:
            raise DPMarginalsError(f"cover = {t} exceeds the view size l = {l}")
        return l, t

    def plan(self, domain: Domain, n: int) -> Plan:
        d = len(domain)
        l, t = self._sizes(domain)
        if self.m is None:
            sets = cover_design(d, t, l)
            assert sets is not None
        else:
            sets = select_marginals(d, t, l, self.m)
        attrs = attribute_names(domain, sets)
        cells = [domain.project(a).cells() for a in attrs]
        if max(cells) > self.max_view_cells:
            raise DPMarginalsError(
                f"{self.name}: a view of {l} attributes has {max(cells):,} cells, over "
                f"max_view_cells = {self.max_view_cells:,}; choose a smaller l")
        m = len(attrs)
        scale_t, scale_s = _rational_scale(m, self.epsilon)
        scale = scale_t / scale_s
        cell_var = discrete_laplace_variance(scale) / max(n, 1) ** 2
        groups = tuple(GroupSpec(a, "discrete_laplace", self.epsilon, c)
                       for a, c in zip(attrs, cells, strict=True))
        params = {"k": self.k, "n": int(n), "model": "central", "l": l, "m": m, "cover": t,
                  "scale": scale, "sensitivity": m,
                  "neighbouring": "add or remove one record; n is not published (the "
                  "release's n is the mean of the noisy view totals)",
                  "report_bits": None, "table2_bits": None, "var0": cell_var,
                  "variance_factor": None,
                  "expected_sse": float(np.mean(cells)) * cell_var}
        return Plan(self.name, self.epsilon, domain, groups, params)

    def _sampler(self, rng: RNGLike) -> str:
        if self.sampler == "simulation" or (
                self.sampler == "auto" and rng is not None and not _opendp_available()):
            return "simulation"
        if not _opendp_available():
            raise DPMarginalsError(
                "PriView's private noise comes from OpenDP: pip install opendp (or pass "
                "sampler='simulation' and a seed for a non-private simulation)")
        return "opendp"

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Any:
        from dpmarginals.inference.views import NoisyView
        from dpmarginals.synopsis.base import consistent_synopsis

        groups = self.plan(data.domain, 1).groups  # the views do not depend on n
        sampler = self._sampler(rng)
        scale_t, scale_s = _rational_scale(len(groups), self.epsilon)
        simulation = SimulationNoise(rng) if sampler == "simulation" else None
        noisy_counts = []
        for spec in groups:
            counts = data.counts(spec.attributes).ravel()
            if sampler == "opendp":
                noisy = _opendp_noisy(counts, scale_t / scale_s, self.epsilon / len(groups))
            else:
                assert simulation is not None
                noisy = counts + simulation.discrete_laplace(scale_t / scale_s, counts.size)
            noisy_counts.append(noisy)
        # The exact n is not published (it would break add/remove-one DP): every view's
        # noisy total estimates it, and their mean is post-processing of the noisy counts.
        n_hat = max(1, round(float(np.mean([c.sum() for c in noisy_counts]))))
        plan = self.plan(data.domain, n_hat)
        views = []
        for spec, noisy in zip(plan.groups, noisy_counts, strict=True):
            table = (noisy / n_hat).reshape(data.domain.project(spec.attributes).shape)
            views.append(NoisyView(spec.attributes, table, n_hat, plan.params["var0"]))
        info = {"plan_hash": plan.hash, **plan.params, "noise_sampler": sampler,
                "seeded_noise": sampler == "simulation" and rng is not None}
        return consistent_synopsis(data.domain, views, self.name, info,
                                   max_rounds=self.max_rounds)
