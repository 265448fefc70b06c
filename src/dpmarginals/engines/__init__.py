"""Counting engines: the aggregator's one heavy, exact, mergeable operation at any scale.

Everything an aggregator does after counting reports per (group, cell) -- unbiasing,
consistency, reconstruction -- is small.  :func:`count_supports` does the counting on one
of three engines that return *identical* count tensors (tests check equality with
``oracle.support`` for every oracle):

* ``"numpy"``: in memory (``oracle.support``); reads Parquet a batch at a time.  The
  default for in-process runs.
* ``"duckdb"``: DuckDB SQL over the Parquet files of a campaign; out of core, all cores,
  small memory.  The embedded default for stored reports.
* ``"spark"``: Apache Spark (DataFrame API only, no Python UDFs) for report sets that
  one machine cannot hold; the ``spark`` extra (``pip install dpmarginals[spark]``).

Reports live in the Parquet layout of :mod:`.parquet` (``campaign=<id>/group=<g>/``);
:func:`.parquet.write_reports` and :func:`.parquet.export_reports` write it.  A JSON-lines
file of reports (what the client and ``campaign export --out`` write, :mod:`.jsonl`) is
counted by the numpy engine.

>>> import tempfile
>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.oracles import OUE
>>> from dpmarginals.protocol.plan import GroupSpec, Plan
>>> plan = Plan("calm", 1.0, Domain(("a",), (12,)), (GroupSpec(("a",), "oue", 1.0, 12),))
>>> reports = np.packbits(np.eye(12, dtype=bool)[np.arange(1000) % 12], axis=1,
...                       bitorder="little")
>>> root = tempfile.mkdtemp()
>>> _ = write_reports(plan, root, "demo", [reports])
>>> (s1, n1), (s2, n2) = (count_supports(plan, root, e) for e in ("numpy", "duckdb"))
>>> bool((s1[0] == OUE(1.0, 12).support(reports)).all() and (s1[0] == s2[0]).all()), n2
(True, array([1000]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np  # noqa: F401 (the module doctest uses it)

from ..core.errors import DPMarginalsError
from ..protocol.plan import Plan
from .base import ENGINES, Counts, check_engine
from .parquet import export_reports, resolve_campaign, write_reports

__all__ = [
    "ENGINES",
    "Counts",
    "count_supports",
    "export_reports",
    "write_reports",
]


def count_supports(
    plan: Plan,
    reports: str | Path | Sequence[Any] | Mapping[int, Any],
    engine: str = "numpy",
    *,
    campaign: str | None = None,
    spark: Any = None,
    threads: int | None = None,
) -> Counts:
    """Support counts per (group, cell) and reports per group: ``(supports, users)``.

    ``reports``: a directory of the Parquet layout (the root holding ``campaign=<id>``
    directories -- name the campaign if there are several -- or a campaign directory), or,
    for the numpy engine, a JSON-lines file of reports or native report arrays (one per
    group, or ``{group: array}``).
    ``threads`` caps DuckDB's worker threads; ``spark`` is the SparkSession to use
    (default: the active one, else a local one).  The result feeds
    :func:`dpmarginals.local.collect.estimate_views` directly.
    """
    engine = check_engine(engine)
    if not isinstance(reports, str | Path):
        if engine != "numpy":
            raise DPMarginalsError(f"the {engine} engine reads reports from Parquet files: "
                                   "write them with dpmarginals.engines.write_reports first")
        from .numpy_engine import count_arrays

        return count_arrays(plan, reports)
    from .jsonl import count_jsonl, is_jsonl

    if is_jsonl(reports):
        if engine != "numpy":
            raise DPMarginalsError(f"{str(reports)!r} is a JSON-lines file: the numpy engine "
                                   f"counts it (the {engine} engine reads Parquet)")
        return count_jsonl(plan, reports)
    if engine == "spark":
        from .spark_engine import SparkEngine

        return SparkEngine(spark).count(plan, reports, campaign=campaign)
    campaign_dir = resolve_campaign(reports, campaign)
    if engine == "duckdb":
        from .duckdb_engine import DuckDBEngine

        duck = DuckDBEngine(threads=threads)
        try:
            return duck.count(plan, campaign_dir)
        finally:
            duck.close()
    from .numpy_engine import count_parquet

    return count_parquet(plan, campaign_dir)
