"""DP marginals for sparse records: Gopi–Mahabadi–Yekhanin, Algorithms 1 and 2.

Extract, for ``k = 1..T``, the set ``S_k`` of k-tuples (sets of ``k`` (column, value)
items with distinct columns) that many records hold, with noisy counts ``H_k``, under
``(epsilon, delta)``-DP (neighbours: one user's record added or removed).

Stage ``k`` (Algorithm 1):

1. ``W_u = M_k(X^u) ∩ V_k``: user ``u``'s valid k-tuples.  ``V_1`` is every item; for
   ``k >= 2``, ``V_k`` is the k-tuples all of whose (k-1)-subtuples are in ``S_{k-1}``
   (apriori candidates: join two tuples of ``S_{k-1}`` sharing their first ``k-2`` items,
   then check the other subtuples).  Users' ``W_u`` are built the same way *inside each
   record*, from the (k-1)-tuples of ``S_{k-1}`` the record holds, so no tuple outside
   the records is ever enumerated for them.
2. ``Delta_k`` = DP ``Q``-th percentile of ``|W_u|`` (OpenDP's exponential mechanism,
   ``epsilon_Q``-DP, candidates ``1..max_contribution``).
3. Contribution bounding: a user with ``|W_u| > Delta_k`` keeps ``Delta_k`` tuples chosen
   uniformly at random (random priorities; vectorized over all users).
4. NoisyThresholding (Algorithm 2) on the histogram of the kept tuples over ``Omega``,
   with discrete Gaussian noise of scale ``sigma_k sqrt(Delta_k)``, keep ``H > rho_k``:

   * ``k = 1``: ``Omega = V_1`` = the union of the kept items, and ``rho_1 = 1 + t`` with
     ``t`` the smallest integer with ``P(Z > t) <= 1 - (1 - delta/2)^(1/Delta_1)`` -- the
     paper's ``1 + sigma sqrt(Delta) Phi^-1((1 - delta/2)^(1/Delta))`` for the discrete
     noise actually drawn (its exact tail, :func:`.noise.dg_threshold`).
   * ``k >= 2``: ``Omega = V_k`` and ``rho_k`` the smallest integer with
     ``P(Z > rho_k) <= eta min(1, |S_{k-1}| / |V_k|)``, so the expected number of
     *spurious* outputs (tuples no user holds) is at most ``eta min(|S_{k-1}|, |V_k|)``
     (Proposition 1.1).
   * ``no_spurious=True`` (Remark 1.1): for every ``k``, ``Omega`` = the union of the kept
     tuples and ``rho_k = 1 + t`` with ``delta / (2T)`` in place of ``delta / 2``; no
     spurious tuple is ever output, at the price of higher thresholds.

**Candidates no user holds.**  When ``|V_k|`` exceeds ``max_materialized``, ``V_k`` is
never materialised: the tuples with a non-zero kept count get OpenDP noise as usual; of
the ``n0`` others, ``Binomial(n0, P(Z > rho_k))`` are output, chosen uniformly (rejection
sampling from the apriori join, exact), with values from the exact conditional tail
``Z | Z > rho_k`` -- the same output distribution as noising all of ``V_k``, except that
the binomial and the tail are sampled by float64 inversion (total variation ~1e-12, which
adds at most ``(1 + e^epsilon) * 1e-12`` to ``delta``).  A test checks both paths agree.

Privacy accounting: :mod:`.accounting` derives the split; on the release path every stage
runs as an OpenDP measurement inside one OpenDP composition (:mod:`.ktuple_stages`), whose
privacy map gives the ``(rho, delta)`` the release records (``budget["privacy_map_rho"]``,
``budget["privacy_map_delta"]``) and OpenDP's conversion the ``epsilon`` it certifies at
``delta`` (``budget["epsilon_certified"]``).

>>> recs = SparseRecords.from_lists([[1, 2, 3]] * 3000 + [[1, 2]] * 3000 + [[4]] * 3000)
>>> res = DPMarginals(epsilon=1.0, delta=1e-6, max_k=3).fit(recs, rng=0, simulation=True)
>>> res.found()
[4, 3, 1]
>>> res.private
False
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import DPMarginalsError, check_epsilon
from ..core.randomness import RNGLike
from ..datasets.records_store import as_records
from ..datasets.sparse import SparseRecords
from .accounting import PrivacyBudget, check_delta, plan_budget
from .ktuple_stages import CertifiedStages, SimulatedStages, stage_budgets
from .noise import (
    NoiseSource,
    dg_sf,
    dg_threshold,
    noise_source,
    sample_binomial,
    sample_dg_tail,
)
from .result import DPMarginalsResult, Level, spurious_fraction, true_counts
from .tuples import (
    TupleCounter,
    _count_candidates,
    _KeyMap,
    _MemoryCounter,
    _sample_unheld,
    _TupleIndex,
)

__all__ = [
    "DPMarginals",
    "DPMarginalsResult",
    "Level",
    "TupleCounter",
    "spurious_fraction",
    "true_counts",
]

# The result type lives in result.py, the counting passes in tuples.py; the public names
# stay importable from here.


def _delta_tail(delta: float, bound: int) -> float:
    """``1 - (1 - delta)^(1 / bound)``, the per-item crossing probability of Remark 1.1."""
    return -math.expm1(math.log1p(-delta) / bound)


# -- the algorithm ----------------------------------------------------------------------
class DPMarginals:
    """``(epsilon, delta)``-DP extraction of frequent k-tuples, ``k = 1..max_k``.

    Parameters (Algorithm 1): ``max_k`` = ``T``; ``eta`` = target fraction of spurious
    tuples; ``percentile`` = ``Q`` (0 < Q <= 100).  ``quantile_fraction`` of the zCDP
    budget goes to the percentiles (Remark 1.2: 10%).  ``accountant``: ``"zcdp"``
    (Theorem 1.1 with the correct conversion) or ``"rdp"`` (Google's dp-accounting; less
    noise for the same guarantee).  ``no_spurious``: Remark 1.1's variant.
    ``max_contribution``: the largest ``Delta_k`` the percentile may choose.
    ``max_materialized``: above this many candidates ``V_k`` is not materialised.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        max_k: int = 3,
        eta: float = 0.1,
        percentile: float = 99.0,
        *,
        quantile_fraction: float = 0.1,
        accountant: str = "zcdp",
        no_spurious: bool = False,
        max_contribution: int = 1000,
        max_materialized: int = 1 << 20,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if isinstance(max_k, bool) or not isinstance(max_k, int | np.integer) or max_k < 1:
            raise DPMarginalsError(f"max_k (T) must be a whole number >= 1, got {max_k!r}")
        self.max_k = int(max_k)
        if not 0.0 < float(eta) < 1.0:
            raise DPMarginalsError(f"eta must be in (0, 1), got {eta!r}")
        self.eta = float(eta)
        if not 0.0 < float(percentile) <= 100.0:
            raise DPMarginalsError(f"percentile must be in (0, 100], got {percentile!r}")
        self.percentile = float(percentile)
        if int(max_contribution) < 1:
            raise DPMarginalsError(f"max_contribution must be >= 1, got {max_contribution!r}")
        self.max_contribution = int(max_contribution)
        self.max_materialized = int(max_materialized)
        self.no_spurious = bool(no_spurious)
        self.budget: PrivacyBudget = plan_budget(
            self.epsilon, self.delta, self.max_k,
            quantile_fraction=quantile_fraction, accountant=accountant,
        )

    def params(self) -> dict[str, Any]:
        return {"max_k": self.max_k, "eta": self.eta, "percentile": self.percentile,
                "no_spurious": self.no_spurious, "max_contribution": self.max_contribution}

    def fit(
        self,
        data: SparseRecords | pd.DataFrame | str | Path,
        *,
        rng: RNGLike = None,
        simulation: bool = False,
        engine: str = "numpy",
        spark: Any = None,
        threads: int | None = None,
    ) -> DPMarginalsResult:
        """Run Algorithm 1 on ``data`` (records, a table with NaN for empty, a file, or a
        records directory of :func:`dpmarginals.datasets.records_store.write_records`).

        ``rng=None`` is the private release (OpenDP noise, OS randomness).  A seed is only
        accepted with ``simulation=True``: a non-private, reproducible simulation.

        ``engine`` runs the counting passes (per-user tuple counts, contribution bounding,
        the histograms, the apriori join of each user's tuples): ``"numpy"`` in memory
        (default), ``"duckdb"`` (out of core; a records directory is scanned from its
        Parquet files) or ``"spark"`` (``spark``: a SparkSession, default the active one;
        needs the ``spark`` extra).  Noise, thresholds and candidates stay on the driver.
        The SQL engines bound contributions by a keyed hash (:func:`dpmarginals.engines.
        base.priority`) instead of numpy's random draws, so with the same seed they agree
        with each other exactly, and with numpy exactly when no user exceeds ``Delta_k``.
        """
        noise = noise_source(rng, simulation=simulation)
        if engine == "numpy":
            records: Any = as_records(data)
            counter: TupleCounter = _MemoryCounter(records)
        else:
            records, counter = tuple_counter(data, engine, spark=spark, threads=threads)
        runner = _Run(self, records, noise, counter)
        levels = runner.run()
        items = [(records.columns[int(records.item_column[i])], records.item_value_label(int(i)))
                 for i in runner.s1_items]
        budget = self.budget.to_dict()
        budget.update(runner.certified())
        return DPMarginalsResult(
            levels=levels, items=items, binary=records.binary,
            budget=budget, params=self.params(), private=noise.private,
            name=records.name, timings=runner.timings,
        )


