"""What the engines share: which groups are counted together, and the small numpy step
that turns an engine's tallies into exactly ``oracle.support``.

The SQL engines (DuckDB, Spark) never run Python per report.  They count *tokens* per
(group, token), a mergeable operation their aggregations do well, and return a table
with at most a few thousand rows per group; numpy then finishes:

=========  ==============================================  ==================================
oracle     token counted by the engine                     numpy finish
=========  ==============================================  ==================================
grr,       the value (matrix: the output o)                scatter into a length-L (m)
matrix                                                     vector
hr         (j, bit)                                        C(x) = (n + (H S)[x + 1]) / 2, S_j
                                                           = N_j0 - N_j1 (one FWHT, O(K log K))
ht, cms    (j, bit): the index and the bit                 scatter into the 2 K counts
em         the reported tuple (v0, ..., v{d-1})            project onto every k-set
                                                           (``AttributeReports.
                                                           support_of_tuples``)
olh        v for every (report, v) with H_seed(v) = y      scatter (the engine joins each
           (a join with the values 0..L-1 and the hash     report with the L values: O(n L)
           in integer arithmetic)                          work, as ``OLH.support``)
oue, sue   per-bit sums, two bits per int64 sum: for      split each sum's two 32-bit
           word i and t < 32, sum((word_i >> t) & LANE),   lanes (low: bit t, high: bit
           LANE = 2^32 + 1 (at most 2^31 - 1 reports per   t + 32); bits >= L must be 0
           group)
=========  ==============================================  ==================================

Malformed reports (out-of-range values, bad seeds, padding bits, nulls) show up in the
tallies (a value outside the domain, a sentinel count) and raise
:class:`~dpmarginals.core.errors.DPMarginalsError` naming the group, as ``oracle.support`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.hashing import PRIME
from ..oracles import FrequencyOracle, fwht
from ..protocol.counts import Counts
from ..protocol.formats import INTEGER_PAYLOADS, plan_oracles, support_sizes
from ..protocol.plan import Plan

__all__ = [
    "ENGINES",
    "LANE",
    "PRIME",
    "Counts",
    "batch_key",
    "check_engine",
    "finish_em",
    "finish_hr",
    "finish_lanes",
    "finish_olh",
    "finish_pairs",
    "finish_values",
    "plan_oracles",
]

ENGINES = ("numpy", "duckdb", "spark")
OLH_ALL, OLH_INVALID = -1, -2  # sentinel "values" of the OLH join: every report, bad ones
LANE = (1 << 32) | 1  # (word >> t) & LANE: bit t in the low 32-bit lane, bit t + 32 high


def check_engine(engine: str) -> str:
    key = str(engine).strip().lower()
    if key not in ENGINES:
        raise DPMarginalsError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    return key


def batch_key(oracle: Any) -> tuple[str, int]:
    """Groups with equal keys share a schema and are counted by one engine query."""
    if oracle.name in ("oue", "sue"):
        return ("words", (oracle.size + 63) // 64)
    if oracle.name in ("hr", "ht", "cms"):
        return ("pairs", 0)
    if oracle.name == "em":
        return ("em", oracle.d)
    if oracle.name in INTEGER_PAYLOADS:
        return ("value", 0)
    return (oracle.name, 0)


def _where(g: int, oracle: Any) -> str:
    return f"group {g} ({oracle.name}, {oracle.size} cells)"


def _scatter(keys: np.ndarray, counts: np.ndarray, high: int, what: str) -> np.ndarray:
    bad = (keys < 0) | (keys >= high)
    if bad.any():
        raise DPMarginalsError(f"{what} {int(keys[bad][0])} is outside 0..{high - 1}")
    out = np.zeros(high, dtype=np.int64)
    np.add.at(out, keys, counts)
    return out


def _no_nulls(keys: Sequence[np.ndarray | np.ma.MaskedArray], g: int, o: Any
              ) -> list[np.ndarray]:
    out = []
    for k in keys:
        if np.ma.isMaskedArray(k) and np.ma.getmaskarray(k).any():
            raise DPMarginalsError(f"{_where(g, o)}: a report has a null value")
        out.append(np.asarray(np.ma.getdata(k), dtype=np.int64))
    return out


def finish_values(oracle: FrequencyOracle, g: int, values: np.ndarray, counts: np.ndarray
                  ) -> tuple[np.ndarray, int]:
    """GRR (and the ``matrix`` format): counts per reported value -> (support, users)."""
    (values,) = _no_nulls([values], g, oracle)
    counts = np.asarray(counts, dtype=np.int64)
    support = _scatter(values, counts, oracle.size, f"{_where(g, oracle)}: reported value")
    return support, int(counts.sum())


def finish_hr(oracle: FrequencyOracle, g: int, j: np.ndarray, bit: np.ndarray,
              counts: np.ndarray) -> tuple[np.ndarray, int]:
    """HR: counts per (j, bit) -> (support, users), exactly ``HR.support``."""
    j, bit = _no_nulls([j, bit], g, oracle)
    counts = np.asarray(counts, dtype=np.int64)
    k = oracle.K  # type: ignore[attr-defined]
    _scatter(j, counts, k, f"{_where(g, oracle)}: hr index")
    _scatter(bit, counts, 2, f"{_where(g, oracle)}: hr bit")
    by_bit = np.zeros((k, 2), dtype=np.int64)
    np.add.at(by_bit, (j, bit), counts)
    n = int(by_bit.sum())
    signed = by_bit[:, 0] - by_bit[:, 1]
    return (n + fwht(signed)[1 : oracle.size + 1]) // 2, n


def finish_pairs(oracle: Any, g: int, j: np.ndarray, bit: np.ndarray, counts: np.ndarray
                 ) -> tuple[np.ndarray, int]:
    """Counts per (j, bit) -> (support, users) of an hr group (:func:`finish_hr`) or of a
    signed-index format (ht, cms: the counts themselves, at 2 j + bit)."""
    if oracle.name == "hr":
        return finish_hr(oracle, g, j, bit, counts)
    j, bit = _no_nulls([j, bit], g, oracle)
    counts = np.asarray(counts, dtype=np.int64)
    _scatter(j, counts, oracle.K, f"{_where(g, oracle)}: {oracle.name} index")
    _scatter(bit, counts, 2, f"{_where(g, oracle)}: {oracle.name} bit")
    support = _scatter(2 * j + bit, counts, oracle.size, f"{_where(g, oracle)}: report")
    return support, int(counts.sum())


def finish_em(oracle: Any, g: int, columns: Sequence[np.ndarray], counts: np.ndarray
              ) -> tuple[np.ndarray, int]:
    """em: counts per distinct reported tuple -> (support, users)."""
    cols = _no_nulls(list(columns), g, oracle)
    counts = np.asarray(counts, dtype=np.int64)
    for a, (col, c) in enumerate(zip(cols, oracle.classes, strict=True)):
        _scatter(col, counts, c, f"{_where(g, oracle)}: em class of attribute {a}")
    tuples = np.column_stack(cols) if cols else np.zeros((0, 0), np.int64)
    return oracle.support_of_tuples(tuples, counts), int(counts.sum())


def finish_olh(oracle: FrequencyOracle, g: int, v: np.ndarray, counts: np.ndarray
               ) -> tuple[np.ndarray, int]:
    """OLH: counts per value v of the (report, v) pairs with H(v) = y, plus the sentinels
    ``OLH_ALL`` (every report) and ``OLH_INVALID`` (seed outside the family, y >= g)."""
    (v,) = _no_nulls([v], g, oracle)
    counts = np.asarray(counts, dtype=np.int64)
    invalid = int(counts[v == OLH_INVALID].sum())
    if invalid:
        raise DPMarginalsError(f"{_where(g, oracle)}: {invalid} report(s) have a seed outside "
                               f"the hash family or a hashed value outside 0..{oracle.g - 1}")  # type: ignore[attr-defined]
    users = int(counts[v == OLH_ALL].sum())
    keep = v >= 0
    return _scatter(v[keep], counts[keep], oracle.size, "olh value"), users


def finish_lanes(oracle: FrequencyOracle, g: int, lanes: np.ndarray, users: int, nulls: int
                 ) -> tuple[np.ndarray, int]:
    """OUE/SUE: ``lanes[i, t]`` = sum over reports of ``(word_i >> t) & (2^32 + 1)``
    for t = 0..31: its low 32 bits count bit t of word i, its high bits bit t + 32."""
    if nulls:
        raise DPMarginalsError(f"{_where(g, oracle)}: {nulls} report(s) have a null word")
    if users >= 1 << 31:
        raise DPMarginalsError(f"{_where(g, oracle)}: {users} reports exceed the 2^31 - 1 "
                               "per group that the Spark lane sums can count")
    lanes = np.asarray(lanes, dtype=np.int64).reshape(-1, 32)
    low, high = lanes & 0xFFFFFFFF, lanes >> 32
    bits = np.concatenate([low, high], axis=1).ravel()  # word i: bits 0..31 then 32..63
    if bits[oracle.size :].any():
        raise DPMarginalsError(f"{_where(g, oracle)}: {int(bits[oracle.size:].sum())} bit(s) "
                               f"set beyond value {oracle.size - 1}")
    return bits[: oracle.size].copy(), int(users)


def empty_counts(plan: Plan) -> Counts:
    return Counts.zeros(support_sizes(plan))


# -- contribution bounding for the central-DP extraction on SQL engines -------------------
def priority_seed(noise: object) -> tuple[int, ...]:
    """Five coefficients in 1..P-1 for :func:`priority`, drawn from the run's noise source
    (the OS's secure source in a private release, the seeded Generator in a simulation)."""
    draws = np.asarray(noise.integers(PRIME - 1, 5), dtype=np.int64)  # type: ignore[attr-defined]
    return tuple(int(x) + 1 for x in draws)


def priority(record: np.ndarray, key: np.ndarray, seed: Sequence[int]) -> np.ndarray:
    """The keyed hash that orders a user's rows for contribution bounding (numpy reference
    of the SQL/DataFrame expression the engines evaluate; all intermediates < 2^63).

    ``t = (((r mod P) s0 + (key & M)) mod P) s1 + (key >> 31)`` (mod P; P = M = 2^31 - 1)
    is injective in ``key < P`` for a fixed record ``r``; the priority is the random cubic
    ``((s2 t + s3) t + s4) t + s0`` mod P (Carter-Wegman: a 4-wise independent hash of
    ``t``, up to the coefficients being non-zero).  A user keeps her ``Delta`` rows of
    smallest (priority, key): a near-uniform ``Delta``-subset, and exactly ``Delta`` rows,
    which is all the privacy proof needs (the sensitivity bound holds for any choice).
    """
    s0, s1, s2, s3, s4 = (int(s) for s in seed)
    r = np.asarray(record, dtype=np.int64) % PRIME
    k = np.asarray(key, dtype=np.int64)
    t = (r * s0 + (k & PRIME)) % PRIME
    t = (t * s1 + (k >> 31)) % PRIME
    h = (s2 * t + s3) % PRIME
    h = (h * t + s4) % PRIME
    return (h * t + s0) % PRIME
