"""Privacy accounting for DP marginals (Gopi–Mahabadi–Yekhanin, Theorem 1.1, corrected).

Neighbouring data sets differ by adding or removing one user's record.

What Algorithm 1 spends, per stage ``k = 1..T``:

* a DP ``Q``-th percentile with ``epsilon_Q`` (pure DP), which is ``epsilon_Q**2 / 2``-zCDP
  [BS16, Prop. 1.4];
* NoisyThresholding: a Gaussian mechanism on a histogram where one user changes at most
  ``Delta_k`` entries by one (l2 sensitivity ``sqrt(Delta_k)``), with noise of scale
  ``sigma_k * sqrt(Delta_k)``: ``1 / (2 sigma_k**2)``-zCDP [BS16, Prop. 1.6].  The noise
  is the *discrete* Gaussian, which has exactly the same zCDP guarantee for integer
  queries [Canonne–Kamath–Steinke 2020, Thm. 14].
* For ``k = 1`` the universe ``Omega = V_1`` is the union of the users' items, so a user's
  unique items are output with probability at most ``delta / 2`` when ``rho_1`` is set from
  ``delta`` (the DP set union argument [GGK+20]): a ``(0, delta/2)`` term.

zCDP composes additively, so the whole run is ``rho``-zCDP with

    rho = T * epsilon_Q**2 / 2 + sum_k 1 / (2 sigma_k**2),

and with the ``(0, delta/2)`` term it is ``(epsilon, delta)``-DP as soon as ``rho``-zCDP
implies ``(epsilon, delta/2)``-DP.

**The conversion** (derivation).  [BS16, Prop. 1.3]: ``rho``-zCDP implies
``(rho + 2 sqrt(rho L), delta')``-DP with ``L = log(1/delta')``.  Setting that equal to
``epsilon`` and completing the square,

    epsilon + L = rho + 2 sqrt(rho L) + L = (sqrt(rho) + sqrt(L))**2
    =>  sqrt(rho) = sqrt(epsilon + L) - sqrt(L)
    =>  rho = (sqrt(epsilon + L) - sqrt(L))**2,      L = log(2 / delta).

The paper's Theorem 1.1 (and Remark 1.2) prints the right-hand side *unsquared*,
``sqrt(epsilon + L) - sqrt(L)``, which is about ``1 / (sqrt(epsilon + L) - sqrt(L))`` times
too large: for ``epsilon = 1, delta = 1e-6`` it allows ``rho = 0.129`` instead of
``0.0167``, i.e. an actual ``epsilon`` of about 2.87.  We use the squared form.

**Default split** (Remark 1.2): 10% of ``rho`` to the ``T`` percentiles, 90% to the
``T`` Gaussian stages with equal ``sigma_k``:

    T epsilon_Q**2 / 2 = rho / 10,        T / (2 sigma**2) = 9 rho / 10.

**Tighter accountant** (``accountant="rdp"``, in the spirit of Remark 1.3), two sound
improvements: (i) the zCDP total is converted by Google's ``dp-accounting`` Rényi
accountant, whose conversion to ``(epsilon, delta)`` is the tighter one of
Canonne–Kamath–Steinke 2020 Prop. 12 / Asoodeh et al. 2021 (``rho`` is scaled up until
it reports the target ``epsilon`` at ``delta / 2``); (ii) the percentile, an exponential
mechanism, is ``epsilon_Q``-bounded-range and hence ``epsilon_Q**2 / 8``-zCDP (Cesar and
Rogers 2021; OpenDP's own zCDP map of ``make_private_quantile``), not ``/ 2``.  For
``epsilon = 1, delta = 1e-6, T = 3`` this gives ``sigma = 8.52`` instead of ``10.0`` and
``epsilon_Q = 0.078`` instead of ``0.033``.  It needs ``pip install dp-accounting``.

>>> round(zcdp_rho(1.0, 1e-6 / 2), 10)
0.0166616767
>>> b = plan_budget(1.0, 1e-6, 3)
>>> round(b.sigmas[0], 4), round(b.epsilon_q, 5)
(10.0015, 0.03333)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..core.errors import DPMarginalsError, check_epsilon

__all__ = [
    "ACCOUNTANTS",
    "PrivacyBudget",
    "check_delta",
    "contingency_rho",
    "plan_budget",
    "rdp_epsilon",
    "rdp_rho",
    "zcdp_epsilon",
    "zcdp_rho",
]

ACCOUNTANTS = ("zcdp", "rdp")


def check_delta(delta: float, field: str = "delta") -> float:
    """Validate ``delta``: a number with ``0 < delta < 1``."""
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"{field} must be a number, got {delta!r}") from None
    if not 0.0 < value < 1.0:
        raise DPMarginalsError(f"{field} must be in (0, 1), got {delta!r}")
    return value


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ``rho`` with ``rho``-zCDP => ``(epsilon, delta)``-DP by [BS16, Prop. 1.3].

    ``rho = (sqrt(epsilon + log(1/delta)) - sqrt(log(1/delta)))**2`` (derivation in the
    module docstring), computed in a cancellation-free form:
    ``sqrt(rho) = epsilon / (sqrt(epsilon + L) + sqrt(L))``.

    >>> rho = zcdp_rho(1.0, 1e-5)
    >>> abs(zcdp_epsilon(rho, 1e-5) - 1.0) < 1e-12
    True
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    log_inv = -math.log(delta)
    root = epsilon / (math.sqrt(epsilon + log_inv) + math.sqrt(log_inv))
    return root * root


def zcdp_epsilon(rho: float, delta: float) -> float:
    """``epsilon = rho + 2 sqrt(rho log(1/delta))`` [BS16, Prop. 1.3], the inverse of
    :func:`zcdp_rho`."""
    if rho < 0:
        raise DPMarginalsError(f"rho must be >= 0, got {rho!r}")
    delta = check_delta(delta)
    return rho + 2.0 * math.sqrt(rho * -math.log(delta))


def rdp_epsilon(rho: float, delta: float) -> float:
    """``epsilon`` of ``rho``-zCDP at ``delta`` by Google's ``dp-accounting`` RDP accountant
    (tighter conversion, Canonne–Kamath–Steinke 2020 Prop. 12)."""
    accountant = _rdp_accountant()
    from dp_accounting import ZCDpEvent

    acc = accountant()
    acc.compose(ZCDpEvent(float(rho)))
    return float(acc.get_epsilon(check_delta(delta)))


def _rdp_accountant() -> Any:
    try:
        from dp_accounting.rdp import RdpAccountant
    except ImportError:  # pragma: no cover - depends on the environment
        raise DPMarginalsError(
            "accountant='rdp' needs Google's dp-accounting: pip install dp-accounting"
        ) from None
    orders = [1 + x / 100.0 for x in range(1, 100)] + [2 + x / 10.0 for x in range(0, 280)]
    orders += [30 + x for x in range(0, 70)] + [100 + 10 * x for x in range(0, 90)]
    return lambda: RdpAccountant(orders=orders)


@dataclass(frozen=True)
class PrivacyBudget:
    """How ``(epsilon, delta)`` is spent by Algorithm 1 with ``T = max_k`` stages.

    ``sigmas[k-1]`` is ``sigma_k``: the noise of stage ``k`` has scale
    ``sigma_k * sqrt(Delta_k)``.  ``epsilon_q`` is the pure-DP budget of each stage's
    percentile, which costs ``quantile_zcdp * epsilon_q**2`` zCDP (1/2 [BS16], or 1/8 for
    the bounded-range analysis of the ``rdp`` accountant).  ``rho`` is the total zCDP;
    ``delta_conversion`` is the ``delta`` of the zCDP -> DP conversion and
    ``delta_threshold`` the ``delta`` left to the thresholding (``delta / 2`` each).
    """

    epsilon: float
    delta: float
    max_k: int
    accountant: str
    quantile_fraction: float
    rho: float
    epsilon_q: float
    sigmas: tuple[float, ...]
    delta_conversion: float
    delta_threshold: float
    quantile_zcdp: float = 0.5

    def zcdp_spent(self) -> float:
        """``T epsilon_Q**2 / 2 + sum_k 1 / (2 sigma_k**2)`` (Theorem 1.1's left side;
        ``/ 8`` instead of ``/ 2`` for the percentiles with the ``rdp`` accountant)."""
        quantiles = self.max_k * self.quantile_zcdp * self.epsilon_q**2
        return quantiles + sum(1 / (2 * s * s) for s in self.sigmas)

    def epsilon_spent(self) -> float:
        """The ``epsilon`` that ``zcdp_spent()`` certifies at ``delta_conversion``."""
        if self.accountant == "rdp":
            return rdp_epsilon(self.zcdp_spent(), self.delta_conversion)
        return zcdp_epsilon(self.zcdp_spent(), self.delta_conversion)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sigmas"] = list(self.sigmas)
        return out


def plan_budget(
    epsilon: float,
    delta: float,
    max_k: int,
    *,
    quantile_fraction: float = 0.1,
    accountant: str = "zcdp",
) -> PrivacyBudget:
    """Split ``(epsilon, delta)`` as in Remark 1.2 (``quantile_fraction`` of ``rho`` to the
    percentiles, equal ``sigma_k``), with ``rho`` from the chosen accountant.

    >>> b = plan_budget(1.0, 1e-6, 3)
    >>> abs(b.zcdp_spent() - b.rho) < 1e-15 and abs(b.epsilon_spent() - 1.0) < 1e-12
    True
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1:
        raise DPMarginalsError(f"max_k (T) must be a whole number >= 1, got {max_k!r}")
    if not 0.0 < quantile_fraction < 1.0:
        raise DPMarginalsError(f"quantile_fraction must be in (0, 1), got {quantile_fraction!r}")
    if accountant not in ACCOUNTANTS:
        raise DPMarginalsError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    delta_conversion = delta / 2
    rho = zcdp_rho(epsilon, delta_conversion)
    quantile_zcdp = 0.5
    if accountant == "rdp":
        rho = _calibrate_rdp(epsilon, delta_conversion, rho)
        quantile_zcdp = 0.125
    epsilon_q = math.sqrt(quantile_fraction * rho / (max_k * quantile_zcdp))
    sigma = math.sqrt(max_k / (2 * (1 - quantile_fraction) * rho))
    return PrivacyBudget(
        epsilon=epsilon, delta=delta, max_k=max_k, accountant=accountant,
        quantile_fraction=quantile_fraction, rho=rho, epsilon_q=epsilon_q,
        sigmas=(sigma,) * max_k, delta_conversion=delta_conversion,
        delta_threshold=delta / 2, quantile_zcdp=quantile_zcdp,
    )


