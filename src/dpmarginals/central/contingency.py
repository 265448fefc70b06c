"""AIM and MST: central-DP marginals of a table through OpenDP's ``opendp.extras.mbi``.

* **AIM** (McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism
  for Differentially Private Synthetic Data", VLDB 2022): measure every 1-way marginal,
  then repeatedly select (noisy max) the marginal of the workload's downward closure that
  the current graphical model answers worst, measure it with Gaussian noise and refit the
  model, spending more per round when a round changes the model less than its noise.
* **MST** (McKenna, Sheldon, Miklau, "Winning the NIST Contest", JPC 2021): measure every
  1-way marginal, select a maximum spanning tree of 2-way marginals (noisy max), measure
  them, fit the model.

Selection, noise (discrete Gaussian) and the privacy accounting are OpenDP's
(``AIM.make_marginals`` and ``MST.make_marginals``, composed with OpenDP's adaptive
composition); the fit is private-pgm's ``mbi`` (mirror descent).  We call the algorithms'
``make_marginals`` on the integer codes of the declared public domain rather than
``make_contingency_table``: the latter gives every attribute an extra "null" category for
values outside known keys, which a declared domain cannot have and which would spread the
noise over ``(c + 1)^k`` instead of ``c^k`` cells of each k-way marginal.

**Privacy.**  Neighbouring tables differ by one record added or removed (OpenDP's
symmetric distance 1), so a k-way count vector has l2 sensitivity 1.  OpenDP accounts
in zero-concentrated DP; ``(epsilon, delta)`` is turned into the budget
``rho = (sqrt(epsilon + log(1/delta)) - sqrt(log(1/delta)))**2``
(:func:`~dpmarginals.central.accounting.zcdp_rho`, [BS16, Prop. 1.3], the squared form), and
the measurement's own privacy map is checked to spend at most ``rho`` before any data is
touched.  ``accountant="rdp"`` uses the tighter conversion of Canonne, Kamath and Steinke
2020 (Google's ``dp-accounting``), the one the AIM paper's code uses: at ``delta = 1e-9``
27% more ``rho`` at ``epsilon = 1`` (0.01497 instead of 0.01178), 47% at 0.1, 11% at 10.
The number of records is not published: the model's total is the noisy measurements'
minimum-variance estimate.

**Budget split, as in the papers' reference code** (private-pgm ``mechanisms/``): AIM gives
``0.9 / 16`` of ``rho`` to the d 1-way marginals (each then gets the per-round noise of the
first of ``16 d`` rounds) and the rest to the rounds, 90% of each round to measuring and
10% to selecting; MST gives a third each to the 1-way marginals, the selection and the
tree's 2-way marginals.  Unlike the reference MST, values are not merged by their noisy
1-way counts ("domain compression"): the declared domain is kept as it is (on Adult,
eps 1, the reference's own error moved by under 1% without it: 0.0933 and 0.0938 with,
0.0937 and 0.0944 without, seeds 0 and 1).

**Cost.**  Each AIM round refits the model (``iters`` mirror-descent steps, warm-started)
and scores every candidate marginal against it, so a run costs about
``rounds x (fit + candidates x model queries)``; ``max_model_size`` (MB of the junction
tree, AIM's own cap, 80 in the paper) and ``rounds`` bound it.  ``run`` records the
seconds and rounds in ``info``.

The result is a :class:`~.contingency_synopsis.ContingencySynopsis`: the fitted model's
log-potentials as plain numpy arrays (answering a query needs neither JAX nor ``mbi``) and
the measured sets with their noise, from which measured marginals get standard errors.
OpenDP's side (the extra, the composed measurement) is :mod:`.opendp_tables`, mbi's is
:mod:`.mbi_bridge`, the budget's conversion :func:`.accounting.contingency_rho`.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from tqdm.auto import tqdm

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_epsilon, check_k, check_positive_int
from ..core.randomness import RNGLike
from ..protocol.plan import Plan
from . import mbi_bridge
from .accounting import ACCOUNTANTS, check_delta, contingency_rho, rdp_epsilon, zcdp_epsilon
from .contingency_synopsis import ContingencySynopsis
from .map_count import check_map_count
from .opendp_tables import certified_rho, marginals_measurement, mst_fit_budget, require_tables

__all__ = ["AIM", "MST", "ContingencySynopsis", "contingency_rho"]

#: AIM's share of rho for the 1-way marginals (private-pgm's aim.py: sigma_0 of 16 d rounds).
AIM_ONEWAY_SHARE = 0.9 / 16
#: MST's share of rho for the 1-way marginals (private-pgm's mst.py: rho / 3).
MST_ONEWAY_SHARE = 1 / 3
RANDOMNESS = ("OpenDP's discrete Gaussian and noisy-max samplers (zCDP), on the OS's "
              "randomness; not seedable")


@dataclass
class _ContingencyMethod:
    """What AIM and MST share: the budget, the OpenDP measurement, the synopsis."""

    epsilon: float
    delta: float | None = None
    k: int = 3
    iters: int = 250
    accountant: str = "zcdp"
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        if self.delta is None:
            raise DPMarginalsError(f"{self.name} is (epsilon, delta)-DP: give a delta "
                                   "(--delta), well below 1/n, e.g. 1e-9")
        self.delta = check_delta(self.delta)
        self.k = check_k(self.k)
        self.iters = check_positive_int(self.iters, "iters")
        check_choice(self.accountant, "accountant", ACCOUNTANTS)

    @property
    def rho(self) -> float:
        assert self.delta is not None
        return contingency_rho(self.epsilon, self.delta, self.accountant)

    def plan(self, domain: Domain, n: int) -> Plan:
        """The public parameters (what is measured is chosen privately, during the run)."""
        check_k(self.k, len(domain))
        return Plan(self.name, self.epsilon, domain, (), {
            "k": self.k, "model": "central", "delta": self.delta, "rho": self.rho,
            "accountant": self.accountant, "iters": self.iters,
            "workload": f"all {self.k}-way marginals", **self._params(len(domain)),
            "neighbouring": "add or remove one record; n is not published (the model's "
                            "total is estimated from the noisy marginals)"})

    def _params(self, d: int) -> dict[str, Any]:
        return {}

    #: The most attributes one measured marginal holds (None: ``k``, the workload's).
    measured_width: ClassVar[int | None] = None

    def largest_marginal(self, domain: Domain) -> tuple[str, ...]:
        """The attributes of the measured marginal with the most cells this method may
        take (release's size check, before any work): the widest attributes."""
        width = min(self.measured_width or self.k, len(domain))
        by_size = sorted(zip(domain.sizes, domain.attributes, strict=True))
        return tuple(a for _, a in by_size[-width:])

    def _algorithm(self, estimator: Any, d: int) -> tuple[Any, float]:
        """OpenDP's algorithm object and the share of rho for the 1-way marginals."""
        raise NotImplementedError

    def _fit_budget(self, rho: float, d: int) -> float:
        """The budget given to the algorithm after the 1-way marginals (``rho`` less an ulp)."""
        return float(np.nextafter(rho, 0.0))

    def measurement(self, domain: Domain, progress: Any = None) -> tuple[Any, float]:
        """OpenDP's measurement (1-way marginals, then the algorithm, composed adaptively:
        :func:`~.opendp_tables.marginals_measurement`) and the rho its privacy map
        certifies, checked to be at most :attr:`rho`.

        Its input is a polars LazyFrame of the attributes' codes (``u32``, ``0..size-1``);
        its output ``(marginals, model)``.  ``progress`` (a tqdm bar, or None) counts the
        model fits, one per round (OpenDP's loop has no other hook).
        """
        require_tables()
        fit = functools.partial(mbi_bridge.fit, iters=self.iters)

        def estimator(*args: Any, **kwargs: Any) -> Any:  # a model fit: one per round
            model = fit(*args, **kwargs)
            if progress is not None:
                progress.update(1)
            return model

        algorithm, share = self._algorithm(estimator, len(domain))
        rho = self.rho
        rho_oneway = rho * share
        rho_rest = self._fit_budget(rho - rho_oneway, len(domain))
        meas = marginals_measurement(domain, algorithm, estimator, rho_oneway, rho_rest)
        spent = certified_rho(meas)
        if spent > rho:
            raise DPMarginalsError(f"{self.name}: OpenDP's measurement spends rho = {spent} "
                                   f"> {rho}")
        return meas, spent

    def run(self, data: Dataset, *, rng: RNGLike = None) -> ContingencySynopsis:
        """Measure and fit on ``data``.  The noise is OpenDP's, never seeded: ``rng`` is
        accepted for the :class:`~dpmarginals.methods.Method` interface and unused."""
        require_tables()  # before anything is imported or read: one line if missing
        import polars as pl

        plan = self.plan(data.domain, data.n)
        check_map_count(int(plan.params.get("rounds") or 0), method=self.name)
        clock = time.perf_counter()
        # no total: AIM's rounds end when its budget does, which the data decides
        with tqdm(desc=f"{self.name}: model fits", unit="fit", disable=None, file=sys.stderr,
                  leave=False) as progress:
            meas, spent = self.measurement(data.domain, progress)
            frame = pl.DataFrame({a: data.codes[:, j].astype(np.uint32)
                                  for j, a in enumerate(data.domain.attributes)})
            marginals, model = meas(frame.lazy())
        seconds = time.perf_counter() - clock
        synopsis = ContingencySynopsis.from_mbi(data.domain, self.name, marginals, model)
        rounds = sum(len(c) > 1 for c, _ in synopsis.measurements)
        synopsis.info.update({
            "plan_hash": plan.hash, **plan.params, "n": synopsis.total,
            "noise_sampler": "opendp", "seeded_noise": False,
            "privacy_map_rho": spent,
            "epsilon_certified": (rdp_epsilon if self.accountant == "rdp" else zcdp_epsilon)(
                spent, self.delta),
            "measured": len(synopsis.measurements), "multiway_measured": rounds,
            "seconds": seconds})
        return synopsis


@dataclass
class AIM(_ContingencyMethod):
    """AIM over the workload of all ``k``-way marginals (see the module docstring).

    ``max_model_size``: AIM's cap on the junction tree, in MB (80 in the paper; smaller is
    faster and coarser); ``rounds``: AIM's round budget ``T`` (default ``16 d``, the
    paper's); ``iters``: mirror-descent steps per refit, warm-started from the last round's
    model (default 250; the paper's code runs 1000).
    """

    max_model_size: float = 80.0
    rounds: int | None = None
    name: ClassVar[str] = "aim"

    def __post_init__(self) -> None:
        super().__post_init__()
        size = float(self.max_model_size)
        if not (size > 0 and math.isfinite(size)):
            raise DPMarginalsError(f"max_model_size must be a number > 0 (MB), got "
                                   f"{self.max_model_size!r}")
        self.max_model_size = size
        if self.rounds is not None:
            self.rounds = check_positive_int(self.rounds, "rounds")

    def _params(self, d: int) -> dict[str, Any]:
        return {"max_model_size_mb": self.max_model_size,
                "rounds": self.rounds or 16 * d, "oneway_share": AIM_ONEWAY_SHARE,
                "measure_split": 0.9}

    def _algorithm(self, estimator: Any, d: int) -> tuple[Any, float]:
        from opendp.extras.mbi import AIM as OpenDPAIM

        return OpenDPAIM(estimator=estimator, queries=self.k, max_size=self.max_model_size,
                         rounds=self.rounds, measure_split=0.9), AIM_ONEWAY_SHARE


@dataclass
class MST(_ContingencyMethod):
    """MST: 1-way marginals and a maximum spanning tree of 2-way marginals.

    ``k`` only names the workload it is evaluated on: MST always measures 2-way marginals.
    ``iters``: mirror-descent steps per fit, 5000 by default as in the final fit of the
    paper's code (private-pgm ``mechanisms/mst.py``).  On Adult (eps 1, delta 1e-9) 250
    steps left the tree model short of convergence: synthetic-rows error 0.104 against
    0.093 at 5000 (seeds 0, 1; 0.0933 and 0.0938 for the reference), at the same CPU time
    (41 s: the fit of a tree is not what a run costs).
    """

    iters: int = 5000
    name: ClassVar[str] = "mst"
    measured_width: ClassVar[int | None] = 2

    def _params(self, d: int) -> dict[str, Any]:
        return {"oneway_share": MST_ONEWAY_SHARE, "measure_split": 0.5}

    def _algorithm(self, estimator: Any, d: int) -> tuple[Any, float]:
        from opendp.extras.mbi import MST as OpenDPMST

        if d < 2:
            raise DPMarginalsError("mst needs at least 2 attributes")
        return OpenDPMST(estimator=estimator, measure_split=0.5), MST_ONEWAY_SHARE

    def _fit_budget(self, rho: float, d: int) -> float:
        """A budget whose split OpenDP's MST accepts (:func:`~.opendp_tables.mst_fit_budget`)."""
        return mst_fit_budget(rho, d)
