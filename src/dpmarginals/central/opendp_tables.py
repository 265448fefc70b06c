"""OpenDP's side of AIM and MST: the ``tables`` extra, the composed measurement, and a
budget split that OpenDP 0.16's MST accepts.

The measurement is OpenDP's adaptive composition (zCDP) of two queries on a polars
LazyFrame of the attributes' codes: every 1-way marginal (``opendp.extras.mbi.Fixed``),
then the algorithm (``AIM`` or ``MST``) from there; its privacy map, not ours, says what
the release spends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.extras import MissingExtraError, require

__all__ = ["certified_rho", "marginals_measurement", "mst_fit_budget", "require_tables"]

WHAT = "AIM and MST (OpenDP's contingency tables)"


def require_tables() -> Any:
    """OpenDP with its ``mbi`` module, polars, and mbi with 64-bit JAX (the ``tables``
    extra), or a one-line :class:`~dpmarginals.core.extras.MissingExtraError`."""
    from ..inference.pgm import require_mbi

    for module in ("polars", "opendp.prelude", "jax"):
        require(module, extra="tables", what=WHAT)
    try:  # before OpenDP imports mbi: 64-bit JAX, and mbi's import-time advice silenced
        require_mbi()
    except MissingExtraError:
        require("mbi", extra="tables", what=WHAT)
        raise
    require("opendp.extras.mbi", extra="tables", what=WHAT)
    dp = require("opendp.prelude", extra="tables", what=WHAT)
    import jax

    # mbi's advice: its many small compiled programs make JAX's persistent cache a cost
    jax.config.update("jax_enable_compilation_cache", False)
    dp.enable_features("contrib")
    return dp


def marginals_measurement(domain: Domain, algorithm: Any, estimator: Callable[..., Any],
                          rho_oneway: float, rho_rest: float) -> Any:
    """OpenDP's adaptive composition of the 1-way marginals (``rho_oneway``) and then
    ``algorithm`` (``rho_rest``), on a LazyFrame of ``u32`` codes ``0..size-1``; its output
    is ``(marginals, model)``.  Neighbours: one record added or removed."""
    dp = require_tables()
    from opendp._internal import _new_pure_function
    from opendp.extras.mbi import Count, Fixed, Marginals

    space = dp.lazyframe_domain([
        dp.series_domain(a, dp.atom_domain(T="u32", bounds=(0, size - 1)))
        for a, size in zip(domain.attributes, domain.sizes, strict=True)])
    metric = dp.frame_distance(dp.symmetric_distance())
    measure = dp.zero_concentrated_divergence()
    d_in = [dp.polars.Bound(per_group=1)]  # one record added or removed
    oneway = Fixed(queries=[Count((a,)) for a in domain.attributes], estimator=estimator)

    def release(queryable: Any) -> Any:
        marginals, model = queryable(oneway.make_marginals(
            space, metric, measure, d_in, rho_oneway, marginals=Marginals(), model=None))
        return queryable(algorithm.make_marginals(
            space, metric, measure, d_in, rho_rest, marginals=marginals, model=model))

    meas = dp.c.make_adaptive_composition(space, metric, measure, d_in,
                                          [rho_oneway, rho_rest])
    return meas >> _new_pure_function(release)


def certified_rho(meas: Any) -> float:
    """What OpenDP's privacy map says ``meas`` spends when one record is added or removed."""
    dp = require_tables()
    return float(meas.map([dp.polars.Bound(per_group=1)]))


def mst_fit_budget(rho: float, d: int) -> float:
    """A budget for OpenDP's MST whose split OpenDP's own accounting accepts.

    OpenDP 0.16's MST gives each of its ``d - 1`` selections ``prior(select / (d - 1))``
    and later checks their composition, whose sum OpenDP rounds up, against ``select``:
    for some values it exceeds it by one ulp ("insufficient budget for query", seen at
    epsilon 1 on NLTCS) after the 1-way marginals were spent.  The same check is made here
    first, on the public budget alone, trimming ``rho`` by 1e-12 relative steps.
    """
    dp = require_tables()

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
