"""Graphical-model inference from noisy marginals (private-pgm's ``mbi``), with shrinkage.

The faithful CALM pipeline makes the noisy views consistent and non-negative and answers
other marginals by local maximum entropy (CALM §4.1, §4.4).  This module is the
alternative of issue #9, in three steps:

1. **Empirical-Bayes shrinkage** (:func:`~dpmarginals.inference.shrinkage.eb_shrink`,
   numpy only): every marginal's top-order interaction is shrunk toward maximum entropy
   by its posterior mean under a prior fitted over all interactions of its order.
2. **Clique selection** (:func:`~dpmarginals.inference.cliques.select_cliques`): views
   whose interaction was shrunk away are modelled through their sub-marginals; when the
   fit is predicted to exceed ``max_fit_seconds`` or ``max_fit_memory_mb``
   (:mod:`dpmarginals.inference.pgm_cost`), the weakest views are replaced the same way.
3. **Graphical-model fit** (:func:`fit_graphical_model`): the selected marginals go as
   ``mbi.LinearMeasurement(table, clique, stddev)`` into ``mbi``'s mirror-descent estimator
   (McKenna, Sheldon, Miklau, ICML 2019), which returns the maximum-entropy distribution
   in the marginal polytope closest to them — one non-negative, consistent joint
   distribution, kept as numpy log-potentials
   (:class:`~dpmarginals.inference.graphical_model.GraphicalModel`).  A fit stops once
   converged (:data:`GAP`); one predicted over the limits is refused before it starts, and
   one that uses twice its predicted CPU time is stopped.

Only step 3 needs the optional ``pgm`` extra (``pip install 'dpmarginals[pgm]'``); it
switches JAX to 64-bit floats for the whole process (``jax_enable_x64``), as ``mbi``
recommends, and keeps JAX's compiled programs on disk (:func:`require_mbi`).
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpmarginals.core import tuned as _tuned
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.extras import MissingExtraError, message
from dpmarginals.inference.cliques import KEEP, select_cliques
from dpmarginals.inference.graphical_model import GraphicalModel
from dpmarginals.inference.helmert import project
from dpmarginals.inference.pgm_cost import (
    BLOCK,
    MAX_FIT_MEMORY_MB,
    MAX_FIT_SECONDS,
    FitWatch,
    check_fit,
    check_limits,
    fit_within,
    limits_to_json,
    predict_fit,
)
from dpmarginals.inference.shrinkage import ADAPTIVE_PRIORS, NoisyMarginal, eb_shrink

__all__ = [
    "EXTRA_MESSAGE",
    "GAP",
    "ITERS",
    "PRIORS",
    "fit_graphical_model",
    "pgm_estimate",
    "require_mbi",
]

EXTRA_MESSAGE = message("pgm", "graphical-model inference (calm-pgm, inference='pgm')")

#: Mirror-descent iterations at most.  Fewer regularise small models (on 18 collections of
#: MSNBC, Kosarak, Adult at d = 8-16 with pairs or small junction trees, calm-pgm's mean SSE
#: was 0.61x CALM's after 200 iterations, 0.65x after 1000) but leave dense ones far from the
#: optimum: 560 overlapping triples in one 16-way clique (Kosarak d = 16, n = 2^20) were 17x
#: CALM's error after 200 iterations and 0.46x after 1000 (Armijo's step shrinks with the
#: overlap).  A fit stops sooner once it has converged (:data:`GAP`).
ITERS = _tuned.ITERS  # provenance: core/tuned.py
#: Convergence: a fit stops once, for two blocks running, the loss still to gain is
#: estimated at most this (``t x`` the last block's mean decrease per step: the remaining
#: gap of a method converging as 1/t).  The loss is half the chi-square distance of the
#: model's marginals to the (shrunk) measurements in their noise standard deviations, and it
#: is quadratic, so a gap of 1/2 puts the model within one standard deviation, summed over
#: all measured cells, of the optimum's marginals (the reports' noise is one per cell).
#: None: run :data:`ITERS`.
GAP = _tuned.GAP  # provenance: core/tuned.py
#: Blocks in a row that must meet :data:`GAP` (mbi's ``patience``).
PATIENCE = 2
#: ``$DPMARGINALS_JAX_CACHE``: where JAX keeps compiled programs across processes (default
#: ``~/.cache/dpmarginals/jax``); "off" keeps them in memory only.
ENV_JAX_CACHE = "DPMARGINALS_JAX_CACHE"

#: Shrinkage priors of :func:`pgm_estimate` (see there).
PRIORS = ("exchangeable", "adaptive")


def require_mbi() -> Any:
    """Import ``mbi`` (64-bit JAX, compilation cached on disk), or raise a
    :class:`~dpmarginals.core.extras.MissingExtraError` naming the extra."""
    try:
        import jax
    except ImportError:
        raise MissingExtraError(EXTRA_MESSAGE, "pgm", "jax") from None
    jax.config.update("jax_enable_x64", True)
    _cache_compilation(jax)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mbi
            from mbi import estimation  # noqa: F401
    except ImportError:
        raise MissingExtraError(EXTRA_MESSAGE, "pgm", "mbi") from None
    return mbi


def _cache_compilation(jax: Any) -> None:
    """JAX's persistent compilation cache in ``$DPMARGINALS_JAX_CACHE`` (default the user
    cache's ``jax`` folder), unless the user chose a folder for JAX already.

    Every program is kept, however small or fast to compile (``mbi`` compiles a few large
    programs per model structure and many small ones): the first fit of a structure in a
    new process then loads them instead of compiling (3.5 s instead of 18 s on a 65-clique
    model here).  ``DPMARGINALS_JAX_CACHE=off`` turns it off.
    """
    setting = os.environ.get(ENV_JAX_CACHE, "").strip()
    if setting.lower() in ("off", "0", "false", "no", "none") or \
            jax.config.jax_compilation_cache_dir:
        return
    if setting:
        folder = os.path.expanduser(setting)
    else:
        from dpmarginals.datasets.files import cache_dir

        folder = str(cache_dir() / "jax")
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)



def fit_graphical_model(
    domain: Domain,
    measurements: Sequence[tuple[Sequence[str], np.ndarray, float]],
    *,
    iters: int = ITERS,
    warm_start: GraphicalModel | None = None,
    gap: float | None = GAP,
    watch: FitWatch | None = None,
) -> GraphicalModel:
    """``mbi``'s mirror descent on ``(clique, table of fractions, per-cell stddev)``.

    Minimises ``sum_i ||mu_{C_i} - y_i||^2 / (2 sigma_i^2)`` over the marginal polytope of
    the graphical model on the measured cliques (total fixed to 1), for at most ``iters``
    steps, stopping sooner once converged (:class:`Convergence`, ``gap``; None runs every
    step).  ``watch``: a :class:`FitWatch` called after each block, which stops a fit that
    overruns its prediction.
    """
    mbi = require_mbi()

    # mbi sees the attributes by their index: it orders junction-tree messages through
    # sets, and strings hash differently in every process (integers do not), so with
    # names each process compiled a different program and JAX's disk cache never hit.
    dom = mbi.Domain(tuple(range(len(domain))), domain.sizes)
    meas = []
    for attrs, table, sd in measurements:
        canon = domain.in_order(attrs)
        y = project(tuple(attrs), np.asarray(table, dtype=np.float64), canon)
        meas.append(mbi.LinearMeasurement(y.ravel(), tuple(map(domain.index, canon)),
                                          float(sd)))
    warm = None
    if warm_start is not None:
        warm = _to_clique_vector(mbi, dom, warm_start)
    estimator = _mirror_descent()
    try:
        model = estimator.estimate(dom, meas, known_total=1.0, iters=iters, warm_start=warm,
                                   callback_fn=Convergence(gap, watch))
    except _Converged as done:
        model = estimator._finalize(done.state, 1.0)
    pots = []
    for clique in model.potentials.cliques:
        f = model.potentials.tables[clique]
        attrs = tuple(domain.attributes[i] for i in f.domain.attributes)
        pots.append((attrs, np.asarray(f.values, dtype=np.float64)))
    return GraphicalModel(domain, pots)


class _Converged(Exception):
    """Raised by :class:`Convergence` with the converged state (mbi's loop has no other
    exit before ``iters``); the state is intact: it is donated only to the next block."""

    def __init__(self, state: Any) -> None:
        super().__init__("converged")
        self.state = state


class Convergence:
    """mbi's per-block callback (given the whole mirror-descent state): the ``watch``, then
    the stop of :data:`GAP`: after ``t`` steps, ``t x`` the mean decrease per step over the
    last block estimates the loss still to gain (exact for a 1/t rate, an over-estimate for
    a faster one); at most ``gap`` for :data:`PATIENCE` blocks running ends the fit."""

    def __init__(self, gap: float | None, watch: FitWatch | None = None) -> None:
        self.gap, self.watch = gap, watch
        self.steps, self.calm, self.loss = 0, 0, math.inf

    def __call__(self, state: Any) -> None:
        if self.watch is not None:
            self.watch(state.mu)
        self.steps += BLOCK
        loss = float(state.loss)
        remaining = self.steps * (self.loss - loss) / BLOCK
        self.loss = loss
        if self.gap is None:
            return
        self.calm = self.calm + 1 if remaining <= self.gap else 0
        if self.calm >= PATIENCE:
            raise _Converged(state)


@functools.cache
def _mirror_descent() -> Any:
    """mbi's mirror descent (Armijo steps) whose callback gets the whole state (one class
    and instance: JAX's compiled steps are keyed by it)."""
    from mbi import estimation

    class StateCallback(estimation.MirrorDescent):
        def _callback_value(self, state: Any, known_total: float, constraints: Any = ()
                            ) -> Any:
            return state

    return StateCallback()


