"""Post-processing of noisy marginals: consistency, non-negativity, max-entropy reconstruction."""

from __future__ import annotations

from dpmarginals.inference.consistency import (
    ConsistencyResult,
    ConsistencyWarning,
    intersection_family,
    make_consistent,
    max_inconsistency,
)
from dpmarginals.inference.maxent import MaxEntInfo, max_entropy
from dpmarginals.inference.nonneg import norm_cut, norm_sub, project_to_simplex
from dpmarginals.inference.views import View, as_view, project

__all__ = [
    "ConsistencyResult",
    "ConsistencyWarning",
    "MaxEntInfo",
    "View",
    "as_view",
    "intersection_family",
    "make_consistent",
    "max_entropy",
    "max_inconsistency",
    "norm_cut",
    "norm_sub",
    "project",
    "project_to_simplex",
]
