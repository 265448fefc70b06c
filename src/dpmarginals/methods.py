"""Every marginal-release method behind one interface.

``make(name, **params)`` returns an object with ``name``, ``plan(domain, n)`` (the
public, JSON-serialisable :class:`~dpmarginals.protocol.plan.Plan`) and ``run(data, rng=...)``
returning a :class:`~dpmarginals.synopsis.base.Synopsis`.

>>> make("calm", epsilon=1.0, k=3).name
'calm'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .central.contingency import AIM, MST
from .central.priview import PriView
from .central.residual import ResidualPlanner
from .core.dataset import Dataset
from .core.domain import Domain
from .core.errors import DPMarginalsError
from .core.randomness import RNGLike
from .local.adaptive import Adaptive
from .local.auto import Auto
from .local.calm import CALM
from .local.calm_pgm import CALMPGM
from .local.cormode import BASELINES
from .local.wfm import WFM
from .protocol.plan import Plan
from .synopsis.base import Synopsis, UniformSynopsis

__all__ = ["Method", "Uniform", "available", "for_plan", "make"]


class Method(Protocol):
    name: str

    def plan(self, domain: Domain, n: int) -> Plan: ...

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis: ...


@dataclass
class Uniform:
    """The Uniform baseline (CALM §5.1): answers every marginal with the uniform table."""

    epsilon: float | None = None
    k: int | None = None
    per_user: bool = False  # it reads no record, so there is nothing to randomize
    name: ClassVar[str] = "uni"

    def plan(self, domain: Domain, n: int) -> Plan:
        return Plan(self.name, float(self.epsilon or 0.0), domain, ())

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        return UniformSynopsis(data.domain)


_REGISTRY: dict[str, Callable[..., Any]] = {
    "calm": CALM,
    "calm_pgm": CALMPGM,  # issue #9: CALM's reports, graphical-model inference ('pgm' extra)
    "adaptive": Adaptive,  # issue #20: phases, each planned from the earlier phases' reports
    "auto": Auto,  # issue #36: the recommended local method, chosen from public facts only
    "uni": Uniform,
    # Issue #4: FC, AM, FT, EM, BE, PriView and the Cormode et al. family (InpRR, InpPS,
    # InpHT, MargRR, MargPS, MargHT, InpEM, InpOLH, InpHTCMS); see dpmarginals.local.cormode.
    **BASELINES,
    "priview": PriView,  # central DP, the papers' reference point
    "aim": AIM,  # issue #18: central (epsilon, delta)-DP through OpenDP ('tables' extra)
    "mst": MST,
    "residual": ResidualPlanner,  # issue 35: ResidualPlanner (Xiao et al. 2023), central
    "wfm": WFM,  # issue #20: the workload factorization mechanism (McKenna et al. 2020)
}


def available() -> list[str]:
    """Names accepted by :func:`make`."""
    return sorted(_REGISTRY)


def make(name: str, **params: Any) -> Method:
    """Build a method by name; unknown names and parameters are clear errors."""
    key = name.lower().replace("-", "_")
    if key not in _REGISTRY:
        raise DPMarginalsError(f"unknown method {name!r}; available: {', '.join(available())}")
    try:
        return _REGISTRY[key](**params)
    except TypeError as exc:
        raise DPMarginalsError(f"method {name!r}: {exc}") from None


def for_plan(plan: Plan, **options: Any) -> Any:
    """The method that made ``plan``, ready to ``release(plan, counts)`` its reports.

    Built by :func:`make` from the plan's method, epsilon and ``k``; ``options`` (e.g.
    ``max_rounds``, ``postprocess``) are passed on where the method takes them.  A plan made
    by ``auto`` (``params["auto"]``) is released by the inference auto picked.  A method
    whose reports cannot be released from counts is a clear error.
    """
    import dataclasses

    key = plan.method.lower().replace("-", "_")
    if key not in _REGISTRY:
        raise DPMarginalsError(f"the plan's method {plan.method!r} is unknown; available: "
                               f"{', '.join(available())}")
    picked = plan.params.get("auto") if isinstance(plan.params, dict) else None
    if isinstance(picked, dict) and key == "calm" and picked.get("chose") == "calm_pgm":
        from .local.auto import pgm_installed

        if pgm_installed():  # auto planned CALM's collection for calm-pgm's inference
            key = "calm_pgm"
    if isinstance(picked, dict) and key == "adaptive" and picked.get("inference") == "pgm":
        from .local.auto import ADAPTIVE_PGM, pgm_installed

        if pgm_installed():  # auto planned the phases for the graphical model's inference
            options = {**ADAPTIVE_PGM, **options}
    cls = _REGISTRY[key]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    params: dict[str, Any] = {"epsilon": plan.epsilon}
    if "k" in fields and plan.params.get("k") is not None:
        params["k"] = plan.params["k"]
    params.update({k: v for k, v in options.items() if k in fields})
    method = make(key, **params)
    if not callable(getattr(method, "release", None)):
        raise DPMarginalsError(f"method {plan.method!r} cannot be released from report counts "
                               "yet: its users do not report marginals through an oracle")
    return method