#: Model structures (domain sizes, cliques) compiled in this process: no compilation to
#: predict for them (a bootstrap's re-fits, repeated runs).
_COMPILED: set[tuple[Any, ...]] = set()
#: Compiled structures a process keeps before it lets them all go (:func:`_forget_compiled`).
#: Each holds about 200 memory mappings of compiled code (6 pairs of 8 binary attributes,
#: measured here) and Linux allows 65,530 per process (``vm.max_map_count``): a held-out
#: run's worker that had fitted a few hundred structures was killed by LLVM ("Unable to
#: allocate section memory").
MAX_COMPILED = 64


def _forget_compiled() -> None:
    """Drop JAX's compiled programs from memory (they stay in the disk cache)."""
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
    _COMPILED.clear()


def _structure(domain: Domain, cliques: Sequence[Sequence[str]]) -> tuple[Any, ...]:
    """What JAX's compiled program depends on: the sizes and the measurements' cliques in
    their order."""
    return (domain.attributes, domain.sizes, tuple(tuple(c) for c in cliques))


def _to_clique_vector(mbi: Any, dom: Any, model: GraphicalModel) -> Any:
    import jax.numpy as jnp

    tables = {}
    for attrs, table in model.potentials:
        clique = tuple(map(model.domain.index, attrs))
        tables[clique] = mbi.Factor(dom.project(clique), jnp.asarray(table))
    return mbi.CliqueVector(dom, list(tables), tables)


