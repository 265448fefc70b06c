"""The in-memory engine: ``oracle.support`` over numpy arrays (the reference counts).

Reports come either in memory (one native array per group) or from the Parquet layout,
read a batch of ``batch_rows`` reports at a time with pyarrow, so memory stays bounded
by one batch whatever the number of reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.extras import lazy
from ..protocol.plan import Plan
from .base import Counts, empty_counts, plan_oracles
from .parquet import (
    METADATA_KEY,
    check_file_metadata,
    check_manifest,
    from_table,
    group_files,
    report_columns,
)

pa = lazy("pyarrow", extra="engines", what="reading or writing Parquet")
pq = lazy("pyarrow.parquet", extra="engines", what="reading or writing Parquet")

__all__ = ["count_arrays", "count_parquet"]

BATCH_ROWS = 1 << 20


def count_arrays(plan: Plan, reports: Sequence[Any] | Mapping[int, Any]) -> Counts:
    """Support counts of in-memory native reports: one array per group (plan order), or
    ``{group: array}`` (missing groups count as empty)."""
    oracles = plan_oracles(plan)
    supports, users = empty_counts(plan)
    if isinstance(reports, Mapping):
        items = list(reports.items())
    else:
        if len(reports) != plan.m:
            raise DPMarginalsError(f"expected one report array per group ({plan.m}), "
                                   f"got {len(reports)}")
        items = list(enumerate(reports))
    for g, native in items:
        if not isinstance(g, int | np.integer) or not 0 <= int(g) < plan.m:
            raise DPMarginalsError(f"group must be one of 0..{plan.m - 1}, got {g!r}")
        arr = np.asarray(native)
        if arr.shape[:1] == (0,):
            continue
        try:
            supports[int(g)] = supports[int(g)] + np.asarray(oracles[g].support(arr), np.int64)
        except DPMarginalsError as exc:
            raise DPMarginalsError(f"group {int(g)}: {exc}") from None
        users[int(g)] += len(arr)
    return Counts(supports, users)


def count_parquet(plan: Plan, campaign_dir: str | Path, *, batch_rows: int = BATCH_ROWS
                  ) -> Counts:
    """Support counts of a campaign directory, streaming each part file in batches."""
    check_manifest(campaign_dir, plan)
    oracles = plan_oracles(plan)
    supports, users = empty_counts(plan)
    for g, oracle in enumerate(oracles):
        columns = report_columns(oracle)
        for path in group_files(campaign_dir, g):
            try:
                pfile = pq.ParquetFile(path)
            except (OSError, pa.ArrowException) as exc:
                raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
            meta = pfile.schema_arrow.metadata or {}
            check_file_metadata(path, meta.get(METADATA_KEY), plan, g)
            missing = [c for c in columns if c not in pfile.schema_arrow.names]
            if missing:
                raise DPMarginalsError(f"{str(path)!r} lacks the {oracle.name} report columns "
                                       f"{missing}")
            for batch in pfile.iter_batches(batch_size=batch_rows, columns=columns):
                try:
                    native = from_table(oracle, batch)
                    supports[g] += np.asarray(oracle.support(native), dtype=np.int64)
                except DPMarginalsError as exc:
                    raise DPMarginalsError(f"group {g}, {Path(path).name}: {exc}") from None
                users[g] += batch.num_rows
    return Counts(supports, users)
