"""The result of the central-DP k-tuple extraction (:mod:`.dp_marginals`): the levels
``S_k``/``H_k``, the saved release format, and the non-private evaluation aids."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.provenance import CENTRAL_UNIT, Provenance
from ..core.table import MarginalTable
from ..datasets.sparse import SparseRecords
from .tuples import _TupleIndex, _UserTuples

__all__ = ["RELEASE_FORMAT", "DPMarginalsResult", "Level", "spurious_fraction", "true_counts"]

RELEASE_FORMAT = "dpmarginals.ktuples"
"""The ``format`` field of a saved k-tuple release (``query`` and ``synthesize`` read it)."""


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Level:
    """``S_k`` and ``H_k``: ``tuples[i]`` (indices into the result's items, increasing) has
    noisy count ``counts[i]``; rows in lexicographic order.

    ``contribution_bound`` = ``Delta_k``, ``threshold`` = ``rho_k`` (output iff the noisy
    count exceeds it), ``noise_scale`` = ``sigma_k sqrt(Delta_k)``, ``candidates`` =
    ``|V_k|`` when it is public (``k >= 2`` without ``no_spurious``), else ``None``: the
    size of a data-dependent universe (``k = 1``, Remark 1.1) is not released.
    """

    k: int
    tuples: np.ndarray
    counts: np.ndarray
    contribution_bound: int = 0
    threshold: float = float("nan")
    candidates: int | None = None
    noise_scale: float = float("nan")
    implicit: bool = False

    def __len__(self) -> int:
        return int(self.counts.size)


@dataclass(eq=False)
class DPMarginalsResult:
    """The release: ``S_1..S_T`` with noisy counts, the extracted items, and the budget.

    ``items[i] = (column, value)`` for the ``i``-th item of ``S_1`` (value ``"1"`` for
    transactional data).  ``timings`` are wall-clock seconds per stage: they depend on
    the data and are not protected, so they are not saved with the release.
    """

    levels: list[Level]
    items: list[tuple[str, str]]
    binary: bool
    budget: dict[str, Any]
    params: dict[str, Any]
    private: bool
    name: str = "records"
    timings: list[dict[str, float]] = field(default_factory=list)
    #: Why a file marked private is not taken for one (read without a digest), or None.
    unsealed: str | None = None

    # -- views ----------------------------------------------------------------------
    @property
    def max_k(self) -> int:
        return len(self.levels)

    def found(self) -> list[int]:
        """``|S_k|`` for ``k = 1..T``."""
        return [len(level) for level in self.levels]

    def label(self, item: int) -> str:
        col, val = self.items[item]
        return col if self.binary else f"{col}={val}"

    def tuples(self, k: int) -> pd.DataFrame:
        """``S_k`` as a table: one row per tuple, its items' labels and its noisy count."""
        level = self._level(k)
        frame = pd.DataFrame({
            f"item{j + 1}": [self.label(i) for i in level.tuples[:, j]] for j in range(k)
        })
        frame["count"] = level.counts
        return frame

    def _level(self, k: int) -> Level:
        if not 1 <= k <= self.max_k:
            raise DPMarginalsError(f"k must be in 1..{self.max_k}, got {k}")
        return self.levels[k - 1]

    def columns(self) -> list[str]:
        """The columns with at least one extracted value."""
        return list(dict.fromkeys(col for col, _ in self.items))

    def count(self, items: Sequence[tuple[str, str] | str]) -> int | None:
        """The noisy count of one tuple given as ``(column, value)`` pairs (or column names
        for transactional data); ``None`` when it was not extracted."""
        found = [self.item_id(it) for it in items]
        if not found or None in found:
            return None
        ids = sorted(i for i in found if i is not None)
        level = self._level(len(ids))
        hit = np.flatnonzero((level.tuples == np.asarray(ids)).all(axis=1))
        return int(level.counts[hit[0]]) if hit.size else None

    def item_id(self, item: tuple[str, str] | str) -> int | None:
        """The index of an extracted item, ``(column, value)`` (or a column name for
        transactional data), or None when the release does not hold it."""
        key = (item, "1") if isinstance(item, str) else (str(item[0]), str(item[1]))
        lookup = getattr(self, "_ids", None)
        if lookup is None:
            lookup = {it: i for i, it in enumerate(self.items)}
            self._ids = lookup
        return lookup.get(key)

    def marginal(self, columns: Sequence[str], n: int) -> MarginalTable:
        """The marginal table over ``columns`` (at most ``T`` of them) from the noisy counts.

        Each column's values are index 0 = "empty or a value not extracted" and then its
        extracted values in the order of :meth:`values`.  Cells follow by
        inclusion–exclusion from the counts of the extracted tuples (a tuple not extracted
        counts 0); ``n`` is the number of records, which the release does not contain
        (pass a public figure or your own DP estimate).  Negative cells are clipped to 0
        and the table is normalised.
        """
        cols = list(columns)
        if not 1 <= len(cols) <= self.max_k:
            raise DPMarginalsError(f"a marginal needs 1..{self.max_k} columns, got {len(cols)}")
        if len(set(cols)) != len(cols):
            raise DPMarginalsError(f"columns repeat in {cols}")
        known = set(self.columns())
        for c in cols:
            if c not in known:
                raise DPMarginalsError(
                    f"column {c!r} has no extracted value; extracted columns: {sorted(known)}"
                )
        if n < 1:
            raise DPMarginalsError(f"n must be >= 1, got {n}")
        ids = [[i for i, it in enumerate(self.items) if it[0] == c] for c in cols]
        shape = tuple(len(v) + 1 for v in ids)
        upward = np.zeros(shape, dtype=np.float64)  # index 0 = "any value" on that axis
        lookup = [{tuple(t): int(c) for t, c in zip(lv.tuples.tolist(), lv.counts.tolist(),
                                                   strict=True)}
                  for lv in self.levels[: len(cols)]]
        for cell in np.ndindex(*shape):
            chosen = tuple(sorted(ids[a][v - 1] for a, v in enumerate(cell) if v > 0))
            upward[cell] = lookup[len(chosen) - 1].get(chosen, 0) if chosen else n
        exact = upward.copy()
        for axis in range(len(cols)):  # "other" = any value minus the extracted ones
            moved = np.moveaxis(exact, axis, 0)
            moved[0] = moved[0] - moved[1:].sum(axis=0)
        exact = np.clip(exact, 0.0, None)
        total = exact.sum()
        values = exact / total if total > 0 else np.full(shape, 1.0 / exact.size)
        return MarginalTable(Domain(tuple(cols), shape), values)

    def values(self, column: str) -> list[str]:
        """Labels of ``column``'s marginal axis: ``"(other)"`` then the extracted values."""
        return ["(other)"] + [v for c, v in self.items if c == column]

    # -- persistence ----------------------------------------------------------------
    def tuple_counts(self, columns: Sequence[str]) -> pd.DataFrame:
        """The extracted tuples over exactly ``columns`` (one value each), with their noisy
        counts: what the release says about those columns.  Tuples not listed were not
        extracted (their count is below the release's threshold, or they do not occur)."""
        cols = list(columns)
        level = self._level(len(cols))
        for c in cols:
            if c not in self.columns():
                raise DPMarginalsError(f"column {c!r} has no extracted value; extracted "
                                       f"columns: {sorted(self.columns())[:20]}")
        item_cols = np.asarray([col for col, _ in self.items], dtype=object)
        held = item_cols[level.tuples] if len(level) else np.empty((0, len(cols)), object)
        rows = [r for r in range(len(level)) if sorted(held[r]) == sorted(cols)]
        frame = pd.DataFrame({c: [next(self.items[i][1] for i in level.tuples[r]
                                       if self.items[i][0] == c) for r in rows] for c in cols})
        frame["count"] = level.counts[rows]
        return frame

    @property
    def provenance(self) -> Provenance:
        """The privacy mark saved with the release (not private when read from a file
        without its digest: nothing tells whether it was edited)."""
        if self.private:
            mark = Provenance(True, "central", "dp_marginals", float(self.budget["epsilon"]),
                              delta=float(self.budget["delta"]), unit=CENTRAL_UNIT,
                              randomness="OpenDP's discrete Gaussian sampler")
            return (mark if self.unsealed is None
                    else replace(mark, private=False, reason=self.unsealed))
        return Provenance.simulation("dp_marginals", "central", float(self.budget["epsilon"]),
                                     "seeded simulation: numpy noise, not OpenDP's; do not "
                                     "publish it", delta=float(self.budget["delta"]),
                                     unit=CENTRAL_UNIT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RELEASE_FORMAT,
            "privacy": self.provenance.to_dict(),
            "method": "dp-marginals (Gopi-Mahabadi-Yekhanin)",
            # the data file's name is not part of a private release
            **({} if self.private else {"name": self.name}),
            "private": self.private,
            # saved again, a file read without its digest stays not private
            **({"unsealed": self.unsealed} if self.unsealed is not None else {}),
            "binary": self.binary,
            "budget": self.budget,
            "params": self.params,
            "items": [list(it) for it in self.items],
            "levels": [
                {"k": lv.k, "contribution_bound": lv.contribution_bound,
                 "threshold": _finite(lv.threshold), "candidates": lv.candidates,
                 "noise_scale": _finite(lv.noise_scale), "implicit": lv.implicit,
                 "tuples": lv.tuples.tolist(), "counts": lv.counts.tolist()}
                for lv in self.levels
            ],
        }

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON with the digest of its content
        (:mod:`dpmarginals.synopsis.release_file`: an edit is detected on load)."""
        from ..synopsis.release_file import save_sealed

        save_sealed(self.to_dict(), path)

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> DPMarginalsResult:
        levels = [
            Level(k=int(lv["k"]),
                  tuples=np.asarray(lv["tuples"], dtype=np.int64).reshape(-1, int(lv["k"])),
                  counts=np.asarray(lv["counts"], dtype=np.int64),
                  contribution_bound=int(lv["contribution_bound"]),
                  threshold=_num(lv["threshold"]), candidates=lv["candidates"],
                  noise_scale=_num(lv["noise_scale"]), implicit=bool(lv["implicit"]))
            for lv in spec["levels"]
        ]
        return cls(levels, [tuple(it) for it in spec["items"]], bool(spec["binary"]),
                   spec["budget"], spec["params"], bool(spec["private"]),
                   spec.get("name", "records"), unsealed=spec.get("unsealed"))

    @classmethod
    def load(cls, path: str | Path) -> DPMarginalsResult:
        """Read a saved release: an edited one (its digest no longer matching) is refused,
        one without a digest is read as not private."""
        try:
            return cls.from_file_body(json.loads(Path(path).read_text()), str(path))
        except DPMarginalsError:
            raise
        except (OSError, ValueError, KeyError) as exc:
            raise DPMarginalsError(f"cannot load a DP marginals result from {str(path)!r}: "
                                   f"{exc}") from None

    @classmethod
    def from_file_body(cls, body: dict[str, Any], source: str) -> DPMarginalsResult:
        """:meth:`from_dict` of a file's JSON, its digest checked first."""
        from ..synopsis.base import UNSEALED
        from ..synopsis.release_file import check_digest

        result = cls.from_dict(body)
        if not check_digest(body, source):
            result.unsealed = UNSEALED
        return result


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


# -- non-private evaluation ---------------------------------------------------------------
def true_counts(result: DPMarginalsResult, records: SparseRecords) -> list[np.ndarray]:
    """NON-PRIVATE evaluation aid: for each extracted tuple, how many records hold it.

    Computed from the raw input, so it is *not* differentially private: use it to evaluate
    a release (spurious tuples have true count 0), never publish it.
    """
    s1 = _record_item_ids(result, records)
    if (s1 < 0).any():
        raise DPMarginalsError("the result has items that the records do not have")
    index = _TupleIndex(records.item_column[s1] if s1.size else np.zeros(0, np.int64))
    rank = np.full(records.n_items, -1, np.int64)
    rank[s1] = np.arange(s1.size)
    r = rank[records.items]
    u = records.rows()[r >= 0]
    idx = r[r >= 0]
    out = [np.bincount(idx, minlength=s1.size).astype(np.int64)]
    for k in range(2, result.max_k + 1):
        level = result.levels[k - 1]
        if len(level) == 0 or index.size(k - 1) < 2:
            out.extend(np.zeros(len(result.levels[j - 1]), np.int64)
                       for j in range(k, result.max_k + 1))
            break
        keys = level.tuples[:, -1] + index.m1 * index.lookup(level.tuples[:, :-1])
        index.add_level(keys)
        counts = np.zeros(keys.size, np.int64)
        nu, ni = [], []
        level_map = index.maps[k]
        assert level_map is not None
        for cu, ck in _UserTuples(index, k, u, idx):
            pos = level_map.find(ck)
            hit = pos >= 0
            counts += np.bincount(pos[hit], minlength=keys.size)
            nu.append(cu[hit])
            ni.append(pos[hit])
        out.append(counts)
        u = np.concatenate(nu) if nu else np.zeros(0, np.int64)
        idx = np.concatenate(ni) if ni else np.zeros(0, np.int64)
    return out


def _record_item_ids(result: DPMarginalsResult, records: SparseRecords) -> np.ndarray:
    """The records' item id of each of the result's items (-1 when absent)."""
    if not result.items:
        return np.zeros(0, np.int64)
    col_idx = pd.Index(records.columns).get_indexer([c for c, _ in result.items])
    if records.binary:  # one item per column, item id = column index
        ok = col_idx >= 0
        out = np.full(col_idx.size, -1, np.int64)
        out[ok] = col_idx[ok]
        return out
    wanted = np.flatnonzero(np.isin(records.item_column, col_idx[col_idx >= 0]))
    ids = {(int(records.item_column[i]), records.item_value_label(int(i))): int(i)
           for i in wanted}
    return np.asarray([ids.get((int(c), v), -1) for c, (_, v) in
                       zip(col_idx, result.items, strict=True)], dtype=np.int64)


def spurious_fraction(result: DPMarginalsResult, records: SparseRecords) -> list[float]:
    """NON-PRIVATE evaluation aid: per ``k``, the fraction of extracted tuples that no
    record holds (0.0 when nothing was extracted)."""
    return [float((c == 0).mean()) if c.size else 0.0 for c in true_counts(result, records)]
