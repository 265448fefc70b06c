"""``auto``: the recommended local-DP method, chosen from public facts only (issue #36).

The choice reads only what is public before any report: the domain, n, epsilon, k, whether
the collection can run in phases, and whether the optional graphical-model extra is
installed (and the fit within its limits).  It never reads the data, so it costs no
privacy and the same facts always give the same method.  The rule (docs/beyond-calm.md §7):

1. **Phases possible** (``release`` on a table in hand always can: every user still
   reports once; a campaign can unless ``phases=False``), and n large enough for the
   adaptive method's phase 1: the **adaptive method** (collection in phases, each planned
   from the reports so far, where Zhang et al.'s CALM plans once with a fixed theta), with
   the graphical model's inference on its phases when the ``pgm`` extra is installed (2-3%
   less error than its numpy inference on all three dev grids, at seconds a release
   instead of a fifth of one: :data:`~dpmarginals.core.tuned.AUTO_INFERENCE`), else its
   numpy inference (shrinkage, consistency, maximum entropy).
2. **One phase only**: CALM's plan, with **calm-pgm**'s inference (shrinkage with the
   adaptive method's priors, then private-pgm's estimator; McKenna, Sheldon, Miklau 2019)
   when the ``pgm`` extra is installed, else faithful **CALM**.

Chosen on the dev grid of CALM Fig. 4/5 (:mod:`dpmarginals.core.tuned`), reported on the
held-out benchmark (``dpmarginals experiment heldout``).

>>> from dpmarginals.core.domain import Domain
>>> dom = Domain.from_dict({f"x{i}": 2 for i in range(8)})
>>> choose(dom, 2**16, 1.0, 3, pgm=False).label
'adaptive'
>>> choose(dom, 2**16, 1.0, 3, pgm=True).label
'adaptive (inference pgm)'
>>> choose(dom, 2**16, 1.0, 3, phases=False, pgm=False).method
'calm'
>>> choose(dom, 2**16, 1.0, 3, phases=False, pgm=True).method
'calm_pgm'
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon, check_k
from ..core.randomness import RNGLike
from ..core.tuned import AUTO_INFERENCE
from ..protocol.plan import Plan
from ..synopsis.base import Synopsis
from .adaptive import Adaptive
from .calm import CALM

__all__ = ["Auto", "Choice", "choose", "pgm_installed"]

#: The methods auto chooses among (registry names).
CANDIDATES = ("calm", "calm_pgm", "adaptive")
#: How auto builds the adaptive method when it picks the graphical model's inference: the
#: adaptive method's priors, and the numpy inference if the fit is refused or stopped (a
#: model over its limits drops its weakest interactions first, as calm-pgm's does: on the
#: dev grid's multi-valued panels that beat the numpy inference, docs/beyond-calm.md §7).
ADAPTIVE_PGM = {"inference": "pgm", "priors": "adaptive", "pgm_fallback": True}


def pgm_installed() -> bool:
    """Whether the optional graphical-model extra (``mbi`` and JAX) is importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("mbi", "jax"))


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` picked: a method's registry name, its inference (for the
    adaptive method), and why, in one sentence."""

    method: str
    inference: str | None
    reason: str

    @property
    def label(self) -> str:
        """e.g. ``adaptive (inference pgm)``."""
        return self.method + (f" (inference {self.inference})" if self.inference else "")

    def to_dict(self) -> dict[str, Any]:
        return {"method": "auto", "chose": self.method, "inference": self.inference,
                "reason": self.reason}

    def build(self, epsilon: float, k: int, **params: Any) -> Any:
        """The chosen method object (``params``: e.g. ``per_user``, fit limits)."""
        from .calm_pgm import CALMPGM

        if self.method == "adaptive":
            picked = ADAPTIVE_PGM if self.inference == "pgm" else {}
            return Adaptive(epsilon=epsilon, k=k, **picked, **params)
        cls = CALMPGM if self.method == "calm_pgm" else CALM
        return cls(epsilon=epsilon, k=k, **params)


def _adaptive_fits(domain: Domain, n: int, epsilon: float, k: int) -> str | None:
    """None when the adaptive method can plan phase 1 for these facts, else why not."""
    try:
        Adaptive(epsilon=epsilon, k=k).plan(domain, n)
    except DPMarginalsError as exc:
        return str(exc)
    return None


def choose(domain: Domain, n: int, epsilon: float, k: int, *, phases: bool = True,
           pgm: bool | None = None) -> Choice:
    """The method ``auto`` uses for these public facts (module docstring).  ``pgm``:
    whether graphical-model inference is available (default: whether the extra is
    installed)."""
    epsilon = check_epsilon(epsilon)
    k = check_k(k, len(domain))
    has_pgm = pgm_installed() if pgm is None else bool(pgm)
    facts = f"d = {len(domain)}, n = {n:,}, eps = {epsilon:g}, k = {k}"
    if phases:
        why_not = _adaptive_fits(domain, n, epsilon, k)
        if why_not is None:
            why = (f"{facts}, phases possible: the adaptive method (collection in phases, each "
                   "planned from the reports so far)")
            if has_pgm and AUTO_INFERENCE == "pgm":
                return Choice("adaptive", "pgm", why + ", with graphical-model inference")
            return Choice("adaptive", None, why + ("" if has_pgm else
                                                   ", no graphical-model extra: its numpy "
                                                   "inference"))
        facts += f" (no phases: {why_not})"
    else:
        facts += ", one phase only"
    if has_pgm:
        return Choice("calm_pgm", None, f"{facts}: CALM's plan with graphical-model inference")
    return Choice("calm", None, f"{facts}, no graphical-model extra: faithful CALM")


@dataclass
class Auto:
    """The recommended local method: :func:`choose` from the public facts, then that
    method.  ``phases=False``: the collection runs in one phase.  ``max_fit_seconds``,
    ``max_fit_memory_mb``: the graphical-model fit's limits (None: each method's default),
    passed to the chosen method where it takes them.

    The synopsis records the choice in ``info["auto"]`` (``chose``, ``inference``,
    ``reason``).

    >>> from dpmarginals.core.domain import Domain
    >>> plan = Auto(epsilon=1.0, k=3).plan(Domain.from_dict({f"x{i}": 2 for i in range(8)}),
    ...                                    2**16)
    >>> plan.method, plan.params["phase"]
    ('adaptive', 1)
    """

    epsilon: float
    k: int = 3
    phases: bool = True
    per_user: bool = False
    max_fit_seconds: float | None = None
    max_fit_memory_mb: float | None = None
    name: ClassVar[str] = "auto"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)

    def choice(self, domain: Domain, n: int) -> Choice:
        """What :func:`choose` picks for ``domain`` and ``n`` (and this epsilon, k, phases)."""
        return choose(domain, n, self.epsilon, min(self.k, len(domain)), phases=self.phases)

    def method_for(self, domain: Domain, n: int) -> Any:
        """The chosen method object for these facts."""
        choice = self.choice(domain, n)
        params: dict[str, Any] = {"per_user": self.per_user}
        if choice.method == "calm_pgm" or choice.inference == "pgm":
            params.update({key: value for key in ("max_fit_seconds", "max_fit_memory_mb")
                           if (value := getattr(self, key)) is not None})
        return choice.build(self.epsilon, min(self.k, len(domain)), **params)

    def plan(self, domain: Domain, n: int) -> Plan:
        """The chosen method's (first) public plan."""
        return self.method_for(domain, n).plan(domain, n)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        """The chosen method's run; ``info["auto"]`` says which and why."""
        choice = self.choice(data.domain, data.n)
        synopsis = self.method_for(data.domain, data.n).run(data, rng=rng)
        synopsis.info["auto"] = choice.to_dict()
        return synopsis