class _Run:
    """One execution of Algorithm 1 (state shared by the stages)."""

    def __init__(self, algo: DPMarginals, records: Any, noise: NoiseSource,
                 counter: TupleCounter) -> None:
        self.algo = algo
        self.records = records  # SparseRecords or a RecordsTable: n, columns, item_column
        self.noise = noise
        self.counter = counter
        self.budget = algo.budget
        self.timings: list[dict[str, float]] = []
        self.s1_items = np.zeros(0, np.int64)
        self.stages: Any = (CertifiedStages(noise, algo.budget.quantile_zcdp)  # type: ignore
                            if noise.private else SimulatedStages(noise))  # type: ignore

    def certified(self) -> dict[str, Any]:
        """What OpenDP's map of the composition certifies (nothing for a simulation)."""
        spent = self.stages.certified()
        if spent is None:
            return {"privacy_map_rho": None, "privacy_map_delta": None}
        rho, delta = spent
        dp = self.stages.dp
        eps, _ = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(self.stages._composition),
                                     self.budget.delta).map(1)
        return {"privacy_map_rho": rho, "privacy_map_delta": delta,
                "epsilon_certified": float(eps),
                "certified_by": "OpenDP's privacy map of the composed stages"}

    def _upper(self, k: int) -> int:
        """Largest candidate ``Delta_k``: ``max_contribution``, or ``C(d, k)`` for a table
        with ``d`` columns (its schema is public and no record has more k-tuples)."""
        upper = self.algo.max_contribution
        if not self.records.binary:
            upper = max(1, min(upper, math.comb(len(self.records.columns), k)))
        return upper

    def _delta_k(self, k: int, index: _TupleIndex | None) -> int:
        """``Delta_k``: the DP percentile of the users' numbers of valid k-tuples."""
        upper = self._upper(k)
        return self.stages.percentile(lambda counter: counter.sizes(k, index, upper + 1),
                                      self.algo.percentile, self.budget.epsilon_q, upper)

    def _set_union_threshold(self, scale: float, bound: int) -> float:
        """``rho = 1 + t``: a count-1 item crosses it with prob. <= 1 - (1 - d)^(1/Delta)."""
        d = self.budget.delta_threshold / (self.algo.max_k if self.algo.no_spurious else 1)
        return 1.0 + dg_threshold(_delta_tail(d, bound), scale)

    def _threshold(self, k: int, bound: int, scale: float, kept: Any = None
                   ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """DP set union of the kept k-tuples: ``(keys, noisy counts, scale, rho)``, the
        keys whose noisy count exceeds ``rho``."""
        rho = self._set_union_threshold(scale, bound)
        kept = kept or (lambda counter: counter.kept(k, bound, self.noise))
        keys, noisy, scale, at_least = self.stages.threshold(kept, scale, int(rho) + 1, bound)
        return keys, noisy, scale, float(at_least - 1)

    def run(self) -> list[Level]:
        self.stages.start(self.counter, stage_budgets(self.budget, self.algo.no_spurious))
        try:
            return self._run()
        finally:
            self.counter.close()

    def _run(self) -> list[Level]:
        T = self.algo.max_k
        clock = time.perf_counter()
        # -- k = 1 ------------------------------------------------------------------------
        d1 = self._delta_k(1, None)
        t_pct = time.perf_counter()
        scale = self.budget.sigmas[0] * math.sqrt(d1)
        items, counts, scale, rho = self._threshold(1, d1, scale)
        t_count = t_noise = time.perf_counter()  # the bounding runs inside the measurement
        self.s1_items = items
        levels = [Level(1, np.arange(items.size, dtype=np.int64)[:, None], counts,
                        d1, rho, None, scale, False)]
        self.timings.append({"candidates": 0.0, "percentile": t_pct - clock,
                             "bounding": t_count - t_pct, "noise": t_noise - t_count,
                             "total": t_noise - clock})
        # compact ids: rank in S_1
        index = _TupleIndex(self.records.item_column[self.s1_items])
        if T >= 2 and index.size(1) >= 2:
            self.counter.advance(1, index, self.s1_items)
        # -- k = 2..T ---------------------------------------------------------------------
        for k in range(2, T + 1):
            clock = time.perf_counter()
            if index.size(k - 1) < 2:
                levels.extend(_empty(j) for j in range(k, T + 1))
                self.timings.extend({"total": 0.0} for _ in range(k, T + 1))
                break
            levels.append(self._stage(k, index))
            self.timings[-1]["total"] = time.perf_counter() - clock
        return levels

    def _stage(self, k: int, index: _TupleIndex) -> Level:
        algo, noise = self.algo, self.noise
        t0 = time.perf_counter()
        n_prev = index.size(k - 1)
        if algo.no_spurious:
            n_cand, cand_keys = 0, None
        else:
            n_cand, cand_keys = _count_candidates(index, k, algo.max_materialized)
        t1 = time.perf_counter()
        dk = self._delta_k(k, index)
        t2 = time.perf_counter()
        scale = self.budget.sigmas[k - 1] * math.sqrt(dk)
        implicit = False
        stages = self.stages
        bounding = [0.0]

        def kept(counter: Any) -> tuple[np.ndarray, np.ndarray]:
            start = time.perf_counter()
            out = counter.kept(k, dk, noise)
            bounding[0] += time.perf_counter() - start
            return out

        if algo.no_spurious:
            out_keys, out_counts, scale, rho = self._threshold(k, dk, scale, kept)
        elif n_cand == 0:
            rho, out_keys, out_counts = float("nan"), np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            rho = float(dg_threshold(algo.eta * min(1.0, n_prev / n_cand), scale))
            if cand_keys is not None:  # V_k materialised: noise on every candidate
                where = _KeyMap(cand_keys, index.key_space(k))

                def histogram(counter: Any) -> np.ndarray:
                    keys, counts = kept(counter)
                    hist = np.zeros(cand_keys.size, np.int64)
                    hist[where.find(keys)] = counts
                    return hist

                noisy, scale = stages.gaussian(histogram, scale, dk)
                sel = noisy > rho
                out_keys, out_counts = cand_keys[sel], noisy[sel]
            else:  # implicit: noise on held candidates, unheld ones sampled in aggregate
                implicit = True
                held: list[np.ndarray] = []

                def nonzero(counter: Any) -> np.ndarray:
                    keys, counts = kept(counter)
                    held.append(keys)  # the positions in V_k of the entries noised
                    return counts

                noisy, scale = stages.gaussian(nonzero, scale, dk)
                held_keys = held[0]
                sel = noisy > rho
                n0 = n_cand - int(held_keys.size)
                m = sample_binomial(n0, dg_sf(int(rho), scale), float(noise.random(1)[0]))
                zero_keys = _sample_unheld(index, k, m, held_keys, noise)
                zero_vals = sample_dg_tail(int(rho), scale, noise.random(m))
                out_keys = np.concatenate([held_keys[sel], zero_keys])
                out_counts = np.concatenate([noisy[sel], zero_vals])
                order = np.argsort(out_keys, kind="stable")
                out_keys, out_counts = out_keys[order], out_counts[order]
        index.add_level(out_keys)
        t4 = time.perf_counter()
        # the next stage starts from the tuples of S_k each record holds (all of them)
        if out_keys.size >= 2 and k < algo.max_k:
            self.counter.advance(k, index, self.s1_items)
        self.timings.append({"candidates": t1 - t0, "percentile": t2 - t1,
                             "bounding": bounding[0], "noise": t4 - t2 - bounding[0],
                             "total": 0.0, "next": time.perf_counter() - t4})
        return Level(k, index.tuples[k].copy(), np.asarray(out_counts, np.int64), dk,
                     rho, None if algo.no_spurious else int(n_cand), scale, implicit)


def _empty(k: int) -> Level:
    return Level(k, np.zeros((0, k), np.int64), np.zeros(0, np.int64))


def tuple_counter(data: Any, engine: str, *, spark: Any = None,
                  threads: int | None = None) -> tuple[Any, Any]:
    """``(records metadata, counter)`` for the central-DP extraction on a SQL engine.

    ``data``: a records directory (:func:`~dpmarginals.datasets.records_store.write_records`;
    its entries are scanned by the engine and never loaded by Python), or anything
    ``DPMarginals.fit`` reads in memory (records, a DataFrame, a file).
    """
    from ..datasets.records_store import is_records_dir, open_records
    from ..engines import check_engine

    engine = check_engine(engine)

    local_dir = isinstance(data, str | Path) and is_records_dir(data)
    if engine == "spark":
        from ..engines.spark_engine import SparkTupleCounter

        counter = SparkTupleCounter(data, spark=spark)
        return counter.records, counter
    if engine == "duckdb":
        from ..engines.duckdb_engine import DuckDBTupleCounter

        records = open_records(data) if local_dir else as_records(data)
        return records, DuckDBTupleCounter(records, threads=threads)
    records = as_records(data)
    return records, _MemoryCounter(records)