def rdp_rho(epsilon: float, delta: float) -> float:
    """The largest ``rho`` whose ``dp-accounting`` conversion certifies ``(epsilon, delta)``
    (Canonne-Kamath-Steinke 2020; at least :func:`zcdp_rho`'s)."""
    return _calibrate_rdp(check_epsilon(epsilon), check_delta(delta), zcdp_rho(epsilon, delta))


def _calibrate_rdp(epsilon: float, delta: float, rho_low: float) -> float:
    """The largest ``rho`` (to 1e-9 relative) whose RDP-accountant epsilon is <= ``epsilon``.

    ``rho_low`` (the BS16 value) always qualifies: the RDP conversion is tighter.
    """
    lo, hi = rho_low, rho_low * 2
    while rdp_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-9 * lo:
        mid = (lo + hi) / 2
        if rdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def contingency_rho(epsilon: float, delta: float, accountant: str = "zcdp") -> float:
    """The zCDP budget ``rho`` that certifies ``(epsilon, delta)``-DP (AIM, MST, residual):
    :func:`zcdp_rho`, or :func:`rdp_rho` with ``accountant="rdp"``.

    >>> round(contingency_rho(1.0, 1e-9), 8)
    0.01178116
    >>> abs(zcdp_epsilon(contingency_rho(1.0, 1e-9), 1e-9) - 1.0) < 1e-12
    True
    """
    if accountant not in ACCOUNTANTS:
        raise DPMarginalsError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return rdp_rho(epsilon, delta) if accountant == "rdp" else zcdp_rho(epsilon, delta)
