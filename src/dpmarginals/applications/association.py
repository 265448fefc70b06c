"""Chi-squared test of independence from a (private) 2-way marginal (Cormode et al. §6.1).

Cormode, Kulkarni and Srivastava (SIGMOD'18, §6.1) test whether two attributes A, B are
independent from a privately released 2-way marginal: with the table's cell fractions
``t[i, j]``, its row and column sums ``r[i]``, ``c[j]`` and the population size ``n``,

    chi2 = n * sum_ij (t[i, j] - r[i] c[j])^2 / (r[i] c[j]),

compared with the critical value of the chi-squared distribution with
``(rows - 1)(columns - 1)`` degrees of freedom (1 for binary attributes) at level
``alpha`` (0.05 in the paper).  Like the paper (its footnote 3) the test is *not* corrected
for the privacy noise: the statistic of a noisy table is compared with the noise-unaware
critical value, so its level is not exactly ``alpha`` (Gaboardi et al. propose
corrections).  Both ``n`` and the degrees of freedom used are returned with the result.

A released table may have negative cells or not sum to 1 (the unbiased estimates of
InpHT, MargPS, FC, ...): it is first projected onto the probability simplex with Norm-Sub
(:func:`dpmarginals.inference.norm_sub`); rows or columns with no mass are dropped (and
the degrees of freedom reduced accordingly).

>>> import numpy as np
>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.core.table import MarginalTable
>>> t = MarginalTable(Domain(("a", "b"), (2, 2)), np.array([[0.4, 0.1], [0.1, 0.4]]))
>>> r = chi_squared_test(t, n=100)
>>> round(r.statistic, 1), r.dof, r.dependent
(36.0, 1, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..core.errors import DPMarginalsError
from ..core.table import MarginalTable
from ..inference import norm_sub

__all__ = ["ChiSquaredResult", "chi_squared_test", "independence_test", "project_to_simplex"]


@dataclass(frozen=True)
class ChiSquaredResult:
    """The outcome of one test; ``dependent`` means the null (independence) is rejected."""

    attributes: tuple[str, str]
    statistic: float
    dof: int
    pvalue: float
    critical_value: float
    alpha: float
    n: int
    dependent: bool

    def __str__(self) -> str:
        verdict = "dependent" if self.dependent else "independent (not rejected)"
        return (f"chi2({self.attributes[0]}, {self.attributes[1]}) = {self.statistic:.4g} with "
                f"{self.dof} degree(s) of freedom and n = {self.n}: p = {self.pvalue:.3g}, "
                f"critical value {self.critical_value:.4g} at alpha = {self.alpha} -> "
                f"{verdict}")


def project_to_simplex(values: np.ndarray) -> np.ndarray:
    """Non-negative fractions summing to 1 (Norm-Sub of a raw estimate; a copy)."""
    values = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(values)):
        raise DPMarginalsError("the marginal has non-finite cells")
    if np.all(values >= 0) and abs(values.sum() - 1.0) < 1e-12:
        return values.copy()
    return norm_sub(values, 1.0)


def chi_squared_test(table: MarginalTable, n: int, *, alpha: float = 0.05) -> ChiSquaredResult:
    """Pearson's chi-squared test of independence of a 2-way marginal of ``n`` people."""
    if len(table.attributes) != 2:
        raise DPMarginalsError(
            f"the chi-squared test needs a 2-way marginal, got {len(table.attributes)} "
            f"attribute(s) {list(table.attributes)}")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DPMarginalsError(f"n (the number of people behind the table) must be an "
                               f"integer >= 1, got {n!r}")
    if not 0 < alpha < 1:
        raise DPMarginalsError(f"alpha must be in (0, 1), got {alpha!r}")
    t = project_to_simplex(table.values)
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    keep_r, keep_c = rows > 0, cols > 0
    t, rows, cols = t[np.ix_(keep_r, keep_c)], rows[keep_r], cols[keep_c]
    dof = (len(rows) - 1) * (len(cols) - 1)
    a, b = table.attributes
    if dof < 1:
        # one attribute is constant in the released table: no evidence of dependence
        return ChiSquaredResult((a, b), 0.0, 0, 1.0, float("nan"), alpha, int(n), False)
    expected = np.outer(rows, cols)
    statistic = float(n * ((t - expected) ** 2 / expected).sum())
    critical = float(stats.chi2.ppf(1 - alpha, dof))
    pvalue = float(stats.chi2.sf(statistic, dof))
    return ChiSquaredResult((a, b), statistic, dof, pvalue, critical, alpha, int(n),
                            statistic > critical)


def independence_test(source: object, attributes: Sequence[str], n: int, *,
                      alpha: float = 0.05) -> ChiSquaredResult:
    """Test two attributes of any synopsis (or a :class:`~dpmarginals.core.dataset.Dataset`).

    ``source.marginal(attributes)`` gives the 2-way table; ``n`` is the number of people
    the release is computed from (the statistic scales with it).
    """
    if len(attributes) != 2:
        raise DPMarginalsError(f"give exactly two attributes, got {list(attributes)}")
    table = source.marginal(list(attributes))  # type: ignore[attr-defined]
    return chi_squared_test(table, n, alpha=alpha)
