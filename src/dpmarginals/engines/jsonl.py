"""Reports in JSON lines: what ``dpmarginals client --save-reports`` and ``campaign export
--out`` write, counted in memory a chunk of lines at a time.

Each line is one report object (docs/deployment.md); blank lines are skipped and a
``ticket`` field (the service's admission ticket, not part of the report) is ignored.
Every report is validated against the plan (``PlanCodec.decode``): one bad line is an
error naming its line number, and a report id seen twice is refused, as the service
would (the ids seen are held in memory: about 100 bytes a report).  Plain or
gzip-compressed (``.gz``) files.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.counts import Counts
from ..protocol.plan import Plan
from ..protocol.reports import PlanCodec, ReportError

__all__ = ["JSONL_SUFFIXES", "count_jsonl", "is_jsonl"]

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
CHUNK_LINES = 50_000


def is_jsonl(path: str | Path) -> bool:
    """Whether ``path`` names a JSON-lines file (``.jsonl``, ``.ndjson``, ``.json``, or
    those with ``.gz``)."""
    p = Path(path)
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    return p.is_file() and name.endswith(JSONL_SUFFIXES)


def _chunks(path: Path) -> Iterator[tuple[int, list[Any]]]:
    """(number of the chunk's first line, its reports), CHUNK_LINES lines at a time."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    chunk: list[Any] = []
    first = 1
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                if not chunk:
                    first = number
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    raise DPMarginalsError(f"{path.name} line {number}: not JSON ({exc})"
                                           ) from None
                if isinstance(item, dict):
                    item.pop("ticket", None)
                chunk.append((number, item))
                if len(chunk) >= CHUNK_LINES:
                    yield first, chunk
                    chunk = []
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
    if chunk:
        yield first, chunk


def count_jsonl(plan: Plan, path: str | Path) -> Counts:
    """Support counts per group of the reports in a JSON-lines file (validated)."""
    p = Path(path)
    codec = PlanCodec(plan)
    supports, users = codec.empty_counts()
    seen: set[bytes] = set()
    for _, chunk in _chunks(p):
        lines = [n for n, _ in chunk]
        try:
            decoded = codec.decode([item for _, item in chunk])
        except ReportError as exc:
            where = f"line {lines[exc.index]}" if exc.index is not None else "a line"
            reason = re.sub(r"repeats report (\d+) of the batch",
                            lambda m, at=lines: f"repeats line {at[int(m.group(1))]}",
                            exc.reason)
            raise DPMarginalsError(f"{p.name} {where}: {reason}") from None
        again = seen.intersection(decoded.ids)
        if again:
            at = next(i for i, rid in enumerate(decoded.ids) if rid in again)
            raise DPMarginalsError(f"{p.name} line {lines[at]}: report_id "
                                   f"{decoded.ids[at].hex()} was seen before")
        seen.update(decoded.ids)
        for g, n, support in codec.tally(decoded):
            supports[g] = supports[g] + support
            users[g] += n
    return Counts(supports, users)
