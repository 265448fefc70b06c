"""What AIM and MST publish: a graphical model fitted to noisy marginals, with the measured
sets and their noise (from which measured marginals get standard errors)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.table import MarginalTable
from ..inference.graphical_model import GraphicalModel
from ..synopsis.base import Synopsis, check_query, maximal_overlaps
from .mbi_bridge import clear_cache, numpy_model

__all__ = ["ContingencySynopsis"]


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
        clear_cache()
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

