"""The stages of the k-tuple release as OpenDP measurements in OpenDP's composition.

Algorithm 1 of Gopi, Mahabadi and Yekhanin spends its budget in ``2 T`` stages, in order:
for ``k = 1..T`` a DP percentile (``Delta_k``), then either a Gaussian mechanism on the
histogram over a public universe (``k >= 2``: ``V_k``) or, where the universe is the
users' own tuples (``k = 1``, and every ``k`` with ``no_spurious``), the Gaussian
thresholding of DP set union.  :class:`CertifiedStages` runs each stage as a query to
**one** OpenDP adaptive composition (``make_adaptive_composition`` over approximate zCDP,
neighbours: one record added or removed, symmetric distance 1) whose per-query budgets
are the hand-derived ones of :mod:`.accounting`; OpenDP checks every stage's own privacy
map against its budget before running it, and the composition's map is what the whole
release spends (:meth:`CertifiedStages.certified`).  Each stage is a chain:

* percentile: records -> the users' numbers of valid k-tuples (one value per record:
  symmetric distance ``d -> d``) >> ``make_private_quantile`` (pure DP, turned into zCDP
  by ``make_pureDP_to_zCDP``, ``eps^2 / 2``; with the ``rdp`` accountant its own zCDP
  map, ``eps^2 / 8``);
* Gaussian: records -> the contribution-bounded histogram, ``int64`` (one record moves at
  most ``Delta_k`` entries by 1: l2 distance ``d sqrt(Delta_k)``) >> ``make_gaussian``
  (the discrete Gaussian);
* threshold: records -> the bounded histogram as a map ``key -> count`` (l0 ``d Delta``,
  l2 ``d sqrt(Delta)``, linf ``d``) >> ``make_gaussian_threshold`` (keeps noisy counts
  ``>= threshold``; its ``delta`` is the set-union term).

The transformations' stability maps are ours (``make_user_transformation``: the
sensitivity argument of :mod:`.accounting`, in code); the noise, the thresholding, their
privacy maps and the composition are OpenDP's.  Where ``V_k`` is too large to materialise
(:mod:`.dp_marginals`, "candidates no user holds") the histogram handed to
``make_gaussian`` is its non-zero part, and the zero entries' noise is drawn in aggregate
with the same law; the map is that of the whole histogram (the same sensitivity).

:class:`SimulatedStages` runs the same stages with a seeded numpy generator (non-private
simulations); it certifies nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .noise import OpenDPNoise, SimulationNoise, percentile_candidates

__all__ = ["CertifiedStages", "SimulatedStages", "stage_budgets"]

Fn = Callable[[Any], Any]


def _up(x: float) -> float:
    """``x`` rounded up by one ulp (stability maps must not under-claim)."""
    return math.nextafter(float(x), math.inf)


def stage_budgets(budget: Any, no_spurious: bool) -> list[tuple[float, float]]:
    """The ``(rho, delta)`` of each of the ``2 T`` stages, in order, from a
    :class:`~.accounting.PrivacyBudget` (the hand-derived split)."""
    quantile = budget.quantile_zcdp * budget.epsilon_q ** 2
    T = budget.max_k
    out = []
    for k in range(1, T + 1):
        delta = (budget.delta_threshold / T if no_spurious
                 else (budget.delta_threshold if k == 1 else 0.0))
        out += [(quantile, 0.0), (1.0 / (2.0 * budget.sigmas[k - 1] ** 2), delta)]
    return out


class CertifiedStages:
    """The stages as queries to one OpenDP adaptive composition (see the module doc)."""

    private = True

    def __init__(self, noise: OpenDPNoise, quantile_zcdp: float) -> None:
        self.noise = noise
        self.dp = noise._dp
        self.dp.enable_features("contrib", "honest-but-curious")
        self.quantile_zcdp = quantile_zcdp
        self._queryable: Any = None
        self._composition: Any = None
        self._budgets: list[tuple[float, float]] = []
        self._next = 0
        dp = self.dp
        self.domain = dp.user_domain("DPMarginalsRecords", lambda _: True)
        self.metric = dp.symmetric_distance()

    def start(self, data: Any, budgets: Sequence[tuple[float, float]]) -> None:
        """Open the composition on ``data`` with the stages' budgets, in order."""
        dp = self.dp
        self._budgets = [(float(r), float(d)) for r, d in budgets]
        self._composition = dp.c.make_adaptive_composition(
            self.domain, self.metric, dp.approximate(dp.zero_concentrated_divergence()), 1,
            self._budgets)
        self._queryable = self._composition(data)
        self._next = 0

    def certified(self) -> tuple[float, float]:
        """``(rho, delta)`` that OpenDP's map of the whole composition certifies."""
        rho, delta = self._composition.map(1)
        return float(rho), float(delta)

    def _budget(self) -> tuple[float, float]:
        budget = self._budgets[self._next]
        self._next += 1
        return budget

    def _ask(self, meas: Any) -> Any:
        return self._queryable(meas)

    def percentile(self, sizes: Fn, q: float, epsilon: float, upper: int) -> int:
        """The ``q``-th percentile of ``sizes(data)`` among the candidate bounds."""
        dp = self.dp
        rho, _ = self._budget()
        vec = dp.vector_domain(dp.atom_domain(T="i64"))
        to_sizes = dp.t.make_user_transformation(
            self.domain, self.metric, vec, self.metric,
            function=lambda data: np.ascontiguousarray(
                np.minimum(np.asarray(sizes(data), dtype=np.int64), upper + 1)),
            stability_map=lambda d_in: d_in)
        candidates = percentile_candidates(upper).tolist()
        pure = self.quantile_zcdp == 0.5

        def make(scale: float) -> Any:
            quantile = dp.m.make_private_quantile(
                vec, self.metric, dp.max_divergence() if pure else
                dp.zero_concentrated_divergence(), candidates=candidates, alpha=q / 100.0,
                scale=scale)
            chain = to_sizes >> quantile
            return dp.c.make_approximate(dp.c.make_pureDP_to_zCDP(chain) if pure else chain)

        unit = float(make(1.0).map(1)[0])  # zCDP at scale 1; it falls as 1 / scale^2
        scale = math.sqrt(unit / rho)
        meas = make(scale)
        while meas.map(1)[0] > rho:  # OpenDP rounds up: nudge the scale until it fits
            scale *= 1 + 1e-12
            meas = make(scale)
        return int(self._ask(meas))

    def gaussian(self, histogram: Fn, scale: float, bound: int) -> tuple[np.ndarray, float]:
        """``histogram(data) + N_Z(0, s^2)`` with ``s >= scale`` fitting the stage's budget;
        a record moves the histogram by at most ``bound`` entries of 1.  Returns the noisy
        vector and ``s``."""
        dp = self.dp
        rho, _ = self._budget()
        vec = dp.vector_domain(dp.atom_domain(T="i64"))
        l2 = dp.l2_distance(T="f64")
        sensitivity = _up(math.sqrt(bound))
        to_hist = dp.t.make_user_transformation(
            self.domain, self.metric, vec, l2,
            function=lambda data: np.ascontiguousarray(histogram(data), dtype=np.int64),
            stability_map=lambda d_in: _up(d_in * sensitivity))

        def make(s: float) -> Any:
            return dp.c.make_approximate(to_hist >> dp.m.make_gaussian(vec, l2, scale=s))

        meas = make(scale)
        while meas.map(1)[0] > rho:
            scale *= 1 + 1e-12
            meas = make(scale)
        return np.asarray(self._ask(meas), dtype=np.int64), scale

    def threshold(self, histogram: Fn, scale: float, threshold: int, bound: int
                  ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """Gaussian thresholding of ``histogram(data) = (keys, counts)``: the keys whose
        noisy count is ``>= threshold`` (raised until OpenDP's delta fits the stage's).
        Returns ``(keys, noisy counts, scale, threshold)``."""
        dp = self.dp
        rho, delta = self._budget()
        space = dp.map_domain(dp.atom_domain(T="i64"), dp.atom_domain(T="i64"))
        metric = dp.l02inf_distance(dp.absolute_distance(T="f64"))
        sensitivity = _up(math.sqrt(bound))

        def as_map(data: Any) -> dict[int, int]:
            keys, counts = histogram(data)
            return dict(zip(np.asarray(keys, np.int64).tolist(),
                            np.asarray(counts, np.int64).tolist(), strict=True))

        to_map = dp.t.make_user_transformation(
            self.domain, self.metric, space, metric, function=as_map,
            stability_map=lambda d_in: (int(d_in) * int(bound), _up(d_in * sensitivity),
                                        float(d_in)))

        def make(s: float, t: int) -> Any:
            return to_map >> dp.m.make_gaussian_threshold(space, metric, scale=s, threshold=t)

        meas = make(scale, threshold)
        while meas.map(1)[0] > rho:
            scale *= 1 + 1e-12
            meas = make(scale, threshold)
        while meas.map(1)[1] > delta:
            threshold += 1
            meas = make(scale, threshold)
        out = self._ask(meas)
        keys = np.fromiter(out.keys(), dtype=np.int64, count=len(out))
        counts = np.fromiter(out.values(), dtype=np.int64, count=len(out))
        order = np.argsort(keys, kind="stable")
        return keys[order], counts[order], scale, threshold


class SimulatedStages:
    """The same stages drawn from a seeded numpy generator: a non-private simulation."""

    private = False

    def __init__(self, noise: SimulationNoise) -> None:
        self.noise = noise
        self._data: Any = None

    def start(self, data: Any, budgets: Sequence[tuple[float, float]]) -> None:
        self._data = data

    def certified(self) -> None:
        return None

    def percentile(self, sizes: Fn, q: float, epsilon: float, upper: int) -> int:
        return self.noise.percentile(sizes(self._data), q, epsilon, upper)

    def gaussian(self, histogram: Fn, scale: float, bound: int) -> tuple[np.ndarray, float]:
        return self.noise.add_discrete_gaussian(histogram(self._data), scale), scale

    def threshold(self, histogram: Fn, scale: float, threshold: int, bound: int
                  ) -> tuple[np.ndarray, np.ndarray, float, int]:
        keys, counts = histogram(self._data)
        noisy = self.noise.add_discrete_gaussian(counts, scale)
        keep = noisy >= threshold
        return np.asarray(keys, np.int64)[keep], noisy[keep], scale, threshold
