"""Parquet part files written whole or not at all (pyarrow from the ``engines`` extra).

A part file is written under a hidden name and renamed when complete, so a reader that
skips names starting with ``.`` or ``_`` never sees half a file (the report layout of
:mod:`dpmarginals.engines.parquet`, the records layout of
:mod:`dpmarginals.datasets.records_store`).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from .extras import lazy

__all__ = ["ROW_GROUP_ROWS", "pa", "pq", "write_part"]

pa = lazy("pyarrow", extra="engines", what="reading or writing Parquet")
pq = lazy("pyarrow.parquet", extra="engines", what="reading or writing Parquet")
ROW_GROUP_ROWS = 1 << 20


def write_part(table: Any, directory: Path) -> Path:
    """``table`` as a new part file ``part-<uuid>.parquet`` of ``directory``, atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.parquet"
    tmp = directory / f".{name}.tmp"
    pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
    os.replace(tmp, directory / name)
    return directory / name