def pgm_estimate(
    domain: Domain,
    views: Sequence[NoisyMarginal],
    *,
    shrink: bool = True,
    keep: float = KEEP,
    iters: int = ITERS,
    warm_start: GraphicalModel | None = None,
    cliques: Sequence[Sequence[str]] | None = None,
    gap: float | None = GAP,
    max_fit_seconds: float | None = MAX_FIT_SECONDS,
    max_fit_memory_mb: float | None = MAX_FIT_MEMORY_MB,
    priors: str = "exchangeable",
    population: int | None = None,
) -> tuple[GraphicalModel, dict[str, Any]]:
    """The whole inference: shrinkage (optional), clique selection, ``mbi`` fit.

    ``priors``: the shrinkage priors (:data:`PRIORS`): ``"exchangeable"`` (calm-pgm's: one
    scale mixture per order) or ``"adaptive"`` (the adaptive method's numpy release's: pairs'
    prior scaled by capacity, binary interactions' sign learned where the residuals show
    one, binary 1-way marginals toward their common centre: :func:`eb_shrink` with
    :data:`~dpmarginals.inference.shrinkage.ADAPTIVE_PRIORS`).  ``population``: the number of
    users the views' groups were drawn from (each user in one group): the shrinkage's noise
    then counts the groups' sampling error (:func:`eb_shrink`; None: the oracles' only).

    ``shrink=False`` gives the plain ``mbi`` estimator on the noisy views (every view a
    measurement with its stddev).  ``cliques`` fixes the selected cliques (a re-fit with
    the same structure reuses JAX's compiled program).  The fit's CPU seconds and memory
    are predicted first (:func:`~dpmarginals.inference.pgm_cost.predict_fit`): when the
    selected cliques' prediction exceeds ``max_fit_seconds`` or ``max_fit_memory_mb``, the
    views with the weakest shrunk interactions are modelled through their sub-marginals
    only until it does not; with ``cliques`` fixed, or without shrinkage, or when even the
    1-way model exceeds them, the fit is refused, naming the prediction (``None``: no
    limit).  A fit that uses more than twice its predicted CPU time is stopped.  Returns
    the model and an info dict (cliques, seconds, prediction, iterations run, fitted prior
    variances per order).
    """
    clock = time.perf_counter()
    require_mbi()
    max_fit_seconds, max_fit_memory_mb = check_limits(max_fit_seconds, max_fit_memory_mb)
    if priors not in PRIORS:
        raise DPMarginalsError(f"priors must be one of {', '.join(PRIORS)}, got {priors!r}")
    if shrink:
        shrunk = eb_shrink(domain, views, population=population,
                           **({} if priors == "exchangeable" else ADAPTIVE_PRIORS))
        sets = [domain.in_order(v.attributes) for v in views]
        info: dict[str, Any] = {
            "shrink": True, "keep": keep, "priors": priors,
            "prior_variance": {str(j): shrunk.prior_variance(j) for j in sorted(shrunk.prior)},
            "shrink_factors": {",".join(sorted(sub)): round(f, 6)
                               for sub, f in shrunk.factor.items()},
            **shrunk.per_order(),
        }
        if cliques is None:
            unbounded = select_cliques(sets, shrunk, keep=keep)
            cliques = select_cliques(
                sets, shrunk, keep=keep,
                fits=lambda c: fit_within(domain, c, iters, max_fit_seconds,
                                          max_fit_memory_mb))
            if cliques != unbounded:
                info["cliques_reduced"] = _reduction(unbounded, cliques)
        cliques = [domain.in_order(c) for c in cliques]
        missing = [list(c) for c in cliques if c not in shrunk.tables]
        if missing:
            raise DPMarginalsError(f"cliques {missing} are not inside any view")
        meas = [(c, shrunk.tables[c], math.sqrt(shrunk.noise[c])) for c in cliques]
    else:
        meas = [(tuple(v.attributes), np.asarray(v.table), math.sqrt(v.variance)) for v in views]
        cliques = [domain.in_order(v.attributes) for v in views]
        info = {"shrink": False}
    structure = _structure(domain, [c for c, _, _ in meas])
    if structure not in _COMPILED and len(_COMPILED) >= MAX_COMPILED:
        _forget_compiled()
    cost = predict_fit(domain, [c for c, _, _ in meas], iters, compiled=structure in _COMPILED)
    check_fit(cost, max_fit_seconds, max_fit_memory_mb)
    if "cliques_reduced" in info:
        reduced = info["cliques_reduced"]
        warnings.warn(
            f"graphical model: {reduced['replaced']} of the {reduced['of']} marginals are "
            "modelled through their sub-marginals only (the weakest interactions), to keep "
            f"the fit within max_fit_seconds={max_fit_seconds:g} and "
            f"max_fit_memory_mb={max_fit_memory_mb:g} (predicted {cost.describe()}); raise "
            "them for the full model", stacklevel=2)
    shrunk_seconds = time.perf_counter() - clock
    watch = FitWatch(cost)
    model = fit_graphical_model(domain, meas, iters=iters, warm_start=warm_start, gap=gap,
                                watch=watch)
    _COMPILED.add(structure)
    info.update({"cliques": [list(c) for c in cliques], "iters": iters,
                 "iterations": watch.steps, "gap": gap,
                 "predicted": {"seconds": round(cost.seconds, 3),
                               "memory_mb": round(cost.memory_mb, 1),
                               "compile_seconds": round(cost.compile_seconds, 3),
                               "step_seconds": cost.step_seconds,
                               "tree_cells": cost.tree_cells, "step_cells": cost.step_cells},
                 "limits": limits_to_json(max_fit_seconds, max_fit_memory_mb),
                 "fit_cpu_seconds": watch.cpu_seconds,
                 "shrink_seconds": shrunk_seconds,
                 "fit_seconds": time.perf_counter() - clock - shrunk_seconds})
    return model, info


def _reduction(full: Sequence[tuple[str, ...]], chosen: Sequence[tuple[str, ...]]
               ) -> dict[str, Any]:
    """How a budgeted selection differs from the unbounded one."""
    kept = set(chosen)
    replaced = [s for s in full if s not in kept]
    return {"replaced": len(replaced), "of": len(full),
            "examples": [list(s) for s in replaced[:5]]}
