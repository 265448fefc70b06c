"""DuckDB over Parquet files: the embedded, out-of-core default for stored reports.

One SQL query per kind of group (all GRR groups together, all groups of (j, bit) reports
-- HR, ht, cms --, all OLH groups, the unary-encoding groups of each word count, the EM
groups of each width), reading only the part files of the
groups concerned, with ``group`` from the Hive-style path.  The queries are pure SQL
aggregations (no Python per report); numpy finishes the small tallies
(:mod:`.base`).  DuckDB streams the files, so memory stays small whatever their size.

The central-DP extraction's counting passes run here too (:class:`DuckDBTupleCounter`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.extras import lazy
from ..protocol.plan import Plan
from .base import (
    LANE,
    OLH_ALL,
    OLH_INVALID,
    PRIME,
    Counts,
    batch_key,
    empty_counts,
    finish_em,
    finish_lanes,
    finish_olh,
    finish_pairs,
    finish_values,
    plan_oracles,
    priority_seed,
)
from .parquet import METADATA_KEY, check_file_metadata, check_manifest, group_files

pa = lazy("pyarrow", extra="engines", what="the duckdb engine")

__all__ = ["DuckDBEngine", "DuckDBTupleCounter", "connect"]

_LOW32 = 0xFFFFFFFF
_LANE = LANE


def _duckdb() -> Any:
    from ..core.extras import require

    return require("duckdb", extra="engines", what="the duckdb engine")


def connect(threads: int | None = None, memory_limit: str | None = None,
            temp_directory: str | None = None) -> Any:
    """An in-memory DuckDB connection (``threads``: worker threads, default all cores)."""
    con = _duckdb().connect(":memory:")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit is not None:
        con.execute("SET memory_limit = ?", [str(memory_limit)])
    if temp_directory is not None:
        con.execute("SET temp_directory = ?", [str(temp_directory)])
    con.execute("SET preserve_insertion_order = false")
    return con


def _sql_str(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _source(files: Sequence[Path]) -> str:
    listed = ", ".join(_sql_str(str(f)) for f in files)
    return (f"read_parquet([{listed}], hive_partitioning = true, "
            "hive_types = {'group': BIGINT})")


class DuckDBEngine:
    """Counts a campaign directory's reports with DuckDB (see the module docstring)."""

    def __init__(self, *, threads: int | None = None, memory_limit: str | None = None,
                 connection: Any = None) -> None:
        self._own = connection is None
        self.con = connect(threads, memory_limit) if connection is None else connection

    def close(self) -> None:
        """Close the connection if this engine opened it."""
        if self._own:
            self.con.close()

    def count(self, plan: Plan, campaign_dir: str | Path) -> Counts:
        check_manifest(campaign_dir, plan)
        oracles = plan_oracles(plan)
        supports, users = empty_counts(plan)
        batches: dict[tuple[str, int], list[int]] = {}
        files: dict[int, list[Path]] = {}
        for g, oracle in enumerate(oracles):
            found = group_files(campaign_dir, g)
            if found:
                files[g] = found
                batches.setdefault(batch_key(oracle), []).append(g)
        self._check_metadata(plan, files)
        for (kind, width), groups in batches.items():
            src = _source([f for g in groups for f in files[g]])
            try:
                if kind == "value":
                    result = self._values(src)
                elif kind == "pairs":
                    result = self._pairs(src)
                elif kind == "em":
                    result = self._tuples(src, width)
                elif kind == "olh":
                    result = self._olh(src, [(g, oracles[g]) for g in groups])
                else:
                    result = self._words(src, width)
            except _duckdb().Error as exc:
                raise DPMarginalsError(f"DuckDB could not count the {kind} reports in "
                                       f"{str(campaign_dir)!r}: {exc}") from None
            for g in groups:
                at = result["group"] == g
                part = {k: v[at] for k, v in result.items()}
                if kind == "value":
                    supports[g], users[g] = finish_values(oracles[g], g, part["k"], part["n"])
                elif kind == "pairs":
                    supports[g], users[g] = finish_pairs(oracles[g], g, part["j"],
                                                         part["bit"], part["n"])
                elif kind == "em":
                    supports[g], users[g] = finish_em(
                        oracles[g], g, [part[f"v{i}"] for i in range(width)], part["n"])
                elif kind == "olh":
                    supports[g], users[g] = finish_olh(oracles[g], g, part["v"], part["n"])
                else:
                    lanes = np.array([[part[f"s{i}_{t}"][0] for t in range(32)]
                                      for i in range(width)], dtype=np.int64)
                    supports[g], users[g] = finish_lanes(oracles[g], g, lanes,
                                                         int(part["n"][0]),
                                                         int(part["nulls"][0]))
        return Counts(supports, users)

    # -- queries ----------------------------------------------------------------------
    def _fetch(self, sql: str) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.con.execute(sql).fetchnumpy().items()}

    def _check_metadata(self, plan: Plan, files: dict[int, list[Path]]) -> None:
        listed = [f for fs in files.values() for f in fs]
        if not listed:
            return
        group_of = {str(f): g for g, fs in files.items() for f in fs}
        rows = self.con.execute(
            "SELECT file_name, value FROM parquet_kv_metadata("
            f"[{', '.join(_sql_str(str(f)) for f in listed)}]) WHERE key = ?",
            [METADATA_KEY]).fetchall()
        for name, value in rows:
            g = group_of.get(str(name))
            if g is not None:
                check_file_metadata(name, bytes(value), plan, g)

    def _values(self, src: str) -> dict[str, np.ndarray]:
        return self._fetch(f'SELECT "group", value AS k, count(*) AS n FROM {src} '
                           'GROUP BY ALL')

    def _pairs(self, src: str) -> dict[str, np.ndarray]:
        return self._fetch(f'SELECT "group", j, bit, count(*) AS n FROM {src} GROUP BY ALL')

    def _tuples(self, src: str, width: int) -> dict[str, np.ndarray]:
        cols = ", ".join(f"v{i}" for i in range(width))
        return self._fetch(f'SELECT "group", {cols}, count(*) AS n FROM {src} GROUP BY ALL')

    def _olh(self, src: str, groups: list[tuple[int, Any]]) -> dict[str, np.ndarray]:
        gs, vs, hs = [], [], []
        for g, oracle in groups:
            v = np.arange(-2, oracle.size, dtype=np.int64)
            gs.append(np.full(v.size, g, np.int64))
            vs.append(v)
            hs.append(np.full(v.size, oracle.g, np.int64))
        values = pa.table({"group": np.concatenate(gs), "v": np.concatenate(vs),
                           "g": np.concatenate(hs)})
        self.con.register("dpm_olh_values", values)
        try:
            a, b = "(r.seed >> 32)", f"(r.seed & {_LOW32})"
            invalid = (f"r.seed IS NULL OR r.y IS NULL OR r.seed < 0 OR {a} < 1 OR "
                       f"{a} >= {PRIME} OR {b} >= {PRIME} OR r.y < 0 OR r.y >= t.g")
            return self._fetch(
                f'SELECT r."group", t.v, count(*) AS n FROM {src} r '
                'JOIN dpm_olh_values t ON r."group" = t."group" '
                f"WHERE t.v = {OLH_ALL} OR (t.v = {OLH_INVALID} AND ({invalid})) "
                f"OR (t.v >= 0 AND ({a} * t.v + {b}) % {PRIME} % t.g = r.y) GROUP BY ALL")
        finally:
            self.con.unregister("dpm_olh_values")

    def _words(self, src: str, width: int) -> dict[str, np.ndarray]:
        sums = ", ".join(f"sum((word{i} >> {t}) & {_LANE})::BIGINT AS s{i}_{t}"
                         for i in range(width) for t in range(32))
        nulls = " OR ".join(f"word{i} IS NULL" for i in range(width))
        return self._fetch(f'SELECT "group", count(*) AS n, count(*) FILTER (WHERE {nulls}) '
                           f'AS nulls, {sums} FROM {src} GROUP BY "group"')


