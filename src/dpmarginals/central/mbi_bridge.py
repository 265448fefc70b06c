"""The bridge between OpenDP 0.16's ``opendp.extras.mbi`` (written for mbi 1.1) and mbi 2.

OpenDP's AIM and MST call an estimator with ``(domain, loss_fn, potentials=...)`` and read
back a model whose ``cliques`` is a list and whose domain has ``attrs``; mbi 2's estimator
is a class, its ``cliques`` a tuple (OpenDP's AIM extends it with a list) and its domain's
names are ``attributes`` (OpenDP's MST reads ``attrs``).  :func:`fit` and
:func:`model_class` bridge both, and the model answers marginals outside its cliques by
numpy's variable elimination (:func:`numpy_model`) instead of a JAX program compiled per
query.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..core.domain import Domain
from ..inference.graphical_model import GraphicalModel

__all__ = ["cached_numpy_model", "clear_cache", "fit", "model_class", "numpy_model"]


def fit(domain: Any, loss_fn: Any, *, potentials: Any = None, iters: int) -> Any:
    """The estimator OpenDP's algorithms call: mbi's mirror descent, warm-started."""
    from mbi import estimation

    model = estimation.MirrorDescent().estimate(domain, loss_fn, iters=iters,
                                                warm_start=potentials)
    return model_class()(potentials=model.potentials, marginals=model.marginals,
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
def model_class() -> type:
    """mbi's ``MarkovRandomField`` with list ``cliques`` and numpy marginals.

    ``project`` of a set outside the model's cliques is variable elimination, which JAX
    compiles anew for every (model, query) pair, and AIM scores every candidate marginal
    against every round's model: py-spy found nearly all of a run's time in JAX compiles
    (NLTCS, d = 8: 18 minutes for 15 rounds on a loaded 2-core machine).  The same marginal
    by numpy's variable elimination (:class:`~dpmarginals.inference.graphical_model.GraphicalModel`)
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
            values = cached_numpy_model(self).marginal(attrs) * float(self.total)
            return Factor(self.domain.project(attrs), jnp.asarray(values))

    return _Model


_LAST_MODEL: list[Any] = []  # (mbi model, its numpy GraphicalModel): AIM asks one per round


def cached_numpy_model(model: Any) -> GraphicalModel:
    """:func:`numpy_model` of ``model``, kept until the next model is asked for."""
    if not _LAST_MODEL or _LAST_MODEL[0] is not model:
        _LAST_MODEL[:] = [model, numpy_model(model)]
    return _LAST_MODEL[1]


def clear_cache() -> None:
    """Forget the cached model (a release is done with it)."""
    _LAST_MODEL.clear()
