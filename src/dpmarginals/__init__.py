"""dpmarginals: differentially private marginal tables.

The names below are imported lazily, so ``import dpmarginals`` stays cheap.

>>> from dpmarginals import CALM, Dataset, Domain, MarginalTable, make, release
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "CALM": "local.calm",
    "DPMarginalsError": "core.errors",
    "Dataset": "core.dataset",
    "Domain": "core.domain",
    "MarginalTable": "core.table",
    "Plan": "protocol.plan",
    "Synopsis": "synopsis.base",
    "load_release": "private_release",
    "load_synopsis": "synopsis.base",
    "make": "methods",
    "release": "private_release",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'dpmarginals' has no attribute {name!r}")
