"""Chi-squared test of independence from a (private) 2-way marginal (Cormode et al. §6.1).

Cormode, Kulkarni and Srivastava (SIGMOD'18, §6.1) test whether two attributes A, B are
independent from a privately released 2-way marginal: with the table's cell fractions
``t[i, j]``, its row and column sums ``r[i]``, ``c[j]`` and the population size ``n``,

    chi2 = n * sum_ij (t[i, j] - r[i] c[j])^2 / (r[i] c[j]),

compared with the critical value of the chi-squared distribution with
``(rows - 1)(columns - 1)`` degrees of freedom (1 for binary attributes) at level
``alpha`` (0.05 in the paper).  The paper does not correct for the privacy noise (its
footnote 3 leaves it to future work): a noisy table's statistic is compared with the
noise-unaware critical value, so the test rejects independence far more often than
``alpha`` -- on the NYC taxi flags at N = 2^18 and eps = ln 3, InpHT's statistic for
M_drop-CC averages 10^3 where the data's own is below 1 and the critical value 3.84.
:func:`chi_squared_test` with ``noise=None`` is that test.

**Noise-aware tests** (``noise=`` a :class:`~.noise_models.NoiseModel`; the module
:mod:`.noise_aware`): the same statistic, compared with its distribution under independence
*through the mechanism* -- by Monte Carlo (``method="monte-carlo"``, the reference) or by
its asymptotic law, a weighted sum of chi-squares (``method="asymptotic"``, Gaboardi et al.
2016).  :func:`independence_test` of a released synopsis runs one by default, rebuilding the
mechanism from what the synopsis records (:func:`~.release_noise.release_noise`): which
group of users reported the pair, their oracle, epsilon and number.  A pair no group
reported together is refused with the reason (its table is a reconstruction).  For a table
released with known noise -- a central release's noisy counts -- pass the counts and a
noise model, e.g. ``chi_squared_test(counts, n, noise=GaussianNoise(sigma))``.

A released table may have negative cells or not sum to 1 (the unbiased estimates of
InpHT, MargPS, FC, ...): it is first projected onto the probability simplex with Norm-Sub
(:func:`dpmarginals.inference.norm_sub`); rows or columns with no mass are dropped (and
the degrees of freedom reduced accordingly).

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.core.table import MarginalTable
>>> t = MarginalTable(Domain(("a", "b"), (2, 2)), np.array([[0.4, 0.1], [0.1, 0.4]]))
>>> r = chi_squared_test(t, n=100)
>>> round(r.statistic, 1), r.dof, r.dependent
(36.0, 1, True)
>>> from dpmarginals.applications.noise_models import GaussianNoise
>>> chi_squared_test(t, n=100, noise=GaussianNoise(20.0), rng=0).dependent   # noise swamps it
False
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ..core.dataset import Dataset
from ..core.errors import DPMarginalsError, check_choice
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..inference import project_to_simplex
from .noise_aware import TESTS, asymptotic_test, monte_carlo_test, pearson_statistics
from .noise_models import NoiseModel

__all__ = ["ChiSquaredResult", "chi_squared_test", "independence_test", "project_to_simplex"]

REPLICATES = 999
"""Monte-Carlo replicates by default: (999 + 1) * 0.05 is an integer, so the test's level is
exactly alpha = 0.05 when the fitted null is the truth."""


@dataclass(frozen=True)
class ChiSquaredResult:
    """The outcome of one test; ``dependent`` means the null (independence) is rejected.

    ``test`` says what the statistic was compared with: ``"pearson"`` (the chi-squared
    distribution, noise ignored: the paper's test), ``"monte-carlo"`` or ``"asymptotic"``
    (its distribution through the release's noise, ``noise`` describing it), or
    ``"reports"`` (Pearson's test of the users' reported values, EM methods)."""

    attributes: tuple[str, str]
    statistic: float
    dof: int
    pvalue: float
    critical_value: float
    alpha: float
    n: int
    dependent: bool
    test: str = "pearson"
    noise: str | None = None
    replicates: int | None = None

    def __str__(self) -> str:
        verdict = "dependent" if self.dependent else "independent (not rejected)"
        text = (f"chi2({self.attributes[0]}, {self.attributes[1]}) = {self.statistic:.4g} with "
                f"{self.dof} degree(s) of freedom and n = {self.n}: p = {self.pvalue:.3g}, "
                f"critical value {self.critical_value:.4g} at alpha = {self.alpha} -> "
                f"{verdict}")
        if self.test == "pearson":
            return text
        how = {"monte-carlo": f"Monte-Carlo null, {self.replicates} replicates",
               "asymptotic": "asymptotic null (weighted chi-squares)",
               "reports": "the users' reported values"}[self.test]
        return f"{text} [{how}; {self.noise}]"


def _check(n: object, alpha: float) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DPMarginalsError(f"n (the number of people behind the table) must be an "
                               f"integer >= 1, got {n!r}")
    if not 0 < alpha < 1:
        raise DPMarginalsError(f"alpha must be in (0, 1), got {alpha!r}")
    return int(n)


def _fractions(table: MarginalTable | Any, n: int | None) -> tuple[np.ndarray, int,
                                                                    tuple[str, str]]:
    """(fractions, n, attribute names) of a MarginalTable, or of an array of counts."""
    if isinstance(table, MarginalTable):
        if len(table.attributes) != 2:
            raise DPMarginalsError(
                f"the chi-squared test needs a 2-way marginal, got {len(table.attributes)} "
                f"attribute(s) {list(table.attributes)}")
        return table.values, n, table.attributes  # type: ignore[return-value]
    names = (str(getattr(getattr(table, "index", None), "name", None) or "rows"),
             str(getattr(getattr(table, "columns", None), "name", None) or "columns"))
    counts = np.asarray(table, dtype=np.float64)
    if counts.ndim != 2 or not np.isfinite(counts).all():
        raise DPMarginalsError(f"the chi-squared test needs a 2-way table of finite counts, "
                               f"got shape {counts.shape}")
    if n is None:
        n = max(round(float(counts.sum())), 1)
    return counts / n, n, names


def chi_squared_test(table: MarginalTable | Any, n: int | None = None, *, alpha: float = 0.05,
                     noise: NoiseModel | None = None, method: str = "monte-carlo",
                     replicates: int = REPLICATES, rng: RNGLike = None) -> ChiSquaredResult:
    """Pearson's chi-squared test of independence of a 2-way table of ``n`` people.

    ``table``: a :class:`MarginalTable` of fractions (``n`` required), or a 2-D array of
    counts (a pandas crosstab works; ``n`` defaults to its rounded total).  ``noise=None``:
    the noise-unaware test of the paper.  ``noise``: a
    :class:`~.noise_models.NoiseModel` of how the table was released, and ``method``
    ``"monte-carlo"`` (``replicates`` simulated releases; ``rng`` seeds them, by default
    from the attribute names so that asking twice gives the same answer) or
    ``"asymptotic"``.
    """
    values, n, attrs = _fractions(table, n)
    n = _check(n, alpha)
    if noise is not None:
        return _noise_aware(values, n, attrs, noise, alpha=alpha, method=method,
                            replicates=replicates, rng=rng)
    t = project_to_simplex(values)
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    keep_r, keep_c = rows > 0, cols > 0
    dof = (int(keep_r.sum()) - 1) * (int(keep_c.sum()) - 1)
    if dof < 1:
        # one attribute is constant in the released table: no evidence of dependence
        return ChiSquaredResult(attrs, 0.0, 0, 1.0, float("nan"), alpha, n, False)
    statistic = float(pearson_statistics(t, n))
    critical = float(stats.chi2.ppf(1 - alpha, dof))
    pvalue = float(stats.chi2.sf(statistic, dof))
    return ChiSquaredResult(attrs, statistic, dof, pvalue, critical, alpha, n,
                            statistic > critical)


def _noise_aware(values: np.ndarray, n: int, attrs: tuple[str, str], noise: NoiseModel, *,
                 alpha: float, method: str, replicates: int, rng: RNGLike) -> ChiSquaredResult:
    check_choice(method, "method", TESTS)
    if not isinstance(noise, NoiseModel):
        raise DPMarginalsError(f"noise must be a NoiseModel (GaussianNoise, LaplaceNoise, "
                               f"release_noise(...)) or None, got {noise!r}")
    counts = np.asarray(values, dtype=np.float64) * n
    if method == "monte-carlo":
        if rng is None:  # the test's randomness is post-processing, not privacy
            rng = np.random.SeedSequence(zlib.crc32(",".join(attrs).encode()))
        out = monte_carlo_test(counts, n, noise, alpha=alpha, replicates=replicates, rng=rng)
        dependent = out.pvalue <= alpha
    else:
        out = asymptotic_test(counts, n, noise, alpha=alpha)
        dependent = out.statistic > out.critical_value
    return ChiSquaredResult(attrs, out.statistic, out.dof, out.pvalue, out.critical_value,
                            alpha, n, bool(dependent), method, noise.describe(),
                            replicates if method == "monte-carlo" else None)


def independence_test(source: object, attributes: Sequence[str], n: int | None = None, *,
                      alpha: float = 0.05, noise: NoiseModel | str | None = "auto",
                      method: str = "monte-carlo", replicates: int = REPLICATES,
                      rng: RNGLike = None) -> ChiSquaredResult:
    """Test two attributes of a released synopsis (or a :class:`Dataset`: exact data).

    ``noise="auto"`` (default): a Dataset gets the classical test; a synopsis the
    noise-aware test of ``method`` through its own mechanism
    (:func:`~.release_noise.release_noise`; ``n`` is the release's and defaults to it), or,
    for the EM methods, Pearson's test of the users' reported values; a synopsis whose
    mechanism cannot be rebuilt is an error saying why.  ``noise=None``: the paper's
    noise-unaware test (``n`` defaults to the release's).  A :class:`NoiseModel`: that one.
    """
    from ..local.em import EMSynopsis
    from .release_noise import release_noise, reported_pair_counts

    attrs = tuple(attributes)
    if len(attrs) != 2:
        raise DPMarginalsError(f"give exactly two attributes, got {list(attrs)}")
    if noise == "auto":
        if isinstance(source, Dataset):
            noise = None
        elif isinstance(source, EMSynopsis):
            res = chi_squared_test(reported_pair_counts(source, attrs), alpha=alpha)
            return dataclasses.replace(res, attributes=attrs, test="reports", noise=(
                f"{source.method}: every attribute randomized on its own, so its reports "
                "are independent exactly when the attributes are"))
        else:
            noise = release_noise(source, attrs)
    elif isinstance(noise, str):
        raise DPMarginalsError(f"noise must be 'auto', None or a NoiseModel, got {noise!r}")
    if n is None:
        n = (source.n if isinstance(source, Dataset)  # type: ignore[assignment]
             else getattr(noise, "n", None) or (getattr(source, "info", None) or {}).get("n"))
        if n is None:
            raise DPMarginalsError("give n, the number of people behind the release")
    table = source.marginal(list(attrs))  # type: ignore[attr-defined]
    return chi_squared_test(table, n, alpha=alpha, noise=noise, method=method,
                            replicates=replicates, rng=rng)
