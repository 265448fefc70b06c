"""A robust-aggregation check: flag groups whose counts no honest population could produce.

Crafted but well-formed reports (the poisoning attacks of Cao, Jia and Gong, "Data
Poisoning Attacks to Local Differential Privacy Protocols", USENIX Security 2021) push up
the support of target outputs.  Whatever the users' true values, an honest report of a
pure frequency oracle supports any one value with probability at most ``p`` (its own value
w.p. ``p``, another w.p. ``q < p``; Wang et al. 2017), independently across users.  So in a
group of ``n`` honest reports the support count of each cell is stochastically at most
Binomial(n, p), and two tests follow, exact or conservative for every true distribution:

* **excess** (every oracle): cell ``v`` is flagged when
  ``P[Binomial(n, p) >= C(v)] < alpha / T``, with ``T`` the number of tests
  (Bonferroni: the chance that any honest group is flagged is at most ``alpha``).  This
  is the frequency-deviation idea of the literature made distribution-free: the count
  exceeds what even "every user holds v" would plausibly give, i.e. the estimated
  frequency ``(C/n - q)/(p - q)`` is significantly above 1.
* **total** (OUE and SUE, whose reports are bit vectors): the number of set bits of an
  honest report is Bernoulli(p) + Binomial(d - 1, q) whatever its value, so the group's
  total is a sum of ``n`` such independent terms; a total too far from ``n(p + (d-1)q)``
  (two-sided, normal approximation) is flagged: crafted vectors with too few or too many
  ones (the consistency test of Cao et al.'s "detecting fake users" for OUE).

What this can and cannot stop: an attacker whose reports keep every estimated frequency
within [0, 1] (and, for OUE/SUE, set a plausible number of bits) is invisible to any test
on the counts: with a fraction ``beta`` of a group's reports they can move one cell's
estimate by up to about ``beta (1 - q) / (p - q)`` (the amplification of Cao et al.).
Tickets bound to groups (:mod:`.tickets`) keep ``beta`` at the attacker's share of all
reports; this check catches the concentrated attack (many crafted reports in one group)
with naive payloads on OUE and SUE groups, which is what moves a released cell far.  On a
GRR group (OLH, HR likewise) a crafted report is shaped like an honest one by
construction, so the concentrated attack is **not detected** while the target's estimate
stays within [0, 1]: measured on Adult, 1% of the users moved a cell by 15 standard
errors unflagged (``benchmarks/poisoning_grr.py``, docs/deployment.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..protocol.counts import Counts
from ..protocol.plan import Plan

__all__ = ["Flag", "check_counts", "crafted_reports"]


@dataclass(frozen=True)
class Flag:
    """A group's statistically implausible count: the test, the cell (None for the total),
    what was counted, the most an honest group plausibly holds, and the p-value."""

    group: int
    test: str
    cell: int | None
    count: int
    expected_at_most: float
    p_value: float

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "test": self.test, "cell": self.cell, "count": self.count,
                "expected_at_most": round(self.expected_at_most, 3),
                "p_value": float(f"{self.p_value:.3g}")}


def check_counts(plan: Plan, counts: Counts, *, alpha: float = 1e-6) -> list[Flag]:
    """The flags of ``counts`` under ``plan`` at family-wise false-alarm rate ``alpha``
    (at most one flag per group and test: its most extreme cell).

    >>> from dpmarginals.core.domain import Domain
    >>> from dpmarginals.protocol.plan import GroupSpec
    >>> plan = Plan("calm", 1.0, Domain(("a",), (4,)), (GroupSpec(("a",), "grr", 1.0, 4),))
    >>> honest = Counts([np.array([300, 260, 240, 200])], [1000])
    >>> check_counts(plan, honest)
    []
    >>> [f.cell for f in check_counts(plan, Counts([np.array([700, 100, 100, 100])], [1000]))]
    [0]
    """
    from scipy import stats

    from ..oracles import ORACLES
    from ..protocol.formats import group_oracle

    checked = [(g, spec) for g, spec in enumerate(plan.groups)  # frequency oracles only
               if spec.oracle in ORACLES and g < counts.m
               and counts.supports[g].shape == (spec.cells,)
               and counts.users[g] > 0]
    if not checked:
        return []
    totals = sum(1 for _, spec in checked if spec.oracle in ("oue", "sue"))
    tests = sum(int(spec.cells) for _, spec in checked) + totals
    level = alpha / tests
    flags = []
    for g, spec in checked:
        oracle = group_oracle(plan, g).oracle  # a memoized plan's: the composed law
        n = int(counts.users[g])
        support = counts.supports[g]
        p = max(float(oracle.p), float(oracle.q))
        cell = int(np.argmax(support))
        top = int(support[cell])
        p_value = float(stats.binom.sf(top - 1, n, p))
        if p_value < level:
            flags.append(Flag(g, "excess", cell, top, _upper(n, p, level), p_value))
        if spec.oracle in ("oue", "sue"):
            d, q = int(spec.cells), float(oracle.q)
            mean = n * (p + (d - 1) * q)
            sd = math.sqrt(n * (p * (1 - p) + (d - 1) * q * (1 - q)))
            total = int(support.sum())
            z = abs(total - mean) / sd if sd > 0 else 0.0
            p_total = float(2 * stats.norm.sf(z))
            if p_total < level:
                flags.append(Flag(g, "total", None, total, mean, p_total))
    return flags


def _upper(n: int, p: float, level: float) -> float:
    """The largest count an honest group of ``n`` plausibly holds (the test's bound)."""
    from scipy import stats

    return float(stats.binom.isf(level, n, p))


def crafted_reports(plan: Plan, group: int, cell: int, count: int, *, mimic: bool,
                    rng: np.random.Generator) -> list[dict[str, Any]]:
    """The attack the check is measured against (tests, benchmarks/load_service.py):
    well-formed reports of ``group`` that support ``cell`` with probability 1.

    Naive (``mimic=False``): the payload supports ``cell`` and as little else as the oracle
    allows (OUE/SUE: only that bit).  ``mimic=True``: OUE/SUE vectors also set every other
    bit with the oracle's q, so the number of ones looks honest (the input-manipulation
    variant of Cao et al.'s attacks); GRR, OLH and HR payloads are the same either way.
    """
    from ..core.hashing import PRIME
    from ..protocol.reports import PlanCodec

    codec = PlanCodec(plan)
    spec = plan.groups[group]
    oracle = codec.oracle(group)
    if spec.oracle == "grr":
        native = np.full(count, cell, dtype=np.int64)
    elif spec.oracle in ("oue", "sue"):
        bits = (rng.random((count, spec.cells)) < oracle.q) if mimic else np.zeros(
            (count, spec.cells), dtype=bool)
        bits[:, cell] = True
        native = np.packbits(bits, axis=1, bitorder="little")
    elif spec.oracle == "olh":
        a = rng.integers(1, PRIME, size=count)
        b = rng.integers(0, PRIME, size=count)
        y = (a * cell + b) % PRIME % oracle.g
        native = np.column_stack(((a << 32) + b, y))
    else:  # hr
        from ..oracles._base import parity

        j = rng.integers(1, oracle.K, size=count)
        native = np.column_stack((j, parity((cell + 1) & j)))
    return codec.reports(group, native)
