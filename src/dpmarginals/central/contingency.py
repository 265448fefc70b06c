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
1-way counts ("domain compression"): the declared domain is kept as it is.

**Cost.**  Each AIM round refits the model (``iters`` mirror-descent steps, warm-started)
and scores every candidate marginal against it, so a run costs about
``rounds x (fit + candidates x model queries)``; ``max_model_size`` (MB of the junction
tree, AIM's own cap, 80 in the paper) and ``rounds`` bound it.  ``run`` records the
seconds and rounds in ``info``.

The result is a :class:`ContingencySynopsis`: the fitted model's log-potentials as plain
numpy arrays (answering a query needs neither JAX nor ``mbi``) and the measured sets with
their noise, from which measured marginals get standard errors.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_epsilon, check_k, check_positive_int
from ..core.extras import require
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..inference.pgm import GraphicalModel, require_mbi
from ..protocol.plan import Plan
from ..synopsis.base import Synopsis, check_query, maximal_overlaps
from .accounting import (
    ACCOUNTANTS,
    check_delta,
    rdp_epsilon,
    rdp_rho,
    zcdp_epsilon,
    zcdp_rho,
)

__all__ = ["AIM", "MST", "ContingencySynopsis", "contingency_rho"]

#: AIM's share of rho for the 1-way marginals (private-pgm's aim.py: sigma_0 of 16 d rounds).
AIM_ONEWAY_SHARE = 0.9 / 16
#: MST's share of rho for the 1-way marginals (private-pgm's mst.py: rho / 3).
MST_ONEWAY_SHARE = 1 / 3
RANDOMNESS = ("OpenDP's discrete Gaussian and noisy-max samplers (zCDP), on the OS's "
              "randomness; not seedable")


def contingency_rho(epsilon: float, delta: float, accountant: str = "zcdp") -> float:
    """The zCDP budget ``rho`` that certifies ``(epsilon, delta)``-DP.

    >>> round(contingency_rho(1.0, 1e-9), 8)
    0.01178116
    >>> abs(zcdp_epsilon(contingency_rho(1.0, 1e-9), 1e-9) - 1.0) < 1e-12
    True
    """
    check_choice(accountant, "accountant", ACCOUNTANTS)
    return rdp_rho(epsilon, delta) if accountant == "rdp" else zcdp_rho(epsilon, delta)


def _opendp() -> Any:
    """OpenDP with its ``mbi`` module, polars, and mbi with 64-bit JAX."""
    what = "AIM and MST (OpenDP's contingency tables)"
    require("polars", extra="tables", what=what)
    dp = require("opendp.prelude", extra="tables", what=what)
    require("opendp.extras.mbi", extra="tables", what=what)
    require_mbi()
    import jax

    # mbi's advice: its many small compiled programs make JAX's persistent cache a cost
    jax.config.update("jax_enable_compilation_cache", False)
    dp.enable_features("contrib")
    return dp


#: Linux's limit on a process's memory mappings below which long AIM runs are warned about:
#: XLA maps memory for every program it compiles, and AIM compiles fits round after round.
#: ACS (d = 23) at eps = 10 reached the default 65,530 after ~55 min and aborted with "LLVM
#: ERROR: Unable to allocate section memory"; one worker held 9,662 mappings after 80 s.
MIN_MAP_COUNT = 262_144
#: Rounds from which AIM runs long enough to reach that limit.
LONG_AIM_ROUNDS = 200


def check_map_count(rounds: int, path: Path = Path("/proc/sys/vm/max_map_count"),
                    method: str = "aim") -> None:
    """Warn before a long run of ``rounds`` compiled fits on a Linux system whose
    ``vm.max_map_count`` is low."""
    if rounds < LONG_AIM_ROUNDS or not path.exists():
        return
    try:
        limit = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    if limit < MIN_MAP_COUNT:
        warnings.warn(f"{method}: {rounds} rounds may exceed this system's vm.max_map_count "
                      f"({limit}) and abort with 'LLVM ERROR: Unable to allocate section "
                      f"memory'; raise it first (sudo sysctl -w vm.max_map_count="
                      f"{MIN_MAP_COUNT * 4}) or pass fewer --rounds", RuntimeWarning,
                      stacklevel=3)


def _fit(domain: Any, loss_fn: Any, *, potentials: Any = None, iters: int) -> Any:
    """The estimator OpenDP's algorithms call: mbi's mirror descent, warm-started.

    OpenDP 0.16's ``mbi`` module was written for mbi 1.1 (``mbi.estimation.mirror_descent``,
    a model whose ``cliques`` is a list and whose domain has ``attrs``); with mbi 2 the
    estimator is a class, ``cliques`` a tuple (OpenDP's AIM extends it with a list) and the
    domain's names are ``attributes`` (OpenDP's MST reads ``attrs``): :func:`_model_class`
    bridges both.
    """
    from mbi import estimation

    model = estimation.MirrorDescent().estimate(domain, loss_fn, iters=iters,
                                                warm_start=potentials)
    return _model_class()(potentials=model.potentials, marginals=model.marginals,
                          total=model.total, constraints=model.constraints)


def numpy_model(model: Any) -> GraphicalModel:
    """An mbi model's log-potentials as a numpy :class:`GraphicalModel`."""
    dom = model.domain
    domain = Domain(tuple(dom.attributes), tuple(int(s) for s in dom.shape))
    pots = [(tuple(model.potentials.tables[c].domain.attributes),
             np.asarray(model.potentials.tables[c].values, dtype=np.float64))
            for c in model.potentials.cliques]
    return GraphicalModel(domain, pots)


@functools.cache
def _model_class() -> type:
    """mbi's ``MarkovRandomField`` with list ``cliques`` and numpy marginals.

    ``project`` of a set outside the model's cliques is variable elimination, which JAX
    compiles anew for every (model, query) pair, and AIM scores every candidate marginal
    against every round's model: py-spy found nearly all of a run's time in JAX compiles
    (NLTCS, d = 8: 18 minutes for 15 rounds on a loaded 2-core machine).  The same marginal
    by numpy's variable elimination (:class:`~dpmarginals.inference.pgm.GraphicalModel`)
    takes milliseconds.
    """
    import jax.numpy as jnp
    from mbi import Domain as MbiDomain
    from mbi import Factor, MarkovRandomField

    class _Domain(MbiDomain):  # type: ignore[misc]
        @property
        def attrs(self) -> tuple[str, ...]:
            return tuple(self.attributes)

    class _Model(MarkovRandomField):  # type: ignore[misc]
        @property
        def cliques(self) -> list[tuple[str, ...]]:
            return list(super().cliques)

        @property
        def domain(self) -> Any:
            dom = super().domain
            return _Domain(dom.attributes, dom.shape)

        def project(self, attrs: Any) -> Any:
            attrs = (attrs,) if isinstance(attrs, str | int) else tuple(attrs)
            if self.marginals.supports(attrs):
                return super().project(attrs)
            values = _cached_numpy_model(self).marginal(attrs) * float(self.total)
            return Factor(self.domain.project(attrs), jnp.asarray(values))

    return _Model


_LAST_MODEL: list[Any] = []  # (mbi model, its numpy GraphicalModel): AIM asks one per round


def _cached_numpy_model(model: Any) -> GraphicalModel:
    if not _LAST_MODEL or _LAST_MODEL[0] is not model:
        _LAST_MODEL[:] = [model, numpy_model(model)]
    return _LAST_MODEL[1]


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

    def _algorithm(self, estimator: Any, d: int) -> tuple[Any, float]:
        """OpenDP's algorithm object and the share of rho for the 1-way marginals."""
        raise NotImplementedError

    def _fit_budget(self, rho: float, d: int) -> float:
        """The budget given to the algorithm after the 1-way marginals (``rho`` less an ulp)."""
        return float(np.nextafter(rho, 0.0))

    def measurement(self, domain: Domain) -> tuple[Any, float]:
        """OpenDP's measurement (1-way marginals, then the algorithm, composed adaptively)
        and the rho its privacy map certifies, checked to be at most :attr:`rho`.

        Its input is a polars LazyFrame of the attributes' codes (``u32``, ``0..size-1``);
        its output ``(marginals, model)``.
        """
        dp = _opendp()
        from opendp._internal import _new_pure_function
        from opendp.extras.mbi import Count, Fixed, Marginals

        estimator = functools.partial(_fit, iters=self.iters)
        algorithm, share = self._algorithm(estimator, len(domain))
        space = dp.lazyframe_domain([
            dp.series_domain(a, dp.atom_domain(T="u32", bounds=(0, size - 1)))
            for a, size in zip(domain.attributes, domain.sizes, strict=True)])
        metric = dp.frame_distance(dp.symmetric_distance())
        measure = dp.zero_concentrated_divergence()
        d_in = [dp.polars.Bound(per_group=1)]  # one record added or removed
        rho = self.rho
        rho_oneway = rho * share
        rho_rest = self._fit_budget(rho - rho_oneway, len(domain))
        oneway = Fixed(queries=[Count((a,)) for a in domain.attributes], estimator=estimator)

        def release(queryable: Any) -> Any:
            marginals, model = queryable(oneway.make_marginals(
                space, metric, measure, d_in, rho_oneway, marginals=Marginals(), model=None))
            return queryable(algorithm.make_marginals(
                space, metric, measure, d_in, rho_rest, marginals=marginals, model=model))

        meas = dp.c.make_adaptive_composition(space, metric, measure, d_in,
                                              [rho_oneway, rho_rest])
        meas = meas >> _new_pure_function(release)
        spent = float(meas.map(d_in))
        if spent > rho:
            raise DPMarginalsError(f"{self.name}: OpenDP's measurement spends rho = {spent} "
                                   f"> {rho}")
        return meas, spent

    def run(self, data: Dataset, *, rng: RNGLike = None) -> ContingencySynopsis:
        """Measure and fit on ``data``.  The noise is OpenDP's, never seeded: ``rng`` is
        accepted for the :class:`~dpmarginals.methods.Method` interface and unused."""
        import polars as pl

        plan = self.plan(data.domain, data.n)
        check_map_count(int(plan.params.get("rounds") or 0), method=self.name)
        clock = time.perf_counter()
        meas, spent = self.measurement(data.domain)
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
    """

    name: ClassVar[str] = "mst"

    def _params(self, d: int) -> dict[str, Any]:
        return {"oneway_share": MST_ONEWAY_SHARE, "measure_split": 0.5}

    def _algorithm(self, estimator: Any, d: int) -> tuple[Any, float]:
        from opendp.extras.mbi import MST as OpenDPMST

        if d < 2:
            raise DPMarginalsError("mst needs at least 2 attributes")
        return OpenDPMST(estimator=estimator, measure_split=0.5), MST_ONEWAY_SHARE

    def _fit_budget(self, rho: float, d: int) -> float:
        """A budget whose split OpenDP's own accounting accepts.

        OpenDP 0.16's MST gives each of its ``d - 1`` selections ``prior(select / (d - 1))``
        and later checks their composition, whose sum OpenDP rounds up, against ``select``:
        for some values it exceeds it by one ulp ("insufficient budget for query", seen at
        epsilon 1 on NLTCS) after the 1-way marginals were spent.  The same check is made here
        first, on the public budget alone, trimming ``rho`` by 1e-12 relative steps.
        """
        dp = _opendp()

        def prior(x: float) -> float:
            return float(np.nextafter(x, -np.inf))

        space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float))
        for step in range(100):
            budget = float(prior(rho * (1 - step * 1e-12)))
            select = float(prior(prior(budget - budget * 0.5)))
            each = float(prior(select / max(d - 1, 1)))
            spent = dp.c.make_adaptive_composition(
                *space, dp.zero_concentrated_divergence(), 1.0, [each] * max(d - 1, 1)).map(1.0)
            if spent <= select:
                return budget
        raise DPMarginalsError(f"mst: no split of rho = {rho} passes OpenDP's accounting")


@dataclass(eq=False)
class ContingencySynopsis(Synopsis):
    """A graphical model fitted to noisy marginals by AIM or MST.

    ``measurements``: each measured attribute set with its noise (standard deviation of
    one count); ``total``: the model's estimate of the number of records.
    """

    kind: ClassVar[str] = "contingency"
    domain: Domain
    model: GraphicalModel
    measurements: list[tuple[tuple[str, ...], float]]
    total: float
    method: str = "aim"
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mbi(cls, domain: Domain, method: str, marginals: Any, model: Any
                 ) -> ContingencySynopsis:
        """From OpenDP's ``(Marginals, MarkovRandomField)``: log-potentials as numpy."""
        pots = numpy_model(model).potentials
        measured = [(tuple(m.clique), float(m.stddev)) for m in marginals.flatten()]
        _LAST_MODEL.clear()
        return cls(domain, GraphicalModel(domain, pots), measured, float(model.total), method)

    def marginal(self, attrs: Sequence[str], *, std: bool = False) -> MarginalTable:
        """The model's marginal; ``std=True`` attaches :meth:`measurement_std`."""
        attrs = check_query(self.domain, attrs)
        table = MarginalTable(self.domain.project(attrs), self.model.marginal(attrs))
        return table.replace(std=self.measurement_std(attrs)) if std else table

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        return maximal_overlaps([c for c, _ in self.measurements], attrs)

    def measurement_std(self, attrs: Sequence[str]) -> np.ndarray:
        """Per-cell standard error of a marginal inside measured sets (as a fraction).

        A measured set ``C ⊇ Q`` with per-count noise ``sigma_C`` gives each cell of Q as a
        sum of ``a_C = cells(C) / cells(Q)`` noisy counts; the measurements are combined with
        inverse-variance weights: ``var = 1 / sum_C 1 / (a_C sigma_C^2)``, divided by the
        total squared (what OpenDP's ``ContingencyTable.std`` computes; the AIM paper's
        §5 estimate for measured marginals).  It is the error of that linear estimate; the
        model's answer is its projection onto one consistent, non-negative distribution,
        usually closer.  A marginal no measured set contains has no such error: the
        model's inference there has no calibrated standard error, and asking is an error.
        """
        attrs = check_query(self.domain, attrs)
        cells = self.domain.project(attrs).cells()
        precision = sum(1.0 / (self.domain.project(c).cells() / cells * sd**2)
                        for c, sd in self.measurements if set(attrs) <= set(c))
        if precision == 0:
            inside = [list(c) for c, _ in self.measurements if len(c) > 1][:3]
            raise DPMarginalsError(
                f"{self.method} measured no marginal containing {list(attrs)}: its answer is "
                "the graphical model's inference, which has no calibrated standard error; "
                f"--std applies to marginals inside a measured set, e.g. {inside}")
        std = math.sqrt(1.0 / precision) / max(self.total, 1.0)
        return np.full(self.domain.project(attrs).shape, std)

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "total": self.total, "model": self.model.to_dict(),
                "measurements": [{"attributes": list(c), "stddev": sd}
                                 for c, sd in self.measurements]}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        measured = [(tuple(m["attributes"]), float(m["stddev"]))
                    for m in payload["measurements"]]
        return cls(domain, GraphicalModel.from_dict(domain, payload["model"]), measured,
                   float(payload["total"]), method, dict(payload.get("info", {})))

