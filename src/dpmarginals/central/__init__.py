"""Central DP marginals for sparse records (Gopi–Mahabadi–Yekhanin) and centralized PriView.

Names are imported lazily so that the CLI's ``--help`` stays fast.

>>> from dpmarginals.central import DPMarginals, SparseRecords
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DPMarginals": "dp_marginals",
    "DPMarginalsResult": "result",
    "Level": "result",
    "spurious_fraction": "result",
    "true_counts": "result",
    "PrivacyBudget": "accounting",
    "plan_budget": "accounting",
    "zcdp_epsilon": "accounting",
    "zcdp_rho": "accounting",
    "SparseRecords": "..datasets.sparse",  # the records type lives with the data sets
    "read_records": "..datasets.sparse",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = _EXPORTS[name]
        relative = module if module.startswith(".") else f".{module}"
        return getattr(importlib.import_module(relative, __name__), name)
    raise AttributeError(f"module 'dpmarginals.central' has no attribute {name!r}")