# -- central DP: the counting passes of the k-tuple extraction ----------------------------
class DuckDBTupleCounter:
    """The counting passes of :class:`~dpmarginals.central.dp_marginals.DPMarginals` in
    DuckDB: per-user numbers of valid k-tuples, contribution bounding, the histogram of
    kept tuples, and the apriori join of each user's held tuples.

    ``records`` is a :class:`~dpmarginals.datasets.records_store.RecordsTable` (entries read
    from Parquet) or in-memory ``SparseRecords`` (registered as an Arrow table).  The item
    dictionary, the extracted tuples ``S_k`` and the noise stay on the driver.
    """

    def __init__(self, records: Any, *, threads: int | None = None,
                 memory_limit: str | None = None) -> None:
        self._tmp = tempfile.mkdtemp(prefix="dpm-duckdb-")
        self.con = connect(threads, memory_limit, temp_directory=self._tmp)
        self.n = int(records.n)
        if hasattr(records, "entry_files"):
            files = records.entry_files()
            if files:
                listed = ", ".join(_sql_str(f) for f in files)
                self.con.execute(f"CREATE VIEW dpm_entries AS SELECT record, item FROM "
                                 f"read_parquet([{listed}])")
            else:
                self.con.execute("CREATE TABLE dpm_entries (record BIGINT, item BIGINT)")
        else:
            table = pa.table({"record": records.rows(), "item": records.items})
            self.con.register("dpm_entries_arrow", table)
            self.con.execute("CREATE VIEW dpm_entries AS SELECT record, item "
                             "FROM dpm_entries_arrow")
        self.seed: tuple[int, ...] | None = None
        self._max_size = 0
        self._k = 0

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _register(self, name: str, table: pa.Table) -> None:
        self.con.execute(f"DROP TABLE IF EXISTS {name}")
        self.con.register(f"{name}_arrow", table)
        self.con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
        self.con.unregister(f"{name}_arrow")

    def _current(self, k: int) -> str:
        return "(SELECT record, item AS key FROM dpm_entries)" if k == 1 else "dpm_w"

    def sizes(self, k: int, index: Any, cap: int) -> np.ndarray:
        """Every user's number of valid k-tuples (clipped at ``cap``), one per user."""
        if k >= 2:
            self._build_w(k, index)
        self._k = k
        self.con.execute("CREATE OR REPLACE TABLE dpm_uc AS SELECT record, count(*) AS c "
                         f"FROM {self._current(k)} GROUP BY record")
        rows = self.con.execute(f"SELECT least(c, {int(cap)}) AS s, count(*) FROM dpm_uc "
                                "GROUP BY s").fetchnumpy()
        values, counts = (np.asarray(x, np.int64) for x in rows.values())
        self._max_size = int(values.max()) if values.size else 0
        if values.size and self._max_size >= cap:  # the true maximum decides bounding
            self._max_size = int(self.con.execute("SELECT max(c) FROM dpm_uc").fetchone()[0])
        zeros = self.n - int(counts.sum())
        return np.repeat(np.concatenate([[0], values]), np.concatenate([[zeros], counts]))

    def kept(self, k: int, delta: int, noise: Any) -> tuple[np.ndarray, np.ndarray]:
        """Distinct keys of the kept rows (sorted) and their counts."""
        cur = self._current(k)
        if self._max_size <= delta:
            sql = f"SELECT key, count(*) AS n FROM {cur} GROUP BY key ORDER BY key"
        else:
            if self.seed is None:
                self.seed = priority_seed(noise)
            prio = _priority_sql("w.record", "w.key", self.seed)
            sql = (f"SELECT key, count(*) AS n FROM ("
                   f"SELECT w.key FROM {cur} w JOIN dpm_uc u USING (record) WHERE u.c <= {delta} "
                   f"UNION ALL SELECT key FROM (SELECT w.record, w.key, {prio} AS prio "
                   f"FROM {cur} w JOIN dpm_uc u USING (record) WHERE u.c > {delta}) "
                   f"QUALIFY row_number() OVER (PARTITION BY record ORDER BY prio, key) "
                   f"<= {delta}) GROUP BY key ORDER BY key")
        out = self.con.execute(sql).fetchnumpy()
        return np.asarray(out["key"], np.int64), np.asarray(out["n"], np.int64)

    def advance(self, k: int, index: Any, s1_items: np.ndarray) -> None:
        """``held`` := the (user, row in S_k) of every S_k tuple each record holds."""
        if k == 1:
            self._register("dpm_s", pa.table({"key": np.asarray(s1_items, np.int64),
                                              "idx": np.arange(len(s1_items), dtype=np.int64)}))
            src = "dpm_entries e JOIN dpm_s s ON e.item = s.key"
            sel = "e.record, s.idx"
        else:
            keys = index.keys[k]
            self._register("dpm_s", pa.table({"key": keys,
                                              "idx": np.arange(keys.size, dtype=np.int64)}))
            src = "dpm_w w JOIN dpm_s s ON w.key = s.key"
            sel = "w.record, s.idx"
        self.con.execute(f"CREATE OR REPLACE TABLE dpm_held AS SELECT {sel} FROM {src}")

    def _build_w(self, k: int, index: Any) -> None:
        """``dpm_w`` := (record, key) of every user's valid k-tuples ``W_u``."""
        m1 = index.m1
        tuples = index.tuples[k - 1]
        cols = {f"c{i}": tuples[:, i] for i in range(k - 1)}
        self._register("dpm_lvl", pa.table({
            "idx": np.arange(tuples.shape[0], dtype=np.int64),
            "prefix": index.prefix(k - 1), "last": index.last(k - 1), **cols}))
        x_items = [f"x.c{i}" for i in range(k - 1)] + ["y.last"]
        checks = []
        for drop in range(k - 2):  # the subtuples without one of the shared k-2 items
            rest = x_items[:drop] + x_items[drop + 1 :]
            cond = " AND ".join(f"l.c{i} = {c}" for i, c in enumerate(rest))
            checks.append(f"EXISTS (SELECT 1 FROM dpm_lvl l WHERE {cond})")
        where = (" WHERE " + " AND ".join(checks)) if checks else ""
        items = ", ".join(f"l.c{i}" for i in range(k - 1))
        self.con.execute(
            "CREATE OR REPLACE TABLE dpm_w AS WITH a AS ("
            f"SELECT h.record, h.idx, l.prefix, l.last, {items} "
            "FROM dpm_held h JOIN dpm_lvl l USING (idx)) "
            f"SELECT x.record, x.idx * {m1} + y.last AS key FROM a x JOIN a y "
            f"ON x.record = y.record AND x.prefix = y.prefix AND x.idx < y.idx{where}")


def _priority_sql(record: str, key: str, seed: tuple[int, ...]) -> str:
    """:func:`.base.priority` in DuckDB SQL (every intermediate < 2^63)."""
    s0, s1, s2, s3, s4 = seed
    p = PRIME
    t = f"((({record} % {p}) * {s0} + ({key} & {p})) % {p})"
    t = f"(({t} * {s1} + ({key} >> 31)) % {p})"
    h = f"(({s2} * {t} + {s3}) % {p})"
    h = f"(({h} * {t} + {s4}) % {p})"
    return f"(({h} * {t} + {s0}) % {p})"
