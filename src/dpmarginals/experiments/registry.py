"""The experiments by name: ``get(name)``, ``names()``, ``describe()``.

Each experiment is defined in :mod:`.calm_figures` (CALM §5) or :mod:`.cormode_figures`
(Cormode et al. §5, §6 and appendix B), with its full grid (the paper's, where this
machine and the available data allow) and a quick grid (what CI runs).

>>> "calm-fig4" in names() and "cormode-fig4" in names()
True
"""

from __future__ import annotations

from ..core.errors import DPMarginalsError
from .adaptive import ADAPTIVE_EXPERIMENTS
from .beyond_calm import BEYOND_CALM_EXPERIMENTS
from .calm_figures import CALM_EXPERIMENTS
from .calm_population import POPULATION_EXPERIMENTS
from .central_tables import CENTRAL_TABLES_EXPERIMENTS
from .cormode_figures import CORMODE_EXPERIMENTS
from .heldout import HELDOUT_EXPERIMENTS
from .runner import Experiment

__all__ = ["EXPERIMENTS", "describe", "get", "names"]

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [*CALM_EXPERIMENTS,
                                                          *CORMODE_EXPERIMENTS,
                                                          *BEYOND_CALM_EXPERIMENTS,
                                                          *CENTRAL_TABLES_EXPERIMENTS,
                                                          *ADAPTIVE_EXPERIMENTS,
                                                          *POPULATION_EXPERIMENTS,
                                                          *HELDOUT_EXPERIMENTS]}


def names() -> list[str]:
    """Experiment names, in the papers' order."""
    return list(EXPERIMENTS)


def get(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name lists the known ones."""
    key = name.strip().lower()
    if key not in EXPERIMENTS:
        raise DPMarginalsError(f"unknown experiment {name!r}; available: {', '.join(names())}")
    return EXPERIMENTS[key]


def describe() -> list[tuple[str, str, str]]:
    """(name, what it reproduces, title) for every experiment."""
    return [(e.name, e.paper, e.title) for e in EXPERIMENTS.values()]
